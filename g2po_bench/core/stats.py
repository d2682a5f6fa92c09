"""Confidence intervals of recorded results: percentile bootstrap (numpy only).

Used where results are recorded (``eval.json``: the success rate of an evaluation panel with its
95 % interval) and where they are analysed (:mod:`g2po_bench.analysis.aggregate`, the CPU-proxy benchmark).
Percentile bootstrap intervals follow Efron & Tibshirani (1993); the paired two-level bootstrap
of :func:`paired_improvement_ci` resamples seeds, then panel tasks within each seed, as
recommended for few-seed RL comparisons (Agarwal et al., 2021, "Deep RL at the edge of the
statistical precipice").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["DEFAULT_N_BOOT", "bootstrap_ci", "paired_improvement_ci"]

#: bootstrap resamples used unless a caller says otherwise.
DEFAULT_N_BOOT = 10_000


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    *,
    statistic: Callable[..., np.ndarray] | None = None,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of ``statistic`` (default: the mean) of the finite values.

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
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = x.size
    if n < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    samples = x[idx]
    stats = samples.mean(axis=1) if statistic is None else np.asarray(statistic(samples, axis=1))
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.percentile(stats, [100 * alpha, 100 * (1 - alpha)])
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
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    d = a - b
    s, t = d.shape
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, s, size=(n_boot, s))
    tasks = rng.integers(0, t, size=(n_boot, s, t))
    stats = d[seeds[:, :, None], tasks].mean(axis=(1, 2))
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.percentile(stats, [100 * alpha, 100 * (1 - alpha)])
    return float(d.mean()), float(lo), float(hi)
