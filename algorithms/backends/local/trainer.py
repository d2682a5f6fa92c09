"""The local trainer backend: PyTorch + transformers on a CPU or one GPU.

One iteration (verl-agent's step-level PPO loop; reference values: docs/design-notes.md
"Training-loop facts"):

1. **Rollout**: ``groups_per_batch`` training tasks x ``group_size`` rollouts, sampled at
   ``train.temperature`` (:func:`g2po_bench.benchmarks.rollout.collect_rollouts`).
2. **Advantages**: the configured estimator on the StepBatch (:mod:`g2po_bench.algorithms.registry`);
   PPO also runs the critic for V(s_t).
3. **Old and reference log-probs**: forward passes without gradient (the old ones are the sampler's
   own with ``train.old_logprobs=sampler``, the float32 default).
4. **Update**: ``ppo_epochs`` passes over shuffled mini-batches of step samples (cut by
   ``train.mini_batch_split``, :mod:`g2po_bench.algorithms.backends.batching`); per token
   ``clipped PPO loss(A_step) + kl_coef * KL_k3(pi || pi_ref) - entropy_coef * H``,
   token-mean over the mini-batch, gradient clipping; environment text never enters the
   loss (only response tokens are scored).

Precision and memory (:mod:`g2po_bench.algorithms.backends.local.precision`): the policy and critic keep
float32 master weights, gradients and AdamW state; ``model.dtype=bfloat16`` runs their forward
passes under autocast; the frozen reference is a copy in ``model.dtype`` on ``train.ref_device``;
``train.gradient_checkpointing`` recomputes layer activations; log-probs are computed over
response positions only, in chunks (:func:`g2po_bench.algorithms.backends.local.transformers_policy.response_logprobs`).
Sampling and rescoring share one definition (:mod:`g2po_bench.algorithms.backends.local.sampling`),
recorded in ``sampling.json``; the sampler's own log-probs are compared with the old log-probs
every iteration (``train/sampler_logprob_gap``; above the compute dtype's threshold a warning,
once per run, names the iteration and ``status.json`` records it:
:class:`g2po_bench.algorithms.backends.common.SamplerGapMonitor`). With ``train.old_logprobs=sampler`` (the float32
default) the sampler's log-probs *are* the old log-probs (no forward pass of the policy before the
update); the gap is then measured on the first mini-batch, whose forward pass runs on the weights
that sampled.

Evaluation on a fixed panel at ``eval.temperature`` before RL (after the warm start), every
``eval.every`` iterations and at the end. A checkpoint (policy, optimizer, critic and its
optimizer, RNG and trainer state) is written atomically and verified every ``train.checkpoint_every`` iterations,
the one before it kept; a run with ``resume=true`` continues from the newest intact one and loses at most the
iterations since.

The run's records (status, metrics, evaluations, checkpoint bookkeeping and resume, timing,
step tables, trackers) and the signal policy are the run lifecycle's
(:mod:`g2po_bench.algorithms.backends.lifecycle`, shared with the OpenRLHF backend); this module
writes the policy, optimizer, RNG and critic state into a checkpoint and reads them back.
Signals (SIGTERM, SIGINT, the preemption signal SIGUSR2): the iteration in flight is abandoned
without being recorded (or finished, when its rollouts were complete), the last complete
iteration is checkpointed if it is not yet, ``status.json`` says ``interrupted`` and the process
exits with ``128 + signal`` (or Submitit requeues the job). An iteration where most episodes crashed
(:mod:`g2po_bench.core.crashes`) is rolled out again after restarting the environment workers, at most
``train.crash_retries`` times; then the run fails with the reason.
"""

from __future__ import annotations

