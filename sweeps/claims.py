"""Per-run claims: at most one process trains a given run of a sweep at any time.

A job that is about to train run R first *claims* it: it creates
``<sweep>/claims/<R>.json`` with ``os.open(O_CREAT | O_EXCL)`` (atomic: of two creators
exactly one succeeds, also on NFS v3+ and Lustre) and writes its owner into it:
``{"kind": "slurm"|"local"|"process", "job_id", "host", "pid", "start", "token", "claimed"}``.
While it trains, a heartbeat thread touches the file every :data:`HEARTBEAT_S` seconds. When
the run ends (done, failed, interrupted, requeued) the owner deletes its claim.

A claim left behind by a job that died without cleaning up (SIGKILL, node failure, OOM
killer, ``scancel``) is *stale*. It is recognised by asking about the owner, not by guessing:

1. Slurm owner: ``squeue``/``sacct`` say the job is over (or no longer know it) -> stale;
   pending (requeued after preemption) or running -> alive.
2. Local/process owner on this host: the pid is gone, a zombie, or reused (start time
   differs) -> stale; else alive.
3. Owner that cannot be asked (another host, no Slurm client): stale iff its heartbeat is
   older than :data:`STALE_AFTER_S`.
4. An empty or unreadable claim (its creator was killed between create and write) is stale
   once it is 60 s old.

A claim whose owner is the asking job itself (same Slurm job id, or same local controller:
the job was requeued after a timeout/preemption) is taken over directly.

Taking over a stale claim must itself be race-free (two launches may find the same stale
claim): the check-and-replace runs under an exclusive ``fcntl.flock`` on
``<sweep>/claims/<R>.lock``, and the replacement is again an ``O_EXCL`` create after moving
the stale file aside (kept as ``<R>.stale-<time>.json`` for forensics). A claimant whose claim
was taken over anyway (its heartbeat finds another token in the file) interrupts its training.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from g2po_bench.sweeps.scheduler import current_job, owner_state

__all__ = ["Claim", "acquire", "read_claim", "claim_state", "HEARTBEAT_S", "STALE_AFTER_S"]

HEARTBEAT_S = 30.0
STALE_AFTER_S = 600.0
_UNWRITTEN_GRACE_S = 60.0


def _claim_path(claims_dir: Path, run_id: str) -> Path:
    return Path(claims_dir) / f"{run_id}.json"


@contextlib.contextmanager
def flocked(path: Path, timeout: float | None = None):
    """Hold an exclusive ``flock`` on ``path`` (created if needed). ``timeout`` None = wait forever.

    On a filesystem without flock support (ENOLCK/EOPNOTSUPP) this proceeds unlocked; the
    O_EXCL claim still guarantees that two jobs never both create the same fresh claim.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    locked = False
    try:
        t0 = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (fcntl.LOCK_NB if timeout is not None else 0))
                locked = True
                break
            except OSError as exc:
                if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    break
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                if timeout is not None and time.monotonic() - t0 > timeout:
                    raise TimeoutError(f"could not lock {path} within {timeout:.0f} s") from None
                time.sleep(0.2)
        yield
    finally:
        if locked:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def read_claim(claims_dir: Path, run_id: str) -> dict[str, Any] | None:
    """The claim of ``run_id`` (with ``heartbeat_age_s``), None if unclaimed; ``{}`` if unreadable."""
    path = _claim_path(claims_dir, run_id)
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        owner = json.loads(text)
        if not isinstance(owner, dict):
            owner = {}
    except json.JSONDecodeError:
        owner = {}
    owner["heartbeat_age_s"] = max(0.0, time.time() - st.st_mtime)
    return owner


def claim_state(owner: dict[str, Any] | None) -> tuple[str, str]:
    """``("free"|"alive"|"stale", reason)`` for a claim read with :func:`read_claim`."""
    if owner is None:
        return "free", "no claim"
    age = float(owner.get("heartbeat_age_s", 0.0))
    if not owner.get("kind"):
        if age > min(STALE_AFTER_S, _UNWRITTEN_GRACE_S):
            return "stale", f"unreadable claim, {age:.0f} s old"
        return "alive", "claim being written"
    st = owner_state(owner)
    who = describe_owner(owner)
    if st.phase in ("pending", "running"):
        return "alive", f"{who} is {st}"
    if st.phase in ("ended", "gone"):
        return "stale", f"{who} is over ({st})"
    if age > STALE_AFTER_S:
        return "stale", f"{who}: no heartbeat for {age:.0f} s ({st})"
    return "alive", f"{who}: heartbeat {age:.0f} s ago ({st})"


