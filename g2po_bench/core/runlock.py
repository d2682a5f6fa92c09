"""One process per run folder: an exclusive lock on ``<run>/.lock`` for the whole run.

Two processes writing into the same run folder mix their records (a process stopped by SIGTERM
that finishes its iteration's bookkeeping after a second one started the same run appends its
metrics line among the second one's). So a training process holds an exclusive ``flock`` on
``<run>/.lock`` (:data:`LOCK_FILE`) from before its first check of the folder until it ends,
resume and the signal path included (docs/run-folder.md "One process per run folder"):

- :meth:`RunLock.acquire` takes the lock, or raises :class:`~g2po_bench.core.errors.RunFolderBusy`
  naming the run and the process id the holder wrote into the file; a process may acquire the
  folder it already holds again (the holds nest, :meth:`RunLock.release` counts them down);
- the lock belongs to the file the process opened: when the folder is deleted and created again
  (by a user, or a second run started in the folder meanwhile), ``<run>/.lock`` is another file
  (another inode) and :meth:`RunLock.owned` is False. Every writer of
  :class:`~g2po_bench.core.rundir.RunDir` asks :func:`check_owned` first and raises
  :class:`~g2po_bench.core.errors.RunFolderLost` instead of writing, so a process that lost its
  folder writes nothing more into it (checked before each write: a replacement between the check
  and the write itself is not seen);
- processes forked while a lock is held (environment workers) close their copy of the lock's file
  descriptor at once (``os.register_at_fork``), so the lock ends with the process that took it,
  never with a worker that outlives it;
- ``.lock`` stays in the folder when the run ends (removing it would let a process that opened
  the old file keep a lock nobody else sees).

``flock`` locks are advisory and per open file: the folder must be on a file system that
supports them (a local disk; NFS emulates ``flock`` with POSIX locks since Linux 2.6.12). Ground
floor: the standard library only.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from g2po_bench.core.errors import RunFolderBusy, RunFolderLost

__all__ = ["LOCK_FILE", "RunLock", "held_lock", "check_owned"]

#: the lock file of a run folder
LOCK_FILE = ".lock"

_HELD: dict[str, RunLock] = {}  # absolute run folder -> this process's lock on it


def _key(root: str | os.PathLike) -> str:
    return os.path.abspath(os.fspath(root))


def _holder(fd: int) -> str:
    """The process id the holder wrote into the lock file ("unknown" while it is not written yet)."""
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


class RunLock:
    """This process's exclusive lock on the run folder ``root`` (module docstring).

    Use :meth:`acquire` (a context manager: ``with RunLock.acquire(root): ...``), not the
    constructor.

    Attributes:
        root: the run folder.
        identity: ``(st_dev, st_ino)`` of the ``.lock`` file this process locked.
    """

    def __init__(self, root: Path, fd: int, identity: tuple[int, int]):
        self.root = root
        self._fd: int | None = fd
        self.identity = identity
        self._holds = 1

    @classmethod
    def acquire(cls, root: str | os.PathLike) -> RunLock:
        """Lock the run folder ``root`` (created when missing) for this process.

        Raises:
            g2po_bench.core.errors.RunFolderBusy: another process holds it (the message names the
                run folder and that process's id); nothing in the folder is changed.
        """
        root = Path(root)
        held = _HELD.get(_key(root))
        if held is not None:
            if held.owned():
                held._holds += 1
                return held
            held._close()  # the folder was replaced under this process: its old lock is worthless
        root.mkdir(parents=True, exist_ok=True)
        path = root / LOCK_FILE
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = _holder(fd)
                os.close(fd)
                raise RunFolderBusy(
                    f"run folder {root} is in use by process {pid} (a `g2po train` or sweep job of run "
                    f"{root.name}); wait for it to end or stop it{f' (kill {pid})' if pid.isdigit() else ''}, or "
                    "start a separate run with run_id=NAME") from None
            st = os.fstat(fd)
            try:
                now = os.stat(path)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                break
            os.close(fd)  # the file was replaced between open and flock: lock the one in place now
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        os.fsync(fd)
        lock = cls(root, fd, (st.st_dev, st.st_ino))
        _HELD[_key(root)] = lock
        return lock

    def owned(self) -> bool:
        """Whether ``<root>/.lock`` is still the file this process locked (False once the folder
        was deleted or replaced, or the lock released)."""
        if self._fd is None:
            return False
        try:
            st = os.stat(self.root / LOCK_FILE)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.identity

    def release(self) -> None:
        """End one hold; the last one unlocks and closes the file."""
        self._holds -= 1
        if self._holds <= 0:
            self._close()

    def _close(self) -> None:
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None
        if _HELD.get(_key(self.root)) is self:
            del _HELD[_key(self.root)]

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def held_lock(root: str | os.PathLike) -> RunLock | None:
    """This process's lock on the run folder ``root`` (None when it holds none)."""
    return _HELD.get(_key(root))


def check_owned(root: str | os.PathLike) -> None:
    """Before a write into the run folder ``root``: nothing when this process holds no lock on it
    or its lock is still the folder's.

    Raises:
        g2po_bench.core.errors.RunFolderLost: this process locked ``root`` and the folder was
            replaced since (its ``.lock`` is another file, or gone).
    """
    lock = _HELD.get(_key(root))
    if lock is not None and not lock.owned():
        raise RunFolderLost(
            f"run folder {lock.root} was replaced while this process trained it (its {LOCK_FILE} is no longer the "
            f"file process {os.getpid()} locked: the folder was deleted or another run started in it); this "
            "process writes nothing more into it")


def _forget_locks_in_child() -> None:
    """After a fork: the child closes its copies of the lock files (without unlocking: the lock is
    the parent's) and holds no run folder."""
    for lock in list(_HELD.values()):
        if lock._fd is not None:
            try:
                os.close(lock._fd)
            except OSError:
                pass
            lock._fd = None
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_locks_in_child)
