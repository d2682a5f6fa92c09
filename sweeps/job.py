"""What runs inside a Submitit job: claim a run, train it (resuming), release it; or a credit shard.

:class:`SweepJob` is the submitted callable: a :class:`submitit.helpers.Checkpointable` that
trains one run (Slurm: one array task per run) or a few runs one after the other (the local
executor: one job per concurrency slot). For each run it

1. skips it if ``status.json`` already says ``done``;
2. claims it (:mod:`g2po_bench.sweeps.claims`): if a live job holds the claim the run is skipped, so two
   launches of the same spec never train a configuration twice; then locks its run folder
   (:class:`g2po_bench.core.runlock.RunLock`, held to the end): a run another process trains
   (e.g. a ``g2po train`` of the same run id) is skipped too, with the holder's process id, and
   its folder is left as it is;
3. builds the config from the resolved YAML validated at launch time, with
   ``run_id`` pinned, ``output_dir=<sweep>/runs``, ``resume=true`` and, unless the spec sets
   it, ``logging.group=<sweep name>`` (the trackers of ``logging.backends`` group the sweep's
   runs: one W&B group, one TensorBoard folder per run under ``<sweep>/runs``): the trainer
   continues from ``checkpoints/latest`` when one exists (after preemption, a timeout, a kill)
   and starts fresh otherwise (then a ``metrics.jsonl`` left by a run killed before its first
   checkpoint is emptied first, so every iteration appears exactly once);
4. calls :func:`g2po_bench.train.run_train` and records the outcome in ``<sweep>/events.jsonl``.

A task with ``argv`` is a shard of a credit study (a sweep spec of ``kind: credit``): the job
runs ``g2po credit <argv> --out <run folder>`` in a child process (:func:`credit_one`); a shard is
the unit of resumption: a finished one (its ``credit.json`` there) is skipped, an interrupted one
runs again from its start.

Signals (the policy of :mod:`g2po_bench.runtime.shutdown`): Slurm sends USR2 ``signal_delay_s`` before
the end or at preemption; the trainer abandons (or finishes) the iteration in flight without
recording it, checkpoints what is complete, and only then calls Submitit's handler, which calls
:meth:`SweepJob.checkpoint` (the same job again) and requeues it; the requeued job resumes from
the checkpoint. ``scancel`` / ``g2po sweep cancel`` (SIGTERM; on the local executor to the job's
controller, which passes it on to the job) and Submitit's own local cancel (SIGINT) stop
the trainer the same way, with ``status.json`` ``interrupted``; a relaunch resumes. Environment
workers ignore all of these and end with the trainer.

The job sets the dispositions it relies on itself, whatever it inherited (:func:`job_guard`, a
:class:`g2po_bench.runtime.shutdown.GracefulShutdown` around all its runs): SIGTERM and SIGINT
are stop requests even when the job was launched from a background shell (``nohup g2po sweep
launch ... &`` starts every process with SIGINT ignored) and although Submitit bypasses SIGTERM. A
request that comes between runs, or while a run is starting (before the trainer's own guard),
is kept: the trainer stops at its first check point and no further run starts; the job exits
with status 128 + signal.

Allocation passed to the trainer backend (exported on every node before the run starts;
the OpenRLHF backend reads these to start Ray on the allocation):

=========================  ===============================================================
``G2PO_SWEEP_CLUSTER``     ``slurm`` | ``local`` | ``debug``
``G2PO_NUM_NODES``         nodes of the allocation
``G2PO_NODE_RANK``         this node's rank (0 = head; only rank 0 calls ``run_train``)
``G2PO_NODELIST``          comma-separated host names, head first
``G2PO_HEAD_NODE``         host name of rank 0
``G2PO_GPUS_PER_NODE``     GPUs per node (``resources.gpus``)
``G2PO_CPUS_PER_TASK``     CPUs of the task (``resources.cpus``; also ``OMP_NUM_THREADS``
                           when unset)
``G2PO_MEM_GB``            memory of the task
``G2PO_RAY_ADDRESS``       ``<head>:<G2PO_RAY_PORT or 6379>`` (the Ray head the backend
                           starts on rank 0)
=========================  ===============================================================

Ranks > 0 (multi-node) do not train: with ``backend=openrlhf`` they join the head's Ray
cluster (``ray start --address=$G2PO_RAY_ADDRESS --block``) and return when it goes away.
"""

from __future__ import annotations

import _thread
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import submitit
import yaml
from rich.console import Console

