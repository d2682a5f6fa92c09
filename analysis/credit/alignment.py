"""Update-direction accuracy from per-group scalars: the cosine a training batch would have.

Source: the suite's method (docs/credit.md "Update-direction accuracy"). The per-row loss
gradients, their compression and the group vectors are :mod:`g2po_bench.analysis.credit.gradients`
(torch); this module is numpy only, so a record (``credit.json``), a pooled record of shards and
the report compute the same figures from the same numbers.

**What is estimated.** A training batch holds B task groups (``train.groups_per_batch``). With
v_g^x the (negated) loss gradient of task group g under the advantages x (an estimator's, or the
ground truth's), the batch's gradient is g^x = sum over its B groups of v_g^x, and the figure is
the cosine a batch would have between the estimator's gradient and the true one, as a ratio of
expectations over batches (groups drawn independently, the batch's groups distinct)::

    cos_B(e) = E<g^e, g*> / sqrt(E|g^e|^2 E|g*|^2),
    E<g^x, g^y> = B (delta_xy + (B - 1) omega_xy),
    delta_xy = E<v_g^x, v_g^y>          (a group with itself),
    omega_xy = E<v_g^x, v_h^y>, g != h  (two groups of one batch).

It sees what a within-group rank cannot: how loud each group is (group vs batch statistics,
mean-only vs std normalization), how steps are weighted inside a group, and whether the groups'
gradients add up (omega, the part every group's update shares) or cancel. It does not depend on
the number of groups the study sampled, which only sets its precision.

**From the study.** The study plays its groups in blocks of B (the groups of one training batch,
:mod:`g2po_bench.analysis.credit.study`) and keeps, for every pair (x, y) of advantage vectors, the
B x B matrix of inner products ``M_gh = <v_g^x, v_h^y>`` of each block (a study of G groups keeps
G x B numbers per pair, not G x G). Then ``delta`` is the mean of the diagonal and ``omega`` the
mean of the off-diagonal entries over every block (every ordered pair of distinct groups of a
block once): unbiased, and exact to pool (shards hold whole blocks).

**Unattenuated.** The ground truth comes from two independent halves of the continuations (A*_1
and A*_2, :mod:`g2po_bench.analysis.credit.groundtruth`); the true gradient's squared norm is
estimated by ``E<g*_1, g*_2>`` (delta and omega of the pair (half 1, half 2)), whose expectation is
the noise-free one, and the cross term uses the mean of the halves (the K-continuation A*), whose
noise is independent of the estimator's advantages. So the noise of A* does not shrink the cosine
(the plain cosine with the K-continuation A*, ``naive``, is kept beside it). It is a ratio
estimate: consistent, with a small bias when the true gradient's norm is small against its noise;
undefined (NaN) when ``E<g*_1, g*_2>`` <= 0.

**CIs** resample task groups within each block (percentile bootstrap, ``n_boot`` draws; a drawn
group's copies count as distinct groups, as in any bootstrap of a statistic of the sample): a
block's draw of counts c gives the diagonal sum ``sum c_g M_gg`` and the off-diagonal sum
``c'Mc - sum c_g M_gg``. With one block this is the bootstrap of the batch gradient
``sum c_g v_g``; its interval matched the sampling distribution of the cosine in simulations
(docs/credit.md). Paired differences use the same draws; ``se`` is the bootstrap SD.

What it assumes: groups independent (tasks drawn without replacement from many); the halves'
A* independent given the sampled rows; the direction of an update step at the sampled policy
decides learning (one step, first order: the PPO ratio is 1, clipping inactive, the KL and entropy
terms and the gradient clipping's scale left out, the whole batch one mini-batch; the trainer's
shuffled mini-batches change each row's weight by the ratio of token counts only); rows without
ground truth count 0 in every gradient.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["GroupGradients", "block_matrices", "block_counts", "gradient_pairs", "alignment_table", "pair_key",
           "HALVES"]

#: the suffixes of the two halves of a target's vectors (``"a_star/1"``, ``"a_star/2"``)
HALVES = ("/1", "/2")


def pair_key(x: str, y: str) -> str:
    """The name of the pair (x, y) in records: ``"x|y"``.

    Raises:
        ValueError: a name holds ``|``.
    """
    if "|" in x or "|" in y:
        raise ValueError(f"vector names may not hold '|': {x!r}, {y!r}")
    return f"{x}|{y}"


def gradient_pairs(rows: Sequence[str], targets: Sequence[str]) -> list[tuple[str, str]]:
    """The pairs of vectors the figures need: (row, row) and (row, target) for every row and
    target, and (target/1, target/1), (target/2, target/2), (target/1, target/2) per target."""
    out = []
    for t in targets:
        h1, h2 = t + HALVES[0], t + HALVES[1]
        out += [(h1, h1), (h2, h2), (h1, h2)]
    for r in rows:
        out.append((r, r))
        out += [(r, t) for t in targets]
    return out


def block_matrices(vectors: Mapping[str, np.ndarray], pairs: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
    """The inner-product matrix ``M_gh = <v_g^x, v_h^y>`` of every pair for the groups of one block.

    Args:
        vectors: name -> (n, d) group vectors of the block's n groups, in group order.
        pairs: (x, y) names.

    Returns:
        ``pair_key(x, y)`` -> (n, n) float64.
    """
    return {pair_key(x, y): np.asarray(vectors[x], dtype=np.float64) @ np.asarray(vectors[y], dtype=np.float64).T
            for x, y in pairs}


@dataclass
class GroupGradients:
    """The inner products of a study's group gradients, block by block (module docstring).

    Attributes:
        groups: (G,) global group index, blocks contiguous and in order;
        block: (G,) the block (training batch) of each group;
        batch: B, the groups of a training batch (a block holds at most B);
        pairs: ``pair_key(x, y)`` -> (G, B) float64: row g holds ``M_gh`` for the groups h of g's
            block in order (NaN beyond the block's size);
        check: the same for a second, independent sketch (pairs of one target only) or empty.
    """

    groups: np.ndarray
    block: np.ndarray
    batch: int
    pairs: dict[str, np.ndarray] = field(default_factory=dict)
    check: dict[str, np.ndarray] = field(default_factory=dict)

    @staticmethod
    def from_blocks(groups: np.ndarray, block: np.ndarray, batch: int,
                    matrices: Sequence[Mapping[str, np.ndarray]],
                    check: Sequence[Mapping[str, np.ndarray]] = ()) -> GroupGradients:
        """Assemble from one dict of (n_b, n_b) matrices per block (blocks in the order of ``groups``).

        Raises:
            ValueError: a block larger than ``batch``, or blocks and matrices that disagree.
        """
        block = np.asarray(block, dtype=np.int64)
        ids = list(dict.fromkeys(block.tolist()))
        if len(ids) != len(matrices) or (check and len(check) != len(ids)):
            raise ValueError(f"GroupGradients: {len(ids)} blocks, {len(matrices)} sets of matrices")

        def rows(mats: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
            keys = list(mats[0]) if mats else []
            out = {k: np.full((len(block), batch), np.nan) for k in keys}
            for b, m in zip(ids, mats):
                sel = np.flatnonzero(block == b)
                if len(sel) > batch:
                    raise ValueError(f"block {b} holds {len(sel)} groups, more than the batch of {batch}")
                for k in keys:
                    out[k][sel, :len(sel)] = m[k]
            return out

        return GroupGradients(groups=np.asarray(groups, dtype=np.int64), block=block, batch=int(batch),
                              pairs=rows(matrices), check=rows(check))

    @staticmethod
    def concat(parts: Sequence[GroupGradients]) -> GroupGradients:
        """The groups of several parts, in order.

        Raises:
            ValueError: no part, or parts of different batch sizes or pairs.
        """
        if not parts:
            raise ValueError("GroupGradients.concat needs at least one part")
        first = parts[0]
        for p in parts[1:]:
            if p.batch != first.batch or set(p.pairs) != set(first.pairs) or set(p.check) != set(first.check):
                raise ValueError("GroupGradients.concat: parts differ in batch size or pairs")
        return GroupGradients(groups=np.concatenate([p.groups for p in parts]),
                              block=np.concatenate([p.block for p in parts]), batch=first.batch,
                              pairs={k: np.concatenate([p.pairs[k] for p in parts]) for k in first.pairs},
                              check={k: np.concatenate([p.check[k] for p in parts]) for k in first.check})

    def save(self, path) -> None:
        """Write an ``.npz`` (float64 matrices; names as arrays of strings)."""
        names = list(self.pairs)
        checks = list(self.check)
        np.savez_compressed(
            path, groups=self.groups, block=self.block, batch=np.int64(self.batch),
            pair_names=np.array(names, dtype=str), matrices=np.stack([self.pairs[k] for k in names])
            if names else np.zeros((0, len(self.groups), self.batch)),
            check_names=np.array(checks, dtype=str), check=np.stack([self.check[k] for k in checks])
            if checks else np.zeros((0, len(self.groups), self.batch)))

    @staticmethod
    def load(path) -> GroupGradients:
        """Read what :meth:`save` wrote.

        Raises:
            OSError: unreadable; ValueError: not such a file.
        """
        with np.load(path, allow_pickle=False) as z:
            try:
                return GroupGradients(groups=z["groups"].astype(np.int64), block=z["block"].astype(np.int64),
                                      batch=int(z["batch"]),
                                      pairs={str(k): z["matrices"][i] for i, k in enumerate(z["pair_names"])},
                                      check={str(k): z["check"][i] for i, k in enumerate(z["check_names"])})
            except KeyError as exc:
                raise ValueError(f"{path}: not a gradient file of a credit study (no {exc})") from None


class _Moments:
    """delta + (B - 1) omega of every pair, at the point estimate and for every bootstrap draw."""

    def __init__(self, gg: GroupGradients, pairs: Mapping[str, np.ndarray], counts: np.ndarray):
        self.batch = gg.batch
        self.pairs = pairs
        self.counts = counts  # (n_boot, G): each block's segment sums to its size
        block = np.asarray(gg.block)
        g = len(block)
        _, inv, size = np.unique(block, return_inverse=True, return_counts=True)
        n_b = size[inv]  # the size of each group's block
        first = np.zeros(g, dtype=np.int64)  # the position of the first group of each group's block
        for i in range(1, g):
            first[i] = first[i - 1] if block[i] == block[i - 1] else i
        j = np.arange(self.batch)
        # the partner of entry (g, j) is the j-th group of g's block (entries beyond its size are masked)
        self.inside = j[None, :] < n_b[:, None]
        self.partner = np.where(self.inside, first[:, None] + j[None, :], 0)
        self.own = np.arange(g) - first  # the column of M_gg in row g
        self.n_groups = g
        self.n_pairs = float((n_b - 1).sum())  # every ordered pair of distinct groups of a block once
        self._cache: dict[str, tuple[float, np.ndarray]] = {}

    def inner(self, key: str) -> tuple[float, np.ndarray]:
        """delta + (B - 1) omega of pair ``key``: (point estimate, (n_boot,) draws)."""
        if key not in self._cache:
            m = np.where(self.inside, np.nan_to_num(self.pairs[key]), 0.0)
            g = self.n_groups
            diag = m[np.arange(g), self.own] if g else np.zeros(0)
            total = float(m.sum())
            delta = float(diag.sum()) / g if g else math.nan
            c = self.counts
            quad = (c * (c[:, self.partner] * m[None]).sum(axis=2)).sum(axis=1) if g else np.zeros(len(c))
            d_b = c @ diag
            with np.errstate(invalid="ignore", divide="ignore"):
                delta_b = d_b / g if g else np.full(len(c), np.nan)
                if self.n_pairs > 0:
                    omega = (total - float(diag.sum())) / self.n_pairs
                    omega_b = (quad - d_b) / self.n_pairs
                else:  # no two groups in one block: the batch's groups are taken as uncorrelated
                    omega, omega_b = 0.0, np.zeros(len(c))
            b1 = self.batch - 1
            self._cache[key] = (delta + b1 * omega, delta_b + b1 * omega_b)
        return self._cache[key]


def block_counts(block: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, G) bootstrap counts: every block's groups resampled within the block."""
    block = np.asarray(block)
    rng = np.random.default_rng([seed, 0x6AD])
    counts = np.zeros((n_boot, len(block)))
    for b in dict.fromkeys(block.tolist()):
        sel = np.flatnonzero(block == b)
        counts[:, sel] = rng.multinomial(len(sel), np.full(len(sel), 1.0 / len(sel)), size=n_boot)
    return counts


def _ratio(num, e, t):
    num, e, t = np.asarray(num, dtype=float), np.asarray(e, dtype=float), np.asarray(t, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = (e > 0) & (t > 0)
        return np.where(ok, num / np.sqrt(np.where(ok, e * t, 1.0)), np.nan)


def _interval(x: np.ndarray, confidence: float) -> tuple[list[float], float]:
    x = x[np.isfinite(x)]
    if x.size < 2:
        return [math.nan, math.nan], math.nan
    lo, hi = np.quantile(x, [(1 - confidence) / 2, 1 - (1 - confidence) / 2])
    return [float(lo), float(hi)], float(x.std(ddof=1))


def alignment_table(gg: GroupGradients, rows: Sequence[str], target: str, *, n_boot: int = 2000, seed: int = 0,
                    confidence: float = 0.95, pairs: Sequence[tuple[str, str]] = (), check: bool = True,
                    draws: bool = False) -> dict:
    """The gradient alignment of every row against one target, with CIs and paired differences.

    Args:
        gg: the study's :class:`GroupGradients`.
        rows: the row names (each needs the pairs (row, row) and (row, target)).
        target: the ground-truth column (its halves' pairs are needed).
        n_boot, seed, confidence: the bootstrap over task groups (module docstring).
        pairs: (a, b) row names whose difference cos_a - cos_b is wanted (same draws).
        check: also score the second sketch (``gg.check``) when it has this target's pairs.
        draws: also return every row's bootstrap draws (``"draws"``: name -> (n_boot,)).

    Returns:
        ``{"rows": {name: {"cosine", "ci", "se", "naive"}}, "truth": {"reliability": the
        split-half cosine of the true gradient, "ci"}, "differences": [{"a", "b", "mean", "ci",
        "se"}], "groups": G, "batch": B, "sketch_check": {name: cosine of the second sketch}}``.
    """
    counts = block_counts(gg.block, n_boot, seed)
    mom = _Moments(gg, gg.pairs, counts)
    h1, h2 = target + HALVES[0], target + HALVES[1]
    t12, t12_b = mom.inner(pair_key(h1, h2))
    t11, t11_b = mom.inner(pair_key(h1, h1))
    t22, t22_b = mom.inner(pair_key(h2, h2))
    tmm = (t11 + t22 + 2 * t12) / 4
    out_rows, boots = {}, {}
    for name in rows:
        ee, ee_b = mom.inner(pair_key(name, name))
        et, et_b = mom.inner(pair_key(name, target))
        boots[name] = _ratio(et_b, ee_b, t12_b)
        ci, se = _interval(boots[name], confidence)
        out_rows[name] = {"cosine": float(_ratio(et, ee, t12)), "ci": ci, "se": se,
                          "naive": float(_ratio(et, ee, tmm))}
    diffs = []
    for a, b in pairs:
        if a in boots and b in boots:
            ci, se = _interval(boots[a] - boots[b], confidence)
            diffs.append({"a": a, "b": b, "mean": out_rows[a]["cosine"] - out_rows[b]["cosine"], "ci": ci, "se": se})
    rel_ci, _ = _interval(_ratio(t12_b, t11_b, t22_b), confidence)
    out = {"rows": out_rows, "differences": diffs, "groups": len(gg.groups), "batch": gg.batch,
           "truth": {"reliability": float(_ratio(t12, t11, t22)), "ci": rel_ci}}
    if draws:
        out["draws"] = boots
    if check and gg.check and pair_key(h1, h2) in gg.check:
        mc = _Moments(gg, gg.check, counts[:0])
        c12 = mc.inner(pair_key(h1, h2))[0]
        out["sketch_check"] = {name: float(_ratio(mc.inner(pair_key(name, target))[0],
                                                  mc.inner(pair_key(name, name))[0], c12))
                               for name in rows if pair_key(name, target) in gg.check}
    return out
