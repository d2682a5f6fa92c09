"""How well an estimator's step advantages match the ground truth, with CIs over task groups.

Source: the suite's method (docs/credit.md; docs/design-notes.md "Credit-assignment ground truth");
split-half reliability by the Spearman-Brown formula. For each scored row set (an estimator
variant, :mod:`g2po_bench.analysis.credit.variants`) and a target (A*, its pooled or its discounted
form, :mod:`g2po_bench.analysis.credit.groundtruth`):

- **within-group correlations**: in every task group, the Spearman (average ranks for ties)
  and Pearson correlation between the advantages A and the target over the group's step rows,
  then their mean over groups. A group where A or the target is constant (or with fewer than
  3 rows) has no correlation: it is *undefined* (NaN), left out of the mean and counted, never
  0 (GRPO in a group whose episodes all failed, for instance);
- **sign agreement on decisive steps**: over the rows with |target| >= ``decisive`` (0.2 in
  success probability by default), the fraction where sign(A) = sign(target) (A = 0 counts as
  disagreement: no credit given); pooled over groups (sum of agreements / sum of decisive rows);
- **credit mass on decisive steps**: sum of |A| over decisive rows / sum of |A| over all rows,
  pooled over groups (the fraction of decisive rows, ``decisive_frac``, is what an estimator
  blind to the target would put there);
- every figure comes with a percentile-bootstrap CI that resamples task groups
  (:func:`g2po_bench.core.stats.bootstrap_ci`; a ratio is recomputed from the resampled groups'
  sums); **paired differences** between two rows use the per-group difference of their
  correlations over the groups where both are defined.

**The oracle and the reliability index.** The ``oracle`` row scores the target computed from half
A of the continuations against the target from the independent half B; its mean within-group
Spearman is the split-half correlation r of the Monte-Carlo ground truth. The Spearman-Brown
formula gives the reliability of the full-K target, ``rel = 2 r / (1 + r)``, and an estimator
equal to the true advantage would correlate with the full-K target at about ``sqrt(rel)`` (the
``ceiling`` entry): a reliability index of the ground truth, not a bound on a row (an estimator
can reach or pass it, e.g. one whose errors share the continuations' noise under common random
numbers) and not a factor every row is attenuated by.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from g2po_bench.core.stats import DEFAULT_N_BOOT, bootstrap_ci

__all__ = ["GroupStats", "group_stats", "summarize", "paired_difference", "ceiling", "score_rows",
           "ORACLE", "spearman_brown", "rank_average"]

#: the name of the oracle row (half A of the target against half B)
ORACLE = "oracle"


def rank_average(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``x`` (1-D), ties sharing their average rank (as ``scipy.stats.rankdata``)."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    ranks = np.empty(len(x), dtype=float)
    start = 0
    n = len(x)
    while start < n:
        end = start + 1
        while end < n and xs[end] == xs[start]:
            end += 1
        ranks[order[start:end]] = (start + end + 1) / 2.0
        start = end
    return ranks


def _constant(x: np.ndarray) -> bool:
    return bool(np.ptp(x) <= 1e-12 * max(1.0, float(np.max(np.abs(x)))))


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a = a - a.mean()
    b = b - b.mean()
    den = math.sqrt(float((a * a).sum()) * float((b * b).sum()))
    return float((a * b).sum() / den) if den > 0 else math.nan


@dataclass
class GroupStats:
    """Per-group statistics of one row set against one target, each (G,) in group order:
    ``spearman``, ``pearson`` float (NaN = undefined), ``decisive`` int (decisive rows),
    ``agree`` int (decisive rows with the target's sign), ``mass_decisive``, ``mass`` float
    (sums of |A|), ``rows`` int."""

    groups: np.ndarray
    spearman: np.ndarray
    pearson: np.ndarray
    decisive: np.ndarray
    agree: np.ndarray
    mass_decisive: np.ndarray
    mass: np.ndarray
    rows: np.ndarray


def group_stats(adv: np.ndarray, target: np.ndarray, group_id: np.ndarray, *, decisive: float = 0.2) -> GroupStats:
    """:class:`GroupStats` of advantages ``adv`` against ``target`` (both (B,), rows with a
    NaN target are left out) per task group ``group_id`` (B,).

    Raises:
        ValueError: shapes differ or ``decisive`` < 0.
    """
    adv = np.asarray(adv, dtype=float)
    target = np.asarray(target, dtype=float)
    group_id = np.asarray(group_id)
    if not (adv.shape == target.shape == group_id.shape) or adv.ndim != 1:
        raise ValueError(f"adv, target and group_id must be (B,) alike; got {adv.shape}, {target.shape}, {group_id.shape}")
    if decisive < 0:
        raise ValueError(f"decisive must be >= 0, got {decisive}")
    groups = np.unique(group_id)
    out = {k: np.zeros(len(groups)) for k in ("spearman", "pearson", "decisive", "agree", "mass_decisive", "mass",
                                              "rows")}
    for j, g in enumerate(groups):
        m = (group_id == g) & np.isfinite(target)
        a, y = adv[m], target[m]
        out["rows"][j] = m.sum()
        if len(a) >= 3 and not _constant(a) and not _constant(y):
            out["spearman"][j] = _pearson(rank_average(a), rank_average(y))
            out["pearson"][j] = _pearson(a, y)
        else:
            out["spearman"][j] = out["pearson"][j] = math.nan
        dec = np.abs(y) >= decisive
        out["decisive"][j] = dec.sum()
        out["agree"][j] = (np.sign(a[dec]) == np.sign(y[dec])).sum()
        out["mass_decisive"][j] = np.abs(a[dec]).sum()
        out["mass"][j] = np.abs(a).sum()
    return GroupStats(groups=groups, **out)


def _ratio_ci(num: np.ndarray, den: np.ndarray, *, n_boot: int, seed: int, confidence: float) -> tuple[float, float, float]:
    """(sum num / sum den, CI) with groups resampled; NaN when sum den = 0."""
    total = float(den.sum())
    if total <= 0:
        return math.nan, math.nan, math.nan

    def stat(samples, axis=1):
        idx = samples.astype(np.int64)
        d = den[idx].sum(axis=axis)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(d > 0, num[idx].sum(axis=axis) / np.where(d > 0, d, 1), np.nan)

    lo, hi = bootstrap_ci(np.arange(len(num), dtype=float), statistic=_nanpercentile_safe(stat),
                          n_boot=n_boot, seed=seed, confidence=confidence)
    return float(num.sum()) / total, lo, hi


def _nanpercentile_safe(stat):
    """A statistic whose NaN resamples (no decisive row drawn) count as the full estimate's
    neighbours: replaced by the mean of the finite resamples, so percentiles stay defined."""

    def wrapped(samples, axis=1):
        v = stat(samples, axis=axis)
        finite = np.isfinite(v)
        if finite.any() and not finite.all():
            v = np.where(finite, v, np.mean(v[finite]))
        return v

    return wrapped


def _mean_ci(values: np.ndarray, *, n_boot: int, seed: int, confidence: float) -> tuple[float, float, float]:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return math.nan, math.nan, math.nan
    lo, hi = bootstrap_ci(finite, n_boot=n_boot, seed=seed, confidence=confidence)
    return float(finite.mean()), lo, hi


def summarize(gs: GroupStats, *, n_boot: int = DEFAULT_N_BOOT, seed: int = 0, confidence: float = 0.95) -> dict:
    """One row set's figures with their CIs from its :class:`GroupStats`.

    Returns:
        ``{"spearman": {"mean", "ci": [lo, hi], "groups": defined, "undefined": count},
        "pearson": {...}, "sign_agreement": {"value", "ci", "decisive_rows"}, "decisive_mass":
        {"value", "ci"}, "decisive_frac": decisive rows / rows}``; NaN where nothing is defined.
    """
    out: dict = {}
    for name in ("spearman", "pearson"):
        vals = getattr(gs, name)
        mean, lo, hi = _mean_ci(vals, n_boot=n_boot, seed=seed, confidence=confidence)
        out[name] = {"mean": mean, "ci": [lo, hi], "groups": int(np.isfinite(vals).sum()),
                     "undefined": int((~np.isfinite(vals)).sum())}
    v, lo, hi = _ratio_ci(gs.agree, gs.decisive, n_boot=n_boot, seed=seed, confidence=confidence)
    out["sign_agreement"] = {"value": v, "ci": [lo, hi], "decisive_rows": int(gs.decisive.sum())}
    v, lo, hi = _ratio_ci(gs.mass_decisive, gs.mass, n_boot=n_boot, seed=seed, confidence=confidence)
    out["decisive_mass"] = {"value": v, "ci": [lo, hi]}
    rows = float(gs.rows.sum())
    out["decisive_frac"] = float(gs.decisive.sum()) / rows if rows else math.nan
    return out


def paired_difference(a: GroupStats, b: GroupStats, *, metric: str = "spearman", n_boot: int = DEFAULT_N_BOOT,
                      seed: int = 0, confidence: float = 0.95) -> dict:
    """Mean over groups of ``a.metric - b.metric`` (groups where both are defined), with a
    bootstrap CI over those groups: ``{"mean", "ci", "groups"}``.

    Raises:
        ValueError: the two were computed on different groups.
    """
    if not np.array_equal(a.groups, b.groups):
        raise ValueError("paired_difference needs GroupStats of the same groups")
    d = getattr(a, metric) - getattr(b, metric)
    mean, lo, hi = _mean_ci(d, n_boot=n_boot, seed=seed, confidence=confidence)
    return {"mean": mean, "ci": [lo, hi], "groups": int(np.isfinite(d).sum())}


def spearman_brown(r: float) -> float:
    """Reliability of a test of double length from the split-half correlation r: 2r / (1 + r)
    (NaN for r <= -1 or NaN)."""
    if not math.isfinite(r) or r <= -1:
        return math.nan
    return 2 * r / (1 + r)


def ceiling(oracle: dict) -> dict:
    """The reliability index of the ground truth from the oracle row's summary (module docstring):
    ``{"split_half": r [lo, hi], "reliability": SB(r) [lo, hi], "ceiling": sqrt(SB(r)) [lo, hi]}``
    (a CI maps through the monotone formulas; NaN where r <= 0 has no square root)."""
    sp = oracle["spearman"]
    r, (lo, hi) = sp["mean"], sp["ci"]
    rel = [spearman_brown(x) for x in (r, lo, hi)]
    root = [math.sqrt(x) if math.isfinite(x) and x >= 0 else math.nan for x in rel]
    return {"split_half": {"mean": r, "ci": [lo, hi]}, "reliability": {"mean": rel[0], "ci": rel[1:]},
            "ceiling": {"mean": root[0], "ci": root[1:]}}


def score_rows(advantages: Mapping[str, np.ndarray], target: np.ndarray, halves: np.ndarray, group_id: np.ndarray,
               *, decisive: float = 0.2, n_boot: int = DEFAULT_N_BOOT, seed: int = 0, confidence: float = 0.95,
               pairs: Sequence[tuple[str, str]] = ()) -> dict:
    """Score every row set against one target, add the oracle row, the ceiling and differences.

    Args:
        advantages: row-set name -> (B,) advantages.
        target: (B,) the ground truth (NaN rows are left out).
        halves: (2, B) the target from half A and half B of the continuations (the oracle row).
        group_id: (B,) task groups.
        decisive: the |target| threshold of decisive steps.
        n_boot, seed, confidence: bootstrap settings.
        pairs: (a, b) names whose paired difference a - b of the Spearman correlation is wanted.

    Returns:
        ``{"rows": {name: summarize(...)}, "ceiling": ceiling(...), "differences":
        [{"a", "b", "spearman": {...}}], "group_stats": {name: GroupStats}}`` (the oracle is
        the row named :data:`ORACLE`).
    """
    stats = {name: group_stats(a, target, group_id, decisive=decisive) for name, a in advantages.items()}
    stats[ORACLE] = group_stats(halves[0], halves[1], group_id, decisive=decisive)
    rows = {name: summarize(gs, n_boot=n_boot, seed=seed, confidence=confidence) for name, gs in stats.items()}
    diffs = [{"a": a, "b": b, "spearman": paired_difference(stats[a], stats[b], n_boot=n_boot, seed=seed,
                                                            confidence=confidence)}
             for a, b in pairs if a in stats and b in stats]
    return {"rows": rows, "ceiling": ceiling(rows[ORACLE]), "differences": diffs, "group_stats": stats}
