"""The signal policy of a training process and its environment workers (the one place it is written).

A training job is signalled by whoever runs it: SLURM sends ``SIGTERM`` on ``scancel`` (and on
``g2po sweep cancel``), the preemption signal (``SIGUSR2``, or ``$SUBMITIT_PREEMPT_SIGNAL``)
``signal_delay_s`` before a time limit or at preemption, and ``SIGKILL`` when its grace time
(``KillWait``) is over; it signals *every* process of the job step, workers included. On the
local executor ``g2po sweep cancel`` sends ``SIGTERM`` to the job's Submitit controller, which
passes it on to the job process only (Submitit's own ``LocalJob.cancel`` sends ``SIGINT``); a
terminal's Ctrl-C reaches every process of the foreground group. The policy:

**Environment workers** (:func:`apply_worker_policy`, called first thing in every worker) ignore
the job's signals (:data:`JOB_SIGNALS`: SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2 and the
preemption signal) and die only with their parent: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` ends a
worker when the trainer ends, however it ends (even by SIGKILL), and
:class:`g2po_bench.runtime.workers.EnvPool` closes or kills its workers itself (also at interpreter
exit). So a shutdown never shows up as crashed episodes.

**Any other process the trainer forks** (e.g. the game generator's process pool) gets, from the
fork hook of :func:`install_fork_hook`, SIGUSR1/SIGUSR2/the preemption signal ignored (an
inherited Submitit handler would checkpoint and requeue the job from the child) and the Python
handlers it inherited for SIGTERM/SIGINT (Submitit's, the trainer's stop request) replaced by
the defaults, so ``multiprocessing``'s ``terminate()`` still ends it.

**The trainer** (:class:`GracefulShutdown`, around the whole run) turns the first SIGTERM, SIGINT
or preemption signal into a *stop request* instead of dying at an arbitrary point:

1. the handler only records the request (a second SIGINT stops at once with KeyboardInterrupt);
2. the iteration in flight is abandoned at the next environment command
   (:func:`check_stop` in :meth:`g2po_bench.runtime.workers.EnvPool.reset`/``step``) or at the trainer's
   own check points, *without recording it*: no metrics line, no checkpoint of it; an iteration
   whose rollouts were complete before the request (the policy update was running) is finished
   and recorded like any other, since nothing in it was touched by the shutdown;
3. what is complete is checkpointed if it is not yet (the state at the end of the last recorded
   iteration, when the update of the abandoned one had not started), ``status.json`` says
   ``interrupted``, and ``metrics.jsonl`` keeps only the checkpointed iterations;
4. exit: for the preemption signal, the handler that was installed before (Submitit's
   checkpoint-and-requeue) is called now, at this safe point, and requeues the job; otherwise
   :class:`Interrupted` (a ``SystemExit`` with status ``128 + signal``: 143 for SIGTERM, 140
   for SIGUSR2, 130 for SIGINT) ends the process. ``status.json`` is not ``done``, so ``g2po
   sweep launch`` resubmits the run and ``resume=true`` continues from the checkpoint; the run's
   metrics then equal an uninterrupted run's with the same seed (timings aside).

Signals whose disposition is ``SIG_IGN`` when the trainer's guard starts (e.g. SIGINT of
``nohup g2po train ... &``, which a shell starts with SIGINT ignored) stay ignored: stop such a
run with SIGTERM (``kill PID``). The guard is a no-op outside the main thread (Python handles
signals there only).

**A sweep job** (:mod:`g2po_bench.sweeps.job`) holds a second guard around all its runs
(``GracefulShutdown(take_ignored=True)``): SIGTERM and SIGINT are taken *whatever disposition
the job inherited* (a job launched from a background shell starts with SIGINT ignored,
Submitit bypasses SIGTERM), so the scheduler's or ``g2po sweep cancel``'s signal always stops
the job: a request that arrives between runs (or while a run is starting, before the trainer's
guard is entered) is kept, the trainer's guard inherits it and stops at its first check point,
and no further run starts. Guards nest: the inner one hands a pending request on and restores
the outer one's handlers when it ends.

**Processes forked for a pool** (the ALFWorld generator's workers) die with their parent too
(:func:`die_with_parent`, their pool initializer): a trainer killed with SIGKILL leaves no worker
behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = [
    "JOB_SIGNALS",
    "STOP_SIGNALS",
    "GracefulShutdown",
    "Interrupted",
    "ShutdownRequested",
    "apply_worker_policy",
    "check_stop",
    "die_with_parent",
    "install_fork_hook",
    "preempt_signal",
    "stop_requested",
]


def preempt_signal() -> signal.Signals:
    """The preemption/time-limit signal: ``$SUBMITIT_PREEMPT_SIGNAL`` (name without ``SIG``,
    Submitit's variable) or SIGUSR2.

    Raises:
        ValueError: the variable names no signal of this platform.
    """
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    sig = getattr(signal, "SIG" + name, None)
    if sig is None:
        raise ValueError(f"SUBMITIT_PREEMPT_SIGNAL={name!r} is not a signal name (e.g. USR2, USR1, TERM)")
    return sig


def _job_signals() -> tuple[signal.Signals, ...]:
    sigs = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2]
    with contextlib.suppress(ValueError):
        p = preempt_signal()
        if p not in sigs and p not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCONT):
            sigs.append(p)
    return tuple(sigs)


#: The signals a job's processes receive from the scheduler or the terminal; workers ignore them.
JOB_SIGNALS: tuple[signal.Signals, ...] = _job_signals()
#: The signals the trainer turns into a stop request (besides the preemption signal).
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)


class ShutdownRequested(BaseException):  # noqa: N818 - a request, not an error
    """Raised inside the trainer at a check point after a stop signal (not an ``Exception``, so
    no ``except Exception`` in between swallows it). ``signum``: the signal received."""

    def __init__(self, signum: int):
        super().__init__(f"{signal.Signals(signum).name} received: stopping")
        self.signum = int(signum)


class Interrupted(SystemExit):
    """Ends a training process that stopped on a signal, with exit status ``128 + signum``
    (the shell's convention for death by that signal; the run folder says ``interrupted``)."""

    def __init__(self, signum: int, message: str = ""):
        super().__init__(128 + int(signum))
        self.signum = int(signum)
        self.message = message

    def __str__(self) -> str:
        return self.message or f"interrupted by {signal.Signals(self.signum).name}"


# ---------------------------------------------------------------------------- workers
def _set_pdeathsig() -> None:
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except OSError:  # pragma: no cover
            pass


def die_with_parent(parent_pid: int | None = None) -> None:
    """Make this (forked) process die with its parent: on Linux ``PR_SET_PDEATHSIG`` = SIGKILL
    (sent when the parent ends, however it ends, even by SIGKILL). With ``parent_pid``, exits at
    once (``os._exit(0)``) when the parent is already gone (it died before the prctl took
    effect). Used by :func:`apply_worker_policy` and as the initializer of process pools
    (``ProcessPoolExecutor(initializer=die_with_parent, initargs=(os.getpid(),))``), whose workers
    otherwise outlive a killed parent, blocked on their task queue."""
    _set_pdeathsig()
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(0)


def apply_worker_policy(parent_pid: int | None = None) -> None:
    """Make this (forked) process ignore the job's signals and die with its parent.

    Called first in every environment worker. Replaces handlers inherited from the parent
    (Submitit's, the trainer's) with ``SIG_IGN`` for :data:`JOB_SIGNALS`, and on Linux sets
    ``PR_SET_PDEATHSIG`` to SIGKILL (:func:`die_with_parent`, which also exits at once when
    ``parent_pid`` is given and the parent is already gone).
    """
    for sig in JOB_SIGNALS:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_IGN)
    die_with_parent(parent_pid)


_FORK_HOOK_INSTALLED = False


def _quiet_child_after_fork() -> None:
    _STATE.reset()
    ignored = {signal.SIGUSR1, signal.SIGUSR2}
    with contextlib.suppress(ValueError):
        ignored.add(preempt_signal())
    for sig in ignored:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_IGN)
    defaults = {signal.SIGTERM: signal.SIG_DFL, signal.SIGHUP: signal.SIG_DFL,
                signal.SIGINT: signal.default_int_handler}
    for sig, default in defaults.items():
        if sig in ignored:
            continue
        with contextlib.suppress(OSError, ValueError, TypeError):
            current = signal.getsignal(sig)
            if callable(current) and current is not signal.default_int_handler:
                signal.signal(sig, default)  # an inherited Python handler (Submitit's, the trainer's)


