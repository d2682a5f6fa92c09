"""How many task groups a comparison needs, and the family-wise correction of a study's comparisons.

Source: the suite's method (docs/credit.md "Resolution"); the sample size of a two-sided z-test
of a mean difference (e.g. Chow, Shao and Wang, *Sample Size Calculations in Clinical Research*,
ch. 3) and Holm's step-down procedure (Holm, 1979, *Scand. J. Statist.* 6:65-70).

- **Groups needed.** A paired difference between two rows is a mean over task groups of per-group
  differences with between-group standard deviation ``sd``. To detect a true difference of
  ``delta`` with probability ``power`` in a two-sided test at level ``alpha`` it needs
  ``n = sd^2 (z_{1 - alpha/2} + z_{power})^2 / delta^2`` groups where the difference is defined;
  when only a fraction ``f`` of the groups define it (a within-group correlation is undefined in a
  group where either side is constant), ``n / f`` groups are sampled. Over a family of ``m``
  comparisons corrected by Holm, the first (smallest) p-value is tested at ``alpha / m``, so
  ``alpha / m`` replaces ``alpha`` (an upper bound: Holm's later steps are less strict).
- **Half-width.** The half-width of a 95 % interval is ``z_{0.975} sd / sqrt(n)``: the groups that
  bring it to ``w`` are ``(z_{0.975} sd / w)^2`` (:func:`groups_for_half_width`).
- **Holm.** p-values of the family sorted ascending, ``p_(j)`` adjusted to
  ``max_{i <= j} min(1, (m - i + 1) p_(i))``; a comparison is resolved when its adjusted p-value is
  below ``alpha``. Beside it, the simultaneous (Bonferroni) interval of level ``1 - alpha / m``,
  ``mean +- z_{1 - alpha/(2m)} se``, which holds for the whole family at once.

p-values and the family-wise intervals use the normal approximation of the mean difference
(``z = mean / se``), with ``se`` the standard error the study measured (the between-group SD over
sqrt(groups) for a mean over groups, the bootstrap SD for a ratio).

Pure Python and numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

__all__ = ["groups_needed", "groups_for_half_width", "holm", "normal_p", "familywise_ci", "RESOLVE_DELTA",
           "RESOLVE_POWER"]

#: the difference a study is sized to resolve (in correlation or cosine units)
RESOLVE_DELTA = 0.05
#: the probability of detecting it
RESOLVE_POWER = 0.8

_Z = NormalDist()


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def groups_needed(sd: float | None, *, delta: float = RESOLVE_DELTA, alpha: float = 0.05,
                  power: float = RESOLVE_POWER, family: int = 1, defined_fraction: float = 1.0) -> float:
    """Task groups that resolve a true difference ``delta`` (module docstring).

    Args:
        sd: between-group standard deviation of the per-group differences (same unit as delta).
        delta: the difference to detect (> 0).
        alpha: two-sided level of one comparison (before the family correction).
        power: probability of detecting ``delta`` (in (0, 1)).
        family: m, the comparisons of the Holm family (>= 1; 1 = no correction).
        defined_fraction: the fraction of sampled groups where the difference is defined (in (0, 1]).

    Returns:
        The number of groups to sample (float, rounded up by the caller); NaN when ``sd`` or the
        fraction is undefined, 0 when ``sd`` is 0.

    Raises:
        ValueError: ``delta`` <= 0, ``alpha`` or ``power`` outside (0, 1), ``family`` < 1.
    """
    if delta <= 0 or not 0 < alpha < 1 or not 0 < power < 1 or family < 1:
        raise ValueError(f"groups_needed: need delta > 0, alpha and power in (0, 1), family >= 1; got "
                         f"{delta}, {alpha}, {power}, {family}")
    if not _finite(sd) or not _finite(defined_fraction) or defined_fraction <= 0:
        return math.nan
    z = _Z.inv_cdf(1 - alpha / (2 * family)) + _Z.inv_cdf(power)
    return float((sd * z / delta) ** 2 / min(defined_fraction, 1.0))


def groups_for_half_width(sd: float | None, width: float, *, confidence: float = 0.95,
                          defined_fraction: float = 1.0) -> float:
    """Task groups whose ``confidence`` interval of a mean over groups has half-width ``width``
    (normal approximation; NaN when ``sd`` is undefined).

    Raises:
        ValueError: ``width`` <= 0 or ``confidence`` outside (0, 1).
    """
    if width <= 0 or not 0 < confidence < 1:
        raise ValueError(f"groups_for_half_width: need width > 0 and confidence in (0, 1); got {width}, {confidence}")
    if not _finite(sd) or not _finite(defined_fraction) or defined_fraction <= 0:
        return math.nan
    return float((_Z.inv_cdf(0.5 + confidence / 2) * sd / width) ** 2 / min(defined_fraction, 1.0))


def normal_p(mean: float | None, se: float | None) -> float:
    """Two-sided p-value of ``mean`` = 0 under the normal approximation; NaN when undefined
    (1.0 for a zero mean with zero SE: two identical rows)."""
    if not _finite(mean) or not _finite(se):
        return math.nan
    if se <= 0:
        return 1.0 if abs(mean) <= 1e-15 else 0.0
    return float(2 * (1 - _Z.cdf(abs(mean) / se)))


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-adjusted p-values of a family (NaN entries stay NaN and do not count in m).

    Args:
        pvalues: (m,) raw p-values.

    Returns:
        (m,) float64 adjusted p-values in the input order.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = len(idx)
    if not m:
        return out
    order = idx[np.argsort(p[idx], kind="mergesort")]
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def familywise_ci(mean: float | None, se: float | None, family: int, *, alpha: float = 0.05) -> tuple[float, float]:
    """The simultaneous (Bonferroni) interval ``mean +- z_{1 - alpha/(2 family)} se`` (NaN when undefined)."""
    if not _finite(mean) or not _finite(se) or family < 1:
        return (math.nan, math.nan)
    z = _Z.inv_cdf(1 - alpha / (2 * family))
    return (float(mean - z * se), float(mean + z * se))
