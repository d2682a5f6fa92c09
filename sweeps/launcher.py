"""Launch, inspect and cancel a sweep with Submitit (slurm, local and debug executors).

Where things go (``<out>`` = the spec's ``output_dir``, default ``results/sweeps/<name>``):

==============================  =================================================================
``<out>/runs/<run_id>/``        the run folders (:mod:`g2po_bench.core.rundir`: config, metrics, eval,
                                status, checkpoints); ``g2po_bench.analysis.load.load_runs(<out>)`` reads them
``<out>/sweep.json``            the sweep state: every run's labels, overrides, resources and
                                submissions (cluster, job id, log paths), and every launch;
                                written atomically (temporary file + rename)
``<out>/sweep.lock``            ``flock`` held by a launch/cancel while it reads, submits and
                                writes the state (two launches at once run one after the other)
``<out>/claims/<run_id>.json``  the claim of a run being trained (:mod:`g2po_bench.sweeps.claims`)
``<out>/configs/<run_id>.yaml`` the resolved config of each run (``g2po train --config`` reruns it)
``<out>/events.jsonl``          what the jobs did: start (fresh / resumed from iteration k),
                                done, failed (with traceback), skipped (and why), requeued
``<out>/submitit/<shape>/``     Submitit's pickles and the job logs, one folder per resource shape
==============================  =================================================================

Launch rules (idempotence): a run is submitted unless ``status.json`` says ``done``, its last
job is still pending or running, or a live job holds its claim. Failed runs and runs whose job
died are resubmitted and resume from their last checkpoint. One Submitit job array per
resource shape, with at most ``max_parallel`` tasks running at once (Slurm ``--array=..%N``);
the local executor has no arrays, so there the runs of a shape are dealt into ``max_parallel``
jobs that each train their share one after the other.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from g2po_bench.core.rundir import (
    RunDir,
    atomic_write_json,
    atomic_write_text,
    code_version,
    read_jsonl,
)
from g2po_bench.sweeps.claims import claim_state, flocked, read_claim
from g2po_bench.sweeps.job import RunTask, SweepJob
from g2po_bench.sweeps.scheduler import HOST, JobState, ProcessTree, job_states, process_start
from g2po_bench.sweeps.spec import PlannedRun, Resources, SpecError, SweepSpec, _parse_where, expand

__all__ = [
    "CLUSTERS",
    "Decision",
    "LaunchResult",
    "RunStatus",
    "SweepState",
    "plan_launch",
    "launch",
    "ClusterUnavailable",
    "cluster_problem",
    "sweep_status",
    "cancel",
    "wait",
]

CLUSTERS = ("slurm", "local", "debug")
#: the commands a Slurm submission runs (Submitit writes an sbatch script whose tasks start with srun)
SLURM_COMMANDS = ("sbatch", "srun")
STATE_VERSION = 1
SIGNAL_DELAY_S = 120  # Slurm sends USR2 this long before the time limit (checkpoint + requeue)


# ---------------------------------------------------------------------------- state file
class SweepState:
    """``<out>/sweep.json``: runs and their submissions, and the launches (atomic writes)."""

    def __init__(self, out: Path):
        self.out = Path(out)
        self.path = self.out / "sweep.json"
        self.data: dict[str, Any] = {"version": STATE_VERSION, "runs": {}, "launches": []}
        if self.path.exists():
            try:
                self.data = json.loads(self.path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:  # cannot happen with atomic writes; be loud
                raise RuntimeError(f"sweep state {self.path} is unreadable: {exc}") from None

    @property
    def lock_path(self) -> Path:
        return self.out / "sweep.lock"

    def run(self, run_id: str) -> dict[str, Any]:
        return self.data["runs"].setdefault(run_id, {"submissions": []})

    def submissions(self, run_id: str) -> list[dict[str, Any]]:
        return self.data["runs"].get(run_id, {}).get("submissions", [])

    def last_submission(self, run_id: str) -> dict[str, Any] | None:
        subs = self.submissions(run_id)
        return subs[-1] if subs else None

    def save(self) -> None:
        self.data["updated"] = time.time()
        atomic_write_json(self.path, self.data)


@contextlib.contextmanager
def _launch_lock(state: SweepState, console=None, timeout: float = 3600.0):
    state.out.mkdir(parents=True, exist_ok=True)
    try:
        with flocked(state.lock_path, timeout=0.0):
            yield
            return
    except TimeoutError:
        pass
    if console is not None:
        console.print(f"waiting for another launch/cancel of this sweep to finish (lock {state.lock_path})")
    with flocked(state.lock_path, timeout=timeout):
        yield


# ---------------------------------------------------------------------------- decisions
@dataclass
class Decision:
    """What a launch decides for one run: submit (and why) or skip (and why)."""
    run: PlannedRun
    action: str  # "submit" | "skip"
    reason: str


def _run_dir(spec: SweepSpec, run_id: str) -> RunDir:
    return RunDir(spec.runs_dir / run_id)


def _progress(st: dict[str, Any] | None) -> str:
    if not st:
        return ""
    return f"{st.get('iteration', 0)}/{st.get('total_iterations', '?')}"


def plan_launch(spec: SweepSpec, runs: list[PlannedRun], state: SweepState) -> list[Decision]:
    """What a launch would do with each run (see the module docstring for the rules)."""
    lasts = [state.last_submission(r.run_id) for r in runs]
    live = job_states([s for s in lasts if s])
    by_run: dict[str, JobState] = {}
    it = iter(live)
    for r, s in zip(runs, lasts):
        if s:
            by_run[r.run_id] = next(it)
    out = []
    for r in runs:
        if r.needs:  # a dry run's placeholder: no folder, no state until the variables are set
            out.append(Decision(r, "submit", f"new (needs {', '.join(r.needs)})"))
            continue
        st = _run_dir(spec, r.run_id).read_status()
        if st and st.get("state") == "done":
            out.append(Decision(r, "skip", "done"))
            continue
        last = state.last_submission(r.run_id)
        js = by_run.get(r.run_id)
        if last and js and js.alive:
            verb = "queued" if js.phase == "pending" else "running"
            out.append(Decision(r, "skip", f"{verb}: {last['cluster']} job {last['job_id']}"))
            continue
        holder = read_claim(spec.output_dir / "claims", r.run_id)
        cstate, why = claim_state(holder)
        if cstate == "alive":
            out.append(Decision(r, "skip", f"running: {why}"))
            continue
        if st and st.get("state") == "failed":
            reason = f"resubmit (failed at {_progress(st)}: {str(st.get('error'))[:60]})"
        elif st and st.get("state") == "interrupted":
            reason = f"resubmit (interrupted at {_progress(st)}: resumes from its checkpoint)"
        elif st:
            reason = f"resubmit (stopped at {_progress(st)}: job {last['job_id'] if last else '?'} {js or 'gone'})"
        elif last:
            reason = f"resubmit (job {last['job_id']} {js or 'gone'} before the run started)"
        else:
            reason = "new"
        out.append(Decision(r, "submit", reason))
    return out


# ---------------------------------------------------------------------------- executors
@contextlib.contextmanager
def _detached_stdio(log: Path, enabled: bool):
    """Let processes started meanwhile (Submitit's local job controllers, which outlive the
    launch) inherit ``log`` as stdout/stderr instead of our terminal or pipe; otherwise
    ``g2po sweep launch ... | tee`` or a caller reading our output would wait for the jobs."""
    if not enabled:
        yield
        return
    import sys

    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (*saved, fd):
            os.close(f)


def _make_executor(cluster: str, folder: Path, res, spec: SweepSpec, name: str, timeout_min: int):
    import submitit

    kwargs: dict[str, Any] = {}
    if cluster == "slurm":
        kwargs["slurm_max_num_timeout"] = spec.max_timeouts
    elif cluster == "local":
        kwargs["local_max_num_timeout"] = spec.max_timeouts
    ex = submitit.AutoExecutor(folder=folder, cluster=cluster, **kwargs)
    params: dict[str, Any] = {
        "name": name, "timeout_min": int(timeout_min), "nodes": res.nodes, "tasks_per_node": 1,
        "cpus_per_task": res.cpus, "mem_gb": res.mem_gb,
    }
    if res.gpus:
        params["gpus_per_node"] = res.gpus
    if cluster == "slurm":
        params.update(
            slurm_array_parallelism=spec.max_parallel, slurm_partition=res.partition,
            slurm_account=res.account, slurm_qos=res.qos, slurm_constraint=res.constraint,
            slurm_signal_delay_s=min(SIGNAL_DELAY_S, max(10, res.time * 60 // 10)),
            slurm_additional_parameters=dict(res.extra) or None,
            slurm_setup=list(spec.setup) or None,
        )
    elif cluster == "local" and spec.setup:
        params["local_setup"] = list(spec.setup)
    ex.update_parameters(**params)
    return ex


@dataclass
class LaunchResult:
    """The outcome of a launch: decisions per run, submitted job ids, the state file."""
    decisions: list[Decision]
    submitted: list[dict[str, Any]] = field(default_factory=list)  # one per job: cluster, job_id, runs
    results: list[Any] = field(default_factory=list)  # debug executor: what the jobs returned
    dry_run: bool = False


class ClusterUnavailable(RuntimeError):
    """The chosen executor cannot submit from this machine (``--cluster slurm`` without Slurm's
    commands); raised before anything is submitted or recorded."""


def cluster_problem(cluster: str) -> str | None:
    """Why ``cluster`` cannot submit from this machine, or None: Slurm needs ``sbatch`` and
    ``srun`` on PATH (a login node of the cluster); ``local`` and ``debug`` always can."""
    if cluster != "slurm":
        return None
    missing = [c for c in SLURM_COMMANDS if shutil.which(c) is None]
    if not missing:
        return None
    return (f"--cluster slurm: {' and '.join(missing)} not found on PATH, so Slurm is not installed or not loaded "
            "on this machine; launch from a login node of the cluster (or load its Slurm module), or run here with "
            "--cluster local")


def launch(spec: SweepSpec, cluster: str, *, where: list[str] | None = None, dry_run: bool = False,
           console=None, on_plan=None, pictures=None) -> LaunchResult:
    """Expand, validate, decide and submit (see the module docstring).

    ``on_plan(spec, decisions, cluster)`` is called with the plan before anything is
    submitted (the CLI prints it). ``pictures``: the tracker pictures' drawer handed to every run
    (picklable; :class:`g2po_bench.core.tracking.RunPictures`). Raises
    :class:`g2po_bench.sweeps.spec.SpecError` before any work, and :class:`ClusterUnavailable`
    (:func:`cluster_problem`) before submitting (a dry run plans anyway).
    """
    if cluster not in CLUSTERS:
        raise ValueError(f"cluster must be one of {', '.join(CLUSTERS)}")
    # validates every run: a broken spec fails here; a dry run plans unset variables as placeholders
    runs = expand(spec, where, placeholders=dry_run)
    if dry_run:
        decisions = plan_launch(spec, runs, SweepState(spec.output_dir))
        if on_plan:
            on_plan(spec, decisions, cluster)
        return LaunchResult(decisions, dry_run=True)
    problem = cluster_problem(cluster)
    if problem:
        raise ClusterUnavailable(problem)
    state = SweepState(spec.output_dir)
    with _launch_lock(state, console):
        state = SweepState(spec.output_dir)  # re-read under the lock
        decisions = plan_launch(spec, runs, state)
        if on_plan:
            on_plan(spec, decisions, cluster)
        result = LaunchResult(decisions)
        todo = [d.run for d in decisions if d.action == "submit"]
        launch_id = uuid.uuid4().hex[:8]
        for r in runs:
            rec = state.run(r.run_id)
            rec.update(labels=r.labels, preset=r.preset, overrides=r.overrides,
                       resources=r.resources.to_dict(), aliases=r.aliases)
            atomic_write_text(spec.output_dir / "configs" / f"{r.run_id}.yaml", r.config_yaml)
        shapes: dict[str, list[PlannedRun]] = {}
        for r in todo:
            shapes.setdefault(r.resources.key(), []).append(r)
        workdir = os.getcwd()
        pending_debug = []
        record = {"id": launch_id, "time": time.time(), "cluster": cluster, "host": HOST, "pid": os.getpid(),
                  "code": code_version(),
                  "spec": str(spec.path), "where": list(where or []), "submitted": [],
                  "skipped": {d.run.run_id: d.reason for d in decisions if d.action == "skip"}}
        state.data.setdefault("launches", []).append(record)
        state.data.update(name=spec.name, spec=str(spec.path), version=STATE_VERSION)
        try:
            for key, group in shapes.items():
                res = group[0].resources
                folder = spec.output_dir / "submitit" / key
                tasks = [RunTask(run_id=r.run_id, config_yaml=r.config_yaml, sweep_dir=str(spec.output_dir),
                                 workdir=workdir, resources=res.to_dict(), cluster=cluster, sweep_name=spec.name,
                                 pictures=pictures)
                         for r in group]
                if cluster == "local":  # no arrays: max_parallel jobs, each trains its share in turn
                    slots = min(spec.max_parallel, len(tasks))
                    chunks = [tasks[i::slots] for i in range(slots)]
                else:
                    chunks = [[t] for t in tasks]
                ex = _make_executor(cluster, folder, res, spec, f"{spec.name}-{key}",
                                    res.time * max(len(c) for c in chunks))
                with _detached_stdio(folder / "controllers.log", cluster == "local"):
                    jobs = ex.submit_array([SweepJob(c, raise_on_failure=cluster != "debug") for c in chunks])
                now = time.time()
                for job, chunk in zip(jobs, chunks):
                    sub = {"cluster": cluster, "job_id": str(job.job_id), "launch": launch_id, "submitted": now,
                           "host": HOST, "shape": key, "folder": str(folder),
                           "stdout": str(job.paths.stdout), "stderr": str(job.paths.stderr),
                           "runs_in_job": [t.run_id for t in chunk]}
                    if cluster == "local":
                        sub["start"] = process_start(int(job.job_id))
                    for t in chunk:
                        state.run(t.run_id)["submissions"].append(sub)
                        record["submitted"].append(t.run_id)
                    result.submitted.append({**sub, "array": len(chunks)})
                    if cluster == "debug":
                        pending_debug.append(job)
        finally:  # record whatever was submitted, also when a later submission failed
            state.save()
        for job in pending_debug:  # the debug executor runs the jobs here, one after the other
            result.results.extend(job.result())
    return result


# ---------------------------------------------------------------------------- status
def runs_from_state(spec: SweepSpec, where: list[str] | None = None) -> list[PlannedRun]:
    """The runs recorded in ``sweep.json`` (for status/cancel when the spec cannot be expanded
    here, e.g. its variables are not set in this shell). ``where`` filters on the labels."""

    filters = _parse_where(where)
    out = []
    for run_id, rec in SweepState(spec.output_dir).data.get("runs", {}).items():
        labels = rec.get("labels") or {}
        if any(labels.get(k) not in v for k, v in filters.items()):
            continue
        cfg_path = spec.output_dir / "configs" / f"{run_id}.yaml"
        out.append(PlannedRun(
            run_id=run_id, labels=labels, seed=int(labels.get("seed", 0)), preset=rec.get("preset"),
            overrides=rec.get("overrides") or [], resources=Resources.from_mapping(rec.get("resources") or {}, run_id),
            config_yaml=cfg_path.read_text() if cfg_path.exists() else ""))
    return out


def expand_or_state(spec: SweepSpec, where: list[str] | None = None, console=None) -> list[PlannedRun]:
    """:func:`expand`, or the runs of the sweep state when the spec does not expand here."""

    try:
        return expand(spec, where)
    except SpecError as exc:
        runs = runs_from_state(spec, where)
        if not runs:
            raise
        if console is not None:
            console.print(f"the spec does not expand here ({str(exc).splitlines()[-1].strip()[:200]}); "
                          f"using the {len(runs)} run(s) recorded in {spec.output_dir / 'sweep.json'}",
                          markup=False)
        return runs


@dataclass
class RunStatus:
    """One run's status in a sweep: state, iteration, job state and reason."""
    run: PlannedRun
    state: str  # pending | running | done | failed
    detail: str
    job: str = ""
    progress: str = ""
    success: float | None = None


