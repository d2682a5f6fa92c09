"""Ask the scheduler (or the OS) whether a job is pending, running or over.

Used by the launcher (is a run already queued?), by ``g2po sweep status`` and by the per-run
claims (is the job holding a claim still alive?). Every query degrades to ``"unknown"`` when it
cannot answer (no Slurm client, another host), and callers then fall back on heartbeats.

Job identities:

- ``slurm``: the Slurm job id, ``<array job id>_<task id>`` for array tasks (``123_4``).
  Asked with one ``squeue --states=all -r`` call for all ids of the user (a job stays visible
  for ``MinJobAge`` seconds after it ends), then ``sacct`` for the ids squeue no longer knows
  (clusters with accounting). Neither knows it -> ``gone`` (over, long ago).
- ``local``: Submitit's local executor runs a job as a controller process; its id is the
  controller's pid. Alive while that pid exists on this host with the recorded start time
  (pid reuse) and is not a zombie.
- ``process``: any process (``host``, ``pid``, ``start``), e.g. the debug executor.

A local job's processes (its controller, the job process Submitit starts, that one's workers)
are followed by :class:`ProcessTree`, which ``g2po sweep cancel`` signals and watches until
every one of them has ended.
"""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass

__all__ = ["JobState", "slurm_states", "process_start", "process_alive", "local_state",
           "job_state", "job_states", "HOST", "descendants", "ProcessTree"]

HOST = socket.gethostname()