from g2po_bench.core.errors import RunFolderBusy
from g2po_bench.core.rundir import RunDir, append_jsonl, atomic_write_text
from g2po_bench.core.runlock import RunLock
from g2po_bench.runconfig import load_config
from g2po_bench.runtime.shutdown import (
    STOP_SIGNALS,
    GracefulShutdown,
    ShutdownRequested,
    install_fork_hook,
)
from g2po_bench.sweeps.claims import acquire, describe_owner
from g2po_bench.train import run_train

__all__ = ["RunTask", "SweepJob", "export_allocation", "job_guard", "log_event", "credit_one"]


@dataclass
class RunTask:
    """Everything a job needs to train one run (picklable, self-contained)."""

    run_id: str
    config_yaml: str  # resolved and validated at launch
    sweep_dir: str
    workdir: str  # the launch directory: relative paths of the config resolve against it
    resources: dict[str, Any] = field(default_factory=dict)
    cluster: str = "local"
    sweep_name: str | None = None  # the trackers' group (W&B group) unless the config sets logging.group
    pictures: Any = None  # the tracker pictures' drawer (core.tracking.RunPictures), given by the CLI
    argv: list[str] | None = None  # a credit shard: its ``g2po credit`` arguments (the run folder is its --out)

    @property
    def runs_dir(self) -> Path:
        return Path(self.sweep_dir) / "runs"

    @property
    def claims_dir(self) -> Path:
        return Path(self.sweep_dir) / "claims"


def log_event(sweep_dir: str | os.PathLike, **record: Any) -> None:
    """Append one event to ``<sweep>/events.jsonl`` (never fails the job)."""
    record.setdefault("time", time.time())
    with contextlib.suppress(OSError):
        append_jsonl(Path(sweep_dir) / "events.jsonl", record)


def export_allocation(resources: dict[str, Any], cluster: str) -> dict[str, str]:
    """Export the ``G2PO_*`` allocation variables (see the module docstring); returns them."""
    try:
        env = submitit.JobEnvironment()
        hosts = list(env.hostnames)
        num_nodes, node = int(env.num_nodes), int(env.node)
    except RuntimeError:  # not inside a Submitit job (direct call)
        hosts, num_nodes, node = [socket.gethostname()], 1, 0
    if not hosts:
        hosts = [socket.gethostname()]
    port = os.environ.get("G2PO_RAY_PORT", "6379")
    values = {
        "G2PO_SWEEP_CLUSTER": cluster,
        "G2PO_NUM_NODES": str(num_nodes),
        "G2PO_NODE_RANK": str(node),
        "G2PO_NODELIST": ",".join(hosts),
        "G2PO_HEAD_NODE": hosts[0],
        "G2PO_GPUS_PER_NODE": str(int(resources.get("gpus", 0))),
        "G2PO_CPUS_PER_TASK": str(int(resources.get("cpus", 1))),
        "G2PO_MEM_GB": f"{float(resources.get('mem_gb', 0)):g}",
        "G2PO_RAY_ADDRESS": f"{hosts[0]}:{port}",
    }
    os.environ.update(values)
    os.environ.setdefault("OMP_NUM_THREADS", values["G2PO_CPUS_PER_TASK"])
    return values


def _has_checkpoint(run: RunDir) -> int | None:
    """Iteration of the checkpoint a resume would load (the newest intact one:
    :meth:`g2po_bench.core.rundir.RunDir.find_checkpoint`), None when there is none."""
    d = run.resume_checkpoint()
    if d is None:
        return None
    try:
        return int(json.loads((d / "trainer_state.json").read_text())["iteration"])
    except (ValueError, KeyError, json.JSONDecodeError):
        return None


def _interrupt_main(claim) -> None:  # pragma: no cover - only when another job stole the claim
    print(f"[g2po sweep] claim {claim.path} was taken over by another job: stopping", file=sys.stderr,
          flush=True)
    _thread.interrupt_main()