def install_fork_hook() -> None:
    """Every process forked from now on by this process starts with the preemption signal
    (and SIGUSR1/2) ignored and Python's default SIGTERM/SIGINT behaviour
    (``os.register_at_fork``; once per process; see the module docstring). Without it a forked
    child inherits Submitit's preemption handler and would checkpoint and requeue the job
    itself. Environment workers then ignore every job signal (:func:`apply_worker_policy`)."""
    global _FORK_HOOK_INSTALLED
    if _FORK_HOOK_INSTALLED or not hasattr(os, "register_at_fork"):
        return
    os.register_at_fork(after_in_child=_quiet_child_after_fork)
    _FORK_HOOK_INSTALLED = True


# ---------------------------------------------------------------------------- trainer
class _State:
    """The process-wide stop request (set by the handler, read by :func:`check_stop`)."""

    def __init__(self) -> None:
        self.active = 0
        self.signum: int | None = None

    def reset(self) -> None:
        self.active = 0
        self.signum = None


_STATE = _State()


def stop_requested() -> int | None:
    """The signal of a pending stop request of this process, or None."""
    return _STATE.signum if _STATE.active else None


def check_stop() -> None:
    """Raise :class:`ShutdownRequested` if a stop was requested while a
    :class:`GracefulShutdown` is active in this process; otherwise do nothing (cheap)."""
    if _STATE.active and _STATE.signum is not None:
        raise ShutdownRequested(_STATE.signum)


