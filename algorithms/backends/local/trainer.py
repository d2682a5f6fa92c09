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

The loop itself (tasks, environment pool, evaluations, iterations, checkpoints, signals, the
run's records) is the training loop's (:mod:`g2po_bench.algorithms.backends.loop`, shared with
the OpenRLHF backend): :class:`LocalTrainer` is this backend's strategy for it (set-up, the
critic's values, the update, and the policy, optimizer, RNG and critic state of a checkpoint).
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from g2po_bench.algorithms import losses
from g2po_bench.algorithms.backends.batching import split_mini_batches
from g2po_bench.algorithms.backends.common import needs_critic
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
from g2po_bench.algorithms.backends.loop import TrainerBackend, TrainingLoop, run_folder
from g2po_bench.algorithms.backends.progress import RunProgress
from g2po_bench.algorithms.registry import AdvantageResult
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.rollout import RolloutBatch
from g2po_bench.core.config import RunConfig
from g2po_bench.core.rundir import RunDir
from g2po_bench.core.tracking import RunPictures
from g2po_bench.runtime.cpus import usable_cpus
from g2po_bench.runtime.workers import EnvPool

__all__ = ["LocalTrainer", "train", "torch_threads", "starting_policy"]


def seed_everything(seed: int) -> None:
    """Seed Python and torch (numpy randomness uses explicit ``default_rng`` generators)."""
    random.seed(seed)
    torch.manual_seed(seed)


def starting_policy(cfg: RunConfig, pool: EnvPool, bench, train_tasks, run: RunDir, progress: RunProgress):
    """The run's starting policy: the warm start (:func:`.warm_start.ensure_warm_start`: built or
    reused) loaded as float32 master weights, saved as the run's KL reference ``<run>/reference/``.

    Returns:
        ``(model, tokenizer, stats)``: the policy, its tokenizer (left padding) and the set-up
        figures for ``setup.json`` (the warm start's, its cache key and folder).
    """
    ws = ensure_warm_start(cfg, pool, bench, train_tasks, run_root=run.root, progress=progress)
    # float32 master weights whatever model.dtype says (it is the compute dtype)
    model, tokenizer = load_model_and_tokenizer(ws.model_dir, dtype="float32", device=cfg.model.device)
    # the reference policy is the starting policy (after the warm start)
    ref_dir = run.root / "reference"
    staging = ref_dir.with_name(".reference.tmp")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    marker = ws.model_dir / "g2po_tiny.json"
    if marker.exists():
        (staging / "g2po_tiny.json").write_text(marker.read_text())
    run.replace_dir(staging, ref_dir)
    stats = dict(ws.stats)
    stats.update({"warm_start/key": ws.key, "warm_start/reused": ws.reused, "warm_start/dir": str(ws.model_dir)})
    return model, tokenizer, stats


class LocalTrainer(TrainerBackend):
    """The local backend's strategy for the training loop (:class:`.loop.TrainerBackend`; module docstring).

    Args:
        cfg: the RunConfig (``backend=local``).
        console: rich console for progress (optional; the loop's run replaces it in :meth:`start`).

    Attributes (after :meth:`session`): ``model`` (float32 master weights), ``tokenizer``,
    ``ref_model`` (the frozen KL reference), ``policy`` (:class:`.transformers_policy.LocalPolicy` on ``model``),
    ``optimizer`` (AdamW), ``critic`` (:class:`.value.ValueModel`, critic estimators only).
    """

    name = "local"

    def __init__(self, cfg: RunConfig, console=None):
        self.cfg = cfg
        self.bench = get_benchmark(cfg.env.name)
        self.device = resolve_device(cfg.model.device)
        self.critic: ValueModel | None = None
        # the loop gives the run folder and its progress display (start); until then (a trainer set
        # up by hand, as the tests of the update do) the config's folder and a display of its own
        self.run = RunDir(run_folder(cfg))
        self.progress = RunProgress(console, enabled=cfg.progress)
        self.compute_dtype = compute_dtype(cfg.model.dtype)
        self.ref_device = self.device if cfg.train.ref_device == "auto" else torch.device(cfg.train.ref_device)
        self.sampling = SamplingParams(temperature=cfg.train.temperature, top_p=cfg.train.top_p)

    def log(self, msg: str) -> None:
        """Print one line (above any progress bar)."""
        self.progress.log(msg)

    # ------------------------------------------------------------------ setup
    def start(self, run: RunDir, progress: RunProgress) -> None:
        """The run's folder and display; seeds Python and torch (``seed``)."""
        self.run, self.progress = run, progress
        seed_everything(self.cfg.seed)

    @contextlib.contextmanager
    def session(self, pool: EnvPool, train_tasks, resume_from: Path | None) -> Iterator[dict[str, Any]]:
        """The models (the warm start, or a checkpoint's policy and the run's reference), then the
        optimizer, critic and sampler (:meth:`_prepare_training`); yields the warm start's figures."""
        stats = self._setup_model(pool, train_tasks, resume_from)
        # the same RNG state whether the warm start was just built (SFT draws from the global RNG)
        # or reused from the cache: same config and seed, same rollouts
        seed_everything(self.cfg.seed)
        self._prepare_training()
        yield stats

    def _setup_model(self, pool: EnvPool, train_tasks, resume_from: Path | None) -> dict[str, float]:
        cfg = self.cfg
        if resume_from is not None:  # the newest intact checkpoint (resume=true)
            self.model, self.tokenizer = load_model_and_tokenizer(resume_from / "policy", dtype="float32",
                                                                  device=cfg.model.device)
            self.ref_model, _ = load_model_and_tokenizer(self.run.root / "reference", dtype=cfg.model.dtype,
                                                         device=str(self.ref_device))
            return {}
        self.model, self.tokenizer, stats = starting_policy(cfg, pool, self.bench, train_tasks, self.run,
                                                            self.progress)
        self.ref_model = self._frozen_reference()
        return stats

    def _frozen_reference(self):
        """The KL reference: a copy of the current policy in the compute dtype (``model.dtype``;
        no master weights needed, it is never trained) on ``train.ref_device``."""
        return copy.deepcopy(self.model).to(device=self.ref_device, dtype=self.compute_dtype)

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
        if needs_critic(self.cfg):
            self.critic = ValueModel.from_policy(self.model, lr=cfg.train.value_lr,
                                                 weight_decay=cfg.train.value_weight_decay,
                                                 compute_dtype=self.compute_dtype,
                                                 gradient_checkpointing=cfg.train.gradient_checkpointing)
        self.run.write_json("sampling.json", {
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

    # ------------------------------------------------------------------ one iteration
    def rollouts_started(self) -> None:
        """Open the windows of the rollout's throughput (:attr:`LocalPolicy.stats`) and peak memory."""
        reset_peak_memory(self.device)
        self.policy.reset_stats()

    def rollout_metrics(self) -> dict[str, Any]:
        """The rollout's throughput (``rollout/*``) and, on a GPU, ``memory/rollout_peak_gb``; opens
        the update's peak-memory window."""
        out = _throughput_metrics(self.policy.reset_stats())
        mem = peak_memory_gb(self.device)
        if mem is not None:
            out["memory/rollout_peak_gb"] = mem
        reset_peak_memory(self.device)
        return out

    def values(self, rollouts: RolloutBatch) -> np.ndarray | None:
        """The critic's V(s_t) of every step row (critic estimators), else None."""
        if self.critic is None:
            return None
        return self.critic.predict(rollouts.prompt_ids, self.tokenizer.pad_token_id,
                                   batch_size=self.cfg.train.micro_batch_size)

    def update(self, rollouts: RolloutBatch, result: AdvantageResult, values: np.ndarray | None,
               iteration: int) -> dict[str, Any]:
        """The policy's PPO update on ``result.advantages`` (:meth:`_update`), then the critic's on
        the estimator's returns (or ``advantages + values``); ``memory/update_peak_gb`` on a GPU."""
        upd = self._update(rollouts, result.advantages)
        if self.critic is not None:
            returns = result.returns if result.returns is not None else result.advantages + values
            t = self.cfg.train
            upd.update(self.critic.fit(rollouts.prompt_ids, returns, values, self.tokenizer.pad_token_id,
                                       clip=t.value_clip, mini_batch_size=t.mini_batch_size,
                                       micro_batch_size=t.micro_batch_size,
                                       response_lengths=[max(len(r), 1) for r in rollouts.response_ids],
                                       loss_agg_mode=t.loss_agg_mode, mini_batch_split=t.mini_batch_split,
                                       epochs=t.ppo_epochs, seed=self.cfg.seed + iteration))
        mem = peak_memory_gb(self.device)
        if mem is not None:
            upd["memory/update_peak_gb"] = mem
        return upd
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

    # ------------------------------------------------------------------ checkpoints
    def save(self, staging: Path, iteration: int, trainer_state: dict[str, Any]) -> None:
        """The local backend's part of a checkpoint (:data:`.lifecycle.CheckpointWriter`): the
        policy (``policy/``) and ``optim.pt`` (optimizer, RNG states, critic and its optimizer)."""
        self.model.save_pretrained(staging / "policy")
        self.tokenizer.save_pretrained(staging / "policy")
        state = {"optimizer": self.optimizer.state_dict(),
                 "torch_rng": torch.get_rng_state(),
                 "python_rng": random.getstate()}
        state.update(self._trained_state())
        torch.save(state, staging / "optim.pt")

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

    def load(self, checkpoint: Path | None) -> dict[str, Any] | None:
        """The optimizer, RNG states and critic of ``checkpoint`` (whose policy :meth:`session`
        loaded); returns its ``trainer_state.json`` (None without a checkpoint: a fresh start)."""
        if checkpoint is None:
            return None
        meta = json.loads((checkpoint / "trainer_state.json").read_text())
        state = torch.load(checkpoint / "optim.pt", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        self._load_trained_state(state)
        return meta

    def capture_state(self) -> tuple[Any, Any]:
        """The RNG states (torch, Python) at the end of an iteration: a stop checkpoints the state
        at the end of the last complete iteration with them."""
        return torch.get_rng_state(), random.getstate()

    def restore_state(self, state: tuple[Any, Any]) -> None:
        """Restore the RNG states of :meth:`capture_state`."""
        torch_rng, py_rng = state
        torch.set_rng_state(torch_rng)
        random.setstate(py_rng)

    def timing(self) -> dict[str, Any]:
        """``timing.json``'s ``torch_threads``."""
        return {"torch_threads": torch.get_num_threads()}


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
    """Run the local backend on ``cfg`` (the training loop with :class:`LocalTrainer`); returns the run folder.

    Args:
        cfg: the RunConfig.
        console: rich console for progress (optional).
        pictures: draws the tracker pictures (optional; :mod:`g2po_bench.analysis.pictures`).

    Raises:
        g2po_bench.runtime.shutdown.Interrupted: stopped by SIGTERM/SIGINT/SIGUSR2 (a ``SystemExit``
            with status 128 + signal; the run folder says ``interrupted``, see
            :mod:`g2po_bench.algorithms.backends.loop`); under Submitit the preemption signal
            requeues the job instead.
        g2po_bench.core.errors.RunFolderBusy: another process trains the same run folder.
    """
    torch.set_num_threads(torch_threads(cfg))
    return TrainingLoop(cfg, LocalTrainer(cfg, console=console), console=console, pictures=pictures).run()
