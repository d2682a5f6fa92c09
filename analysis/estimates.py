"""rliable's interval estimates of score arrays: aggregate metrics, probability of improvement, performance profiles.

The statistics are rliable's (Agarwal et al., 2021, "Deep Reinforcement Learning at the Edge of
the Statistical Precipice", NeurIPS; the ``rliable`` package, ``rliable.metrics``), computed on
the score arrays of :mod:`g2po_bench.analysis.scores` (one row per seed, one column per ALFWorld
task type, success in %):

- **aggregate metrics** (:func:`aggregate_estimates`): the interquartile mean (IQM: the mean of
  the middle 50 % of all run x task scores, ``rliable.metrics.aggregate_iqm``), the median and
  the mean of the per-task means (``aggregate_median``, ``aggregate_mean``). rliable's optimality
  gap is left out: with success rates in % and the threshold 100 it is 100 minus the mean.
- **probability of improvement** (:func:`improvement_probabilities`): P(X > Y), the probability
  that a run of method X scores above a run of method Y on a task drawn at random, ties counting
  one half (the Mann-Whitney U statistic over ``runs_X x runs_Y``, averaged over the tasks both
  share; ``rliable.metrics.probability_of_improvement``). Runs count as independent samples: the
  pairing by seed of :func:`g2po_bench.analysis.aggregate.method_differences` is not used.
- **performance profiles** (:func:`performance_profiles`): the fraction of all run x task scores
  above a threshold tau, for tau from 0 to 100 % (rliable's score distributions).

Intervals are rliable's stratified percentile bootstrap (runs resampled with replacement within
each task; for a probability of improvement each method's runs independently), drawn by the
suite's seeded :func:`g2po_bench.core.stats.stratified_bootstrap_ci`. rliable's own
``rliable.library`` (``get_interval_estimates``) is not called: rliable 1.2 pins ``arch < 8``,
which fails to import with pandas 3, and its ``StratifiedBootstrap`` draws from numpy's global
random state. So each statistic is applied to all resamples at once by a vectorised twin of the
rliable function (the ``_RESAMPLED`` functions below, equal to rliable's on every resample:
``tests/test_analysis_estimates.py``); point estimates call ``rliable.metrics`` itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import scipy.stats
from rliable import metrics as rly_metrics

from g2po_bench.analysis.scores import ScoreDict
from g2po_bench.core.stats import DEFAULT_N_BOOT, stratified_bootstrap_ci

__all__ = [
    "AGGREGATE_METRICS",
    "aggregate_estimates",
    "improvement_probabilities",
    "performance_profiles",
    "PROFILE_TAUS",
]

#: the aggregate metrics reported, in their column order: name -> rliable's function of a ``(runs, tasks)`` matrix
AGGREGATE_METRICS: dict[str, Callable[[np.ndarray], float]] = {
    "iqm": rly_metrics.aggregate_iqm,
    "median": rly_metrics.aggregate_median,
    "mean": rly_metrics.aggregate_mean,
}

#: thresholds of the performance profiles (success in %)
PROFILE_TAUS = np.linspace(0.0, 100.0, 101)


# ---------------------------------------------------------------------------- rliable's statistics, resampled
def _iqm_resampled(r: np.ndarray) -> np.ndarray:
    """``aggregate_iqm`` of each resample of ``r`` ``(n_boot, runs, tasks)``: a 25 % trimmed mean of all entries."""
    return scipy.stats.trim_mean(r.reshape(len(r), -1), 0.25, axis=1)


def _median_resampled(r: np.ndarray) -> np.ndarray:
    """``aggregate_median``: the median over tasks of the per-task means over runs."""
    return np.median(r.mean(axis=1), axis=1)


def _mean_resampled(r: np.ndarray) -> np.ndarray:
    """``aggregate_mean``: the mean over tasks of the per-task means over runs."""
    return r.mean(axis=1).mean(axis=1)


def _improvement_resampled(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``probability_of_improvement(x, y)`` of each resample: ``x`` ``(n_boot, m, tasks)``, ``y``
    ``(n_boot, n, tasks)``; per task P(X > Y) + P(X = Y) / 2 over the m x n pairs, then the mean over tasks."""
    xs, ys = x[:, :, None, :], y[:, None, :, :]
    per_task = (xs > ys).mean(axis=(1, 2)) + 0.5 * (xs == ys).mean(axis=(1, 2))
    return per_task.mean(axis=1)


