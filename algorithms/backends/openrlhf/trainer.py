"""The OpenRLHF trainer backend (``backend=openrlhf``): the suite's loop on Ray, DeepSpeed and vLLM.

One iteration, with the same semantics as the local backend
(:mod:`g2po_bench.algorithms.backends.local.trainer`; docs/design-notes.md "Training-loop facts"):

1. **Generation**: ``groups_per_batch`` tasks x ``group_size`` rollouts by the suite's rollout
   engine (:func:`g2po_bench.benchmarks.rollout.collect_rollouts`; environments in worker processes,
   step prompts with history) through :class:`.policy.EnginePolicy` on OpenRLHF's vLLM engines.
2. **Reference and old log-probs** (and critic values): OpenRLHF's
   ``RemoteExperienceMaker.make_experience`` on the actor, reference and critic Ray actor
   groups, one OpenRLHF sample per agent step (:mod:`.experience`).
3. **Advantages**: the registry estimator on the StepBatch, written on every response token
   (:class:`.experience_maker.StepExperienceMaker`).
4. **Update**: OpenRLHF's DeepSpeed ``fit`` of the actor (clipped PPO loss, KL k3 to the
   reference as a loss term, entropy bonus, token-mean; :mod:`.args`) and of the critic; then
   OpenRLHF's weight synchronisation of the actor into the vLLM engines.

OpenRLHF classes used, all unchanged in the Ray workers: ``RayActorGroup`` with
``PolicyModelActor``, ``ReferenceModelActor``, ``CriticModelActor`` (DeepSpeed ZeRO),
``create_vllm_engines`` (``RolloutRayActor``), ``DeepspeedStrategy`` (``get_strategy``);
in the driver, :class:`StepPPOTrainer` subclasses ``BasePPOTrainer`` (its ``ppo_train`` and
``broadcast_to_vllm`` orchestration, sleep/wake handling and KL controller) and
:class:`.experience_maker.StepExperienceMaker` subclasses ``RemoteExperienceMaker``.

The run folder is the local backend's, written by the same run lifecycle
(:mod:`g2po_bench.algorithms.backends.lifecycle`: ``config.yaml``, ``metrics.jsonl`` with seconds
per phase, ``eval.json``, ``status.json``, ``timing.json``, ``steps/`` with ``record_graphs``,
``checkpoints/latest/{policy,trainer_state.json}``, the trackers of ``logging.backends``) plus
``checkpoints/openrlhf/`` (DeepSpeed checkpoints of the actor and critic: what ``resume=true``
loads), ``openrlhf.json`` (layout) and ``openrlhf_args.txt`` (the OpenRLHF arguments). The
lifecycle's signal policy applies too: SIGTERM, SIGINT or the preemption signal abandons the
iteration in flight, checkpoints the last complete one (while the Ray workers are still up),
and leaves ``status.json`` ``interrupted`` (exit status 128 + signal, or Submitit's requeue).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import torch
from openrlhf.trainer.ppo_trainer import BasePPOTrainer

from g2po_bench.algorithms.backends.common import (
    at_train_temperature,
    eval_metrics,
    evaluate_panel,
    load_task_splits,
    needs_critic,
    rl_tasks,
    rollout_metrics,
    train_temperature_eval_due,
    training_rollouts,
)
from g2po_bench.algorithms.backends.lifecycle import RunLifecycle
from g2po_bench.algorithms.backends.local.trainer import LocalTrainer
from g2po_bench.algorithms.backends.openrlhf.args import build_argv, parse_openrlhf_args
from g2po_bench.algorithms.backends.openrlhf.cluster import (
    RayCluster,
    join_as_worker,
    read_allocation,
    worker_runtime_env,
)
from g2po_bench.algorithms.backends.openrlhf.engine_policy import EnginePolicy, vllm_sampling_params
from g2po_bench.algorithms.backends.openrlhf.experience import (
    StepSamples,
    build_samples,
    critic_view,
)
from g2po_bench.algorithms.backends.openrlhf.experience_maker import StepExperienceMaker
from g2po_bench.algorithms.backends.openrlhf.settings import OpenRLHFSettings, load_settings
from g2po_bench.algorithms.registry import bind_run_estimator
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.rollout import RolloutBatch
from g2po_bench.core.config import RunConfig
from g2po_bench.core.rundir import RunDir, atomic_write_json, atomic_write_text
from g2po_bench.core.tracking import RunPictures
from g2po_bench.runtime.shutdown import check_stop
from g2po_bench.runtime.workers import EnvPool

__all__ = ["StepPPOTrainer", "OpenRLHFTrainer", "Stack", "Workers", "load_tokenizer", "train"]


def load_tokenizer(path: str | os.PathLike):
    """The policy's tokenizer, loaded as the local backend loads it (left padding)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = Path(path)
    tok = (PreTrainedTokenizerFast.from_pretrained(path) if (path / "g2po_tiny.json").exists()
           else AutoTokenizer.from_pretrained(path))
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