import copy
import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from g2po_bench.algorithms import losses
from g2po_bench.algorithms.backends.batching import split_mini_batches
from g2po_bench.algorithms.backends.common import (
    SamplerGapMonitor,
    at_train_temperature,
    eval_metrics,
    evaluate_panel,
    load_task_splits,
    rl_tasks,
    rollout_metrics,
    train_temperature_eval_due,
    training_rollouts,
)
from g2po_bench.algorithms.backends.lifecycle import RunLifecycle
from g2po_bench.algorithms.backends.local.memory import (
    enable_checkpointing,
    peak_memory_gb,
    reset_peak_memory,
)
from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer, resolve_device
from g2po_bench.algorithms.backends.local.precision import (
    autocast,
    check_master_weights,
    compute_dtype,
)
from g2po_bench.algorithms.backends.local.sampling import SamplingParams, model_generation_overrides
from g2po_bench.algorithms.backends.local.transformers_policy import (
    LocalPolicy,
    pack_sequences,
    response_logprobs,
)
from g2po_bench.algorithms.backends.local.value import ValueModel
from g2po_bench.algorithms.backends.local.warm_start import ensure_warm_start
from g2po_bench.algorithms.backends.progress import format_rate_ci
from g2po_bench.algorithms.registry import bind_run_estimator
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.rollout import RolloutBatch
from g2po_bench.core.config import RunConfig
from g2po_bench.core.crashes import CRASHED_HEAVY_FRACTION, is_crashed_heavy
from g2po_bench.core.rundir import RunDir, atomic_write_json
from g2po_bench.core.tracking import RunPictures
from g2po_bench.runtime.cpus import usable_cpus
from g2po_bench.runtime.shutdown import check_stop
from g2po_bench.runtime.workers import EnvPool

__all__ = ["LocalTrainer", "train", "torch_threads"]


def seed_everything(seed: int) -> None:
    """Seed Python and torch (numpy randomness uses explicit ``default_rng`` generators)."""
    random.seed(seed)
    torch.manual_seed(seed)