# Slurm state names -> phase
_PENDING = {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "CONFIGURING", "RESIZING",
            "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "POWER_UP_NODE"}
_RUNNING = {"RUNNING", "COMPLETING"}


@dataclass(frozen=True)
class JobState:
    """``phase``: pending | running | ended | gone | unknown; ``detail``: the scheduler's word."""

    phase: str
    detail: str = ""

    @property
    def alive(self) -> bool:
        return self.phase in ("pending", "running")

    def __str__(self) -> str:
        return self.detail or self.phase


def _slurm_phase(state: str) -> str:
    word = state.split()[0].rstrip("+").upper() if state else ""
    if word in _PENDING:
        return "pending"
    if word in _RUNNING:
        return "running"
    return "ended" if word else "unknown"


def slurm_states(job_ids: list[str], timeout: float = 30.0) -> dict[str, JobState]:
    """Slurm state of each job id (``123`` or ``123_4``); ``unknown`` if Slurm cannot be asked.

    One ``squeue --states=all -r -j ID,ID,...`` call per 200 ids (any user's jobs: a claim may
    belong to a colleague's job), then ``sacct`` for the ids squeue no longer knows.
    """
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    seen: dict[str, str] = {}
    for k in range(0, len(ids), 200):
        chunk = ids[k:k + 200]
        cmd = ["squeue", "--states=all", "-h", "-r", "-o", "%i|%T", "-j", ",".join(chunk)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            return {i: JobState("unknown", "squeue unavailable") for i in ids}
        if proc.returncode != 0:
            if "invalid job id" in proc.stderr.lower():
                continue  # (a single) id squeue no longer knows
            return {i: JobState("unknown", f"squeue failed: {proc.stderr.strip()[:120]}") for i in ids}
        for line in proc.stdout.splitlines():
            if "|" in line:
                jid, state = line.strip().split("|", 1)
                seen[jid] = state
    out: dict[str, JobState] = {}
    missing = []
    for i in ids:
        if i in seen:
            out[i] = JobState(_slurm_phase(seen[i]), seen[i])
        else:
            missing.append(i)
    if missing:
        out.update(_sacct_states(missing, timeout))
    return out


def _sacct_states(ids: list[str], timeout: float) -> dict[str, JobState]:
    cmd = ["sacct", "-X", "-n", "-P", "-o", "JobID,State"]
    for i in ids:
        cmd += ["-j", i]
    found: dict[str, str] = {}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode == 0:
            for line in proc.stdout.splitlines():
                parts = line.strip().split("|")
                if len(parts) >= 2 and parts[0] != "JobID":
                    found[parts[0]] = parts[1]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {i: JobState(_slurm_phase(found[i]), found[i]) if i in found
            else JobState("gone", "not known to squeue/sacct") for i in ids}


def process_start(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22), None if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return None
    rest = stat[stat.rfind(")") + 2:].split()
    if not rest or rest[0] in ("Z", "X"):  # zombie / dead: over
        return None
    try:
        return int(rest[19])
    except (IndexError, ValueError):  # pragma: no cover
        return None


def process_alive(host: str | None, pid: int | None, start: int | None) -> JobState:
    """Whether process ``pid`` (started at ``start`` ticks) on ``host`` is alive."""
    if pid is None:
        return JobState("unknown", "no pid")
    if host and host != HOST:
        return JobState("unknown", f"on host {host}")
    now_start = process_start(int(pid))
    if now_start is None:
        return JobState("ended", "process exited")
    if start is not None and int(start) != now_start:
        return JobState("ended", "process exited (pid reused)")
    return JobState("running", "process alive")


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids of every process (one pass over ``/proc``)."""
    children: dict[int, list[int]] = {}
    for d in os.scandir("/proc"):
        if not d.name.isdigit():
            continue
        try:
            with open(f"/proc/{d.name}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(d.name))
    return children


def descendants(pid: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """All descendants of ``pid`` (from ``/proc``, or the map of :func:`_children`; children
    before grandchildren)."""
    children = _children() if children is None else children
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        for c in sorted(children.get(p, [])):
            out.append(c)
            todo.append(c)
    return out


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            stat = fh.read()
        return int(stat[stat.rfind(")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


class ProcessTree:
    """A process and every descendant it has had while followed, each identified by pid and
    start time (a reused pid is another process). ``g2po sweep cancel`` follows a local job's
    tree: the job is over when :meth:`alive` is empty, although processes whose parent died are
    re-parented (to init) and no longer descend from the root.

    Args:
        pid: the root (a local job's id: Submitit's controller, or the shell running the
            executor's ``setup`` lines before it).
        start: the root's start time in clock ticks (:func:`process_start`) recorded at
            submission; another start time means the job is already over.
    """

    CONTROLLER = "submitit.local._local"  # Submitit's local job controller: python -m submitit.local._local
    JOB = "submitit.core._submit"  # the job process it starts: python -m submitit.core._submit

    def __init__(self, pid: int, start: int | None = None):
        self.root = int(pid)
        self.known: dict[int, int] = {}
        now = process_start(self.root)
        if now is not None and (start is None or int(start) == now):
            self.known[self.root] = now
        self.refresh()

    def refresh(self) -> None:
        """Add the descendants the live followed processes have now."""
        children = _children()
        for pid in self.alive(refresh=False):
            for child in descendants(pid, children):
                if child not in self.known:
                    st = process_start(child)
                    if st is not None:
                        self.known[child] = st

    def alive(self, refresh: bool = True) -> list[int]:
        """The followed processes still running (zombies count as ended), root first."""
        if refresh:
            self.refresh()
        return [p for p, st in self.known.items() if process_start(p) == st]

    def controllers(self) -> list[int]:
        """The live Submitit controllers of the tree (the root, or the child of a setup shell)."""
        return [p for p in self.alive() if self.CONTROLLER in _command(p)]

    def describe(self) -> str:
        """``123 (controller), 124 (job), 125 (worker)`` for the live processes (the root is the
        job when it is no controller)."""
        roles = []
        for p in self.alive(refresh=False):
            cmd = _command(p)
            if self.CONTROLLER in cmd:
                role = "controller"
            elif p == self.root or (self.JOB in cmd and self.JOB not in _command(_parent(p))):
                role = "job"
            else:
                role = "worker"
            roles.append(f"{p} ({role})")
        return ", ".join(roles)


def local_state(sub: dict) -> JobState:
    """State of a Submitit local job recorded as ``{"job_id": pid, "host", "start"}``."""
    try:
        pid = int(sub["job_id"])
    except (KeyError, ValueError):
        return JobState("unknown", "bad job id")
    st = process_alive(sub.get("host"), pid, sub.get("start"))
    return JobState(st.phase, "RUNNING" if st.phase == "running" else st.detail)


def job_state(sub: dict) -> JobState:
    """The scheduler's state of a job id (pending, running, done, failed, unknown)."""
    return job_states([sub])[0]


def job_states(subs: list[dict]) -> list[JobState]:
    """States of recorded submissions (dicts with ``cluster`` and ``job_id``), one Slurm query."""
    slurm_ids = [str(s["job_id"]) for s in subs if s.get("cluster") == "slurm"]
    slurm = slurm_states(slurm_ids) if slurm_ids else {}
    out = []
    for s in subs:
        cluster = s.get("cluster")
        if cluster == "slurm":
            out.append(slurm.get(str(s["job_id"]), JobState("unknown")))
        elif cluster == "local":
            out.append(local_state(s))
        elif cluster == "debug":
            out.append(JobState("ended", "debug job (ran in the launching process)"))
        else:
            out.append(JobState("unknown", f"cluster {cluster!r}"))
    return out


def current_job() -> dict:
    """Who is running this code: the Slurm job, the Submitit local job, or a plain process."""
    env = os.environ
    pid = os.getpid()
    ident = {"host": HOST, "pid": pid, "start": process_start(pid)}
    if env.get("SLURM_JOB_ID") and env.get("SUBMITIT_EXECUTOR", "slurm") == "slurm":
        if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
            job = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
        else:
            job = env["SLURM_JOB_ID"]
        return {"kind": "slurm", "job_id": job, **ident}
    if env.get("SUBMITIT_LOCAL_JOB_ID"):
        ctl = int(env["SUBMITIT_LOCAL_JOB_ID"])
        return {"kind": "local", "job_id": str(ctl), "job_start": process_start(ctl), **ident}
    return {"kind": "process", "job_id": f"{HOST}:{pid}", **ident}


def owner_state(owner: dict) -> JobState:
    """Liveness of the job described by :func:`current_job` (claims use it)."""
    kind = owner.get("kind")
    if kind == "slurm":
        return slurm_states([str(owner.get("job_id"))]).get(str(owner.get("job_id")), JobState("unknown"))
    if kind == "local":
        return local_state({"job_id": owner.get("job_id"), "host": owner.get("host"),
                            "start": owner.get("job_start")})
    return process_alive(owner.get("host"), owner.get("pid"), owner.get("start"))