class StepPPOTrainer(BasePPOTrainer):
    """OpenRLHF's ``BasePPOTrainer`` fed with step-level samples from the suite's rollouts.

    Keeps OpenRLHF's ``ppo_train`` (actor and critic ``fit`` on their groups, with the sleep
    modes) and ``broadcast_to_vllm``; replaces prompt-level ``train_step`` by
    :meth:`train_on_rollouts` and the experience maker by :class:`StepExperienceMaker`.

    Args:
        strategy, actor_model_group, critic_model_group, reference_model_group, vllm_engines,
            tokenizer: as ``BasePPOTrainer`` (no reward model: rewards come from environments).
        cfg: the RunConfig (its estimator and options, bound once here: ``self.estimator``).
        dp_ranks: data-parallel ranks of the actor group.
    """

    def __init__(self, strategy, actor_model_group, critic_model_group, reference_model_group, vllm_engines,
                 tokenizer, *, cfg: RunConfig, dp_ranks: int = 1):
        super().__init__(strategy, actor_model_group, critic_model_group, None, reference_model_group,
                         vllm_engines, tokenizer)
        self.cfg = cfg
        self.estimator = bind_run_estimator(cfg)
        self.experience_maker = StepExperienceMaker(
            actor_model_group, critic_model_group, None, reference_model_group, self.kl_ctl, strategy, tokenizer,
            dp_ranks=dp_ranks)

    def train_step(self, rollout_samples, global_step):  # pragma: no cover - OpenRLHF's prompt-level entry
        raise RuntimeError("StepPPOTrainer trains on the suite's rollouts: use train_on_rollouts()")

    def make_experiences(self, rollouts: RolloutBatch) -> tuple[list, StepSamples]:
        """Experiences (old and reference log-probs, values, per-token advantages) of the rows."""
        ss = build_samples(rollouts, eos_token_id=self.tokenizer.eos_token_id, pad_to=self.args.train.batch_size)
        self.experience_maker.prepare(ss, lambda values: self.estimator(rollouts, values))
        return self.experience_maker.make_experience_batch(ss.samples), ss

    def train_on_rollouts(self, rollouts: RolloutBatch, global_step: int) -> tuple[dict[str, Any], int]:
        """One update on ``rollouts``; returns (status with ``timing/*`` seconds, next global step)."""
        experiences, ss = self.make_experiences(rollouts)
        timing = dict(self.experience_maker.timing)
        t0 = time.time()
        refs = self.actor_model_group.async_run_method_batch(method_name="append", experience=experiences)
        if self.critic_model_group is not None:
            views = [critic_view(e, ss.prompt_lens, ss.rows) for e in experiences]
            refs.extend(self.critic_model_group.async_run_method_batch(method_name="append", experience=views))
        ray.get(refs)
        status = self.ppo_train(global_step)
        timing["update_s"] = time.time() - t0
        t0 = time.time()
        if self.vllm_engines is not None:
            self.broadcast_to_vllm()
        timing["sync_s"] = time.time() - t0
        status = {k: float(v) for k, v in status.items() if isinstance(v, (int, float))}
        status.update({f"timing/{k}": v for k, v in timing.items()})
        status["samples"] = float(len(ss.samples))
        status["samples_padding"] = float(len(ss.samples) - ss.num_real)
        return status, global_step + 1