#: What the trainer's guard does after a stop request (its log line).
TRAINER_STOP = ("the iteration in flight is finished or abandoned without being recorded, what is complete is "
                "checkpointed, then the process exits")


class GracefulShutdown:
    """Context manager: the trainer's (and a sweep job's) side of the policy (module docstring).

    ``with GracefulShutdown(log=print) as guard:`` installs the handlers (main thread only),
    and on exit restores the previous ones. After catching :class:`ShutdownRequested` and
    saving what is complete, call :meth:`exit` to leave the process the policy's way. Guards
    nest: a request pending when an inner guard starts is kept (the inner guard's first check
    point acts on it), and it stays pending after the inner guard ends while an outer one is
    active.

    Args:
        log: called with one line when a signal arrives (e.g. ``console.print``); the default
            writes to stderr.
        signals: the signals turned into a stop request; default SIGTERM, SIGINT and the
            preemption signal (:func:`preempt_signal`).
        take_ignored: also take a signal whose disposition is ``SIG_IGN`` when the guard starts
            (a sweep job: the launcher's shell, not the job, chose to ignore it); by default such
            a signal stays ignored (``nohup g2po train ... &``).
        action: what happens after a request, for the log line.
    """

    def __init__(self, log: Callable[[str], Any] | None = None, *,
                 signals: tuple[int, ...] | None = None, take_ignored: bool = False,
                 action: str = TRAINER_STOP):
        self.log = log or (lambda m: print(m, file=sys.stderr, flush=True))
        self.previous: dict[int, Any] = {}
        self.installed = False
        self._signals = tuple(signals) if signals is not None else None
        self.take_ignored = take_ignored
        self.action = action

    @property
    def signals(self) -> tuple[signal.Signals, ...]:
        if self._signals is not None:
            return tuple(signal.Signals(s) for s in self._signals)
        sigs = list(STOP_SIGNALS)
        p = preempt_signal()
        if p not in sigs:
            sigs.append(p)
        return tuple(sigs)

    def __enter__(self) -> GracefulShutdown:
        install_fork_hook()
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in self.signals:
            prev = signal.getsignal(sig)
            if prev is signal.SIG_IGN and not self.take_ignored:
                continue  # ignored by whoever started us: keep it so
            self.previous[sig] = prev
            signal.signal(sig, self._on_signal)
        if not _STATE.active:
            _STATE.signum = None  # a request of an outer guard is kept (nested guards)
        _STATE.active += 1
        self.installed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.installed:
            return
        for sig, prev in self.previous.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        _STATE.active = max(0, _STATE.active - 1)
        if not _STATE.active:
            _STATE.signum = None
        self.installed = False

    def _on_signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if _STATE.signum is not None:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            # a later preemption signal wins over a plain SIGTERM: the job must be requeued
            if signum == preempt_signal():
                _STATE.signum = signum
            return
        _STATE.signum = signum
        self.log(f"{name} received: {self.action}"
                 + (" (Ctrl-C again to stop at once)" if signum == signal.SIGINT else ""))

    @property
    def requested(self) -> int | None:
        """The signal of the pending stop request, or None."""
        return _STATE.signum if self.installed else None

    def exit(self, message: str = "") -> None:
        """Leave the process after a stop request (never returns).

        For the preemption signal whose previous handler is a Python callable (Submitit's
        checkpoint-and-requeue), that handler is called now (it requeues and raises
        ``SystemExit``); otherwise raises :class:`Interrupted` (exit status 128 + signal).
        """
        signum = _STATE.signum if _STATE.signum is not None else signal.SIGTERM
        prev = self.previous.get(signum)
        self.__exit__(None, None, None)
        if signum == preempt_signal() and callable(prev):
            prev(signum, None)
        raise Interrupted(signum, message)

