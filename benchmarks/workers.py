"""A pool of environments stepped in parallel worker processes.

Each worker process holds the environments of some slots (slot i lives in worker i mod W)
and executes the reset/step commands for its slots in order; the workers run in parallel.
Workers limit BLAS/OpenMP to one thread each.

A worker exits with its parent process, even when the parent is killed with SIGKILL.

Failure handling (DEVELOPERS.md "Standards": a crashing environment is restarted and its
episode recorded as failed):

- an exception inside ``reset`` or ``step`` rebuilds that slot's environment and answers a
  terminal, failed :class:`~benchmarks.base.Observation` with ``info["crashed"] = True``;
  a failed ``reset`` is retried once on a fresh environment first;
- a worker process that dies (segfault, ``os._exit``, OOM kill) is restarted; every slot
  it held answers a crashed observation for the command in flight.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import Any

from benchmarks.base import Observation, Task

__all__ = ["EnvPool", "crashed_observation"]

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def crashed_observation(error: str) -> Observation:
    """The terminal, failed observation recorded for a crashed environment."""
    return Observation(text="", instruction="", admissible_actions=None, state_key="<crashed>",
                       reward=0.0, done=True, won=False, info={"crashed": True, "error": error})


def _make_env(benchmark: str, env_cfg: Any):
    from benchmarks.registry import get_benchmark

    return get_benchmark(benchmark).make_env(env_cfg)


def _die_with_parent() -> None:
    """Make this (forked) worker exit when its parent dies, and drop inherited handlers.

    A forked child inherits the parent's signal handlers (e.g. Submitit's, which ignore
    SIGTERM) and its copies of sibling workers' pipes, so it would not notice a SIGKILL of the
    trainer. On Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` ends it with the parent.
    """
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # pragma: no cover
            pass
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except OSError:  # pragma: no cover
            pass


def _worker_main(conn, benchmark: str, env_cfg: Any, parent_pid: int) -> None:
    _die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)
    for var in _THREAD_VARS:
        os.environ[var] = "1"
    try:  # torch may already be imported in a forked child
        import torch

        torch.set_num_threads(1)
    except Exception:  # pragma: no cover
        pass
    envs: dict[int, Any] = {}

    def env_for(slot: int):
        if slot not in envs:
            envs[slot] = _make_env(benchmark, env_cfg)
        return envs[slot]

    def rebuild(slot: int) -> None:
        old = envs.pop(slot, None)
        if old is not None:
            try:
                old.close()
            except Exception:
                pass

    while True:
        try:
            msg = conn.recv()
        except (EOFError, KeyboardInterrupt):
            break
        kind, items = msg
        if kind == "close":
            break
        replies = []
        for slot, arg in items:
            try:
                if kind == "reset":
                    try:
                        obs = env_for(slot).reset(arg)
                    except Exception:
                        rebuild(slot)
                        obs = env_for(slot).reset(arg)
                else:
                    obs = env_for(slot).step(arg)
            except Exception as exc:  # environment crash: restart it, episode fails
                rebuild(slot)
                obs = crashed_observation(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
            replies.append((slot, obs))
        conn.send(replies)
    for env in envs.values():
        try:
            env.close()
        except Exception:
            pass
    conn.close()


@dataclass
class _Worker:
    process: Any
    conn: Any


class EnvPool:
    """Environments in ``num_workers`` processes (0 = as many as CPU cores).

    Args:
        benchmark: benchmark name (``benchmarks.registry``).
        env_cfg: the picklable EnvConfig passed to the benchmark's ``make_env``.
        num_workers: worker processes; 0 = ``os.cpu_count()``.

    Use as a context manager or call :meth:`close`.
    """

    def __init__(self, benchmark: str, env_cfg: Any, num_workers: int = 0):
        self.benchmark = benchmark
        self.env_cfg = env_cfg
        self.num_workers = num_workers or os.cpu_count() or 1
        self._ctx = mp.get_context("fork")
        self._workers: list[_Worker | None] = [None] * self.num_workers
        self.restarts = 0
        for w in range(self.num_workers):
            self._start(w)

    def _start(self, w: int) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker_main, args=(child, self.benchmark, self.env_cfg, os.getpid()),
                                 daemon=True, name=f"env-worker-{w}")
        proc.start()
        child.close()
        self._workers[w] = _Worker(proc, parent)

    def _run(self, kind: str, items: list[tuple[int, Any]]) -> dict[int, Observation]:
        by_worker: dict[int, list[tuple[int, Any]]] = {}
        for slot, arg in items:
            by_worker.setdefault(slot % self.num_workers, []).append((slot, arg))
        sent = []
        results: dict[int, Observation] = {}
        for w, its in by_worker.items():
            try:
                self._workers[w].conn.send((kind, its))
                sent.append(w)
            except (BrokenPipeError, OSError):
                self._restart(w)
                for slot, _ in its:
                    results[slot] = crashed_observation("environment worker process had died")
        for w in sent:
            try:
                for slot, obs in self._workers[w].conn.recv():
                    results[slot] = obs
            except (EOFError, OSError, ConnectionResetError):
                code = self._workers[w].process.exitcode
                self._restart(w)
                for slot, _ in by_worker[w]:
                    results[slot] = crashed_observation(f"environment worker process died (exit code {code})")
        return results

    def _restart(self, w: int) -> None:
        self.restarts += 1
        old = self._workers[w]
        if old is not None:
            try:
                old.conn.close()
            except Exception:
                pass
            old.process.join(timeout=1)
            if old.process.is_alive():
                old.process.kill()
        self._start(w)

    def reset(self, items: list[tuple[int, Task]]) -> dict[int, Observation]:
        """Reset slot -> task for each (slot, task); returns slot -> first observation."""
        return self._run("reset", items)

    def step(self, items: list[tuple[int, str]]) -> dict[int, Observation]:
        """Step slot with action for each (slot, action); returns slot -> observation."""
        return self._run("step", items)

    def close(self) -> None:
        for w in self._workers:
            if w is None:
                continue
            try:
                w.conn.send(("close", []))
            except Exception:
                pass
            w.process.join(timeout=2)
            if w.process.is_alive():
                w.process.kill()
        self._workers = [None] * self.num_workers

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