@dataclass
class Stack:
    """The Ray workers of one run."""

    engines: list
    actor: Any
    reference: Any
    critic: Any
    sampling_params: Any
    dp_ranks: int


class Workers:
    """Where the OpenRLHF backend's Ray workers come from: OpenRLHF's own composition (as in
    ``openrlhf.cli.train_ppo_ray.train``): vLLM engines and the actor, reference and critic groups
    on DeepSpeed, on the GPUs of the allocation.

    The trainer takes another ``Workers`` through ``OpenRLHFTrainer(cfg, workers=...)``: workers
    with the same remote interfaces (the test suite's CPU stand-ins, ``tests/openrlhf_cpu_workers.py``),
    with no switch in the product.
    """

    def resolve(self, settings: OpenRLHFSettings, *, needs_ref: bool = True,
                needs_critic: bool = False) -> OpenRLHFSettings:
        """The resource layout with every ``0``/``auto`` filled in and checked
        (:meth:`.settings.OpenRLHFSettings.resolved`). Raises ValueError for a layout that does
        not fit the GPUs."""
        return settings.resolved(needs_ref=needs_ref, needs_critic=needs_critic)

    def ray_resources(self) -> dict[str, Any]:
        """Resources of a Ray cluster the trainer starts itself (``{}``: Ray detects them)."""
        return {}

    def worker_env(self) -> dict[str, str]:
        """Environment variables the Ray workers need beyond :func:`.cluster.worker_runtime_env`'s."""
        return {}

    def build(self, args, strategy, settings: OpenRLHFSettings, model_path: str, max_steps: int) -> Stack:
        """Create and initialise the engines and model groups of one run.

        Args:
            args: OpenRLHF's parsed arguments (:func:`.args.parse_openrlhf_args`).
            strategy: OpenRLHF's DeepSpeed strategy.
            settings: the resolved layout.
            model_path: the starting model folder.
            max_steps: optimizer steps of the run (sizes the schedulers).
        """
        from openrlhf.trainer.ray import create_vllm_engines
        from openrlhf.trainer.ray.launcher import RayActorGroup, ReferenceModelActor
        from openrlhf.trainer.ray.ppo_actor import PolicyModelActor
        from openrlhf.trainer.ray.ppo_critic import CriticModelActor
        from ray.util.placement_group import placement_group

        nodes, gpn = args.actor.num_nodes, args.actor.num_gpus_per_node
        pg = None
        if args.train.colocate_all or args.train.colocate_actor_ref:
            pg = placement_group([{"GPU": 1, "CPU": 1} for _ in range(nodes * gpn)], strategy="PACK")
            ray.get(pg.ready())
        engines = create_vllm_engines(
            args.vllm.num_engines, args.vllm.tensor_parallel_size, model_path, args.train.seed,
            args.train.full_determinism_enable, args.vllm.enable_prefix_caching, args.vllm.enforce_eager,
            args.data.max_len, shared_pg=pg if args.train.colocate_all else None,
            gpu_memory_utilization=args.vllm.gpu_memory_utilization, vllm_enable_sleep=args.vllm.enable_sleep)
        share = 0.2 if pg else 1
        actor = RayActorGroup(nodes, gpn, PolicyModelActor, pg=pg, num_gpus_per_actor=share)
        ref = (RayActorGroup(args.ref.num_nodes, args.ref.num_gpus_per_node, ReferenceModelActor, pg=pg,
                             num_gpus_per_actor=share) if args.algo.kl.init_coef > 0 else None)
        critic = None
        if args.critic.model_name_or_path:
            cpg = pg if args.train.colocate_all else None
            critic = RayActorGroup(args.critic.num_nodes, args.critic.num_gpus_per_node, CriticModelActor,
                                   pg=cpg, num_gpus_per_actor=0.2 if cpg else 1)
        return self.initialise(Stack(engines=engines, actor=actor, reference=ref, critic=critic,
                                     sampling_params=vllm_sampling_params, dp_ranks=nodes * gpn),
                               strategy, model_path, max_steps)

    @staticmethod
    def initialise(stack: Stack, strategy, model_path: str, max_steps: int) -> Stack:
        """Load the starting model into every group of ``stack`` (the critic after the actor: its
        scheduler is sized after the actor's, OpenRLHF's order); returns ``stack``."""
        refs = stack.actor.async_init_model_from_pretrained(strategy, model_path, max_steps, stack.engines)
        if stack.reference is not None:
            refs.extend(stack.reference.async_init_model_from_pretrained(strategy, model_path))
        ray.get(refs)
        if stack.critic is not None:
            ray.get(stack.critic.async_init_model_from_pretrained(strategy, model_path, max_steps))
        return stack


