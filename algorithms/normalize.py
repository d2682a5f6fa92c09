"""Grouped ("segmented") statistics and normalization shared by the advantage estimators.

Source: the reference code (verl-agent ``gigpo/core_gigpo.py``: ``episode_norm_reward``,
``step_norm_reward``; docs/design-notes.md "The StepBatch"): every standard deviation is the
unbiased (n-1) one (``torch.std``); eps = 1e-6; "normalize" means ``mean_std_norm``::

    norm(x_i) = (x_i - mean_S) / (std_S + eps)

or ``mean_norm``::

    norm(x_i) = x_i - mean_S

where S is the *reference set* of row i (its task group, its node, its step group, ...).

A reference set is described by a dense segment index ``seg`` (int64, values in
``0..num_segments-1``), one entry per element of the set. The statistics of a segment may be
computed from one array (e.g. the step-0 rows of each trajectory, or the distinct successors
of a node) and applied to another (every row): see :func:`segment_stats` and
:func:`apply_normalization`.

Degenerate reference sets (docs/design-notes.md "The StepBatch"):

- a set whose members are all equal gives exactly 0. "All equal" is decided with a tiny
  tolerance, ``std <= DEGENERATE_RTOL * (1 + |mean|)``, so values that are equal in exact
  arithmetic but differ by float64 rounding (e.g. the same node value summed in another
  order) also give exactly 0 instead of rounding noise amplified by ``1 / (std + eps)``.
- a set with a single member: ``singleton="zero"`` gives 0 (node, step-group and edge terms);
  ``singleton="unit"`` uses mean 0 and std 1 (the GRPO episode term, as the reference code).

Everything here is vectorized (``np.bincount``/``np.argsort``): O(B) per statistic plus one
O(B log B) sort per factorization. No Python loop over rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "EPS",
    "DEGENERATE_RTOL",
    "MODES",
    "SegmentStats",
    "factorize",
    "factorize_texts",
    "factorize_first_seen",
    "factorize_pairs",
    "pair_key",
    "count_distinct",
    "segment_stats",
    "apply_normalization",
    "group_normalize",
]

EPS = 1e-6
"""The eps of ``mean_std_norm`` (``epsilon=1e-6`` in verl-agent's ``gigpo/core_gigpo.py``)."""

DEGENERATE_RTOL = 1e-12
"""A reference set counts as "all equal" when ``std <= DEGENERATE_RTOL * (1 + |mean|)``."""

MODES = ("mean_std_norm", "mean_norm")


@dataclass(frozen=True)
class SegmentStats:
    """Per-segment statistics; every field has shape (num_segments,).

    - ``count`` int64: members of the reference set.
    - ``mean`` float64: their mean (0 for an empty segment).
    - ``std`` float64: their unbiased (n-1) standard deviation (0 when count < 2).
    - ``degenerate`` bool: count >= 2 and all members equal (within DEGENERATE_RTOL).
    """

    count: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    degenerate: np.ndarray


def factorize(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids of integer keys, ordered like the key values.

    Args:
        keys: (n,) integer array (any int64 values, e.g. hashed state keys).

    Returns:
        ``(ids, k)``: ids (n,) int64 in ``0..k-1`` with ``ids[i] < ids[j]`` iff
        ``keys[i] < keys[j]``; k = number of distinct keys.
    """
    keys = np.asarray(keys)
    n = keys.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    perm = np.argsort(keys)
    sk = keys[perm]
    new = np.empty(n, dtype=np.int64)
    new[0] = 0
    np.not_equal(sk[1:], sk[:-1], out=new[1:])
    ids_sorted = np.cumsum(new)
    ids = np.empty(n, dtype=np.int64)
    ids[perm] = ids_sorted
    return ids, int(ids_sorted[-1]) + 1


_TEXT_HASH_BASE = np.uint64(0x9E3779B97F4A7C15)


def factorize_texts(texts: np.ndarray | list) -> tuple[np.ndarray, int]:
    """Dense ids of strings (e.g. action texts): equal ids for equal strings.

    Exact and deterministic: every string is hashed by a polynomial over its code points
    (vectorized over the rows, one pass per character position), the hashes are factorized in
    order of first appearance, and every row is then compared with the first row of its id;
    should two different strings share a hash, :func:`numpy.unique` (exact, slower) decides
    instead. Sorting a million fixed-width strings directly takes seconds; this takes a
    fraction of one.

    Args:
        texts: (n,) strings: a ``U`` array, an object array or a list of str.

    Returns:
        ``(ids, k)``: ids (n,) int64 in ``0..k-1`` numbered in order of first appearance;
        k = number of distinct strings.
    """
    arr = np.asarray(texts)
    if arr.dtype.kind != "U":
        arr = arr.astype(str)
    n = arr.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    width = arr.dtype.itemsize // 4
    if width == 0:  # every string empty
        return np.zeros(n, dtype=np.int64), 1
    codes = np.ascontiguousarray(arr).view(np.uint32).reshape(n, width)
    hashes = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(width):  # one pass per character position, vectorized over the rows
            hashes *= _TEXT_HASH_BASE
            hashes += codes[:, j]
    ids, k = factorize_first_seen(hashes.view(np.int64))
    first = np.empty(k, dtype=np.int64)
    first[ids[::-1]] = np.arange(n - 1, -1, -1, dtype=np.int64)  # first row of each id
    if not np.array_equal(codes, codes[first[ids]]):  # a hash collision: decide exactly
        uniq, inv = np.unique(arr, return_inverse=True)
        return inv.reshape(-1).astype(np.int64, copy=False), int(len(uniq))
    return ids, k


def factorize_first_seen(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids of integer keys numbered in order of first appearance (so they do not
    depend on the key values themselves, only on which rows are equal).

    Args:
        keys: (n,) integer array.

    Returns:
        ``(ids, k)`` as :func:`factorize`.
    """
    ids, k = factorize(keys)
    if k == 0:
        return ids, 0
    first = np.empty(k, dtype=np.int64)
    first[ids[::-1]] = np.arange(len(ids) - 1, -1, -1, dtype=np.int64)
    rank = np.empty(k, dtype=np.int64)
    rank[np.argsort(first)] = np.arange(k, dtype=np.int64)
    return rank[ids], k


def factorize_pairs(a: np.ndarray, na: int, b: np.ndarray, nb: int) -> tuple[np.ndarray, int]:
    """Dense ids of pairs ``(a_i, b_i)`` of dense ids (``a < na``, ``b < nb``).

    Args:
        a, b: (n,) int64 dense ids.
        na, nb: their ranges.

    Returns:
        ``(ids, k)`` as :func:`factorize`, ordered lexicographically by (a, b).

    Raises:
        OverflowError: ``na * nb`` does not fit in int64 (needs more than ~3e9 distinct values).
    """
    return factorize(pair_key(a, na, b, nb))


def pair_key(a: np.ndarray, na: int, b: np.ndarray, nb: int) -> np.ndarray:
    """One int64 key per pair of dense ids ``(a_i, b_i)`` (``a < na``, ``b < nb``): a * nb + b.

    Raises:
        OverflowError: ``na * nb`` does not fit in int64.
    """
    if na * nb >= 2**62:
        raise OverflowError("pair_key: key space too large for one int64 key")
    return a.astype(np.int64) * np.int64(max(nb, 1)) + b


def count_distinct(keys: np.ndarray) -> int:
    """Number of distinct values of an integer array (one sort, no inverse)."""
    keys = np.asarray(keys)
    if keys.size == 0:
        return 0
    s = np.sort(keys)
    return int(np.count_nonzero(s[1:] != s[:-1])) + 1


def segment_stats(values: np.ndarray, seg: np.ndarray, num_segments: int) -> SegmentStats:
    """Mean and unbiased std of ``values`` per segment (two-pass, float64).

    Args:
        values: (m,) float64, the members of all reference sets.
        seg: (m,) int64 segment of each member, in ``0..num_segments-1``.
        num_segments: number of segments (empty segments get count 0, mean 0, std 0).

    Returns:
        :class:`SegmentStats` with arrays of shape (num_segments,).
    """
    values = np.asarray(values, dtype=np.float64)
    count = np.bincount(seg, minlength=num_segments).astype(np.int64)
    total = np.bincount(seg, weights=values, minlength=num_segments).astype(np.float64)
    mean = np.divide(total, count, out=np.zeros(num_segments), where=count > 0)
    dev = values - mean[seg]
    ss = np.bincount(seg, weights=dev * dev, minlength=num_segments).astype(np.float64)
    var = np.divide(ss, count - 1, out=np.zeros(num_segments), where=count > 1)
    std = np.sqrt(var)
    degenerate = (count >= 2) & (std <= DEGENERATE_RTOL * (1.0 + np.abs(mean)))
    return SegmentStats(count=count, mean=mean, std=std, degenerate=degenerate)


def apply_normalization(
    x: np.ndarray,
    seg: np.ndarray,
    stats: SegmentStats,
    mode: str,
    *,
    eps: float = EPS,
    singleton: str = "zero",
) -> np.ndarray:
    """Normalize each ``x_i`` with the statistics of its segment ``seg[i]``.

    ``mean_std_norm``: (x - mean) / (std + eps); ``mean_norm``: x - mean. Rows whose
    segment is degenerate (all reference values equal) get exactly 0. Rows whose segment has
    fewer than two reference values get 0 (``singleton="zero"``) or are normalized with mean
    0 and std 1 (``singleton="unit"``: x / (1 + eps), resp. x), the reference code's rule for
    a one-member task group.

    Args:
        x: (n,) float64 values to normalize.
        seg: (n,) int64 segment of each value.
        stats: statistics of the segments (see :func:`segment_stats`).
        mode: ``"mean_std_norm"`` or ``"mean_norm"``.
        eps: added to the std.
        singleton: ``"zero"`` or ``"unit"``.

    Returns:
        (n,) float64.

    Raises:
        ValueError: unknown ``mode`` or ``singleton``.
    """
    if mode not in MODES:
        raise ValueError(f"unknown normalization mode {mode!r}; choose one of {MODES}")
    if singleton not in ("zero", "unit"):
        raise ValueError(f"unknown singleton rule {singleton!r}; choose 'zero' or 'unit'")
    count = stats.count[seg]
    centered = x - stats.mean[seg]
    if mode == "mean_std_norm":
        out = centered / (stats.std[seg] + eps)
    else:
        out = centered
    out[stats.degenerate[seg]] = 0.0
    small = count < 2
    if small.any():
        if singleton == "zero":
            out[small] = 0.0
        else:
            out[small] = x[small] / (1.0 + eps) if mode == "mean_std_norm" else x[small]
    return out


def group_normalize(
    x: np.ndarray,
    seg: np.ndarray,
    num_segments: int,
    mode: str,
    *,
    eps: float = EPS,
    singleton: str = "zero",
) -> np.ndarray:
    """Normalize ``x`` within its own segments (the reference set of a row is its segment).

    Shorthand for ``apply_normalization(x, seg, segment_stats(x, seg, n), mode, ...)``.

    Args:
        x: (n,) float64; seg: (n,) int64 in ``0..num_segments-1``.

    Returns:
        (n,) float64.
    """
    return apply_normalization(
        x, seg, segment_stats(x, seg, num_segments), mode, eps=eps, singleton=singleton
    )
