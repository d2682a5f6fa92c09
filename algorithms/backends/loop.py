"""The training loop: one for every trainer backend.

:class:`TrainingLoop` runs a training run from its tasks to its last record; a backend (a
:class:`TrainerBackend`: :class:`.local.trainer.LocalTrainer`, :class:`.openrlhf.trainer.OpenRLHFTrainer`)
provides the models and the update, and is only ever called by the loop (it never sees the loop
or the run lifecycle). The loop owns, in this order:

1. the run folder (:class:`g2po_bench.core.runlock.RunLock`: one process per run folder, held to
   the end, the signal path included) and the run's records (:class:`.lifecycle.RunLifecycle`:
   status, metrics, evaluations, checkpoints and resume, trackers, the signal policy);
2. the task splits (:func:`.common.load_task_splits`, :func:`.common.rl_tasks`) and the
   environment pool (:class:`g2po_bench.runtime.workers.EnvPool`, given the benchmark);
3. the backend's set-up (:meth:`TrainerBackend.session`: warm start or the resumed models, its
   workers), then either the resume (:meth:`TrainerBackend.load` gives the checkpoint's trainer
   state) or the evaluations before RL, at ``eval.temperature`` and with
   ``eval.at_train_temperature`` at ``train.temperature``;
4. the iterations (docs/design-notes.md "Training-loop facts"): rollouts of
   ``train.groups_per_batch`` tasks x ``train.group_size`` episodes
   (:func:`.common.training_rollouts`; rolled out again after restarting the environment workers
   while most episodes crashed, at most ``train.crash_retries`` times), the critic's values when
   the estimator declares them (:meth:`TrainerBackend.values`), the advantages of the run's
   estimator (:func:`g2po_bench.algorithms.registry.bind_run_estimator`: bound once, when the loop
   is made, and called every iteration), the backend's update
   (:meth:`TrainerBackend.update`), the metrics line, the evaluation every ``eval.every``
   iterations and after the last, checkpoints every ``train.checkpoint_every`` iterations
   (:meth:`TrainerBackend.save` writes the backend's files);
5. stop requests (SIGTERM, SIGINT, the preemption signal: the iteration in flight abandoned, the
   last complete one checkpointed while the backend's models are still up), failures, and the
   end of the run (``timing.json``, ``status.json`` ``done``).

Each metrics line holds ``iteration``, ``iter_s``, ``rollout_s``, ``adv_s`` (the backend's values
and the estimator), ``update_s``, the ``train/*`` metrics of the rollouts
(:func:`.common.rollout_metrics`), ``adv/*`` (the estimator's diagnostics), what the backend
reports (:meth:`TrainerBackend.rollout_metrics`, :meth:`TrainerBackend.update`; a backend may
report finer timings under the same names), the step table's figures with ``record_graphs`` and
``eval/*`` on evaluation iterations.

numpy, the benchmark harness and the run-folder code only: importable without torch or OpenRLHF.
"""

from __future__ import annotations

import abc
import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

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
from g2po_bench.algorithms.backends.progress import RunProgress, format_rate_ci
from g2po_bench.algorithms.registry import AdvantageResult, bind_run_estimator
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.rollout import RolloutBatch
from g2po_bench.core.config import RunConfig, resolve_run_id
from g2po_bench.core.crashes import CRASHED_HEAVY_FRACTION, is_crashed_heavy
from g2po_bench.core.rundir import RunDir
from g2po_bench.core.runlock import RunLock
from g2po_bench.core.tracking import RunPictures
from g2po_bench.runtime.shutdown import check_stop
from g2po_bench.runtime.workers import EnvPool

__all__ = ["TrainerBackend", "TrainingLoop", "run_folder"]


def run_folder(cfg: RunConfig) -> Path:
    """The run folder of ``cfg``: ``<output_dir>/<run_id>`` (the default run id is the config's hash)."""
    return Path(cfg.output_dir) / resolve_run_id(cfg)


