"""The run lifecycle every trainer backend goes through: the one place a training run's records are written.

A backend (:mod:`.local.trainer`, :mod:`.openrlhf.trainer`) owns its models and its update; a
:class:`RunLifecycle` owns the rest, the same for every backend:

- **status** (``status.json``): ``running`` from :meth:`~RunLifecycle.start`, after every
  iteration, ``done`` (:meth:`~RunLifecycle.finish`), ``failed`` with the error
  (:meth:`~RunLifecycle.fail`), ``interrupted`` with the signal (:meth:`~RunLifecycle.stop_on_signal`);
- **metrics** (``metrics.jsonl``): one line per iteration with ``time_s`` (seconds since the run
  started, across resumes), appended by :meth:`~RunLifecycle.end_iteration`; only iterations
  covered by the checkpoint survive a resume or a stop (dropped once the resumed run starts
  training, never by an attempt that ends before);
- **evaluations** (``eval.json``): the history, ``before``/``final``/``best`` and
  ``at_train_temperature`` (:meth:`~RunLifecycle.record_evaluation`);
- **checkpoints**: ``checkpoints/latest`` and ``checkpoints/previous`` (:mod:`g2po_bench.core.checkpoints`):
  a staging folder the backend's writer fills with its model and optimizer files, then the
  trainer state ``trainer_state.json`` (iteration, evaluation history, elapsed seconds, plus what
  the backend adds), fsynced, its ``manifest.json`` written, verified, and renamed to ``latest``
  (the former ``latest`` kept as ``previous``), every ``train.checkpoint_every`` iterations and at
  the end;
- **resume** (``resume=true``; :meth:`~RunLifecycle.resume`): the newest intact checkpoint
  (:attr:`~RunLifecycle.resume_from`; a corrupt ``latest`` is skipped with a warning naming the
  file) and its trainer state restored. The run's records stay as they are until the resumed
  run starts training (:meth:`~RunLifecycle.begin_training`): then metric lines past the
  checkpoint are dropped and ``eval.json`` and ``config.yaml`` rewritten. A resume that fails or
  is stopped before that leaves every record but ``status.json`` untouched, and its status keeps
  the checkpoint's iteration;
- **signals** (:meth:`~RunLifecycle.run_guarded`): the policy of :mod:`g2po_bench.runtime.shutdown`:
  SIGTERM, SIGINT and the preemption signal become a stop request; the iteration in flight is
  abandoned without being recorded (:func:`~g2po_bench.runtime.shutdown.check_stop`, called in the
  environment pool and at the backend's check points); the last complete iteration is
  checkpointed if it is not yet (:meth:`~RunLifecycle.checkpoint_on_stop`, placed by the
  backend where its models can still be saved); ``status.json`` says ``interrupted``; the
  process exits with ``128 + signal`` or Submitit requeues it;
- **timing** (``timing.json``): seconds per phase (:class:`.progress.RunProgress`) when the run
  is done;
- **step tables** (``steps/iter_<K>.parquet``, ``record_graphs``): :meth:`~RunLifecycle.record_step_table`;
- **tracking** (``logging.backends``, :mod:`g2po_bench.core.tracking`): console lines as they
  come; TensorBoard and W&B receive each iteration once it is checkpointed (and the evaluation
  before RL with the first checkpoint), so a tracker never shows an iteration that a resume
  drops and replays; a resumed run continues the same tracker run; pictures (a task group's
  state graph every ``logging.graph_every`` iterations, the learning curve after the last
  iteration) come from the :class:`~g2po_bench.core.tracking.RunPictures` the entry point passes.

numpy, the benchmark harness and the run-folder code only: importable without torch or OpenRLHF.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from g2po_bench.algorithms.backends.common import (
    TruncationWarnings,
    eval_metrics,
    eval_record,
    record_evaluation,
)
from g2po_bench.algorithms.backends.common import record_step_table as _record_step_table
from g2po_bench.algorithms.backends.progress import RunProgress
from g2po_bench.core.checkpoints import CorruptCheckpointWarning
from g2po_bench.core.config import config_to_dict, config_to_yaml, resolve_run_id
from g2po_bench.core.errors import CheckpointError
from g2po_bench.core.rundir import RunDir, atomic_write_json, atomic_write_text
from g2po_bench.core.tracking import RunPictures, Tracker, run_info, run_steps
from g2po_bench.runtime.shutdown import GracefulShutdown, ShutdownRequested

__all__ = ["RunLifecycle", "CheckpointWriter", "PICTURES_DIR"]

#: where the tracker pictures are written in the run folder
PICTURES_DIR = "pictures"

CheckpointWriter = Callable[[Path, int, dict[str, Any]], "dict[str, Any] | None"]
"""``write(staging, iteration, trainer_state) -> extra trainer-state entries or None``: the
backend's files of a checkpoint (model, optimizer, ...) written into the empty folder
``staging``; ``trainer_state`` is what ``trainer_state.json`` will hold (a backend that keeps
its own copy, e.g. DeepSpeed's client state, stores it)."""


class RunLifecycle:
    """The records of one training run of ``cfg`` in ``<output_dir>/<run_id>`` (module docstring).

    Args:
        cfg: the RunConfig.
        backend: the backend's name (``"local"``, ``"openrlhf"``), recorded for the trackers.
        console: rich console for progress bars and lines (None: no progress display).
        log: ``log(line)`` for the run's lines (default: the progress display's, which prints
            nothing without a console).
        truncation_log: where the prompt-truncation warnings go (None: Python warnings).
        write_checkpoint: the backend's :data:`CheckpointWriter` (required before
            :meth:`save_checkpoint`; may be set later as the attribute).
        capture_state: returns what :meth:`checkpoint_on_stop` must restore before saving the
            state at the end of the last complete iteration (the local backend: its RNG states);
            None when nothing is needed.
        restore_state: takes what ``capture_state`` returned.
        pictures: draws the tracker pictures (None: no pictures).

    Attributes:
        run: the :class:`~g2po_bench.core.rundir.RunDir`.
        progress: the :class:`.progress.RunProgress` (phases, their seconds for ``timing.json``).
        start_iteration: the next iteration to train (1 on a fresh start).
        eval_history, train_temperature_evals: the evaluations so far.
        resume_from: with ``resume=true``, the newest intact checkpoint folder the backend loads
            (None: nothing to resume, the run starts fresh).
        checkpoint_iteration: the iteration of the run's newest intact checkpoint (None: none yet).

    Raises:
        g2po_bench.core.errors.CheckpointError: ``resume=true`` and the run holds checkpoints of
            which none is intact (the message names the file at fault); nothing is written.
    """

    def __init__(self, cfg, *, backend: str, console=None, log: Callable[[str], Any] | None = None,
                 truncation_log: Callable[[str], Any] | None = None,
                 write_checkpoint: CheckpointWriter | None = None,
                 capture_state: Callable[[], Any] | None = None,
                 restore_state: Callable[[Any], None] | None = None,
                 pictures: RunPictures | None = None):
        self.cfg = cfg
        self.backend = backend
        run = RunDir(Path(cfg.output_dir) / resolve_run_id(cfg))
        self.progress = RunProgress(console, enabled=cfg.progress)
        self.log = log or self.progress.log
        self.resume_from: Path | None = None
        self.checkpoint_iteration: int | None = None  # iteration of the newest intact checkpoint
        if cfg.resume:
            self.resume_from, self.checkpoint_iteration = self._resume_point(run)
        self.run = run.create()
        self.truncation = TruncationWarnings(cfg.train.max_prompt_tokens, log=truncation_log)
        self.write_checkpoint = write_checkpoint
        self.capture_state = capture_state
        self.restore_state = restore_state
        self.pictures = pictures
        self.metrics_t0 = time.time()
        self.eval_history: list[dict[str, Any]] = []
        # eval.at_train_temperature: {"before": EVAL, "final": EVAL} at train.temperature
        self.train_temperature_evals: dict[str, dict[str, Any]] = {}
        self.start_iteration = 1
        # (iteration, captured state) while the backend's models hold exactly the state at the end
        # of that iteration (None while an update is under way): what a stop may checkpoint
        self._clean: tuple[int, Any] | None = None
        self.tracker: Tracker | None = None
        self._unpublished: dict[int, dict[str, Any]] = {}  # iteration -> metrics record, not yet sent
        self._training = False  # the RL loop has started (begin_training)
        self._resumed = False  # resume() restored a checkpoint's trainer state
        # the records may be rewritten: a fresh start began (fresh_start) or a resume started
        # training (begin_training); before that a stop or a failure leaves them as they are
        self._committed = False

    @staticmethod
    def _resume_point(run: RunDir) -> tuple[Path | None, int | None]:
        """``(folder, iteration)`` of the newest intact checkpoint of ``run`` ((None, None): none).
        A newer corrupt one is reported in one line naming its file (:class:`CorruptCheckpointWarning`).

        Raises:
            CheckpointError: the run holds checkpoints and none is intact."""
        choice = run.find_checkpoint()
        if choice.rejected:
            bad = choice.describe_rejected(run.root)
            if choice.path is None:
                raise CheckpointError(f"resume: no intact checkpoint in {run.root / 'checkpoints'}: {bad}. Nothing "
                                      "was changed; delete the run folder to start over, or start a separate run "
                                      "with run_id=NAME")
            warnings.warn(f"resume: {bad}; resuming from {choice.path.relative_to(run.root).as_posix()} "
                          f"(iteration {choice.iteration})", CorruptCheckpointWarning, stacklevel=3)
        return choice.path, choice.iteration

    @property
    def total(self) -> int:
        """``train.iterations``."""
        return int(self.cfg.train.iterations)

    # ------------------------------------------------------------------ start and end
    def start(self) -> None:
        """Write ``config.yaml`` and ``status.json`` ``running`` (iteration 0). A resume with a
        checkpoint writes only the status (``running`` at the checkpoint's iteration): the run's
        ``config.yaml`` is rewritten once the resumed run starts training (:meth:`begin_training`)."""
        if self.resume_from is None:
            atomic_write_text(self.run.config_path, config_to_yaml(self.cfg))
        self.run.write_status("running", self.checkpoint_iteration or 0, self.total)

    def write_setup(self, stats: dict[str, Any], t0: float) -> None:
        """``setup.json``: the warm start's figures and the seconds since ``t0`` (nothing when empty)."""
        if stats:
            atomic_write_json(self.run.root / "setup.json", {**stats, "setup_seconds": time.time() - t0})

    def fresh_start(self) -> None:
        """No checkpoint to resume (the backend starts the run from its beginning): drop what an
        earlier attempt of this run may have logged before its first checkpoint."""
        if self.resume_from is not None:  # a backend that cannot use the checkpoint found starts over
            atomic_write_text(self.run.config_path, config_to_yaml(self.cfg))
        self.resume_from = self.checkpoint_iteration = None
        self._committed = True
        self.run.truncate_metrics(0)

    def begin_training(self) -> None:
        """After the resume (or the evaluations before RL): a resumed run now rewrites its records
        (metric lines past the checkpoint dropped, ``eval.json`` and ``config.yaml`` rewritten,
        ``status.json`` ``running``); then open the trackers and send what is recorded for good and
        not sent yet (a resumed run's iterations up to its checkpoint), and mark the current state
        as the clean state of iteration ``start_iteration - 1``."""
        resumed = self._resumed
        if resumed:
            it = int(self.checkpoint_iteration or 0)
            self.run.truncate_metrics(it)
            if self.eval_history:
                self.write_eval()
            atomic_write_text(self.run.config_path, config_to_yaml(self.cfg))
            self.run.write_status("running", it, self.total)
        self._committed = True
        self.tracker = self._open_tracker(fresh=not resumed)
        if resumed:
            for rec in self.run.read_metrics():
                it = int(rec.get("iteration", 0))
                if it > self.tracker.published_step:
                    self._unpublished[it] = rec
            self._publish(self.checkpoint_iteration)
        self.mark_clean(self.start_iteration - 1)
        self._training = True

    def finish(self, **timing: Any) -> RunDir:
        """The run is complete: ``status.json`` ``done``, the summary lines, ``timing.json``
        (seconds per phase plus ``timing``), trackers closed. Returns the run folder."""
        total = self.total
        self.run.write_status("done", total, total)
        summary = (eval_record(self.cfg, self.eval_history, self.train_temperature_evals)
                   if self.eval_history else None)
        for line in self.progress.summary_lines(summary):
            self.log(line)
        atomic_write_json(self.run.root / "timing.json", {"seconds": self.progress.seconds, **timing})
        self._close_tracker("done")
        return self.run

    def fail(self, exc: BaseException) -> None:
        """``status.json`` ``failed`` with ``exc`` (its iteration: the last one recorded, or before
        training started the checkpoint's); trackers closed as failed."""
        done = self.start_iteration - 1 if self._training else (self.checkpoint_iteration or 0)
        self.run.write_status("failed", done, self.total, error=f"{type(exc).__name__}: {exc}")
        self._close_tracker("failed")

    @contextlib.contextmanager
    def failing_on_error(self) -> Iterator[None]:
        """Around the body of a backend's run (after :meth:`start`): any exception marks the run
        failed (:meth:`fail`) and goes on; a stop request is not a failure and goes on untouched
        (to :meth:`run_guarded`)."""
        try:
            yield
        except ShutdownRequested:
            raise
        except BaseException as exc:
            self.fail(exc)
            raise

    # ------------------------------------------------------------------ signals
    def run_guarded(self, body: Callable[[], RunDir]) -> RunDir:
        """Run ``body`` (the backend's whole run) under the signal policy (module docstring).

        Raises:
            g2po_bench.runtime.shutdown.Interrupted: stopped by SIGTERM/SIGINT/the preemption
                signal (a ``SystemExit`` with status 128 + signal; under Submitit the preemption
                signal requeues the job instead).
        """
        with GracefulShutdown(log=self.log if self.progress.console is not None else None) as guard:
            try:
                return body()
            except ShutdownRequested as req:
                msg = self.stop_on_signal(req.signum)
            guard.exit(msg)
        raise AssertionError("unreachable: GracefulShutdown.exit raises")  # pragma: no cover

    @contextlib.contextmanager
    def checkpoint_on_stop(self) -> Iterator[None]:
        """Around the part of a run where the backend can still save its models: on a stop
        request, checkpoint the last complete iteration if it is not yet, then let the request
        go on (to :meth:`run_guarded`)."""
        try:
            yield
        except ShutdownRequested:
            self.checkpoint_clean_state()
            raise

    def checkpoint_clean_state(self) -> None:
        """Checkpoint the state at the end of the last complete iteration when it is not the
        checkpoint's yet (restoring the captured state first); nothing while an update is under
        way or before RL started."""
        if self._clean is None:
            return
        it, state = self._clean
        if it <= (self.checkpoint_iteration if self.checkpoint_iteration is not None else -1):
            return  # (a stop during iteration 1 checkpoints iteration 0: a resume skips the warm start)
        if self.restore_state is not None:
            self.restore_state(state)
        self.save_checkpoint(it)
        self._publish(it)

    def stop_on_signal(self, signum: int) -> str:
        """After a stop request: keep only checkpointed iterations in ``metrics.jsonl`` (a resume
        stopped before it started training leaves the records as they are), write ``status.json``
        ``interrupted``, close the trackers; returns the one-line reason (also in the status)."""
        name = signal.Signals(signum).name
        total = self.total
        in_flight = self.start_iteration
        done = self.checkpoint_iteration
        if done is not None:
            if self._committed:
                self.run.truncate_metrics(done)
            where = f"resume=true continues from the checkpoint of iteration {done}"
        else:  # no checkpoint: a resume starts the run again, nothing recorded is kept
            self.run.truncate_metrics(0)
            where = "no checkpoint yet: resume=true starts the run again"
        when = (f"during iteration {in_flight} of {total}, which was not recorded" if self._training
                else "before RL started (loading tasks, warm start or the evaluation before RL)")
        msg = f"interrupted by {name} {when}; {where}"
        self.run.write_status("interrupted", done or 0, total, error=msg)
        self.log(msg)
        self._close_tracker("interrupted")
        return msg

    def mark_clean(self, iteration: int) -> None:
        """The backend's models hold exactly the state at the end of ``iteration`` (what a stop
        may checkpoint)."""
        self._clean = (iteration, self.capture_state() if self.capture_state is not None else None)

    def update_started(self) -> None:
        """The update changes the models: no longer the state of the last complete iteration."""
        self._clean = None

    # ------------------------------------------------------------------ iterations
    def end_iteration(self, rec: dict[str, Any]) -> None:
        """Record iteration ``rec["iteration"]``: ``time_s``, the metrics line, the checkpoint when
        due, ``status.json``, the trackers (once checkpointed); then the state is clean."""
        it = int(rec["iteration"])
        total = self.total
        rec["time_s"] = time.time() - self.metrics_t0
        self.run.log_metrics(rec)
        self._unpublished[it] = rec
        if it % self.cfg.train.checkpoint_every == 0 or it == total:
            self.save_checkpoint(it)
        self.run.write_status("running" if it < total else "done", it, total)
        if self.checkpoint_iteration == it:
            self._publish(it)
        self.start_iteration = it + 1
        self.mark_clean(it)

    def console_line(self, line: str) -> None:
        """One iteration's line, printed when ``logging.backends`` has ``console``."""
        if "console" in self.cfg.logging.backends:
            self.log(line)

    def record_step_table(self, rb, res, iteration: int, values=None) -> dict[str, float]:
        """Iteration ``iteration``'s step table (``record_graphs``;
        :func:`g2po_bench.algorithms.backends.common.record_step_table`); returns its metrics."""
        return _record_step_table(self.run.root, self.cfg, rb, res, iteration, values)

    # ------------------------------------------------------------------ evaluations
    def record_evaluation(self, ev: dict[str, Any]) -> dict[str, Any]:
        """Add an evaluation of the panel to the history (replacing any of the same or a later
        iteration) and rewrite ``eval.json``; returns ``ev``."""
        self.truncation.observe(eval_metrics(ev), int(ev["iteration"]))
        self.eval_history = record_evaluation(self.eval_history, ev)
        self.write_eval()
        return ev

    def record_train_temperature_evaluation(self, which: str, ev: dict[str, Any]) -> None:
        """``eval.at_train_temperature``'s evaluation ``which`` ("before" or "final")."""
        self.train_temperature_evals[which] = ev
        self.write_eval()

    def write_eval(self) -> None:
        """``eval.json`` from the evaluations so far."""
        atomic_write_json(self.run.eval_path, eval_record(self.cfg, self.eval_history, self.train_temperature_evals))

    # ------------------------------------------------------------------ checkpoints
    def trainer_state(self, iteration: int) -> dict[str, Any]:
        """What ``trainer_state.json`` holds for a checkpoint of ``iteration``."""
        return {"iteration": iteration, "eval_history": self.eval_history,
                "train_temperature_evals": self.train_temperature_evals,
                "elapsed_s": time.time() - self.metrics_t0}

    def save_checkpoint(self, iteration: int) -> None:
        """Write ``checkpoints/latest`` for ``iteration``: a staging folder filled by the backend's
        writer (plus the tiny model's marker beside its policy, and ``trainer_state.json``), then
        fsynced, given its manifest, verified and moved into place, the former ``latest`` kept as
        ``previous`` (:meth:`g2po_bench.core.rundir.RunDir.commit_checkpoint`).

        Raises:
            g2po_bench.core.errors.CheckpointError: the written checkpoint fails verification (the
                checkpoints in place are untouched).
        """
        if self.write_checkpoint is None:
            raise RuntimeError("RunLifecycle.write_checkpoint is not set: the backend must give its writer")
        target = self.run.checkpoint_dir
        staging = target.with_name(f".latest.{os.getpid()}.tmp")
        # this process's staging folder, and those of attempts killed while they wrote one (one
        # process at a time trains a run: the sweeps' claims, a user's single command)
        for stale in target.parent.glob(".latest.*.tmp"):
            shutil.rmtree(stale, ignore_errors=True)
        staging.mkdir(parents=True)
        state = self.trainer_state(iteration)
        extra = self.write_checkpoint(staging, iteration, state) or {}
        marker = self.run.root / "reference" / "g2po_tiny.json"
        if marker.exists() and (staging / "policy").is_dir():
            # the tiny model's marker travels with its checkpoints (env.prompt=auto picks its prompt)
            (staging / "policy" / "g2po_tiny.json").write_text(marker.read_text())
        (staging / "trainer_state.json").write_text(json.dumps({**state, **extra}))
        self.run.commit_checkpoint(staging, iteration)
        self.checkpoint_iteration = iteration

    def resume(self, state: dict[str, Any]) -> int:
        """Continue from a checkpoint's trainer state (``iteration``, ``eval_history``,
        ``train_temperature_evals``, ``elapsed_s``). Nothing is written yet: the records follow
        when the resumed run starts training (:meth:`begin_training`). Returns the checkpoint's
        iteration."""
        it = int(state["iteration"])
        self.start_iteration = it + 1
        self.checkpoint_iteration = it
        self.eval_history = list(state.get("eval_history", []))
        self.train_temperature_evals = dict(state.get("train_temperature_evals", {}))
        self.metrics_t0 = time.time() - float(state.get("elapsed_s", 0.0))
        self._resumed = True
        self.log(f"resumed from the checkpoint of iteration {it}")
        return it

    # ------------------------------------------------------------------ trackers
    def _open_tracker(self, *, fresh: bool) -> Tracker:
        cfg = self.cfg
        info = run_info(self.run.run_id, backend=self.backend, run_folder=str(self.run.root.resolve()))
        tracker = Tracker(self.run.root, cfg.logging, run_id=self.run.run_id, config=config_to_dict(cfg), info=info,
                          kind="train", config_yaml=config_to_yaml(cfg), log=self.log, fresh=False)
        if fresh and tracker.published_step >= 0:
            # started from scratch although an earlier attempt sent steps (its checkpoints were
            # deleted): a new tracker run, the old one keeps what it showed
            tracker.close("failed")
            tracker = Tracker(self.run.root, cfg.logging, run_id=self.run.run_id, config=config_to_dict(cfg),
                              info=info, kind="train", config_yaml=config_to_yaml(cfg), log=self.log, fresh=True)
        return tracker

    def _publish(self, up_to: int) -> None:
        """Send every step up to ``up_to`` not sent yet: the metrics line, the evaluations of that
        iteration and, when due, the pictures."""
        tr = self.tracker
        if tr is None:
            return
        evals = {"history": self.eval_history, "at_train_temperature": self.train_temperature_evals}
        for s, scalars in run_steps(self._unpublished.values(), evals).items():
            if tr.published_step < s <= up_to:
                tr.publish(s, scalars, self._pictures(s) if tr.wants_images else {})
        for s in [s for s in self._unpublished if s <= up_to]:
            del self._unpublished[s]

    def _pictures(self, step: int) -> dict[str, Path]:
        """The pictures due at ``step``: the state graph every ``logging.graph_every`` iterations,
        the learning curve after the last iteration."""
        lg = self.cfg.logging
        out: dict[str, Path] = {}
        if self.pictures is None:
            return out
        folder = self.run.root / PICTURES_DIR
        if lg.graph_every and step > 0 and step % lg.graph_every == 0:
            png = self.pictures.state_graph(self.run.root, step, lg.graph_group,
                                            folder / f"state_graph_iter{step:05d}.png")
            if png is not None:
                out["pictures/state_graph"] = png
        if lg.learning_curve and step == self.total and step > 0:
            png = self.pictures.learning_curve(self.run.root, folder / "learning_curve.png")
            if png is not None:
                out["pictures/learning_curve"] = png
        return out

    def _close_tracker(self, state: str) -> None:
        if self.tracker is not None:
            self.tracker.close(state)
            self.tracker = None