def _profile_resampled(taus: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The score distribution at ``taus``: fraction of a resample's run x task scores above each tau, ``(n_boot, k)``."""
    def profile(r: np.ndarray) -> np.ndarray:
        flat = r.reshape(len(r), -1)
        return (flat[:, :, None] > taus[None, None, :]).mean(axis=1)

    return profile


#: the vectorised twin of each rliable function, applied to all resamples at once
_RESAMPLED: dict[str, Callable[..., np.ndarray]] = {
    "iqm": _iqm_resampled,
    "median": _median_resampled,
    "mean": _mean_resampled,
    "probability_of_improvement": _improvement_resampled,
}


def _all_aggregates(r: np.ndarray) -> np.ndarray:
    """``(n_boot, len(AGGREGATE_METRICS))``: every aggregate metric of the same resamples."""
    return np.stack([_RESAMPLED[name](r) for name in AGGREGATE_METRICS], axis=1)


# ---------------------------------------------------------------------------- the estimates
def aggregate_estimates(
    dicts: Sequence[ScoreDict],
    *,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> pd.DataFrame:
    """IQM, median and mean of each method's score matrix, each with its stratified-bootstrap CI.

    The three metrics are computed on the same resamples (``seed`` for every method: a method's
    interval depends only on its own scores).

    Returns:
        One row per (env, model size, method): ``env, model_size, method_label, runs, tasks``, then
        for each metric ``<metric>, <metric>_low, <metric>_high`` (``iqm``, ``median``, ``mean``;
        %, CI NaN with one run), ``in_progress, short_run``.
    """
    cols = ["env", "model_size", "method_label", "runs", "tasks"]
    cols += [f"{m}{s}" for m in AGGREGATE_METRICS for s in ("", "_low", "_high")] + ["in_progress", "short_run"]
    rows = []
    for sd in dicts:
        for label, arr in sd.scores.items():
            bounds = stratified_bootstrap_ci(arr, statistic=_all_aggregates, confidence=confidence, n_boot=n_boot,
                                             seed=seed)
            lo, hi = (np.broadcast_to(np.asarray(b, dtype=float), (len(AGGREGATE_METRICS),)) for b in bounds)
            row = {"env": sd.env, "model_size": sd.model_size, "method_label": label, "runs": arr.shape[0],
                   "tasks": arr.shape[1], "in_progress": sd.in_progress[label], "short_run": sd.short_run[label]}
            for k, (name, fn) in enumerate(AGGREGATE_METRICS.items()):
                row[name] = float(fn(arr))
                row[f"{name}_low"], row[f"{name}_high"] = float(lo[k]), float(hi[k])
            rows.append(row)
    return pd.DataFrame.from_records(rows, columns=cols)


def improvement_probabilities(
    dicts: Sequence[ScoreDict],
    *,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> pd.DataFrame:
    """P(method > baseline) for every two methods of one environment and model size, with its CI.

    ``method`` is the later of the two in the tables' row order (as in
    :func:`g2po_bench.analysis.aggregate.method_differences`); the tasks are those both have. A
    pair without a common task, or where one method has fewer than two runs, gets NaN bounds.

    Returns:
        ``env, model_size, method_label, baseline_label, runs, baseline_runs, tasks, probability,
        ci_low, ci_high`` (probabilities in [0, 1]).
    """
    cols = ["env", "model_size", "method_label", "baseline_label", "runs", "baseline_runs", "tasks", "probability",
            "ci_low", "ci_high"]
    rows = []
    for sd in dicts:
        labels = list(sd.frames)
        for i, base in enumerate(labels):
            for meth in labels[i + 1:]:
                tasks, scores = sd.on_common_tasks([meth, base])
                if not tasks:
                    continue
                x, y = scores[meth], scores[base]
                lo, hi = stratified_bootstrap_ci(x, y, statistic=_improvement_resampled, confidence=confidence,
                                                 n_boot=n_boot, seed=seed)
                rows.append({"env": sd.env, "model_size": sd.model_size, "method_label": meth, "baseline_label": base,
                             "runs": x.shape[0], "baseline_runs": y.shape[0], "tasks": len(tasks),
                             "probability": float(rly_metrics.probability_of_improvement(x, y)),
                             "ci_low": float(lo), "ci_high": float(hi)})
    return pd.DataFrame.from_records(rows, columns=cols)


def performance_profiles(
    sd: ScoreDict,
    taus: np.ndarray = PROFILE_TAUS,
    *,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """rliable's performance profiles (score distributions) of the methods of ``sd``, on their common tasks.

    Returns:
        (taus, profiles, cis): ``profiles[method]`` ``(k,)`` the fraction of its run x task scores
        above each tau; ``cis[method]`` ``(2, k)`` the lower and upper bounds (stratified bootstrap;
        absent for a method with one run). Empty dicts when the methods share no task.
    """
    taus = np.asarray(taus, dtype=float)
    tasks, scores = sd.on_common_tasks()
    if not tasks:
        return taus, {}, {}
    profile = _profile_resampled(taus)
    profiles, cis = {}, {}
    for label, arr in scores.items():
        profiles[label] = profile(arr[None])[0]
        lo, hi = stratified_bootstrap_ci(arr, statistic=profile, confidence=confidence, n_boot=n_boot, seed=seed)
        if np.ndim(lo):
            cis[label] = np.stack([lo, hi])
    return taus, profiles, cis
