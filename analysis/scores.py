"""Run records as rliable's score arrays: ``{method: (num_runs, num_tasks)}`` per environment and model size.

rliable (Agarwal et al., 2021) reports aggregate performance over a matrix of scores per method,
one row per run (here: one seed) and one column per task. The suite's tasks are the ALFWorld
task types (the per-task-type success rates of each run's held-out evaluation, in %): the
columns of :data:`TASK_TYPE_METRICS`. This module is the one place where run records become such
matrices; :mod:`g2po_bench.analysis.estimates` computes the interval estimates from them.

Each method's matrix holds the task types any of its runs has (a task type none of its runs
played is dropped) and the runs that have all of them (a run missing one is dropped), as
``ScoreDict.frames``. Comparisons between methods (probability of improvement, performance
profiles) use :meth:`ScoreDict.on_common_tasks`: the task types every method compared has.

Example::

    from g2po_bench.analysis.aggregate import metrics_long
    from g2po_bench.analysis.scores import score_dicts
    for sd in score_dicts(metrics_long(loaded.runs)):
        sd.env, sd.model_size, sd.scores   # {"GRPO": array (5, 6), "G2PO": array (5, 6), ...}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from g2po_bench.analysis.naming import (
    ALFWORLD_TASK_TYPES,
    TASK_TYPE_METRIC,
    method_sort_key,
    model_size_sort_key,
)

__all__ = ["TASK_TYPE_METRICS", "ScoreDict", "score_dicts"]

#: the tasks of the score arrays: the six ALFWorld task types' success metrics (``success_pick``, ...)
TASK_TYPE_METRICS = tuple(TASK_TYPE_METRIC[t] for t in ALFWORLD_TASK_TYPES)


@dataclass
class ScoreDict:
    """The score matrices of the methods of one environment and model size.

    Attributes:
        env, model_size: what the runs have in common.
        frames: method label -> DataFrame ``(runs, tasks)`` of scores (%), index ``run_id``,
            columns the task metrics of that method; the methods in the tables' row order.
        in_progress, short_run: method label -> whether any of its runs is still running / short.
    """

    env: str
    model_size: str
    frames: dict[str, pd.DataFrame] = field(default_factory=dict)
    in_progress: dict[str, bool] = field(default_factory=dict)
    short_run: dict[str, bool] = field(default_factory=dict)

    @property
    def scores(self) -> dict[str, np.ndarray]:
        """rliable's score dict: method label -> float array ``(num_runs, num_tasks)`` (%)."""
        return {label: f.to_numpy(dtype=float) for label, f in self.frames.items()}

    def on_common_tasks(self, labels: Sequence[str] | None = None) -> tuple[tuple[str, ...], dict[str, np.ndarray]]:
        """(tasks, score dict) of ``labels`` (default: every method) restricted to the task metrics
        all of them have, in :data:`TASK_TYPE_METRICS` order; tasks is empty when they share none."""
        labels = list(self.frames) if labels is None else list(labels)
        shared = set.intersection(*(set(self.frames[m].columns) for m in labels)) if labels else set()
        order = [str(c) for f in self.frames.values() for c in f.columns]
        tasks = tuple(sorted(shared, key=order.index))
        return tasks, {m: self.frames[m][list(tasks)].to_numpy(dtype=float) for m in labels}


def _method_frame(grp: pd.DataFrame, tasks: Sequence[str]) -> pd.DataFrame:
    """``(runs, tasks)`` of one method's rows of ``metrics_long``: its task types with a value, its
    runs with all of them."""
    mat = grp.pivot_table(index="run_id", columns="metric", values="value", aggfunc="mean")
    mat = mat[[m for m in tasks if m in mat.columns]].dropna(axis=1, how="all").dropna(axis=0, how="any")
    mat.columns = [str(c) for c in mat.columns]
    return mat


def _flag(grp: pd.DataFrame, column: str) -> bool:
    return bool(grp[column].astype(bool).any()) if column in grp else False


def score_dicts(long: pd.DataFrame, tasks: Sequence[str] = TASK_TYPE_METRICS) -> list[ScoreDict]:
    """The score dicts of ``long`` (:func:`g2po_bench.analysis.aggregate.metrics_long`), one per
    (environment, model size) with a method that has a score.

    Args:
        long: one row per (run, metric) with ``run_id, model_size, method_label, metric, value``
            (``env``, ``in_progress``, ``short_run`` optional).
        tasks: the task metrics (columns), default the ALFWorld task types.

    Returns:
        :class:`ScoreDict` list in the tables' order (environment, model size); methods in the
        tables' row order (:func:`g2po_bench.analysis.naming.method_sort_key`).
    """
    if long is None or len(long) == 0:
        return []
    sub = long[long["metric"].isin(list(tasks))]
    if "env" not in sub:
        sub = sub.assign(env="")
    out = []
    for (env, size), env_grp in sub.groupby(["env", "model_size"], sort=False, dropna=False):
        sd = ScoreDict(str(env), str(size))
        labels = sorted({str(m) for m in env_grp["method_label"]}, key=method_sort_key)
        for label in labels:
            grp = env_grp[env_grp["method_label"].astype(str) == label]
            frame = _method_frame(grp, tasks)
            if frame.size == 0:
                continue
            sd.frames[label] = frame
            sd.in_progress[label] = _flag(grp, "in_progress")
            sd.short_run[label] = _flag(grp, "short_run")
        if sd.frames:
            out.append(sd)
    return sorted(out, key=lambda s: (s.env, model_size_sort_key(s.model_size)))