class LocalTrainer:
    """Runs one training run of ``cfg`` into ``<output_dir>/<run_id>`` (see module docstring).

    Args:
        cfg: the RunConfig (``backend=local``).
        console: rich console for progress (optional).
        pictures: draws the tracker pictures (:class:`g2po_bench.core.tracking.RunPictures`; optional).
    """

    def __init__(self, cfg: RunConfig, console=None, pictures: RunPictures | None = None):
        self.cfg = cfg
        self.bench = get_benchmark(cfg.env.name)
        self.estimator = bind_run_estimator(cfg)  # options checked once; called every iteration
        self.console = console
        self.device = resolve_device(cfg.model.device)
        self.critic: ValueModel | None = None
        # a stop checkpoints the state at the end of the last complete iteration: the lifecycle
        # keeps that iteration's RNG states (_rng_state) and restores them before saving
        self.lifecycle = RunLifecycle(cfg, backend="local", console=console,
                                      truncation_log=self.log if console is not None else None,
                                      write_checkpoint=self._write_checkpoint, capture_state=_rng_state,
                                      restore_state=_restore_rng_state, pictures=pictures)
        self.run: RunDir = self.lifecycle.run
        self.progress = self.lifecycle.progress
        self.truncation = self.lifecycle.truncation
        self.sampler_gap = SamplerGapMonitor(cfg.model.dtype, log=self.log if console is not None else None)
        self.compute_dtype = compute_dtype(cfg.model.dtype)
        self.ref_device = self.device if cfg.train.ref_device == "auto" else torch.device(cfg.train.ref_device)
        self.sampling = SamplingParams(temperature=cfg.train.temperature, top_p=cfg.train.top_p)

    # ------------------------------------------------------------------ logging
    def log(self, msg: str) -> None:
        """Print one line (above any progress bar)."""
        self.progress.log(msg)

    @property
    def start_iteration(self) -> int:
        """The next iteration to train (:attr:`RunLifecycle.start_iteration`)."""
        return self.lifecycle.start_iteration

    @property
    def eval_history(self) -> list[dict[str, Any]]:
        """The evaluations of the panel so far (:attr:`RunLifecycle.eval_history`)."""
        return self.lifecycle.eval_history

    # ------------------------------------------------------------------ setup
    def _setup_model(self, pool: EnvPool, train_tasks) -> dict[str, float]:
        cfg = self.cfg
        ckpt = self.lifecycle.resume_from  # the newest intact checkpoint (resume=true), else None
        if ckpt is not None:
            self.model, self.tokenizer = load_model_and_tokenizer(ckpt / "policy", dtype="float32",
                                                                  device=cfg.model.device)
            self.ref_model, _ = load_model_and_tokenizer(self.run.root / "reference", dtype=cfg.model.dtype,
                                                         device=str(self.ref_device))
            self._resume_state = ckpt
            return {}
        self._resume_state = None
        ws = ensure_warm_start(cfg, pool, self.bench, train_tasks, run_root=self.run.root,
                               progress=self.progress)
        # float32 master weights whatever model.dtype says (it is the compute dtype)
        self.model, self.tokenizer = load_model_and_tokenizer(ws.model_dir, dtype="float32",
                                                              device=cfg.model.device)
        # the reference policy is the starting policy (after the warm start)
        ref_dir = self.run.root / "reference"
        staging = ref_dir.with_name(".reference.tmp")
        self.model.save_pretrained(staging)
        self.tokenizer.save_pretrained(staging)
        marker = ws.model_dir / "g2po_tiny.json"
        if marker.exists():
            (staging / "g2po_tiny.json").write_text(marker.read_text())
        self.run.replace_dir(staging, ref_dir)
        self.ref_model = self._frozen_reference()
        stats = dict(ws.stats)
        stats.update({"warm_start/key": ws.key, "warm_start/reused": ws.reused,
                      "warm_start/dir": str(ws.model_dir)})
        return stats

    def _frozen_reference(self):
        """The KL reference: a copy of the current policy in the compute dtype (``model.dtype``;
        no master weights needed, it is never trained) on ``train.ref_device``."""
        return copy.deepcopy(self.model).to(device=self.ref_device, dtype=self.compute_dtype)

    # ------------------------------------------------------------------ main loop
    def run_training(self) -> RunDir:
        """Set up (warm start or resume), evaluate before RL, train, evaluate; returns the run folder.

        Raises:
            whatever the environment, model or estimator raise; ``status.json`` then says failed.
        """
        cfg = self.cfg
        lc = self.lifecycle
        seed_everything(cfg.seed)
        lc.start()
        t_setup = time.time()
        with lc.failing_on_error():  # a stop request goes on to RunLifecycle.run_guarded
            with lc.checkpoint_on_stop():
                with self.progress.phase("loading tasks", key="tasks"):
                    train_tasks, panel = load_task_splits(cfg, self.bench)
                    rl_pool = self._rl_tasks(train_tasks)  # fails here, before any work, if it is empty
                # printed once the tasks are loaded: a data or config error stays a one-line message
                self.log(f"run folder: {self.run.root}")
                self.log(f"tasks: {len(train_tasks)} training, evaluation panel of {len(panel)} x "
                         f"{cfg.eval.episodes_per_task} episode(s) ({cfg.env.eval_split})")
                with EnvPool(self.bench, cfg.env, cfg.env.num_workers) as pool:
                    setup_stats = self._setup_model(pool, train_tasks)
                    # the same RNG state whether the warm start was just built (SFT draws from the
                    # global RNG) or reused from the cache: same config and seed, same rollouts
                    seed_everything(cfg.seed)
                    self._prepare_training()
                    if self._resume_state is not None:
                        self._load_checkpoint(self._resume_state)
                    else:
                        # a fresh start (also resume=true without a checkpoint): drop what an
                        # earlier attempt of this run may have logged before its first checkpoint
                        lc.fresh_start()
                        lc.write_setup(setup_stats, t_setup)
                        ev = self._evaluate(pool, panel, 0)
                        self.log(f"evaluation before RL: success {format_rate_ci(ev)}")
                        self._evaluate_at_train_temperature(pool, panel, 0, "before")
                    lc.begin_training()
                    self._loop(pool, rl_pool, panel)
        return lc.finish(torch_threads=torch.get_num_threads())

    def _prepare_training(self) -> None:
        """After the models are loaded: freeze the reference, check the master weights, switch
        on gradient checkpointing, build the sampler, the optimizer and the critic, and record
        the sampling definition in ``sampling.json``."""
        cfg = self.cfg
        self.ref_model.eval()
        for p in self.ref_model.parameters():
            p.requires_grad_(False)
        check_master_weights(self.model)
        if cfg.train.gradient_checkpointing:
            enable_checkpointing(self.model)
        self.policy = LocalPolicy(self.model, self.tokenizer, max_prompt_tokens=cfg.train.max_prompt_tokens,
                                  max_batch_tokens=cfg.train.rollout_batch_tokens,
                                  compute_dtype=self.compute_dtype)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.train.lr,
                                           weight_decay=cfg.train.weight_decay)
        if self.estimator.needs_critic:
            self.critic = ValueModel.from_policy(self.model, lr=cfg.train.value_lr,
                                                 weight_decay=cfg.train.value_weight_decay,
                                                 compute_dtype=self.compute_dtype,
                                                 gradient_checkpointing=cfg.train.gradient_checkpointing)
        atomic_write_json(self.run.root / "sampling.json", {
            "train": self.sampling.describe(),
            "eval": self.policy.sampling(cfg.eval.temperature).describe(),
            "model_generation_config_ignored": model_generation_overrides(self.model),
            "compute_dtype": cfg.model.dtype, "master_dtype": "float32",
            "rescoring": "the same warpers on raw logits, then log_softmax (SamplingParams.rescore)",
        })

    def _logprobs(self, model, packed, *, with_entropy: bool = False):
        """:func:`response_logprobs` of ``model`` under this run's sampling definition, chunk size
        and autocast (the trainer's one way of scoring responses)."""
        with autocast(next(model.parameters()).device, self.compute_dtype):
            return response_logprobs(model, packed, sampling=self.sampling, with_entropy=with_entropy,
                                     chunk_tokens=self.cfg.train.logprob_chunk_tokens)

    def _rl_tasks(self, train_tasks) -> list:
        """The tasks RL draws from (``train.rl_tasks``, :func:`g2po_bench.algorithms.backends.common.rl_tasks`)."""
        tasks = rl_tasks(self.cfg, train_tasks)
        if len(tasks) != len(train_tasks):
            self.log(f"RL draws from the {len(tasks)} training tasks the warm start's demonstrations "
                     f"did not use (train.rl_tasks={self.cfg.train.rl_tasks})")
        return tasks

    def _loop(self, pool: EnvPool, train_tasks, panel) -> None:
        cfg = self.cfg
        total = cfg.train.iterations
        for it in range(self.start_iteration, total + 1):
            check_stop()
            with self.progress.phase(f"RL iteration {it}/{total}", total=cfg.env.max_steps, key="RL iterations",
                                     announce=False) as h:
                rec = self._iteration(pool, train_tasks, it, on_step=lambda t, n: h.update(t, f"steps, {n} active"))
            line = (f"iteration {it}/{total}: train success {rec['train/success_rate']:.1%}, "
                    f"invalid {rec['train/invalid_frac']:.1%}, {rec['iter_s']:.1f} s "
                    f"(rollout {rec['rollout_s']:.1f}, update {rec['update_s']:.1f})")
            if cfg.eval.every and it % cfg.eval.every == 0 or it == total:
                ev = self._evaluate(pool, panel, it)
                rec.update(eval_metrics(ev))
                line += f"; held-out success {format_rate_ci(ev)}"
            self.lifecycle.console_line(line)
            if it == total:
                self._evaluate_at_train_temperature(pool, panel, it, "final")
            self.lifecycle.end_iteration(rec)

    def _iteration(self, pool: EnvPool, train_tasks, it: int, on_step=None) -> dict[str, Any]:
        cfg = self.cfg
        reset_peak_memory(self.device)
        self.policy.reset_stats()
        t0 = time.time()
        rb = self._rollouts_without_crashes(pool, train_tasks, it, on_step=on_step)
        t_roll = time.time()
        gen = self.policy.reset_stats()
        mem_roll = peak_memory_gb(self.device)
        reset_peak_memory(self.device)
        values = None
        if self.critic is not None:
            values = self.critic.predict(rb.prompt_ids, self.tokenizer.pad_token_id,
                                         batch_size=cfg.train.micro_batch_size)
        res = self.estimator(rb, values)
        t_adv = time.time()
        check_stop()  # a stop requested during the rollouts abandons the iteration here
        self.lifecycle.update_started()  # the update changes the model: no longer the state of iteration it-1
        upd = self._update(rb, res.advantages)
        if self.critic is not None:
            returns = res.returns if res.returns is not None else res.advantages + values
            t = cfg.train
            upd.update(self.critic.fit(rb.prompt_ids, returns, values, self.tokenizer.pad_token_id,
                                       clip=t.value_clip, mini_batch_size=t.mini_batch_size,
                                       micro_batch_size=t.micro_batch_size,
                                       response_lengths=[max(len(r), 1) for r in rb.response_ids],
                                       loss_agg_mode=t.loss_agg_mode, mini_batch_split=t.mini_batch_split,
                                       epochs=t.ppo_epochs, seed=cfg.seed + it))
        t_upd = time.time()
        rec: dict[str, Any] = {
            "iteration": it,
            "iter_s": t_upd - t0, "rollout_s": t_roll - t0, "adv_s": t_adv - t_roll, "update_s": t_upd - t_adv,
            **rollout_metrics(rb),
            **_throughput_metrics(gen),
            **{f"adv/{k}": v for k, v in res.diagnostics.items()},
            **upd,
            **self.lifecycle.record_step_table(rb, res, it, values),
        }
        if mem_roll is not None:
            rec["memory/rollout_peak_gb"] = mem_roll
            rec["memory/update_peak_gb"] = peak_memory_gb(self.device)
        self.truncation.observe(rec, it)
        if self.sampler_gap.observe(rec, it):
            self.run.warnings["stale_sampler"] = self.sampler_gap.record
        return rec

    def _rollouts_without_crashes(self, pool: EnvPool, train_tasks, it: int, on_step=None) -> RolloutBatch:
        """The iteration's rollouts; rolled out again (same seeds) after restarting the workers
        while most episodes crashed, at most ``train.crash_retries`` times.

        Raises:
            RuntimeError: still crashed-heavy after the retries (the message says how many).
            ShutdownRequested: a stop was requested (the crashes are then the shutdown's).
        """
        retries = self.cfg.train.crash_retries
        counts = []
        for attempt in range(retries + 1):
            rb = training_rollouts(self.cfg, self.policy, pool, self.bench, train_tasks, it, on_step=on_step)
            crashed, n = sum(bool(t["crashed"]) for t in rb.trajectories), len(rb.trajectories)
            if not is_crashed_heavy(crashed, n):
                return rb
            check_stop()
            counts.append(f"{crashed}/{n}")
            if attempt < retries:
                self.log(f"iteration {it}: {crashed} of {n} episodes crashed; restarting the environment "
                         f"workers and rolling the iteration out again (retry {attempt + 1} of {retries})")
                pool.restart()
        raise RuntimeError(
            f"iteration {it}: more than {CRASHED_HEAVY_FRACTION:.0%} of the episodes crashed in each of "
            f"{retries + 1} attempts ({', '.join(counts)} crashed; the environment workers were restarted "
            "between attempts): the environment is failing, not the policy. Check the environment "
            "(data, memory, the worker log) and resume with resume=true; train.crash_retries sets the "
            "number of attempts")

    # ------------------------------------------------------------------ update
    def _update(self, rb: RolloutBatch, advantages: np.ndarray) -> dict[str, float]:
        cfg = self.cfg.train
        pad = self.tokenizer.pad_token_id
        rows = [i for i, r in enumerate(rb.response_ids) if len(r) > 0]
        if not rows:
            return {}
        rows.sort(key=lambda i: len(rb.prompt_ids[i]) + len(rb.response_ids[i]))
        t_lp0 = time.time()
        old_lp: dict[int, torch.Tensor] = {}
        ref_lp: dict[int, torch.Tensor] = {}
        from_sampler = cfg.old_logprobs == "sampler"
        with torch.no_grad():
            for s in range(0, len(rows), cfg.micro_batch_size):
                mb = rows[s:s + cfg.micro_batch_size]
                packed = pack_sequences([rb.prompt_ids[i] for i in mb], [rb.response_ids[i] for i in mb],
                                        pad, self.device)
                sampled = from_sampler and all(_has_sampler_logprobs(rb, i) for i in mb)
                lp = None if sampled else self._logprobs(self.model, packed)[0]
                rl, _ = self._logprobs(self.ref_model, packed)
                for j, i in enumerate(mb):
                    n = len(rb.response_ids[i])
                    old_lp[i] = (torch.as_tensor(rb.sampler_logprobs[i], dtype=torch.float32, device=self.device)
                                 if sampled else lp[j, :n].clone())
                    ref_lp[i] = rl[j, :n].clone()
        t_logprob = time.time() - t_lp0
        gap_diffs: list[torch.Tensor] = []  # sampler mode: current (= old) policy vs sampler, first mini-batch
        self.model.train()
        rng = np.random.default_rng(int(self.cfg.seed) + len(rows))
        sums: dict[str, float] = {}
        n_mb = 0
        grad_norms = []
        for _ in range(cfg.ppo_epochs):
            order = rng.permutation(rows)
            for mini in split_mini_batches(order, cfg.mini_batch_size, cfg.mini_batch_split):
                mini.sort(key=lambda i: len(rb.prompt_ids[i]) + len(rb.response_ids[i]))
                n_tok = sum(len(rb.response_ids[i]) for i in mini)
                n_micro = -(-len(mini) // cfg.micro_batch_size)  # reference: mean over micro-batches
                self.optimizer.zero_grad(set_to_none=True)
                mb_stats: dict[str, float] = {}
                for m in range(0, len(mini), cfg.micro_batch_size):
                    micro = mini[m:m + cfg.micro_batch_size]
                    packed = pack_sequences([rb.prompt_ids[i] for i in micro],
                                            [rb.response_ids[i] for i in micro], pad, self.device)
                    mask = packed["response_mask"]
                    logp, ent = self._logprobs(self.model, packed, with_entropy=True)
                    old = _stack(old_lp, micro, mask)
                    ref = _stack(ref_lp, micro, mask)
                    adv = torch.as_tensor(advantages[micro], dtype=torch.float32, device=self.device)
                    adv = adv[:, None].expand_as(logp)
                    out = losses.ppo_step_loss(
                        logp, old, ref, adv, ent, mask, clip_ratio=cfg.clip_ratio, kl_coef=cfg.kl_coef,
                        entropy_coef=cfg.entropy_coef, kl_estimator=cfg.kl_estimator,
                        clip_ratio_c=cfg.clip_ratio_c, kl_clamp=cfg.kl_clamp, loss_agg_mode=cfg.loss_agg_mode,
                        num_micro_batches=n_micro,
                    )
                    out["loss"].backward()
                    if from_sampler and n_mb == 0:  # the weights are still those that sampled
                        gap_diffs.append((logp.detach() - old)[mask].abs())
                    for k, v in out["stats"].items():
                        mb_stats[k] = mb_stats.get(k, 0.0) + float(v) * mask.sum().item() / n_tok
                gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                grad_norms.append(float(gn))
                self.optimizer.step()
                for k, v in mb_stats.items():
                    sums[k] = sums.get(k, 0.0) + v
                n_mb += 1
        self.model.eval()
        out = {f"loss/{k}": v / max(n_mb, 1) for k, v in sums.items()}
        out["loss/grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
        out["logprob_s"] = t_logprob
        if from_sampler:
            if gap_diffs:
                d = torch.cat(gap_diffs)
                out.update({"train/sampler_logprob_gap": float(d.mean()),
                            "train/sampler_logprob_gap_max": float(d.max())})
        else:
            out.update(_sampler_gap(rb, rows, old_lp))
        return out

    # ------------------------------------------------------------------ evaluation
    def _evaluate(self, pool: EnvPool, panel, iteration: int) -> dict[str, Any]:
        ev = self._play_panel(self.cfg, pool, panel, iteration, f"evaluation at iteration {iteration}")
        return self.lifecycle.record_evaluation(ev)

    def _play_panel(self, cfg, pool: EnvPool, panel, iteration: int, title: str) -> dict[str, Any]:
        """One evaluation of ``panel`` with ``cfg``'s eval settings, shown as a progress phase."""
        n = len(panel) * cfg.eval.episodes_per_task
        with self.progress.phase(f"{title} ({n} episodes)", total=n, key="evaluation") as h:
            return evaluate_panel(cfg, self.policy, pool, self.bench, panel, iteration,
                                  on_progress=lambda done, total: h.update(done, "episodes"))

    def _evaluate_at_train_temperature(self, pool: EnvPool, panel, iteration: int, which: str) -> None:
        """``eval.at_train_temperature``: the panel at ``train.temperature`` (same evaluation seed),
        recorded as ``eval.json`` ``at_train_temperature[which]`` ("before" or "final")."""
        cfg = self.cfg
        if not train_temperature_eval_due(cfg, self.lifecycle.train_temperature_evals, which, iteration):
            return
        t = cfg.train.temperature
        ev = self._play_panel(at_train_temperature(cfg), pool, panel, iteration,
                              f"evaluation at the training temperature {t:g}, iteration {iteration}")
        self.lifecycle.record_train_temperature_evaluation(which, ev)
        self.log(f"held-out success at the training temperature {t:g} ({which}): {format_rate_ci(ev)}")

    # ------------------------------------------------------------------ checkpoints
    def _write_checkpoint(self, staging: Path, it: int, trainer_state: dict[str, Any]) -> dict[str, Any] | None:
        """The local backend's part of a checkpoint (:data:`.lifecycle.CheckpointWriter`): the
        policy (``policy/``) and ``optim.pt`` (optimizer, RNG states, critic and its optimizer);
        returns the trainer-state entries it adds (``warnings``, when the run warned)."""
        self.model.save_pretrained(staging / "policy")
        self.tokenizer.save_pretrained(staging / "policy")
        state = {"optimizer": self.optimizer.state_dict(),
                 "torch_rng": torch.get_rng_state(),
                 "python_rng": random.getstate()}
        state.update(self._trained_state())
        torch.save(state, staging / "optim.pt")
        # what the run warned about once (status.json warnings) survives a resume
        return {"warnings": self.run.warnings} if self.run.warnings else None

    def _trained_state(self) -> dict[str, Any]:
        """What the run has trained besides the policy and its optimizer, for ``optim.pt``: the
        critic's weights (``critic``) and its AdamW state (``critic_optimizer``: moments and step
        count; without it a resumed PPO run restarts the critic's optimizer and its metrics drift
        from an uninterrupted run's)."""
        if self.critic is None:
            return {}
        return {"critic": self.critic.state_dict(), "critic_optimizer": self.critic.optimizer.state_dict()}

    def _load_trained_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`_trained_state` from a checkpoint's ``optim.pt``; a checkpoint written
        before the critic's optimizer was saved restores the weights and says that its optimizer
        restarts."""
        if self.critic is None or "critic" not in state:
            return
        self.critic.load_state_dict(state["critic"])
        if "critic_optimizer" in state:
            self.critic.optimizer.load_state_dict(state["critic_optimizer"])
        else:
            self.log("the checkpoint holds the critic's weights but not its optimizer state (written by an "
                     "earlier version): the critic's AdamW restarts, so this run will not match an "
                     "uninterrupted one")

    def _load_checkpoint(self, ckpt: Path) -> None:
        meta = json.loads((ckpt / "trainer_state.json").read_text())
        state = torch.load(ckpt / "optim.pt", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        self._load_trained_state(state)
        self.run.warnings = dict(meta.get("warnings") or {})
        if "stale_sampler" in self.run.warnings:
            self.sampler_gap.record = dict(self.run.warnings["stale_sampler"])
        self.lifecycle.resume(meta)


def _has_sampler_logprobs(rb: RolloutBatch, i: int) -> bool:
    """Row ``i`` carries the sampler's log-prob of every response token."""
    lp = rb.sampler_logprobs[i] if rb.sampler_logprobs else None
    return lp is not None and len(lp) == len(rb.response_ids[i])


def _sampler_gap(rb: RolloutBatch, rows: list[int], old_lp: dict[int, torch.Tensor]) -> dict[str, float]:
    """How far the trainer's old log-probs are from the sampler's own (same tokens, same
    weights): ``train/sampler_logprob_gap`` (mean absolute difference per token) and ``..._max``.
    0 up to float rounding in float32; bf16 kernels (cached decoding vs. one full forward) leave
    a small gap; a large one means the sampler drew from another distribution."""
    if not rb.sampler_logprobs:
        return {}
    diffs = [torch.as_tensor(rb.sampler_logprobs[i], dtype=torch.float32) - old_lp[i].float().cpu()
             for i in rows if rb.sampler_logprobs[i] is not None and len(rb.sampler_logprobs[i]) == len(old_lp[i])]
    if not diffs:
        return {}
    d = torch.cat(diffs).abs()
    return {"train/sampler_logprob_gap": float(d.mean()), "train/sampler_logprob_gap_max": float(d.max())}


def _throughput_metrics(gen: dict[str, float]) -> dict[str, float]:
    """Rollout throughput of one iteration from :attr:`LocalPolicy.stats`: prompt and generated
    tokens, seconds inside ``generate`` and tokens per second of those seconds."""
    secs = max(float(gen.get("generate_s", 0.0)), 1e-9)
    return {"rollout/prompt_tokens": int(gen.get("prompt_tokens", 0)),
            "rollout/generated_tokens": int(gen.get("generated_tokens", 0)),
            "rollout/generate_s": float(gen.get("generate_s", 0.0)),
            "rollout/prompt_tokens_per_s": gen.get("prompt_tokens", 0) / secs,
            "rollout/generated_tokens_per_s": gen.get("generated_tokens", 0) / secs}


def _rng_state() -> tuple[Any, Any]:
    return torch.get_rng_state(), random.getstate()


def _restore_rng_state(state: tuple[Any, Any]) -> None:
    torch_rng, py_rng = state
    torch.set_rng_state(torch_rng)
    random.setstate(py_rng)


def _stack(store: dict[int, torch.Tensor], rows: list[int], mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    for j, i in enumerate(rows):
        v = store[i]
        out[j, : v.shape[0]] = v
    return out


def torch_threads(cfg: RunConfig) -> int:
    """The torch intra-op threads of a run: ``model.num_threads``, or with 0 every CPU this process
    may use (:func:`g2po_bench.runtime.cpus.usable_cpus`: the affinity mask, ``SLURM_CPUS_PER_TASK`` /
    ``G2PO_CPUS_PER_TASK`` (a sweep job's ``resources.cpus``), the cgroup quota). The model and the
    environment workers take turns (the lock-step rollout waits for the workers), so the model may
    use every core while it computes."""

    return cfg.model.num_threads if cfg.model.num_threads > 0 else usable_cpus()


def train(cfg: RunConfig, console=None, pictures: RunPictures | None = None) -> RunDir:
    """Run the local backend on ``cfg``; returns the run folder.

    Args:
        cfg: the RunConfig.
        console: rich console for progress (optional).
        pictures: draws the tracker pictures (optional; :mod:`g2po_bench.analysis.pictures`).

    Raises:
        g2po_bench.runtime.shutdown.Interrupted: stopped by SIGTERM/SIGINT/SIGUSR2 (a ``SystemExit``
            with status 128 + signal; the run folder says ``interrupted``, see the module
            docstring); under Submitit the preemption signal requeues the job instead.
    """
    torch.set_num_threads(torch_threads(cfg))
    trainer = LocalTrainer(cfg, console=console, pictures=pictures)
    return trainer.lifecycle.run_guarded(trainer.run_training)