def describe_owner(owner: dict[str, Any]) -> str:
    """A one-line human description of a claim's owner (job id or pid@host)."""
    kind = owner.get("kind", "?")
    if kind == "slurm":
        return f"slurm job {owner.get('job_id')}"
    if kind == "local":
        return f"local job {owner.get('job_id')}@{owner.get('host')}"
    return f"process {owner.get('pid')}@{owner.get('host')}"


def _same_job(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.get("kind") != b.get("kind"):
        return False
    if a.get("kind") == "slurm":
        return str(a.get("job_id")) == str(b.get("job_id"))
    if a.get("kind") == "local":
        return (a.get("host"), str(a.get("job_id")), a.get("job_start")) == (
            b.get("host"), str(b.get("job_id")), b.get("job_start"))
    return (a.get("host"), a.get("pid"), a.get("start")) == (b.get("host"), b.get("pid"), b.get("start"))


def _create_exclusive(path: Path, owner: dict[str, Any]) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(owner, sort_keys=True))
        fh.flush()
        os.fsync(fh.fileno())
    return True


class Claim:
    """A held claim: call :meth:`release` (or use as a context manager) when the run ends."""

    def __init__(self, path: Path, owner: dict[str, Any], on_lost=None):
        self.path = path
        self.owner = owner
        self._stop = threading.Event()
        self._on_lost = on_lost
        self.lost = False
        self._thread = threading.Thread(target=self._heartbeat, name=f"claim-{path.stem}", daemon=True)
        self._thread.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            if not self.still_mine():
                self.lost = True
                if self._on_lost is not None:
                    self._on_lost(self)
                return
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def still_mine(self) -> bool:
        cur = read_claim(self.path.parent, self.path.stem)
        return bool(cur) and cur.get("token") == self.owner["token"]

    def release(self) -> None:
        self._stop.set()
        with flocked(self.path.with_suffix(".lock")):
            if self.still_mine():
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def acquire(claims_dir: str | os.PathLike, run_id: str, on_lost=None,
            owner: dict[str, Any] | None = None) -> tuple[Claim | None, dict[str, Any] | None, str]:
    """Try to claim ``run_id``. Returns ``(claim, None, how)`` or ``(None, holder, why)``.

    ``how`` says whether the claim was fresh, taken over from the same job (requeue) or from
    a stale owner (and why it was stale); ``why`` why the holder counts as alive.
    """
    claims_dir = Path(claims_dir)
    claims_dir.mkdir(parents=True, exist_ok=True)
    path = _claim_path(claims_dir, run_id)
    me = dict(owner or current_job())
    me.update(token=uuid.uuid4().hex, claimed=time.time(), run_id=run_id)
    if _create_exclusive(path, me):
        return Claim(path, me, on_lost), None, "fresh claim"
    with flocked(claims_dir / f"{run_id}.lock"):
        for _ in range(3):
            if _create_exclusive(path, me):
                return Claim(path, me, on_lost), None, "fresh claim"
            holder = read_claim(claims_dir, run_id)
            if holder is None:
                continue  # released meanwhile: try to create again
            if holder.get("kind") and _same_job(holder, me):
                how = f"taken over from the same job ({describe_owner(holder)}, requeued)"
            else:
                state, why = claim_state(holder)
                if state == "alive":
                    return None, holder, why
                how = f"taken over a stale claim: {why}"
            aside = claims_dir / f"{run_id}.stale-{time.time():.0f}-{uuid.uuid4().hex[:6]}.json"
            try:
                os.replace(path, aside)
            except FileNotFoundError:
                continue
            if _create_exclusive(path, me):
                return Claim(path, me, on_lost), None, how
        holder = read_claim(claims_dir, run_id) or {}
        return None, holder, "contended claim"