class TrainerBackend(abc.ABC):
    """What a trainer backend gives the :class:`TrainingLoop` (a strategy).

    The loop calls these methods in this order; none of them is given the loop or the lifecycle,
    and none calls back into them. :meth:`session`, :meth:`update` and :meth:`save` are
    abstract (a backend without them cannot be instantiated: ``TypeError``); the others have
    defaults that do nothing.

    Attributes:
        name: the backend's name, recorded for the trackers (``"local"``, ``"openrlhf"``).
        policy: what rollouts and evaluations sample from (the
            :class:`g2po_bench.runtime.policy_protocol.Policy` interface), set once :meth:`session`
            has set the backend up.
    """

    name: str = "backend"
    policy: Any = None

    def start(self, run: RunDir, progress: RunProgress) -> None:
        """First thing in a run, before ``status.json`` says ``running``: the run folder (for the
        backend's own files) and the run's progress display (phases, lines)."""
        return None  # nothing by default

    @abc.abstractmethod
    def session(self, pool: EnvPool, train_tasks: list, resume_from: Path | None) -> AbstractContextManager[dict[str, Any]]:
        """Set the backend up for the run, as a context manager that tears it down at exit.

        Args:
            pool: the environment pool (the warm start replays expert demonstrations in it).
            train_tasks: the training split.
            resume_from: the newest intact checkpoint folder with ``resume=true`` (None: a fresh run).

        Yields:
            the set-up figures written to ``setup.json`` on a fresh start (the warm start's), or ``{}``.
        """

    def load(self, checkpoint: Path | None) -> dict[str, Any] | None:
        """Restore the backend's optimizer, RNG and trained state from ``checkpoint`` (after
        :meth:`session`); returns the checkpoint's trainer state (``iteration``,
        ``eval_history``, ``train_temperature_evals``, ``elapsed_s``, ``warnings``), or None to
        start the run fresh."""
        return None

    def generating(self) -> AbstractContextManager[None]:
        """Around every use of :attr:`policy` (rollouts and evaluations), e.g. waking inference
        engines."""
        return contextlib.nullcontext()

    def rollouts_started(self) -> None:
        """Before an iteration's rollouts (e.g. open the windows of the throughput and memory figures)."""
        return None  # nothing by default

    def rollout_metrics(self) -> dict[str, Any]:
        """Right after an iteration's rollouts: the backend's figures of them for the metrics line."""
        return {}

    def values(self, rollouts: RolloutBatch) -> np.ndarray | None:
        """The critic's V(s_t) per step row, (B,) float64, when the estimator declares ``values``
        (:func:`.common.needs_critic`), else None."""
        return None

    @abc.abstractmethod
    def update(self, rollouts: RolloutBatch, result: AdvantageResult, values: np.ndarray | None,
               iteration: int) -> dict[str, Any]:
        """Train on one iteration: the policy on ``result.advantages`` (B,) (and the critic on the
        estimator's returns, or ``advantages + values``); returns the metrics for the line
        (``loss/*``, ...)."""

    @abc.abstractmethod
    def save(self, staging: Path, iteration: int, trainer_state: dict[str, Any]) -> dict[str, Any] | None:
        """Write the backend's files of a checkpoint into the empty folder ``staging``
        (:data:`.lifecycle.CheckpointWriter`); returns extra trainer-state entries or None."""

    def capture_state(self) -> Any:
        """What must be restored before the state at the end of the last complete iteration is
        checkpointed on a stop (e.g. RNG states); None when nothing is."""
        return None

    def restore_state(self, state: Any) -> None:
        """Restore what :meth:`capture_state` returned."""
        return None  # nothing by default

    def timing(self) -> dict[str, Any]:
        """Extra entries of ``timing.json`` (e.g. the threads used)."""
        return {}


