"""What a user sees of a long run: one line per phase or iteration, bars on a terminal.

Every phase longer than a few seconds (expert replay, warm start, evaluation, each RL
iteration) reports progress. On a terminal it is a rich progress bar; without one (a log file,
a SLURM job) the same information arrives as plain lines: one when a phase starts, one when it
ends (with its seconds and result), and one at most every ``heartbeat_s`` seconds in between,
so ``tail -f`` of a log is readable. The seconds of each phase are added up for the end-of-run
summary (:meth:`RunProgress.summary_lines`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["RunProgress", "PhaseHandle", "format_rate_ci"]


def format_rate_ci(ev: dict[str, Any] | None) -> str:
    """``"41.7 % [33.3, 50.8] (n=120)"`` from an EVAL record with ``success_ci`` (fractions); with
    a score (WebShop's mean reward x 100) it follows: ``"..., score 55.1 [50.2, 60.0]"``."""
    if not ev:
        return "n/a"
    ci = ev.get("success_ci")
    ci_txt = f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else ""
    out = f"{100 * ev['success_rate']:.1f} %{ci_txt} (n={ev['num_episodes']})"
    if ev.get("score") is not None and ev.get("episode_scores") is not None:
        sci = ev.get("score_ci")
        out += f", score {ev['score']:.1f}" + (f" [{sci[0]:.1f}, {sci[1]:.1f}]" if sci else "")
    return out


class PhaseHandle:
    """Progress of one phase: :meth:`update` with the amount done so far."""

    def __init__(self, owner: RunProgress, name: str, total: float | None):
        self.owner, self.name, self.total = owner, name, total
        self.done: float = 0
        self.info = ""
        self.t0 = time.time()
        self._last_line = self.t0
        self._task = None

    def update(self, done: float, info: str = "") -> None:
        """Set the amount done (same unit as ``total``) and a short status text."""
        self.done, self.info = done, info
        o = self.owner
        if o._bar is not None and self._task is not None:
            o._bar.update(self._task, completed=done, description=f"{self.name} {info}".strip())
        elif o.enabled and time.time() - self._last_line >= o.heartbeat_s:
            self._last_line = time.time()
            total = f"/{self.total:g}" if self.total else ""
            o.log(f"  {self.name}: {done:g}{total} {info} ({time.time() - self.t0:.0f} s)".rstrip())


class RunProgress:
    """Phase timing and progress display for one run.

    Args:
        console: a ``rich.console.Console`` (or None: nothing is printed, timings are still
            kept).
        enabled: show progress (``cfg.progress``); False prints only phase lines.
        heartbeat_s: seconds between progress lines when there is no terminal.
    """

    def __init__(self, console=None, enabled: bool = True, heartbeat_s: float = 30.0):
        self.console = console
        self.enabled = enabled and console is not None
        self.heartbeat_s = heartbeat_s
        self.live = self.enabled and bool(getattr(console, "is_terminal", False))
        self.seconds: dict[str, float] = {}
        self._bar: Progress | None = None

    def log(self, msg: str) -> None:
        """Print one line (above the bar on a terminal)."""
        if self.console is not None:
            self.console.print(msg, highlight=False, markup=False, soft_wrap=True)

    @contextlib.contextmanager
    def phase(self, name: str, total: float | None = None, key: str | None = None,
              announce: bool = True) -> Iterator[PhaseHandle]:
        """Time a phase (seconds added to ``self.seconds[key or name]``) and show its progress.

        Without a terminal, a phase with a ``total`` prints ``"<name> ..."`` when it starts
        (unless ``announce`` is False, e.g. for RL iterations that print one line when done)."""
        handle = PhaseHandle(self, name, total)
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console, transient=True)
            self._bar.__enter__()
            handle._task = self._bar.add_task(name, total=total)
        elif self.enabled and announce and (total or 0) > 0:
            self.log(f"{name} ...")
        try:
            yield handle
        finally:
            if self._bar is not None:
                self._bar.__exit__(None, None, None)
                self._bar = None
            dt = time.time() - handle.t0
            k = key or name
            self.seconds[k] = self.seconds.get(k, 0.0) + dt

    def summary_lines(self, evals: dict[str, Any] | None) -> list[str]:
        """The end-of-run summary: success before RL / final / best (with CIs) and seconds per phase."""
        lines = []
        if evals:
            best = evals.get("best") or {}
            lines.append(f"held-out success before RL: {format_rate_ci(evals.get('before'))}")
            lines.append(f"held-out success final:     {format_rate_ci(evals.get('final'))}")
            lines.append(f"held-out success best:      {format_rate_ci(best)} at iteration {best.get('iteration')}")
            at_t = evals.get("at_train_temperature") or {}
            if at_t:
                lines.append(f"held-out success at the training temperature {at_t['temperature']:g}: "
                             f"before RL {format_rate_ci(at_t.get('before'))}, final {format_rate_ci(at_t.get('final'))}")
        total = sum(self.seconds.values())
        parts = ", ".join(f"{k} {v:.0f} s" for k, v in self.seconds.items())
        lines.append(f"time: {total:.0f} s ({parts})")
        return lines
