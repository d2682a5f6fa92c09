"""The suite's bootstrap: percentile confidence intervals of recorded results (numpy only).

Every interval the suite prints comes from this module, by one of two resampling schemes:

- **Stratified** (:func:`stratified_bootstrap_ci`): a score matrix ``(runs, tasks)`` is resampled
  by drawing, for each task (column) independently, ``runs`` rows with replacement; several
  matrices (one per method, for a comparison of methods) are resampled independently of each
  other. This is rliable's stratified bootstrap (Agarwal et al., 2021, "Deep Reinforcement
  Learning at the Edge of the Statistical Precipice", NeurIPS; ``rliable.library.
  StratifiedBootstrap`` and ``StratifiedIndependentBootstrap``), seeded. One task is the plain
  percentile bootstrap of :func:`bootstrap_ci` (Efron & Tibshirani, 1993): one value per seed,
  run or episode, resampled with replacement.
- **Two-level, paired** (:func:`paired_improvement_ci`): seeds with replacement, then panel
  tasks with replacement within each drawn seed, the same tasks for the two evaluations that are
  compared (before and after RL, or two methods of one seed).

The interval is the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` percentiles of the
resampled statistic (numpy's "linear" interpolation). Each call makes its own
``numpy.random.default_rng(seed)``, so an interval depends only on its inputs and ``seed``.

Used where results are recorded (``eval.json``: the success rate of an evaluation panel with its
95 % interval), where they are analysed (:mod:`g2po_bench.analysis.aggregate`, the report, the
CPU-proxy benchmark) and by the credit study (:mod:`g2po_bench.analysis.credit.scoring`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["DEFAULT_N_BOOT", "bootstrap_ci", "stratified_bootstrap_ci", "paired_improvement_ci"]

#: bootstrap resamples used unless a caller says otherwise.
DEFAULT_N_BOOT = 10_000


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _percentile_interval(stats: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval over the resamples (axis 0) of ``stats``."""
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.percentile(stats, [100 * alpha, 100 * (1 - alpha)], axis=0)
    return lo, hi


def _stratified_resample(scores: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``(n_boot, runs, tasks)``: for every resample and task, ``runs`` rows drawn with replacement."""
    runs, tasks = scores.shape
    idx = rng.integers(0, runs, size=(n_boot, runs, tasks))
    return scores[idx, np.arange(tasks)[None, None, :]]


def stratified_bootstrap_ci(
    *scores: np.ndarray,
    statistic: Callable[..., np.ndarray],
    confidence: float = 0.95,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> tuple[float | np.ndarray, float | np.ndarray]:
    """Stratified percentile-bootstrap interval of ``statistic`` of one or more score matrices.

    Args:
        *scores: one or more ``(runs, tasks)`` float arrays (e.g. one per method; the run counts
            may differ, the statistic decides what the tasks must share). Each is resampled as in
            the module docstring, the first one's draws first, all from one generator.
        statistic: ``f(*resampled) -> (n_boot,)`` or ``(n_boot, k)``, called once with every
            matrix resampled ``n_boot`` times, each ``(n_boot, runs, tasks)``.
        confidence: e.g. 0.95 for a 95 % interval.
        n_boot: bootstrap resamples.
        seed: seed of ``numpy.random.default_rng``.

    Returns:
        (low, high): floats for a scalar statistic, ``(k,)`` arrays for a vector one; (NaN, NaN)
        when a matrix has fewer than two runs or no task.

    Raises:
        ValueError: no matrix, a matrix that is not 2-D, or ``confidence`` outside (0, 1).
    """
    _check_confidence(confidence)
    mats = [np.asarray(m, dtype=float) for m in scores]
    if not mats or any(m.ndim != 2 for m in mats):
        raise ValueError(f"scores must be (runs, tasks) matrices, got shapes {[m.shape for m in mats]}")
    if any(m.shape[0] < 2 or m.shape[1] == 0 for m in mats):
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    stats = np.asarray(statistic(*(_stratified_resample(m, n_boot, rng) for m in mats)), dtype=float)
    lo, hi = _percentile_interval(stats, confidence)
    if np.ndim(lo) == 0:
        return float(lo), float(hi)
    return lo, hi


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    *,
    statistic: Callable[..., np.ndarray] | None = None,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of ``statistic`` (default: the mean) of the finite values.

    The stratified bootstrap of :func:`stratified_bootstrap_ci` with one task: the same draws.

    Args:
        values: (n,) one value per seed/run/episode (e.g. 0/1 successes).
        statistic: ``f(samples, axis=1) -> array`` over a ``(n_boot, n)`` array; default mean.
        confidence: e.g. 0.95 for a 95 % interval.
        n_boot: bootstrap resamples.
        seed: seed of ``numpy.random.default_rng``.

    Returns:
        (low, high) in the unit of ``values``; (NaN, NaN) with fewer than two values.

    Raises:
        ValueError: ``confidence`` outside (0, 1).
    """
    _check_confidence(confidence)
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]

    def over_values(resampled: np.ndarray) -> np.ndarray:
        samples = resampled.reshape(n_boot, -1)
        return samples.mean(axis=1) if statistic is None else np.asarray(statistic(samples, axis=1))

    lo, hi = stratified_bootstrap_ci(x[:, None], statistic=over_values, confidence=confidence, n_boot=n_boot,
                                     seed=seed)
    return float(lo), float(hi)


def paired_improvement_ci(
    before: np.ndarray | Sequence[Sequence[float]],
    after: np.ndarray | Sequence[Sequence[float]],
    *,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Mean improvement ``after - before`` over seeds and panel tasks, with a two-level bootstrap CI.

    Each seed's two evaluations play the same panel (same tasks, same order), so the per-task
    differences are paired. One resample draws S seeds with replacement and, for each, T tasks with
    replacement (the same task indices for its before and after), then averages the differences.

    Args:
        before: (S, T) per-episode success (0/1 or scores) after the warm start, one row per seed.
        after: (S, T) the same panel after RL.
        confidence, n_boot, seed: as in :func:`bootstrap_ci`.

    Returns:
        (mean improvement, low, high) in the unit of the inputs (fractions for successes).

    Raises:
        ValueError: shapes differ or are not 2-D with at least one seed and two tasks.
    """
    b = np.asarray(before, dtype=float)
    a = np.asarray(after, dtype=float)
    if b.shape != a.shape or b.ndim != 2 or b.shape[0] < 1 or b.shape[1] < 2:
        raise ValueError(f"before and after must both be (seeds, tasks) with >= 2 tasks; got {b.shape} and {a.shape}")
    _check_confidence(confidence)
    d = a - b
    s, t = d.shape
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, s, size=(n_boot, s))
    tasks = rng.integers(0, t, size=(n_boot, s, t))
    stats = d[seeds[:, :, None], tasks].mean(axis=(1, 2))
    lo, hi = _percentile_interval(stats, confidence)
    return float(d.mean()), float(lo), float(hi)