def _last_event(spec: SweepSpec, run_id: str, events: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    for ev in reversed(events or []):
        if ev.get("run_id") == run_id:
            return ev
    return None


def _stderr_tail(path: str | None) -> str:
    if not path:
        return ""
    try:
        lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    for ln in reversed(lines):
        if "Error" in ln or "Exception" in ln or "Killed" in ln or "CANCELLED" in ln:
            return ln[:160]
    return lines[-1][:160] if lines else ""


def sweep_status(spec: SweepSpec, where: list[str] | None = None,
                 runs: list[PlannedRun] | None = None, console=None) -> list[RunStatus]:
    """The state of every run of the spec: pending, running, done or failed, with the reason."""
    runs = runs if runs is not None else expand_or_state(spec, where, console)
    state = SweepState(spec.output_dir)
    lasts = [state.last_submission(r.run_id) for r in runs]
    states = iter(job_states([s for s in lasts if s]))
    jstates = [next(states) if s else None for s in lasts]
    events = read_jsonl(spec.output_dir / "events.jsonl")
    out = []
    for r, last, js in zip(runs, lasts, jstates):
        rd = _run_dir(spec, r.run_id)
        st = rd.read_status()
        job = f"{last['cluster']}:{last['job_id']}" if last else ""
        prog = _progress(st)
        if st and st.get("state") == "done":
            succ = None
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                succ = float(json.loads(rd.eval_path.read_text())["final"]["success_rate"])
            out.append(RunStatus(r, "done", "finished", job, prog, succ))
            continue
        holder = read_claim(spec.output_dir / "claims", r.run_id)
        cstate, why = claim_state(holder) if holder is not None else ("free", "")
        if cstate == "alive":
            out.append(RunStatus(r, "running", f"training ({why})", job, prog))
            continue
        if js is not None and js.phase == "running" and st and st.get("state") == "running":
            out.append(RunStatus(r, "running", "training", job, prog))
            continue
        if js is not None and js.alive:
            chunked = len(last.get("runs_in_job", [])) > 1
            failed_here = bool(st and st.get("state") == "failed")
            if js.phase == "running" and chunked and not failed_here:
                out.append(RunStatus(r, "pending", f"waiting for its turn in {job}", job, prog))
                continue
            if js.phase == "running" and not chunked:
                detail = "restarting after a requeue" if failed_here else "starting"
                out.append(RunStatus(r, "running", detail, job, prog))
                continue
            if js.phase == "pending":
                detail = (f"queued again, resumes from its checkpoint ({js})" if st else f"queued ({js})")
                out.append(RunStatus(r, "pending", detail, job, prog))
                continue
        ev = _last_event(spec, r.run_id, events)
        if last and last.get("cancelled"):
            out.append(RunStatus(r, "failed", f"cancelled by `g2po sweep cancel` (job {js})", job, prog))
        elif st and st.get("state") == "failed":
            out.append(RunStatus(r, "failed", str(st.get("error") or "failed"), job, prog))
        elif st and st.get("state") == "interrupted":
            out.append(RunStatus(r, "failed", f"job {last['job_id'] if last else '?'} ended ({js or 'unknown'}): "
                                 f"{st.get('error') or 'interrupted'}", job, prog))
        elif st and st.get("state") == "running":
            out.append(RunStatus(r, "failed", f"job {last['job_id'] if last else '?'} ended ({js or 'unknown'}) "
                                 f"while training at iteration {prog} (killed? relaunch resumes from the "
                                 "checkpoint)", job, prog))
        elif last:
            why = ""
            if ev and ev.get("event") == "skipped":
                why = f"skipped by the job: {ev.get('reason')}"
            else:
                why = _stderr_tail(last.get("stderr"))
            out.append(RunStatus(r, "failed", f"job {last['job_id']} ended ({js or 'unknown'}) before the run "
                                 f"started{': ' + why if why else ''}", job, prog))
        else:
            out.append(RunStatus(r, "pending", "not launched yet", "", prog))
    return out


# ---------------------------------------------------------------------------- cancel
#: How long ``g2po sweep cancel`` waits for the cancelled jobs to stop (seconds; ``--timeout``).
CANCEL_TIMEOUT_S = 60.0
#: A local job's controller is sent SIGTERM again this often while the job runs on (seconds).
CANCEL_RESEND_S = 2.0


def _signal_local(tree: ProcessTree) -> list[int]:
    """SIGTERM to the local job's Submitit controller(s) (the root when there is none yet: a
    setup shell, or a controller still starting); returns the pids signalled."""
    targets = tree.controllers() or [p for p in tree.alive() if p == tree.root]
    sent = []
    for pid in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
            sent.append(pid)
    return sent


def cancel(spec: SweepSpec, where: list[str] | None = None, console=None, timeout: float = CANCEL_TIMEOUT_S,
           poll_s: float = 0.25) -> list[dict[str, Any]]:
    """Cancel the live jobs of the spec's runs and wait (up to ``timeout`` seconds) until they stop.

    Slurm: ``scancel`` (SIGTERM to every process of the job; SIGKILL after the cluster's
    ``KillWait``). Local: SIGTERM to the job's Submitit controller, which sets its SIGTERM handler
    itself and passes the signal on to the job process; the job takes SIGTERM whatever
    disposition it inherited (:func:`g2po_bench.sweeps.job.job_guard`), its trainer stops at the next
    check point without recording the iteration in flight, and the job exits. SIGTERM is sent
    again every :data:`CANCEL_RESEND_S` seconds while the job runs on: a job submitted a moment
    ago may be between the start of a process and the moment it sets its handler, where one
    signal can be lost; a repeated request is harmless (the guards act on the first). A job is
    stopped when none of its processes (controller, job process, workers) is left (Slurm: when
    the scheduler no longer says pending/running).

    Returns:
        One dict per live job: ``cluster``, ``job_id``, ``runs``, ``ok`` (the cancel was sent),
        ``message`` (why not), ``stopped`` (seen to stop within ``timeout``), ``seconds`` (until
        it stopped), ``still_running`` (local: the live pids with their roles; Slurm: its state).
    """
    runs = expand_or_state(spec, where, console)
    state = SweepState(spec.output_dir)
    cancelled: list[dict[str, Any]] = []
    watched: list[tuple[dict[str, Any], dict[str, Any], ProcessTree | None]] = []
    with _launch_lock(state, console):
        state = SweepState(spec.output_dir)
        subs: dict[tuple[str, str], dict[str, Any]] = {}
        for r in runs:
            last = state.last_submission(r.run_id)
            if last:
                subs[(last["cluster"], last["job_id"])] = last
        items = list(subs.values())
        for sub, js in zip(items, job_states(items)):
            if not js.alive:
                continue
            entry: dict[str, Any] = {"cluster": sub["cluster"], "job_id": sub["job_id"], "ok": False, "message": "",
                                     "runs": sub.get("runs_in_job", []), "stopped": False, "seconds": None,
                                     "still_running": ""}
            tree = None
            if sub["cluster"] == "slurm":
                proc = subprocess.run(["scancel", sub["job_id"]], capture_output=True, text=True)
                entry.update(ok=proc.returncode == 0, message=proc.stderr.strip())
            elif sub["cluster"] == "local" and sub.get("host") == HOST:
                tree = ProcessTree(int(sub["job_id"]), sub.get("start"))
                if _signal_local(tree):
                    entry["ok"] = True
                else:
                    entry.update(ok=True, stopped=True, seconds=0.0, message="it had already ended")
            else:
                entry["message"] = f"cannot cancel a {sub['cluster']} job from host {HOST}"
            if entry["ok"]:
                for run_id in sub.get("runs_in_job", []):
                    for s in state.submissions(run_id):
                        if s["job_id"] == sub["job_id"] and s["cluster"] == sub["cluster"]:
                            s["cancelled"] = time.time()
                if not entry["stopped"]:
                    watched.append((entry, sub, tree))
            cancelled.append(entry)
        state.save()
    _wait_stopped(watched, timeout, poll_s)
    return cancelled


def _wait_stopped(watched, timeout: float, poll_s: float) -> None:
    """Poll the cancelled jobs until each has stopped or ``timeout`` seconds have passed (outside
    the launch lock: a launch meanwhile sees them as live and skips their runs)."""
    t0 = last_sent = time.time()
    last_asked = -math.inf  # Slurm is asked every CANCEL_RESEND_S seconds, local processes every poll
    while True:
        now = time.time()
        pending = []
        ask_slurm = now - last_asked >= CANCEL_RESEND_S
        if ask_slurm:
            last_asked = now
        for entry, sub, tree in watched:
            if entry["stopped"]:
                continue
            if tree is not None:
                over = not tree.alive()
            else:
                over = ask_slurm and not job_states([sub])[0].alive
            if over:
                entry.update(stopped=True, seconds=round(now - t0, 1))
            else:
                pending.append((entry, sub, tree))
        if not pending or now - t0 >= timeout:
            break
        if now - last_sent >= CANCEL_RESEND_S:
            for _, _, tree in pending:
                if tree is not None:
                    _signal_local(tree)
            last_sent = now
        time.sleep(poll_s)
    for entry, sub, tree in pending:
        entry["still_running"] = (f"pid {tree.describe()}" if tree is not None
                                  else f"Slurm says {job_states([sub])[0]}")


# ---------------------------------------------------------------------------- wait
def wait(spec: SweepSpec, where: list[str] | None = None, timeout: float | None = None,
         poll_s: float = 2.0, console=None) -> list[RunStatus]:
    """Poll :func:`sweep_status` until no run is pending or running (or ``timeout`` seconds)."""
    runs = expand_or_state(spec, where, console)
    t0 = time.time()
    last_line = ""
    while True:
        rows = sweep_status(spec, runs=runs)
        counts = {k: sum(1 for r in rows if r.state == k) for k in ("pending", "running", "done", "failed")}
        line = ", ".join(f"{v} {k}" for k, v in counts.items())
        if console is not None and line != last_line:
            console.print(f"[{time.time() - t0:5.0f} s] {line}")
            last_line = line
        if counts["pending"] == 0 and counts["running"] == 0:
            return rows
        if all(r.state in ("done", "failed") or r.detail == "not launched yet" for r in rows):
            return rows
        if timeout is not None and time.time() - t0 > timeout:
            return rows
        time.sleep(poll_s)