class TrainingLoop:
    """One training run of ``cfg`` with ``backend`` into ``<output_dir>/<run_id>`` (module docstring).

    Args:
        cfg: the RunConfig.
        backend: the :class:`TrainerBackend`.
        console: rich console for progress and lines (None: no display).
        pictures: draws the tracker pictures (:class:`g2po_bench.core.tracking.RunPictures`; optional).
        log: where the run's lines go (default: the console; None and no console: nowhere, and the
            run's one-time warnings become Python warnings).

    Attributes:
        estimator: the run's estimator (:func:`g2po_bench.algorithms.registry.bind_run_estimator`),
            bound here once, before the run folder is touched.

    Raises:
        ValueError, TypeError: the estimator or its options are bad (from ``bind_run_estimator``).
    """

    def __init__(self, cfg: RunConfig, backend: TrainerBackend, *, console=None,
                 pictures: RunPictures | None = None, log: Callable[[str], Any] | None = None):
        self.cfg = cfg
        self.backend = backend
        self.bench = get_benchmark(cfg.env.name)
        self.estimator = bind_run_estimator(cfg)  # options checked once; called every iteration
        self.console = console
        self.pictures = pictures
        self._log = log
        self.lifecycle: RunLifecycle | None = None
        self.sampler_gap: SamplerGapMonitor | None = None

    def log(self, msg: str) -> None:
        """Print one of the run's lines."""
        self.lifecycle.log(msg)

    def run(self) -> RunDir:
        """Train; returns the run folder.

        Raises:
            g2po_bench.core.errors.RunFolderBusy: another process trains this run folder.
            g2po_bench.core.errors.RunFolderLost: the folder was replaced during the run (nothing
                more was written into it).
            g2po_bench.runtime.shutdown.Interrupted: stopped by SIGTERM/SIGINT/the preemption
                signal (a ``SystemExit`` with status 128 + signal; ``status.json`` says
                ``interrupted``); under Submitit the preemption signal requeues the job instead.
            whatever the environment, the backend or the estimator raise (``status.json`` says ``failed``).
        """
        with RunLock.acquire(run_folder(self.cfg)):
            lc = self.lifecycle = RunLifecycle(
                self.cfg, backend=self.backend.name, console=self.console, log=self._log,
                write_checkpoint=self.backend.save,
                capture_state=self.backend.capture_state, restore_state=self.backend.restore_state,
                pictures=self.pictures)
            # the one-time warnings go to the run's lines when there are any, else to Python warnings
            warn = lc.log if (self._log is not None or self.console is not None) else None
            lc.truncation.log = warn
            self.sampler_gap = SamplerGapMonitor(self.cfg.model.dtype, log=warn)
            return lc.run_guarded(self._train)

    def _train(self) -> RunDir:
        cfg, lc, backend = self.cfg, self.lifecycle, self.backend
        backend.start(lc.run, lc.progress)
        lc.start()
        t_setup = time.time()
        with lc.failing_on_error():  # a stop request goes on to RunLifecycle.run_guarded
            train_tasks, panel, rl_pool = self._load_tasks()
            with EnvPool(self.bench, cfg.env, cfg.env.num_workers) as pool, \
                    backend.session(pool, train_tasks, lc.resume_from) as setup_stats, \
                    lc.checkpoint_on_stop():  # while the backend can still save its models
                self._begin(pool, panel, setup_stats, t_setup)
                self._iterate(pool, rl_pool, panel)
        return lc.finish(**backend.timing())

    def _load_tasks(self) -> tuple[list, list, list]:
        """(training split, evaluation panel, the tasks RL draws from); fails here, before any
        work, when there is nothing to train on."""
        cfg = self.cfg
        with self.lifecycle.progress.phase("loading tasks", key="tasks"):
            train_tasks, panel = load_task_splits(cfg, self.bench)
            rl_pool = rl_tasks(cfg, train_tasks)
            if len(rl_pool) != len(train_tasks):
                self.log(f"RL draws from the {len(rl_pool)} training tasks the warm start's demonstrations "
                         f"did not use (train.rl_tasks={cfg.train.rl_tasks})")
        # printed once the tasks are loaded: a data or config error stays a one-line message
        self.log(f"run folder: {self.lifecycle.run.root}")
        if cfg.resume and self.lifecycle.resume_from is None:  # e.g. a mistyped run_id: say so
            self.log("resume=true: the run folder holds no checkpoint yet, so the run starts from its beginning")
        self.log(f"tasks: {len(train_tasks)} training, evaluation panel of {len(panel)} x "
                 f"{cfg.eval.episodes_per_task} episode(s) ({cfg.env.eval_split}), from "
                 + (f"env.data_dir={cfg.env.data_dir}" if cfg.env.data_dir is not None
                    else f"the embedded default data of {cfg.env.name} (env.data_dir unset)"))
        return train_tasks, panel, rl_pool

    def _begin(self, pool: EnvPool, panel, setup_stats: dict[str, Any], t_setup: float) -> None:
        """The resume (the backend's checkpoint), or a fresh start with the evaluations before RL."""
        lc = self.lifecycle
        state = self.backend.load(lc.resume_from)
        if state is not None:
            lc.resume(state)
            warned = lc.run.warnings.get("stale_sampler")
            if warned:
                self.sampler_gap.record = dict(warned)  # a resumed run warns no second time
        else:
            # a fresh start (also resume=true without a checkpoint): drop what an earlier attempt
            # of this run may have logged before its first checkpoint
            lc.fresh_start()
            lc.write_setup(setup_stats, t_setup)
            ev = self.evaluate(pool, panel, 0)
            self.log(f"evaluation before RL: success {format_rate_ci(ev)}")
            self.evaluate_at_train_temperature(pool, panel, 0, "before")
        lc.begin_training()

    def _iterate(self, pool: EnvPool, train_tasks, panel) -> None:
        cfg, lc = self.cfg, self.lifecycle
        total = cfg.train.iterations
        for it in range(lc.start_iteration, total + 1):
            check_stop()
            with lc.progress.phase(f"RL iteration {it}/{total}", total=cfg.env.max_steps, key="RL iterations",
                                   announce=False) as h:
                rec = self._iteration(pool, train_tasks, it, on_step=lambda t, n: h.update(t, f"steps, {n} active"))
            line = (f"iteration {it}/{total}: train success {rec['train/success_rate']:.1%}, "
                    f"invalid {rec['train/invalid_frac']:.1%}, {rec['iter_s']:.1f} s "
                    f"(rollout {rec['rollout_s']:.1f}, update {rec['update_s']:.1f})")
            if cfg.eval.every and it % cfg.eval.every == 0 or it == total:
                ev = self.evaluate(pool, panel, it)
                rec.update(eval_metrics(ev))
                line += f"; held-out success {format_rate_ci(ev)}"
            lc.console_line(line)
            if it == total:
                self.evaluate_at_train_temperature(pool, panel, it, "final")
            lc.end_iteration(rec)

    def _iteration(self, pool: EnvPool, train_tasks, it: int, on_step=None) -> dict[str, Any]:
        """One iteration (module docstring, step 4); returns its metrics line (not yet recorded)."""
        lc, backend = self.lifecycle, self.backend
        backend.rollouts_started()
        t0 = time.time()
        rb = self._rollouts_without_crashes(pool, train_tasks, it, on_step=on_step)
        t_roll = time.time()
        rollout_stats = backend.rollout_metrics()
        values = backend.values(rb)
        res = self.estimator(rb, values)
        t_adv = time.time()
        check_stop()  # a stop requested during the rollouts abandons the iteration here
        lc.update_started()  # the update changes the models: no longer the state of iteration it-1
        upd = backend.update(rb, res, values, it)
        t_upd = time.time()
        rec: dict[str, Any] = {
            "iteration": it,
            "iter_s": t_upd - t0, "rollout_s": t_roll - t0, "adv_s": t_adv - t_roll, "update_s": t_upd - t_adv,
            **rollout_metrics(rb),
            **rollout_stats,
            **{f"adv/{k}": v for k, v in res.diagnostics.items()},
            **upd,
            **lc.record_step_table(rb, res, it, values),
        }
        lc.truncation.observe(rec, it)
        if self.sampler_gap.observe(rec, it):
            lc.run.warnings["stale_sampler"] = self.sampler_gap.record
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
            with self.backend.generating():
                rb = training_rollouts(self.cfg, self.backend.policy, pool, self.bench, train_tasks, it,
                                       on_step=on_step)
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

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, pool: EnvPool, panel, iteration: int) -> dict[str, Any]:
        """The panel at ``eval.temperature``, recorded in ``eval.json``; returns the EVAL record."""
        ev = self._play_panel(self.cfg, pool, panel, iteration, f"evaluation at iteration {iteration}")
        return self.lifecycle.record_evaluation(ev)

    def evaluate_at_train_temperature(self, pool: EnvPool, panel, iteration: int, which: str) -> None:
        """``eval.at_train_temperature``: the panel at ``train.temperature`` (same evaluation seed),
        recorded as ``eval.json`` ``at_train_temperature[which]`` ("before" or "final"); nothing
        when it is off or already recorded for ``iteration``."""
        cfg, lc = self.cfg, self.lifecycle
        if not train_temperature_eval_due(cfg, lc.train_temperature_evals, which, iteration):
            return
        t = cfg.train.temperature
        ev = self._play_panel(at_train_temperature(cfg), pool, panel, iteration,
                              f"evaluation at the training temperature {t:g}, iteration {iteration}")
        lc.record_train_temperature_evaluation(which, ev)
        self.log(f"held-out success at the training temperature {t:g} ({which}): {format_rate_ci(ev)}")

    def _play_panel(self, cfg, pool: EnvPool, panel, iteration: int, title: str) -> dict[str, Any]:
        """One evaluation of ``panel`` with ``cfg``'s eval settings, shown as a progress phase."""
        n = len(panel) * cfg.eval.episodes_per_task
        with self.lifecycle.progress.phase(f"{title} ({n} episodes)", total=n, key="evaluation") as h, \
                self.backend.generating():
            return evaluate_panel(cfg, self.backend.policy, pool, self.bench, panel, iteration,
                                  on_progress=lambda done, total: h.update(done, "episodes"))
