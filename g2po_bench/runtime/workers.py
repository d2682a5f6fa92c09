"""A pool of environments stepped in parallel worker processes.

Each worker process holds the environments of some slots (slot i lives in worker i mod W)
and executes the reset/step commands for its slots in order; the workers run in parallel. The
pool is given the benchmark itself (:func:`g2po_bench.benchmarks.registry.get_benchmark`), whose
``make_env`` builds each slot's environment: the runtime looks no benchmark up by name, so the
benchmarks' harness can import it from below.

- **CPUs**: the default number of workers is the number of CPUs this process may use
  (:func:`g2po_bench.runtime.cpus.usable_cpus`: affinity, SLURM, cgroup quota), and every BLAS/OpenMP
  pool inside a worker runs one thread (:func:`g2po_bench.runtime.cpus.limit_thread_pools`).
- **Signals**: workers follow :mod:`g2po_bench.runtime.shutdown`: they ignore the job's signals
  (SIGTERM, SIGINT, SIGUSR1/2, ...) and die only with their parent (``PR_SET_PDEATHSIG``, even
  when the parent is killed with SIGKILL). A pending stop request of the trainer makes
  :meth:`EnvPool.reset`/:meth:`EnvPool.step` raise :class:`g2po_bench.runtime.shutdown.ShutdownRequested`
  before any command is sent, so the iteration in flight is abandoned, never half-recorded.
- **Memory**: ``max_episodes`` recycles a worker (a fresh process) once it has started that
  many episodes, at the next reset when none of its slots is in the middle of an episode, so
  no episode is lost and what an environment library keeps per game is released with the
  process (ALFWorld's engine bounds what it keeps per game itself,
  :mod:`g2po_bench.benchmarks.alfworld.engine` "Memory"; recycling bounds anything else).

Failure handling (DEVELOPERS.md "Standards": a crashing environment is restarted and its
episode recorded as failed):

- an exception inside ``reset`` or ``step`` rebuilds that slot's environment and answers a
  terminal, failed :class:`~g2po_bench.core.protocol.Observation` with ``info["crashed"] = True``;
  a failed ``reset`` is retried once on a fresh environment first;
- a worker process that dies (segfault, ``os._exit``, OOM kill) is restarted; every slot
  it held answers a crashed observation for the command in flight;
- :meth:`EnvPool.restart` restarts every worker (the trainer does so before retrying an
  iteration where most episodes crashed).
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import multiprocessing.util  # noqa: F401 - its exit handler must be registered before ours
import os
import traceback
import weakref
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from g2po_bench.core.protocol import Environment, Observation, Task, crashed_observation
from g2po_bench.runtime.cpus import limit_thread_pools, usable_cpus
from g2po_bench.runtime.shutdown import apply_worker_policy, check_stop

__all__ = ["EnvPool", "EnvFactory"]


@runtime_checkable
class EnvFactory(Protocol):
    """What the pool needs of a benchmark (:class:`g2po_bench.benchmarks.base.Benchmark` has both)."""

    def make_env(self, env_cfg: Any) -> Environment:
        """A fresh environment for ``env_cfg`` (called in the worker processes)."""

    def preload_worker_modules(self) -> None:
        """Import, before the workers are forked, what every worker would import itself."""


def _preload(benchmark: EnvFactory) -> None:
    """The benchmark's :meth:`~g2po_bench.benchmarks.base.Benchmark.preload_worker_modules`, run
    before the workers are forked so that they inherit the imported modules. A failed import is
    left to the workers, whose first reset reports it as a crashed episode with the reason."""
    try:
        benchmark.preload_worker_modules()
    except ImportError:
        pass


def _worker_main(conn, benchmark: EnvFactory, env_cfg: Any, parent_pid: int) -> None:
    apply_worker_policy(parent_pid)  # ignore the job's signals, die with the parent
    limit_thread_pools(1)
    envs: dict[int, Any] = {}

    def env_for(slot: int):
        if slot not in envs:
            envs[slot] = benchmark.make_env(env_cfg)
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
        if kind == "probe":  # for tests and diagnostics: pid, RSS, thread pools
            conn.send(_probe())
            continue
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


def _probe() -> dict[str, Any]:
    from threadpoolctl import threadpool_info

    rss = 0
    try:
        with open("/proc/self/statm") as fh:
            rss = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        pass
    return {"pid": os.getpid(), "rss_bytes": rss,
            "thread_pools": [{"internal_api": p.get("internal_api"), "num_threads": p.get("num_threads")}
                             for p in threadpool_info()]}


_LIVE_POOLS: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_live_pools() -> None:
    """Close the pools still open at interpreter exit. Registered after multiprocessing's own
    exit handler, so it runs first: that handler sends SIGTERM to daemonic children and joins
    them, which would wait forever for workers that ignore SIGTERM."""
    for pool in list(_LIVE_POOLS):
        try:
            pool.close()
        except Exception:
            pass


@dataclass
class _Worker:
    process: Any
    conn: Any
    episodes: int = 0  # resets served since the process started


def _ask_to_close(worker: _Worker) -> None:
    """Send ``close`` to a worker (nothing when its pipe is already broken)."""
    try:
        worker.conn.send(("close", []))
    except Exception:
        pass


def _end_process(worker: _Worker, timeout: float) -> None:
    """Wait ``timeout`` seconds for the worker process to exit, then kill it (and wait 2 s more)."""
    worker.process.join(timeout=timeout)
    if worker.process.is_alive():
        worker.process.kill()
        worker.process.join(timeout=2)


def _close_pipe(worker: _Worker) -> None:
    """Close the pool's end of the worker's pipe (errors ignored: the worker is gone)."""
    try:
        worker.conn.close()
    except Exception:
        pass


def _shutdown_workers(workers: list) -> None:
    """Close (then kill) the worker processes (also when a pool is garbage-collected unclosed):
    every worker is asked to close first, so that they exit side by side."""
    for w in workers:
        if w is not None:
            _ask_to_close(w)
    for w in workers:
        if w is not None:
            _end_process(w, timeout=2)
            _close_pipe(w)
    workers[:] = [None] * len(workers)


class EnvPool:
    """Environments in ``num_workers`` processes (see the module docstring).

    Args:
        benchmark: the benchmark (``g2po_bench.benchmarks.registry.get_benchmark(name)``, or any
            :class:`EnvFactory`); the forked workers call its ``make_env``.
        env_cfg: the picklable EnvConfig passed to the benchmark's ``make_env``.
        num_workers: worker processes; 0 = :func:`g2po_bench.runtime.cpus.usable_cpus` (the CPUs this
            process may use: affinity, ``SLURM_CPUS_PER_TASK``, cgroup quota).
        max_episodes: recycle a worker after it started this many episodes (resets); 0 = never.
            Default: ``env_cfg.worker_max_episodes`` when the config has it, else 0.

    Attributes:
        restarts: workers restarted after a crash or by :meth:`restart`.
        recycled: workers replaced because of ``max_episodes``.

    Raises:
        ValueError: ``num_workers`` or ``max_episodes`` is negative.
        TypeError: ``benchmark`` is a name or another object without ``make_env`` (look the
            benchmark up with ``get_benchmark(name)`` first).

    Use as a context manager or call :meth:`close`.
    """

    def __init__(self, benchmark: EnvFactory, env_cfg: Any, num_workers: int = 0, max_episodes: int | None = None):
        if not isinstance(benchmark, EnvFactory):
            raise TypeError(f"EnvPool needs the benchmark itself, got {benchmark!r}: pass "
                            "g2po_bench.benchmarks.registry.get_benchmark(name)")
        if num_workers < 0:
            raise ValueError(f"num_workers={num_workers}: must be >= 0 (0 = one per usable CPU)")
        if max_episodes is None:
            max_episodes = int(getattr(env_cfg, "worker_max_episodes", 0) or 0)
        if max_episodes < 0:
            raise ValueError(f"max_episodes={max_episodes}: must be >= 0 (0 = never recycle workers)")
        self.benchmark = benchmark
        self.env_cfg = env_cfg
        self.num_workers = num_workers or usable_cpus()
        self.max_episodes = max_episodes
        self._ctx = mp.get_context("fork")
        self._workers: list[_Worker | None] = [None] * self.num_workers
        self._in_episode: set[int] = set()  # slots whose episode has not ended
        self.restarts = 0
        self.recycled = 0
        self._finalizer = weakref.finalize(self, _shutdown_workers, self._workers)
        self._finalizer.atexit = False  # _close_live_pools runs at exit, before multiprocessing's
        _LIVE_POOLS.add(self)
        _preload(benchmark)
        for w in range(self.num_workers):
            self._start(w)

    def _start(self, w: int) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker_main, args=(child, self.benchmark, self.env_cfg, os.getpid()),
                                 daemon=True, name=f"env-worker-{w}")
        proc.start()
        child.close()
        self._workers[w] = _Worker(proc, parent)

    def _stop(self, w: int) -> None:
        old = self._workers[w]
        if old is None:
            return
        _ask_to_close(old)
        _end_process(old, timeout=2)
        _close_pipe(old)
        self._workers[w] = None

    def _recycle_due(self, by_worker: dict[int, list[tuple[int, Any]]]) -> None:
        """Before a reset: replace workers past ``max_episodes`` whose slots are all between
        episodes (the slots being reset now start new episodes on the fresh process)."""
        if not self.max_episodes:
            return
        for w, its in by_worker.items():
            worker = self._workers[w]
            if worker is None or worker.episodes < self.max_episodes:
                continue
            resetting = {slot for slot, _ in its}
            busy = [s for s in self._in_episode if s % self.num_workers == w and s not in resetting]
            if busy:
                continue  # an episode is running there: wait for a later reset
            self._stop(w)
            self._start(w)
            self.recycled += 1

    def _run(self, kind: str, items: list[tuple[int, Any]]) -> dict[int, Observation]:
        check_stop()  # a stop request abandons the work in flight before anything is sent
        by_worker: dict[int, list[tuple[int, Any]]] = {}
        for slot, arg in items:
            by_worker.setdefault(slot % self.num_workers, []).append((slot, arg))
        if kind == "reset":
            self._recycle_due(by_worker)
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
                if kind == "reset":
                    self._workers[w].episodes += len(by_worker[w])
            except (EOFError, OSError, ConnectionResetError):
                code = self._workers[w].process.exitcode
                self._restart(w)
                for slot, _ in by_worker[w]:
                    results[slot] = crashed_observation(f"environment worker process died (exit code {code})")
        for slot, obs in results.items():
            if obs.done:
                self._in_episode.discard(slot)
            else:
                self._in_episode.add(slot)
        return results

    def _restart(self, w: int) -> None:
        self.restarts += 1
        old = self._workers[w]
        if old is not None:
            _close_pipe(old)
            _end_process(old, timeout=1)
        self._workers[w] = None
        for s in [s for s in self._in_episode if s % self.num_workers == w]:
            self._in_episode.discard(s)  # its environments are gone
        self._start(w)

    def restart(self) -> None:
        """Restart every worker process (fresh environments; episodes in flight are lost)."""
        for w in range(self.num_workers):
            self._stop(w)
            self.restarts += 1
            self._start(w)
        self._in_episode.clear()

    def reset(self, items: list[tuple[int, Task]]) -> dict[int, Observation]:
        """Reset slot -> task for each (slot, task); returns slot -> first observation.

        Raises:
            g2po_bench.runtime.shutdown.ShutdownRequested: a stop was requested (nothing was sent).
        """
        return self._run("reset", items)

    def step(self, items: list[tuple[int, str]]) -> dict[int, Observation]:
        """Step slot with action for each (slot, action); returns slot -> observation.

        Raises:
            g2po_bench.runtime.shutdown.ShutdownRequested: a stop was requested (nothing was sent).
        """
        return self._run("step", items)

    def probe(self) -> list[dict[str, Any]]:
        """Per worker: ``{"pid", "rss_bytes" (resident memory, bytes), "thread_pools": [{
        "internal_api" (openblas, mkl, openmp, ...), "num_threads"}]}`` (diagnostics, tests)."""
        out = []
        for w in self._workers:
            w.conn.send(("probe", []))
            out.append(w.conn.recv())
        return out

    def worker_pids(self) -> list[int]:
        """The process ids of the current workers."""
        return [w.process.pid for w in self._workers if w is not None]

    def close(self) -> None:
        """Close every worker (they exit; killed after 2 s if they do not)."""
        _shutdown_workers(self._workers)
        self._in_episode.clear()
        _LIVE_POOLS.discard(self)

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
