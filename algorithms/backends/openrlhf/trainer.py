"""The OpenRLHF trainer backend (``backend=openrlhf``): the suite's loop on Ray, DeepSpeed and vLLM.

One iteration, with the same semantics as the local backend
(:mod:`g2po_bench.algorithms.backends.local.trainer`; docs/design-notes.md "Training-loop facts"):

1. **Generation**: ``groups_per_batch`` tasks x ``group_size`` rollouts by the suite's rollout
   engine (:func:`g2po_bench.benchmarks.rollout.collect_rollouts`; environments in worker processes,
   step prompts with history) through :class:`.engine_policy.EnginePolicy` on OpenRLHF's vLLM engines.
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

The loop is the local backend's: the training loop (:mod:`g2po_bench.algorithms.backends.loop`)
runs the tasks, environment pool, evaluations, iterations, checkpoints, signals and records, with
:class:`OpenRLHFTrainer` as this backend's strategy (the Ray workers as a session, the critic's
values and the update on them, DeepSpeed checkpoints). The run folder is the local backend's
(``config.yaml``, ``metrics.jsonl`` with seconds per phase, ``eval.json``, ``status.json``,
``timing.json``, ``steps/`` with ``record_graphs``, ``checkpoints/latest/{policy,trainer_state.json}``,
the trackers of ``logging.backends``) plus ``checkpoints/openrlhf/`` (DeepSpeed checkpoints of the
actor and critic: what ``resume=true`` loads), ``openrlhf.json`` (layout) and
``openrlhf_args.txt`` (the OpenRLHF arguments). The loop's signal policy applies too: SIGTERM,
SIGINT or the preemption signal abandons the iteration in flight, checkpoints the last complete
one (while the Ray workers are still up: they live in the backend's session), and leaves
``status.json`` ``interrupted`` (exit status 128 + signal, or Submitit's requeue).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch
from openrlhf.trainer.ppo_trainer import BasePPOTrainer

from g2po_bench.algorithms.backends.common import needs_critic
from g2po_bench.algorithms.backends.local.trainer import starting_policy
from g2po_bench.algorithms.backends.loop import TrainerBackend, TrainingLoop, run_folder
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
from g2po_bench.algorithms.backends.progress import RunProgress
from g2po_bench.algorithms.registry import AdvantageResult, BoundEstimator, bind_run_estimator
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.rollout import RolloutBatch
from g2po_bench.core.config import RunConfig
from g2po_bench.core.rundir import RunDir
from g2po_bench.core.tracking import RunPictures
from g2po_bench.runtime.workers import EnvPool

__all__ = ["StepPPOTrainer", "ScoredRollouts", "OpenRLHFTrainer", "Stack", "Workers", "load_tokenizer", "train"]


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
        cfg: the RunConfig (its estimator and options: :attr:`estimator`).
        dp_ranks: data-parallel ranks of the actor group.
    """

    def __init__(self, strategy, actor_model_group, critic_model_group, reference_model_group, vllm_engines,
                 tokenizer, *, cfg: RunConfig, dp_ranks: int = 1):
        super().__init__(strategy, actor_model_group, critic_model_group, None, reference_model_group,
                         vllm_engines, tokenizer)
        self.cfg = cfg
        self.experience_maker = StepExperienceMaker(
            actor_model_group, critic_model_group, None, reference_model_group, self.kl_ctl, strategy, tokenizer,
            dp_ranks=dp_ranks)

    @functools.cached_property
    def estimator(self) -> BoundEstimator:
        """The run's estimator (:func:`g2po_bench.algorithms.registry.bind_run_estimator`), bound
        at its first use: by :meth:`make_experiences` (updates outside the training loop); in a
        run the loop binds its own and gives the advantages to :meth:`train_on_scored`."""
        return bind_run_estimator(self.cfg)

    def train_step(self, rollout_samples, global_step):  # pragma: no cover - OpenRLHF's prompt-level entry
        raise RuntimeError("StepPPOTrainer trains on the suite's rollouts: use train_on_rollouts()")

    def score(self, rollouts: RolloutBatch) -> ScoredRollouts:
        """OpenRLHF's model forwards on the rows (old and reference log-probs, the critic's values),
        before the advantages are known."""
        ss = build_samples(rollouts, eos_token_id=self.tokenizer.eos_token_id, pad_to=self.args.train.batch_size)
        self.experience_maker.prepare(ss)
        experiences = self.experience_maker.score_batch(ss.samples)
        return ScoredRollouts(experiences, ss, self.experience_maker.row_values(experiences))

    def with_advantages(self, scored: ScoredRollouts,
                        advantage_fn: Callable[[np.ndarray | None], AdvantageResult]) -> list:
        """The scored experiences with ``advantage_fn(values)``'s advantages (and returns) on their
        action tokens (:meth:`.experience_maker.StepExperienceMaker.compute_advantages_and_returns`)."""
        maker = self.experience_maker
        maker.prepare(scored.samples, advantage_fn)
        t0 = time.time()
        experiences = maker.compute_advantages_and_returns(scored.experiences)
        maker.timing["adv_s"] = time.time() - t0
        return experiences

    def make_experiences(self, rollouts: RolloutBatch) -> tuple[list, StepSamples]:
        """Experiences (old and reference log-probs, values, per-token advantages) of the rows,
        the advantages from the configured estimator."""
        scored = self.score(rollouts)
        experiences = self.with_advantages(scored, lambda values: self.estimator(rollouts, values))
        return experiences, scored.samples

    def train_on_rollouts(self, rollouts: RolloutBatch, global_step: int) -> tuple[dict[str, Any], int]:
        """One update on ``rollouts`` (advantages from the configured estimator); returns (status
        with ``timing/*`` seconds, next global step)."""
        experiences, ss = self.make_experiences(rollouts)
        return self.fit(experiences, ss, global_step)

    def train_on_scored(self, scored: ScoredRollouts, result: AdvantageResult,
                        global_step: int) -> tuple[dict[str, Any], int]:
        """One update on rows scored by :meth:`score` with the advantages of ``result``; returns
        (status with ``timing/*`` seconds, next global step)."""
        return self.fit(self.with_advantages(scored, lambda values: result), scored.samples, global_step)

    def fit(self, experiences: list, ss: StepSamples, global_step: int) -> tuple[dict[str, Any], int]:
        """OpenRLHF's ``ppo_train`` of the actor (and critic) on ``experiences``, then the weight
        sync into the vLLM engines; returns (status with ``timing/*`` seconds, next global step)."""
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
class ScoredRollouts:
    """One batch of rows after OpenRLHF's model forwards (:meth:`StepPPOTrainer.score`).

    Attributes:
        experiences: OpenRLHF's micro-batch experiences (log-probs, values; no advantages yet).
        samples: the :class:`.experience.StepSamples` they were made from (their map to the rows).
        values: (rows,) float64 critic values V(s_t), or None without a critic.
    """

    experiences: list
    samples: StepSamples
    values: np.ndarray | None


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