class OpenRLHFTrainer:
    """Runs one training run of ``cfg`` on OpenRLHF into ``<output_dir>/<run_id>``.

    Args:
        cfg: the RunConfig (``backend=openrlhf``).
        console: rich console for progress lines (optional).
        settings: the resource layout (default :func:`.settings.load_settings`).
        pictures: draws the tracker pictures (:class:`g2po_bench.core.tracking.RunPictures`; optional).
        workers: where the Ray workers come from (default :class:`Workers`: OpenRLHF's on GPUs).
    """

    def __init__(self, cfg: RunConfig, console=None, settings: OpenRLHFSettings | None = None,
                 pictures: RunPictures | None = None, workers: Workers | None = None):
        self.cfg = cfg
        self.workers = workers if workers is not None else Workers()
        self.console = console
        self.settings = settings if settings is not None else load_settings(cfg)
        self.lifecycle = RunLifecycle(cfg, backend="openrlhf", console=console, log=self.log, truncation_log=self.log,
                                      write_checkpoint=self._write_checkpoint, pictures=pictures)
        self.run: RunDir = self.lifecycle.run
        self.progress = self.lifecycle.progress
        self.ckpt_root = self.run.root / "checkpoints" / "openrlhf"
        self.bench = get_benchmark(cfg.env.name)
        self.global_step = 0

    def log(self, msg: str) -> None:
        if self.console is not None:
            self.console.print(msg)
        else:
            print(msg, flush=True)

    # ------------------------------------------------------------------ main
    def run_training(self) -> RunDir:
        """The whole run under the lifecycle's signal policy (on node rank 0; other ranks of a
        multi-node allocation join the head's Ray cluster instead); returns the run folder."""
        alloc = read_allocation()
        if alloc.multi_node and not alloc.is_head:
            # plain Slurm (srun on every node): this rank only lends its GPUs to the head's cluster
            self.log(f"node rank {alloc.node_rank}: joining the Ray head at {alloc.address}")
            join_as_worker(alloc, wait_s=self.settings.node_wait_s)
            return self.run
        return self.lifecycle.run_guarded(lambda: self._run_head(alloc))

    def _run_head(self, alloc) -> RunDir:
        cfg = self.cfg
        lc = self.lifecycle
        settings = self.workers.resolve(self.settings, needs_ref=cfg.train.kl_coef > 0, needs_critic=needs_critic(cfg))
        lc.start()
        atomic_write_json(self.run.root / "openrlhf.json", {
            "settings": settings.as_dict(), "allocation": dataclasses.asdict(alloc)})
        with lc.failing_on_error():  # a stop request goes on to RunLifecycle.run_guarded
            with self.progress.phase("loading tasks", key="tasks"):
                train_tasks, panel = load_task_splits(cfg, self.bench)
                rl_pool = rl_tasks(cfg, train_tasks)  # fails here, before any work, if it is empty
            # environment workers are forked before Ray starts threads in this process
            with EnvPool(self.bench, cfg.env, cfg.env.num_workers) as pool:
                model_path = self._starting_model(pool, train_tasks)
                self.tokenizer = load_tokenizer(model_path)
                resuming = bool(cfg.resume and (self.ckpt_root / "_actor").exists())
                with RayCluster(alloc, address=settings.ray_address, node_wait_s=settings.node_wait_s,
                                runtime_env=worker_runtime_env({**_extra_worker_env(), **self.workers.worker_env()}),
                                log=self.log, **self.workers.ray_resources()):
                    # a stop checkpoints the last complete iteration here, while the workers are up
                    with lc.checkpoint_on_stop():
                        with self.progress.phase("OpenRLHF workers", key="workers"):
                            self._setup(settings, str(model_path), resuming)
                        if not self._resume():
                            lc.fresh_start()
                            ev = self._evaluate(pool, panel, 0)
                            self.log(f"evaluation before RL: success {ev['success_rate']:.1%} on "
                                     f"{ev['num_episodes']} episodes")
                            self._evaluate_at_train_temperature(pool, panel, 0, "before")
                        lc.begin_training()
                        self._loop(pool, rl_pool, panel)
        return lc.finish()

    def _starting_model(self, pool: EnvPool, train_tasks) -> Path:
        """The starting policy (also the KL reference): ``model.path`` when it needs no warm
        start, else the local backend's setup (tiny model and/or SFT) saved to ``reference/``."""
        cfg = self.cfg
        ref_dir = self.run.root / "reference"
        if cfg.resume and (ref_dir / "config.json").exists():
            return ref_dir
        if cfg.model.path is not None and cfg.train.sft_epochs == 0:
            return Path(cfg.model.path)

        local = LocalTrainer(dataclasses.replace(cfg, resume=False), console=self.console)
        t0 = time.time()
        stats = local._setup_model(pool, train_tasks)
        self.lifecycle.write_setup(stats, t0)
        del local
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return ref_dir

    def _setup(self, settings: OpenRLHFSettings, model_path: str, resuming: bool) -> None:
        from openrlhf.utils import get_strategy

        cfg = self.cfg
        argv = build_argv(cfg, settings, model_path=model_path, ckpt_path=str(self.ckpt_root), resume=resuming)
        messages: list[str] = []
        self.args = parse_openrlhf_args(argv, messages)
        atomic_write_text(self.run.root / "openrlhf_args.txt", " ".join(argv) + "\n")
        for m in messages:
            self.log(f"OpenRLHF: {m}")
        strategy = get_strategy(self.args)
        t0 = time.time()
        self.stack = self.workers.build(self.args, strategy, settings, model_path, _max_steps(self.args, cfg))
        self.log(f"OpenRLHF workers ready in {time.time() - t0:.0f} s: {settings.vllm_num_engines} vLLM engine(s), "
                 f"actor on {self.stack.dp_ranks} rank(s)")
        self.trainer = StepPPOTrainer(strategy, self.stack.actor, self.stack.critic, self.stack.reference,
                                      self.stack.engines, self.tokenizer, cfg=cfg, dp_ranks=self.stack.dp_ranks)
        self.policy = EnginePolicy(self.stack.engines, self.tokenizer, max_prompt_tokens=cfg.train.max_prompt_tokens,
                                   sampling_params=self.stack.sampling_params)

    @contextlib.contextmanager
    def _awake(self):
        """vLLM engines awake (weights and KV cache) while the rollout engine uses them."""
        from openrlhf.trainer.ray.vllm_engine import batch_vllm_engine_call

        sleep = bool(self.args.vllm.enable_sleep)
        if sleep:
            batch_vllm_engine_call(self.stack.engines, "wake_up")
        try:
            yield
        finally:
            if sleep:
                batch_vllm_engine_call(self.stack.engines, "sleep")

    # ------------------------------------------------------------------ loop
    def _loop(self, pool: EnvPool, train_tasks, panel) -> None:
        cfg = self.cfg
        lc = self.lifecycle
        total = cfg.train.iterations
        for it in range(lc.start_iteration, total + 1):
            check_stop()
            with self.progress.phase(f"RL iteration {it}/{total}", key="RL iterations", announce=False):
                rec = self._iteration(pool, train_tasks, it)
            if cfg.eval.every and it % cfg.eval.every == 0 or it == total:
                rec.update(eval_metrics(self._evaluate(pool, panel, it)))
            if it == total:
                self._evaluate_at_train_temperature(pool, panel, it, "final")
            lc.console_line(_summary(rec, total))
            lc.end_iteration(rec)

    def _iteration(self, pool: EnvPool, train_tasks, it: int) -> dict[str, Any]:
        cfg = self.cfg
        t0 = time.time()
        with self._awake():
            rb = training_rollouts(cfg, self.policy, pool, self.bench, train_tasks, it)
        t_roll = time.time()
        check_stop()  # a stop requested during the rollouts abandons the iteration here
        self.lifecycle.update_started()  # the update changes the actor: no longer the state of iteration it-1
        status, self.global_step = self.trainer.train_on_rollouts(rb, self.global_step)
        maker = self.trainer.experience_maker
        result = maker.result
        rec: dict[str, Any] = {
            "iteration": it,
            "iter_s": time.time() - t0,
            "rollout_s": t_roll - t0,
            "logprob_s": status.pop("timing/logprob_s", 0.0),
            "adv_s": status.pop("timing/adv_s", 0.0),
            "update_s": status.pop("timing/update_s", 0.0),
            "sync_s": status.pop("timing/sync_s", 0.0),
            **rollout_metrics(rb),
            "train/padding_samples": status.pop("samples_padding", 0.0),
            **{f"adv/{k}": v for k, v in (result.diagnostics if result is not None else {}).items()},
        }
        for k, v in status.items():  # the local backend's names where the quantity is the same
            if k != "samples":
                rec[_METRIC_NAMES.get(k, f"openrlhf/{k}")] = v
        if result is not None:
            rec.update(self.lifecycle.record_step_table(rb, result, it, maker.values))
        self.lifecycle.truncation.observe(rec, it)
        return rec

    # ------------------------------------------------------------------ evaluation
    def _evaluate(self, pool: EnvPool, panel, iteration: int) -> dict[str, Any]:
        n = len(panel) * self.cfg.eval.episodes_per_task
        with self.progress.phase(f"evaluation at iteration {iteration} ({n} episodes)", key="evaluation"), \
                self._awake():
            ev = evaluate_panel(self.cfg, self.policy, pool, self.bench, panel, iteration)
        return self.lifecycle.record_evaluation(ev)

    def _evaluate_at_train_temperature(self, pool: EnvPool, panel, iteration: int, which: str) -> None:
        """``eval.at_train_temperature``: the panel at ``train.temperature`` (same evaluation seed),
        recorded as ``eval.json`` ``at_train_temperature[which]`` ("before" or "final"), as the
        local backend does."""
        lc = self.lifecycle
        if not train_temperature_eval_due(self.cfg, lc.train_temperature_evals, which, iteration):
            return
        with self.progress.phase(f"evaluation at the training temperature, iteration {iteration}",
                                 key="evaluation"), self._awake():
            ev = evaluate_panel(at_train_temperature(self.cfg), self.policy, pool, self.bench, panel, iteration)
        lc.record_train_temperature_evaluation(which, ev)
        self.log(f"held-out success at the training temperature {self.cfg.train.temperature:g} ({which}): "
                 f"{ev['success_rate']:.1%} on {ev['num_episodes']} episodes")

    # ------------------------------------------------------------------ checkpoints
    def _write_checkpoint(self, staging: Path, it: int, trainer_state: dict[str, Any]) -> dict[str, Any]:
        """The OpenRLHF part of a checkpoint (:data:`.lifecycle.CheckpointWriter`): DeepSpeed
        checkpoints of the actor (and critic) with the trainer state as client state (what
        ``resume`` loads), and the actor's HF export as ``policy/`` (for ``g2po eval`` and the
        sweeps launcher)."""
        tag = f"iter{it}"
        state = {"g2po_iteration": it, "global_step": self.global_step,
                 "eval_history": trainer_state["eval_history"],
                 "train_temperature_evals": trainer_state["train_temperature_evals"],
                 "elapsed_s": trainer_state["elapsed_s"]}
        refs = self.stack.actor.async_run_method("save_checkpoint", tag=tag, client_states=state)
        if self.stack.critic is not None:
            refs.extend(self.stack.critic.async_run_method("save_checkpoint", tag=tag))
        ray.get(refs)
        hf = self.ckpt_root / f"{tag}_hf"
        if hf.exists():
            os.replace(hf, staging / "policy")
        for old in self.ckpt_root.glob("iter*_hf"):
            shutil.rmtree(old, ignore_errors=True)
        return {"backend": "openrlhf", "deepspeed_checkpoint": str(self.ckpt_root), "tag": tag}

    def _resume(self) -> bool:
        """Continue from the DeepSpeed checkpoint's client state; False when starting fresh."""
        if not self.args.ckpt.load_enable:
            return False
        state = ray.get(self.stack.actor.async_run_method("get_checkpoint_states"))[0] or {}
        if "g2po_iteration" not in state:
            return False
        self.global_step = int(state.get("global_step", state["g2po_iteration"]))
        self.lifecycle.resume({**state, "iteration": int(state["g2po_iteration"])})
        self.trainer.broadcast_to_vllm()  # the engines start from the base weights
        return True