def _task_config(task: RunTask, load_config):
    """The run's config: the resolved YAML with ``run_id``, ``output_dir`` and ``resume=true``
    pinned, and ``logging.group`` the sweep's name when the spec leaves it unset (a sweep's
    runs form one tracker group; logging settings never change a run id)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        fh.write(task.config_yaml)
        cfg_file = fh.name
    overrides = [f"run_id={task.run_id}", f"output_dir={task.runs_dir}", "resume=true"]
    logging = (yaml.safe_load(task.config_yaml) or {}).get("logging") or {}
    if task.sweep_name and logging.get("group") is None:
        overrides.append(f"logging.group={task.sweep_name}")
    try:
        return load_config(cfg_file, overrides)
    finally:
        os.unlink(cfg_file)


def _claim(task: RunTask, run: RunDir):
    """``(claim, how, None)``: the task's claim and how it was taken (:func:`.claims.acquire`); or
    ``(None, None, result)`` with the ``skipped`` result (logged) of a run that is already done or
    claimed by another job."""
    st = run.read_status()
    if st and st.get("state") == "done":
        log_event(task.sweep_dir, run_id=task.run_id, event="skipped", reason="already done")
        return None, None, {"run_id": task.run_id, "state": "skipped", "reason": "already done"}
    claim, holder, how = acquire(task.claims_dir, task.run_id, on_lost=_interrupt_main)
    if claim is None:
        reason = f"claimed by {describe_owner(holder or {})} ({how})"
        log_event(task.sweep_dir, run_id=task.run_id, event="skipped", reason=reason)
        return None, None, {"run_id": task.run_id, "state": "skipped", "reason": reason}
    return claim, how, None


def train_one(task: RunTask, console=None) -> dict[str, Any]:
    """Claim and train one run; returns ``{"run_id", "state": done|failed|skipped, ...}``."""

    run = RunDir(task.runs_dir / task.run_id)
    claim, how, skipped = _claim(task, run)
    if claim is None:
        return skipped
    try:  # one process per run folder: a `g2po train` of the same run may hold it (docs/run-folder.md)
        folder = RunLock.acquire(run.root)
    except RunFolderBusy as exc:
        claim.release()
        log_event(task.sweep_dir, run_id=task.run_id, event="skipped", reason=str(exc))
        return {"run_id": task.run_id, "state": "skipped", "reason": str(exc)}
    try:
        st = run.read_status()  # re-read under the claim: another job may have finished it
        if st and st.get("state") == "done":
            log_event(task.sweep_dir, run_id=task.run_id, event="skipped", reason="already done")
            return {"run_id": task.run_id, "state": "skipped", "reason": "already done"}

        resume_from = _has_checkpoint(run)
        if not run.has_checkpoint() and run.metrics_path.exists():
            # fresh start: drop lines of a killed attempt (a run whose checkpoints are all corrupt
            # keeps its records: the trainer refuses to resume it, naming the file)
            atomic_write_text(run.metrics_path, "")
        try:  # validated at launch; checked again here (paths must exist on this node too)
            cfg = _task_config(task, load_config)
        except Exception as exc:
            err = f"{type(exc).__name__} on {socket.gethostname()}: {exc}"
            total = int(((yaml.safe_load(task.config_yaml) or {}).get("train") or {}).get("iterations", 0))
            run.create().write_status("failed", int(st.get("iteration", 0)) if st else 0, total, error=err)
            log_event(task.sweep_dir, run_id=task.run_id, event="failed", error=err)
            return {"run_id": task.run_id, "state": "failed", "error": err, "resumed_from": resume_from}
        log_event(task.sweep_dir, run_id=task.run_id, event="start", claim=how,
                  resume_from=resume_from, owner=describe_owner(claim.owner))
        print(f"[g2po sweep] run {task.run_id}: {how}; "
              + (f"resuming from the checkpoint of iteration {resume_from}" if resume_from is not None
                 else "starting fresh"), flush=True)
        t0 = time.time()
        try:
            run_train(cfg, console=console, pictures=task.pictures)
        except Exception as exc:
            err = f"{type(exc).__name__}: {exc}"
            log_event(task.sweep_dir, run_id=task.run_id, event="failed", error=err,
                      traceback=traceback.format_exc()[-4000:])
            return {"run_id": task.run_id, "state": "failed", "error": err, "resumed_from": resume_from}
        log_event(task.sweep_dir, run_id=task.run_id, event="done", seconds=time.time() - t0,
                  resume_from=resume_from)
        return {"run_id": task.run_id, "state": "done", "resumed_from": resume_from}
    except BaseException as exc:  # SystemExit (requeue), KeyboardInterrupt (cancel)
        if not isinstance(exc, Exception):
            log_event(task.sweep_dir, run_id=task.run_id, event="interrupted", reason=type(exc).__name__)
        raise
    finally:
        folder.release()
        claim.release()


#: the file a credit shard's ``g2po credit`` writes its output to, in its run folder
CREDIT_LOG = "credit.log"
#: seconds a credit shard's process has to end after SIGTERM before it is killed
CREDIT_STOP_S = 30.0


def _last_line(path: Path) -> str:
    with contextlib.suppress(OSError):
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
        if lines:
            return lines[-1][:300]
    return ""


def _wait_child(proc: subprocess.Popen, guard) -> int:
    """Wait for ``proc``; on the job's stop request (``guard``) send it SIGTERM, then SIGKILL
    after :data:`CREDIT_STOP_S` seconds. Returns its exit status."""
    asked = None
    while True:
        try:
            return proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        if guard is not None and guard.requested is not None:
            if asked is None:
                proc.terminate()
                asked = time.time()
            elif time.time() - asked > CREDIT_STOP_S:
                proc.kill()


def credit_one(task: RunTask, guard=None) -> dict[str, Any]:
    """Claim and run one credit shard: ``g2po credit <argv> --out <its run folder>`` in a child
    process (its output in ``credit.log`` of the folder); ``status.json`` says running, then done,
    failed (with the last line of the log) or interrupted. A shard whose folder already holds its
    ``credit.json`` is done (the study writes it last). A stop request of the job (cancel) ends
    the child with SIGTERM; the job's own end (a requeue) kills it, so two jobs never write one
    folder. Returns ``{"run_id", "state", ...}`` as :func:`train_one`."""
    run = RunDir(task.runs_dir / task.run_id)
    claim, how, skipped = _claim(task, run)
    if claim is None:
        return skipped
    proc = None
    try:
        run.create()
        if (run.root / "credit.json").exists():  # finished before its status was written
            run.write_status("done", 1, 1)
            log_event(task.sweep_dir, run_id=task.run_id, event="done", seconds=0.0, resume_from=None)
            return {"run_id": task.run_id, "state": "done", "resumed_from": None}
        run.write_status("running", 0, 1)
        log_event(task.sweep_dir, run_id=task.run_id, event="start", claim=how, resume_from=None,
                  owner=describe_owner(claim.owner))
        print(f"[g2po sweep] credit shard {task.run_id}: {how}; g2po credit {' '.join(task.argv or [])}", flush=True)
        t0 = time.time()
        log = run.root / CREDIT_LOG
        with open(log, "a", encoding="utf-8") as fh:
            proc = subprocess.Popen([sys.executable, "-m", "g2po_bench.cli", "credit", *(task.argv or []),
                                     "--out", str(run.root)], cwd=task.workdir, stdout=fh, stderr=subprocess.STDOUT)
            rc = _wait_child(proc, guard)
        if rc == 0 and (run.root / "credit.json").exists():
            run.write_status("done", 1, 1)
            log_event(task.sweep_dir, run_id=task.run_id, event="done", seconds=time.time() - t0, resume_from=None)
            return {"run_id": task.run_id, "state": "done", "resumed_from": None}
        stopped = guard is not None and guard.requested is not None
        err = (f"stopped by {signal.Signals(guard.requested).name}" if stopped else
               f"g2po credit exited with status {rc}: {_last_line(log)} (log: {log})")
        run.write_status("interrupted" if stopped else "failed", 0, 1, error=err)
        log_event(task.sweep_dir, run_id=task.run_id, event="interrupted" if stopped else "failed", error=err)
        return {"run_id": task.run_id, "state": "failed", "error": err, "resumed_from": None}
    finally:
        if proc is not None and proc.poll() is None:  # the job ends (requeue, kill): so does its shard
            proc.kill()
            proc.wait()
        claim.release()


def _quiet_forked_children() -> None:
    """Processes forked by the trainer (environment workers) would inherit Submitit's signal
    handlers (and checkpoint and requeue the job themselves when Slurm signals every process of
    the step): every forked child ignores the job's signals instead and dies with its parent
    (:mod:`g2po_bench.runtime.shutdown`, where the whole signal policy is written down)."""

    install_fork_hook()


def job_guard(cluster: str):
    """The job's signal guard (see the module docstring): a
    :class:`g2po_bench.runtime.shutdown.GracefulShutdown` for SIGTERM and SIGINT held around all the
    job's runs. On the ``local`` and ``slurm`` executors it takes the two signals whatever
    disposition the job inherited (a launch from a background shell passes SIGINT on ignored, and
    Submitit's job process bypasses SIGTERM); the ``debug`` executor runs the job in the launching
    process, whose ignored signals stay ignored. The preemption signal is left to Submitit's
    handler (checkpoint and requeue) and to the trainer's own guard.

    Args:
        cluster: the executor (``local``, ``slurm``, ``debug``).

    Returns:
        The guard (not yet entered): ``with job_guard(cluster) as guard: ...``.
    """
    return GracefulShutdown(signals=STOP_SIGNALS, take_ignored=cluster != "debug",
                            log=lambda m: print(f"[g2po sweep] {m}", file=sys.stderr, flush=True),
                            action="the job stops: a run that is starting stops at its first check point, "
                                   "and no further run starts")


class SweepJob(submitit.helpers.Checkpointable):
    """The Submitit callable: trains ``tasks`` in order (see the module docstring).

    ``raise_on_failure``: raise at the end when a run failed, so the scheduler marks the job
    FAILED (off for the debug executor, which would open a debugger on an exception).
    """

    def __init__(self, tasks: list[RunTask], raise_on_failure: bool = True):
        self.tasks = list(tasks)
        self.raise_on_failure = raise_on_failure
        self.requeues = 0

    def __call__(self) -> list[dict[str, Any]]:
        if not self.tasks:
            return []
        first = self.tasks[0]
        _quiet_forked_children()
        cwd = os.getcwd()
        os.chdir(first.workdir)
        try:
            alloc = export_allocation(first.resources, first.cluster)
            if int(alloc["G2PO_NODE_RANK"]) != 0:
                return [_worker_node(first, alloc)]
            results = self._train_all()
        finally:
            os.chdir(cwd)
        failed = [r for r in results if r["state"] == "failed"]
        if failed and self.raise_on_failure:
            raise RuntimeError("; ".join(f"{r['run_id']}: {r['error']}" for r in failed))
        return results

    def _train_all(self) -> list[dict[str, Any]]:
        """Train the runs in order under :func:`job_guard`; a stop request ends the job (exit
        status 128 + signal, :class:`g2po_bench.runtime.shutdown.Interrupted`) before the next run."""
        console = Console(file=sys.stdout, force_terminal=False, width=120)
        results: list[dict[str, Any]] = []
        with job_guard(self.tasks[0].cluster) as guard:
            for t in self.tasks:
                if guard.requested is not None:
                    break
                try:
                    results.append(train_one(t, console=console) if t.argv is None else credit_one(t, guard))
                except ShutdownRequested:  # a check point reached outside the trainer's guard
                    break
            if guard.requested is not None:
                left = [t.run_id for t in self.tasks[len(results):]]
                msg = (f"job stopped by {signal.Signals(guard.requested).name}"
                       + (f"; not trained (a relaunch trains them): {', '.join(left)}" if left else ""))
                print(f"[g2po sweep] {msg}", file=sys.stderr, flush=True)
                guard.exit(msg)
        return results

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """Called by Submitit on preemption/timeout: requeue the same runs (they resume)."""
        self.requeues += 1
        for t in self.tasks:
            log_event(t.sweep_dir, run_id=t.run_id, event="checkpoint-requeue", requeues=self.requeues)
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def _worker_node(task: RunTask, alloc: dict[str, str]) -> dict[str, Any]:  # pragma: no cover - multi-node
    """Rank > 0 of a multi-node run: join the head's Ray cluster (OpenRLHF) until it ends."""
    backend = (yaml.safe_load(task.config_yaml) or {}).get("backend", "local")
    if backend != "openrlhf":
        return {"run_id": task.run_id, "state": "skipped", "reason": f"rank {alloc['G2PO_NODE_RANK']}: "
                f"backend {backend} uses one node"}
    try:  # the backend's own worker role (same contract: the G2PO_* variables)
        # lazy: the OpenRLHF backend (Ray) is an optional GPU dependency
        from g2po_bench.algorithms.backends.openrlhf.cluster import join_as_worker, read_allocation
    except ImportError:
        join_as_worker = None
    if join_as_worker is not None:
        rc = join_as_worker(read_allocation())
        return {"run_id": task.run_id, "state": "worker", "returncode": rc}
    host, port = alloc["G2PO_RAY_ADDRESS"].rsplit(":", 1)
    deadline = time.time() + 900  # the head may still be loading the model before Ray starts
    while time.time() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
            break
        except OSError:
            time.sleep(5)
    rc = subprocess.run(["ray", "start", f"--address={alloc['G2PO_RAY_ADDRESS']}", "--block"],
                        check=False).returncode
    return {"run_id": task.run_id, "state": "worker", "returncode": rc}