class OpenRLHFTrainer(TrainerBackend):
    """The OpenRLHF backend's strategy for the training loop (:class:`..loop.TrainerBackend`).

    Args:
        cfg: the RunConfig (``backend=openrlhf``).
        alloc: the nodes of the run (:func:`.cluster.read_allocation`; default: read it).
        settings: the resource layout (default :func:`.settings.load_settings`).
        workers: where the Ray workers come from (default :class:`Workers`: OpenRLHF's on GPUs).
        log: where this backend's own lines go (default: printed).
    """

    name = "openrlhf"

    def __init__(self, cfg: RunConfig, *, alloc=None, settings: OpenRLHFSettings | None = None,
                 workers: Workers | None = None, log=None):
        self.cfg = cfg
        self.alloc = alloc if alloc is not None else read_allocation()
        self.workers = workers if workers is not None else Workers()
        self.settings = settings if settings is not None else load_settings(cfg)
        self.log = log or _printer(None)
        self.bench = get_benchmark(cfg.env.name)
        self.global_step = 0

    # ------------------------------------------------------------------ setup
    def start(self, run: RunDir, progress: RunProgress) -> None:
        """Resolve the resource layout (raises ValueError when it does not fit the GPUs) and record
        it with the allocation in ``openrlhf.json``."""
        self.run, self.progress = run, progress
        self.ckpt_root = run.root / "checkpoints" / "openrlhf"
        cfg = self.cfg
        self.layout = self.workers.resolve(self.settings, needs_ref=cfg.train.kl_coef > 0,
                                           needs_critic=needs_critic(cfg))
        run.write_json("openrlhf.json", {"settings": self.layout.as_dict(),
                                         "allocation": dataclasses.asdict(self.alloc)})

    @contextlib.contextmanager
    def session(self, pool: EnvPool, train_tasks, resume_from: Path | None) -> Iterator[dict[str, Any]]:
        """The starting model (the local backend's warm start, saved to ``reference/``), then the
        Ray cluster and OpenRLHF's workers on it, up until the session ends; yields the warm
        start's figures. The environment workers were forked before Ray starts threads here."""
        model_path, stats = self._starting_model(pool, train_tasks)
        self.tokenizer = load_tokenizer(model_path)
        resuming = bool(self.cfg.resume and (self.ckpt_root / "_actor").exists())
        with RayCluster(self.alloc, address=self.layout.ray_address, node_wait_s=self.layout.node_wait_s,
                        runtime_env=worker_runtime_env({**_extra_worker_env(), **self.workers.worker_env()}),
                        log=self.log, **self.workers.ray_resources()):
            with self.progress.phase("OpenRLHF workers", key="workers"):
                self._setup(self.layout, str(model_path), resuming)
            yield stats

    def _starting_model(self, pool: EnvPool, train_tasks) -> tuple[Path, dict[str, Any]]:
        """The starting policy (also the KL reference) and the set-up figures: ``model.path`` when
        it needs no warm start, else the local backend's (tiny model and/or SFT) saved to ``reference/``."""
        cfg = self.cfg
        ref_dir = self.run.root / "reference"
        if cfg.resume and (ref_dir / "config.json").exists():
            return ref_dir, {}
        if cfg.model.path is not None and cfg.train.sft_epochs == 0:
            return Path(cfg.model.path), {}
        model, _, stats = starting_policy(cfg, pool, self.bench, train_tasks, self.run, self.progress)
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return ref_dir, stats

    def _setup(self, settings: OpenRLHFSettings, model_path: str, resuming: bool) -> None:
        from openrlhf.utils import get_strategy

        cfg = self.cfg
        argv = build_argv(cfg, settings, model_path=model_path, ckpt_path=str(self.ckpt_root), resume=resuming)
        messages: list[str] = []
        self.args = parse_openrlhf_args(argv, messages)
        self.run.write_text("openrlhf_args.txt", " ".join(argv) + "\n")
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

    def load(self, checkpoint: Path | None) -> dict[str, Any] | None:
        """The trainer state in the DeepSpeed checkpoint's client state (what ``resume=true``
        loaded into the workers at set-up; the engines then get the actor's weights); None when
        starting fresh."""
        if not self.args.ckpt.load_enable:
            return None
        state = ray.get(self.stack.actor.async_run_method("get_checkpoint_states"))[0] or {}
        if "g2po_iteration" not in state:
            return None
        self.global_step = int(state.get("global_step", state["g2po_iteration"]))
        self.trainer.broadcast_to_vllm()  # the engines start from the base weights
        return {**state, "iteration": int(state["g2po_iteration"])}

    @contextlib.contextmanager
    def generating(self) -> Iterator[None]:
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

    # ------------------------------------------------------------------ one iteration
    def values(self, rollouts: RolloutBatch) -> np.ndarray | None:
        """OpenRLHF's model forwards on the rows (:meth:`StepPPOTrainer.score`, kept for
        :meth:`update`); returns the critic's values (None without a critic)."""
        self._scored = self.trainer.score(rollouts)
        return self._scored.values

    def update(self, rollouts: RolloutBatch, result: AdvantageResult, values: np.ndarray | None,
               iteration: int) -> dict[str, Any]:
        """OpenRLHF's update of the actor (and critic) on the rows scored by :meth:`values` with
        ``result``'s advantages, then the weight sync; returns ``logprob_s`` (the forwards of
        :meth:`values`), ``update_s`` (the DeepSpeed ``fit``), ``sync_s``, the padding samples and
        OpenRLHF's status under the local backend's names (:data:`_METRIC_NAMES`)."""
        scored, self._scored = self._scored, None
        status, self.global_step = self.trainer.train_on_scored(scored, result, self.global_step)
        rec: dict[str, Any] = {
            "logprob_s": status.pop("timing/logprob_s", 0.0),
            "update_s": status.pop("timing/update_s", 0.0),
            "sync_s": status.pop("timing/sync_s", 0.0),
            "train/padding_samples": status.pop("samples_padding", 0.0),
        }
        status.pop("timing/adv_s", None)  # attaching the advantages: part of the loop's adv_s
        for k, v in status.items():  # the local backend's names where the quantity is the same
            if k != "samples":
                rec[_METRIC_NAMES.get(k, f"openrlhf/{k}")] = v
        return rec

    # ------------------------------------------------------------------ checkpoints
    def save(self, staging: Path, iteration: int, trainer_state: dict[str, Any]) -> dict[str, Any]:
        """The OpenRLHF part of a checkpoint (:data:`..lifecycle.CheckpointWriter`): DeepSpeed
        checkpoints of the actor (and critic) with the trainer state as client state (what
        ``resume`` loads), and the actor's HF export as ``policy/`` (for ``g2po eval`` and the
        sweeps launcher)."""
        tag = f"iter{iteration}"
        state = {"g2po_iteration": iteration, "global_step": self.global_step,
                 **{k: v for k, v in trainer_state.items() if k != "iteration"}}
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