_METRIC_NAMES = {
    "policy_loss": "loss/pg_loss", "ppo_clip_ratio": "loss/clip_frac", "ppo_kl": "loss/approx_kl",
    "kl": "loss/kl", "entropy_loss": "loss/entropy", "actor_grad_norm": "loss/grad_norm",
    "critic_loss": "loss/value", "critic_grad_norm": "loss/value_grad_norm",
}
"""OpenRLHF status keys -> the local backend's metric names (same definitions); other keys are
logged as ``openrlhf/<key>``."""


def _extra_worker_env() -> dict[str, str]:
    # the suite's own and NCCL's/vLLM's variables of this process, passed on to the workers
    return {k: v for k, v in os.environ.items() if k.startswith(("G2PO_", "NCCL_", "VLLM_"))}


def _max_steps(args, cfg: RunConfig) -> int:
    rows = cfg.train.groups_per_batch * cfg.train.group_size * cfg.env.max_steps
    return max(1, cfg.train.iterations * args.train.max_epochs * -(-rows // args.train.batch_size))


def _summary(rec: dict[str, Any], total: int) -> str:
    msg = (f"iteration {rec['iteration']}/{total}: success {rec['train/success_rate']:.0%}, "
           f"{rec['iter_s']:.1f} s (generation {rec['rollout_s']:.1f}, log-probs {rec['logprob_s']:.1f}, "
           f"advantages {rec['adv_s']:.2f}, update {rec['update_s']:.1f}, sync {rec['sync_s']:.1f})")
    if "eval/success_rate" in rec:
        msg += f"; eval {rec['eval/success_rate']:.0%}"
    return msg


def train(cfg: RunConfig, console=None, pictures: RunPictures | None = None) -> RunDir:
    """Run the OpenRLHF backend on ``cfg``; returns the run folder.

    Raises:
        g2po_bench.runtime.shutdown.Interrupted: stopped by SIGTERM/SIGINT/the preemption
            signal (status 128 + signal; the run folder says ``interrupted``), as on the local backend.
    """
    return OpenRLHFTrainer(cfg, console=console, pictures=pictures).run_training()
