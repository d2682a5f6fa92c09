"""The pictures a run sends to its trackers (TensorBoard, W&B): drawn with the report's own code.

:class:`AnalysisPictures` implements :class:`g2po_bench.core.tracking.RunPictures` for the run
lifecycle (:mod:`g2po_bench.algorithms.backends.lifecycle`), which sends the PNG files it returns:

- :meth:`~AnalysisPictures.state_graph`: one task group's state graph at an iteration, as
  ``g2po graph`` draws it (:func:`g2po_bench.analysis.graph_cli.draw_group`, PNG only);
- :meth:`~AnalysisPictures.learning_curve`: held-out success (with its 95 % CI band over seeds,
  none for one run) and training success against the iteration, as ``g2po report`` draws it
  (:func:`g2po_bench.analysis.figures.plot_learning_curves` on :func:`g2po_bench.analysis.load.load_runs`
  of the one run folder).

Drawing never stops a run: a picture that fails to draw is reported with one line and skipped.
"""

from __future__ import annotations

import warnings
from pathlib import Path

__all__ = ["AnalysisPictures"]


class AnalysisPictures:
    """Tracker pictures from the analysis package (see the module docstring).

    Args:
        log: ``log(line)`` for a picture that could not be drawn (default: a Python warning).
    """

    def __init__(self, log=None):
        self.log = log

    def _skip(self, what: str, exc: Exception) -> None:
        msg = f"tracker picture {what} not drawn: {type(exc).__name__}: {exc}"
        if self.log is not None:
            self.log(msg)
        else:
            warnings.warn(msg, RuntimeWarning, stacklevel=3)

    def state_graph(self, run_root: Path, iteration: int, group: int, out: Path) -> Path | None:
        """Task group ``group`` (-1: :func:`g2po_bench.analysis.state_graph.choose_group`) of
        iteration ``iteration``'s step table, drawn to ``out`` (PNG); None when the iteration has
        no step table or the drawing fails."""
        from g2po_bench.analysis.graph_cli import (
            draw_group,  # lazy: matplotlib only when a picture is due
        )

        try:
            drawing = draw_group(run_root, iteration=iteration, group=None if group < 0 else group, out=out,
                                 html=False)
        except (FileNotFoundError, ValueError) as exc:
            self._skip(f"state graph of iteration {iteration}", exc)
            return None
        return drawing.png

    def learning_curve(self, run_root: Path, out: Path) -> Path | None:
        """The run's learning curves (held-out and training success, %) drawn to ``out`` (PNG);
        None when the run has no evaluation or the drawing fails."""
        # lazy: matplotlib and seaborn only when a picture is due (the CLI creates this object at start-up)
        from g2po_bench.analysis.figures import plot_learning_curves
        from g2po_bench.analysis.load import load_runs

        try:
            loaded = load_runs(run_root)
            png = plot_learning_curves(loaded.evals, out, curves=loaded.curves, include_variants=True)
        except (FileNotFoundError, ValueError, KeyError) as exc:
            self._skip("learning curve", exc)
            return None
        return None if png is None else Path(png)