def _printer(console):
    """Print a line on ``console`` (plainly without one): this backend's lines are shown in every case."""
    if console is not None:
        return lambda msg: console.print(msg, highlight=False, markup=False, soft_wrap=True)
    return lambda msg: print(msg, flush=True)


def train(cfg: RunConfig, console=None, pictures: RunPictures | None = None,
          workers: Workers | None = None) -> RunDir:
    """Run the OpenRLHF backend on ``cfg`` (the training loop with :class:`OpenRLHFTrainer`, on node
    rank 0; the other ranks of a multi-node allocation join the head's Ray cluster instead);
    returns the run folder.

    Args:
        cfg: the RunConfig (``backend=openrlhf``).
        console: rich console for progress lines (optional).
        pictures: draws the tracker pictures (optional).
        workers: where the Ray workers come from (default :class:`Workers`: OpenRLHF's on GPUs; the
            tests inject CPU stand-ins here).

    Raises:
        g2po_bench.runtime.shutdown.Interrupted: stopped by SIGTERM/SIGINT/the preemption
            signal (status 128 + signal; the run folder says ``interrupted``), as on the local backend.
    """
    log = _printer(console)
    alloc = read_allocation()
    if alloc.multi_node and not alloc.is_head:
        # plain Slurm (srun on every node): this rank only lends its GPUs to the head's cluster
        log(f"node rank {alloc.node_rank}: joining the Ray head at {alloc.address}")
        join_as_worker(alloc, wait_s=(load_settings(cfg)).node_wait_s)
        return RunDir(run_folder(cfg))
    backend = OpenRLHFTrainer(cfg, alloc=alloc, workers=workers, log=log)
    return TrainingLoop(cfg, backend, console=console, pictures=pictures, log=log).run()
