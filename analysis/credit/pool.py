"""A study's figures from its per-group numbers, and the pool of several parts of one study.

Source: the suite's method (docs/credit.md "Shards and pooling", "Resolution"). Every figure of a
credit study is a function of per-group numbers: the within-group figures of every row set against
every target (:class:`g2po_bench.analysis.credit.scoring.GroupStats`) and the inner products of the
group gradients (:class:`g2po_bench.analysis.credit.alignment.GroupGradients`). :func:`score_groups`
computes them, one function for a study run at once, a pool of shards and a study grown in chunks,
so the three give the same figures when their groups are the same.

- **One shared set of groups.** A within-group correlation is undefined in a group where either
  side is constant. Every row of a target is reported on the same groups: those where the oracle
  and every main row (the estimators at their defaults) are defined (their count beside the
  study's), so rows are compared on the same tasks and the reliability index is that of those groups;
  an ablation row undefined in some of them says how many. Sign agreement and credit mass are
  taken over the same groups. The gradient alignment is defined on every group (a sum).
- **Paired differences** (every pair of main rows, every ablation against its estimator's main
  row), per metric: the mean, its percentile-bootstrap CI, the standard error, the two-sided
  p-value (normal approximation), the Holm-adjusted p-value over the study's family of
  differences of that metric and target, the simultaneous (Bonferroni) CI, and the groups that
  would resolve a difference of 0.05 at 80 % power, alone and under Holm over the family
  (:mod:`g2po_bench.analysis.credit.resolution`).
- **Pooling** (:func:`pool_records`): records of disjoint ranges of whole blocks of one study (the
  same config, policy and settings but the shard) are concatenated in group order, rows and
  per-group numbers alike, and scored again.

numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from g2po_bench.analysis.credit.alignment import GroupGradients, alignment_table
from g2po_bench.analysis.credit.resolution import familywise_ci, groups_needed, holm, normal_p
from g2po_bench.analysis.credit.scoring import ORACLE, GroupStats, ceiling, summarize
from g2po_bench.core.stats import bootstrap_ci

__all__ = ["GroupData", "score_groups", "wanted_pairs", "shared_groups", "monte_carlo_agreement", "pool_records",
           "PoolError", "MC_ORACLE", "STATS_FIELDS"]

#: in exact mode with continuations: the row set that scores the Monte-Carlo halves against each other
MC_ORACLE = "oracle (Monte Carlo)"
#: the per-group figures a record keeps (:class:`GroupStats`)
STATS_FIELDS = ("spearman", "pearson", "decisive", "agree", "mass_decisive", "mass", "rows")
#: the settings that may differ between the parts of one study
PART_SETTINGS = ("shard", "shards")


class PoolError(ValueError):
    """Records that cannot be pooled into one study (the message names what differs or is missing)."""


def _name(v: Any) -> str:
    return v["name"] if isinstance(v, Mapping) else v.name


def _axis(v: Any) -> str:
    return (v.get("axis") if isinstance(v, Mapping) else v.axis) or ""


def _estimator(v: Any) -> str:
    return v["estimator"] if isinstance(v, Mapping) else v.estimator


def wanted_pairs(variants: Sequence[Any]) -> list[tuple[str, str]]:
    """The paired differences a study reports: every pair of main rows (later minus earlier in
    table order), and each ablation row minus its estimator's main row (variants as
    :class:`~g2po_bench.analysis.credit.variants.Variant` or record dicts)."""
    main = [v for v in variants if not _axis(v)]
    pairs = [(_name(b), _name(a)) for i, a in enumerate(main) for b in main[i + 1:]]
    main_of = {_estimator(v): _name(v) for v in main}
    pairs += [(_name(v), main_of[_estimator(v)]) for v in variants if _axis(v) and _estimator(v) in main_of]
    return pairs


@dataclass
class GroupData:
    """A study's per-group numbers.

    Attributes:
        groups: (G,) global group indices, in order.
        stats: target -> row set -> :class:`GroupStats` over ``groups``.
        gradients: the group gradients' inner products (None: not computed).
    """

    groups: np.ndarray
    stats: dict[str, dict[str, GroupStats]]
    gradients: GroupGradients | None = None

    @staticmethod
    def concat(parts: Sequence[GroupData]) -> GroupData:
        """The groups of several parts, in order.

        Raises:
            PoolError: parts with different targets, row sets, or gradients in some only.
        """
        first = parts[0]
        for p in parts[1:]:
            if p.stats.keys() != first.stats.keys() or any(p.stats[t].keys() != first.stats[t].keys()
                                                           for t in first.stats):
                raise PoolError("the parts score different targets or row sets")
        if len({p.gradients is None for p in parts}) > 1:
            raise PoolError("some parts have gradient alignment and others do not")
        stats = {t: {name: GroupStats(groups=np.concatenate([p.stats[t][name].groups for p in parts]),
                                      **{f: np.concatenate([getattr(p.stats[t][name], f) for p in parts])
                                         for f in STATS_FIELDS})
                     for name in first.stats[t]} for t in first.stats}
        grads = None if first.gradients is None else GroupGradients.concat([p.gradients for p in parts])
        return GroupData(groups=np.concatenate([p.groups for p in parts]), stats=stats, gradients=grads)

    def to_record(self) -> dict[str, Any]:
        """The ``per_group`` entry of ``credit.json`` (the gradients go to ``gradients.npz``)."""
        return {"groups": self.groups.tolist(),
                "stats": {t: {name: {f: getattr(gs, f).tolist() for f in STATS_FIELDS} for name, gs in s.items()}
                          for t, s in self.stats.items()}}

    @staticmethod
    def from_record(per_group: Mapping[str, Any], gradients: GroupGradients | None = None) -> GroupData:
        """The inverse of :meth:`to_record` (null reads as NaN)."""
        groups = np.asarray(per_group["groups"], dtype=np.int64)

        def arr(x):
            return np.array([np.nan if v is None else v for v in x], dtype=np.float64)

        stats = {t: {name: GroupStats(groups=groups.copy(), **{f: arr(d[f]) for f in STATS_FIELDS})
                     for name, d in s.items()} for t, s in per_group["stats"].items()}
        return GroupData(groups=groups, stats=stats, gradients=gradients)


def _restrict(gs: GroupStats, mask: np.ndarray) -> GroupStats:
    return GroupStats(groups=gs.groups[mask], **{f: getattr(gs, f)[mask] for f in STATS_FIELDS})


def shared_groups(stats: Mapping[str, GroupStats], names: Sequence[str]) -> np.ndarray:
    """(G,) bool: the groups where the Spearman correlation of every row set in ``names`` is defined."""
    mask = None
    for n in names:
        if n in stats:
            ok = np.isfinite(stats[n].spearman)
            mask = ok if mask is None else mask & ok
    if mask is None:
        first = next(iter(stats.values()))
        mask = np.ones(len(first.groups), dtype=bool)
    return mask


def _difference(a: GroupStats, b: GroupStats, n_all: int, *, n_boot: int, seed: int, confidence: float) -> dict:
    d = a.spearman - b.spearman
    d = d[np.isfinite(d)]
    n = int(d.size)
    if n == 0:
        return {"mean": math.nan, "ci": [math.nan, math.nan], "groups": 0, "sd": math.nan, "se": math.nan}
    lo, hi = bootstrap_ci(d, n_boot=n_boot, seed=seed, confidence=confidence)
    sd = float(d.std(ddof=1)) if n >= 2 else math.nan
    return {"mean": float(d.mean()), "ci": [lo, hi], "groups": n, "sd": sd,
            "se": sd / math.sqrt(n) if n >= 2 else math.nan, "defined_fraction": n / n_all if n_all else math.nan}


def _resolve(entries: list[dict]) -> None:
    """Add p, Holm's p, the family-wise CI and the groups needed to every entry of one family."""
    p = [normal_p(e.get("mean"), e.get("se")) for e in entries]
    adjusted = holm(p)
    m = int(np.isfinite(np.asarray(p, dtype=float)).sum())
    for e, raw, adj in zip(entries, p, adjusted):
        frac = e.get("defined_fraction", 1.0)
        e.update(p=raw, p_holm=float(adj), family=m, ci_family=list(familywise_ci(e.get("mean"), e.get("se"), max(m, 1))),
                 groups_needed=groups_needed(e.get("sd"), defined_fraction=frac),
                 groups_needed_holm=groups_needed(e.get("sd"), family=max(m, 1), defined_fraction=frac))


def monte_carlo_agreement(exact: np.ndarray, mc: np.ndarray, se: np.ndarray, mask: np.ndarray) -> dict[str, float]:
    """How the Monte-Carlo A* agrees with the exact A* on the rows in ``mask``: the fraction within
    1.96 SE, the mean and largest |z|."""
    diff = (np.asarray(mc, dtype=float) - np.asarray(exact, dtype=float))[mask]
    se = np.asarray(se, dtype=float)[mask]
    within = np.abs(diff) <= 1.96 * np.nan_to_num(se, nan=0.0) + 1e-12
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(se > 0, diff / se, np.where(np.abs(diff) <= 1e-12, 0.0, np.inf))
    finite = np.isfinite(z)
    return {"rows": int(mask.sum()), "within_ci": float(within.mean()) if within.size else math.nan,
            "mean_z": float(z[finite].mean()) if finite.any() else math.nan,
            "max_abs_z": float(np.abs(z).max()) if z.size else math.nan}


def score_groups(data: GroupData, variants: Sequence[Any], settings: Any) -> dict[str, dict]:
    """Every figure of a study from its per-group numbers (module docstring).

    Args:
        data: the per-group numbers.
        variants: the scored rows in table order (:class:`~g2po_bench.analysis.credit.variants.Variant`
            or record dicts with ``name``, ``estimator``, ``axis``).
        settings: ``n_boot``, ``seed``, ``confidence`` (a
            :class:`~g2po_bench.analysis.credit.study.CreditSettings` or its dict).

    Returns:
        target -> ``{"groups": G, "shared": {"groups": n, "rule": text}, "rows": {name:
        summarize(...)} (the oracle included), "ceiling", "mc_ceiling" (exact mode with
        continuations, else None), "differences": [{"a", "b", "spearman": {mean, ci, groups, sd,
        se, p, p_holm, family, ci_family, groups_needed, groups_needed_holm}}], "gradient":
        :func:`~g2po_bench.analysis.credit.alignment.alignment_table` with the same additions on its
        differences, or None}``.
    """
    get = settings.get if isinstance(settings, Mapping) else (lambda k: getattr(settings, k))
    n_boot, seed, confidence = int(get("n_boot")), int(get("seed")), float(get("confidence"))
    names = [_name(v) for v in variants]
    main = [_name(v) for v in variants if not _axis(v)]
    pairs = wanted_pairs(variants)
    g_all = len(data.groups)
    out: dict[str, dict] = {}
    for target, stats in data.stats.items():
        shared = shared_groups(stats, [*main, ORACLE])
        sub = {name: _restrict(gs, shared) for name, gs in stats.items()}
        rows = {}
        for name in [*names, ORACLE]:
            if name in sub:
                rows[name] = summarize(sub[name], n_boot=n_boot, seed=seed, confidence=confidence)
                rows[name]["spearman"]["defined_all_groups"] = int(np.isfinite(stats[name].spearman).sum())
        diffs = [{"a": a, "b": b, "spearman": _difference(sub[a], sub[b], g_all, n_boot=n_boot, seed=seed,
                                                          confidence=confidence)}
                 for a, b in pairs if a in sub and b in sub]
        _resolve([d["spearman"] for d in diffs])
        mc = (ceiling(summarize(sub[MC_ORACLE], n_boot=n_boot, seed=seed, confidence=confidence))
              if MC_ORACLE in sub else None)
        grad = None
        if data.gradients is not None:
            grad = alignment_table(data.gradients, [n for n in names if n in sub], target, n_boot=n_boot, seed=seed,
                                   confidence=confidence, pairs=pairs)
            for d in grad["differences"]:
                d["sd"] = d["se"] * math.sqrt(g_all) if math.isfinite(d["se"]) else math.nan
            _resolve(grad["differences"])
        out[target] = {"groups": g_all,
                       "shared": {"groups": int(shared.sum()),
                                  "rule": "the groups where the oracle and every main row have a defined Spearman"},
                       "rows": rows, "ceiling": ceiling(rows[ORACLE]), "mc_ceiling": mc, "differences": diffs,
                       "gradient": grad}
    return out


# ---------------------------------------------------------------------------- pooling
@dataclass
class _Part:
    record: dict[str, Any]
    gradients: GroupGradients | None
    where: str = ""
    first: int = field(init=False)
    stop: int = field(init=False)

    def __post_init__(self):
        self.first, self.stop = (int(x) for x in self.record["groups"])


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    """``key: A != B`` for each (nested) entry where ``a`` and ``b`` differ (the first 5)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += _differences(a.get(k), b.get(k), f"{prefix}{k}.")
        return out[:5]
    return [] if a == b else [f"{prefix.rstrip('.') or 'value'}: {a!r} != {b!r}"]


def _mismatches(parts: list[_Part], key: str, fn=lambda r, k: r.get(k)) -> list[str]:
    """``"<part> and <first part> differ in KEY (what)"`` for each part whose ``fn(record, key)``
    is not the first part's."""
    ref = fn(parts[0].record, key)
    out = []
    for p in parts[1:]:
        value = fn(p.record, key)
        if value != ref:
            what = "; ".join(_differences(value, ref)) or "?"
            out.append(f"{p.where} and {parts[0].where} differ in {key} ({what})")
    return out


def _concat_rows(parts: list[_Part]) -> dict[str, Any]:
    def cat(values):
        if isinstance(values[0], dict):
            return {k: cat([v[k] for v in values]) for k in values[0]}
        return [x for v in values for x in v]

    return cat([p.record["rows"] for p in parts])


def pool_records(records: Sequence[tuple[str, dict[str, Any], GroupGradients | None]],
                 *, code: Any = None, command: Sequence[str] = (), created: str | None = None) -> tuple[dict[str, Any],
                                                                                                    GroupGradients | None]:
    """One study record from the records of its parts (shards or chunks).

    Args:
        records: (where it came from, ``credit.json`` object, its gradients or None) per part.
        code, command, created: the pooled record's provenance (the parts' own are kept under
            ``parts``).

    Returns:
        (the pooled record, the pooled gradients or None): ``groups`` [0, G), ``settings``
        with ``shard`` 0 of 1, rows and per-group numbers in group order, ``summary`` and
        ``timing`` summed, ``scores`` by :func:`score_groups`.

    Raises:
        PoolError: the parts differ in config, policy, settings (but the shard), rows or
            targets; their groups overlap, leave a gap, or do not reach the study's G.
    """
    parts = sorted((_Part(rec, gg, where) for where, rec, gg in records), key=lambda p: p.first)
    if not parts:
        raise PoolError("nothing to pool: no credit.json")
    for p in parts:
        if p.record.get("version", 1) < 2 or "per_group" not in p.record:
            raise PoolError(f"{p.where}: a credit record of version {p.record.get('version', 1)} keeps no per-group "
                            "numbers; run the study again to pool it")
    found = [m for key in ("env", "mode", "config", "variants", "skipped") for m in _mismatches(parts, key)]
    found += _mismatches(parts, "policy", lambda r, k: {a: b for a, b in r[k].items() if a != "reused"})  # a warm start's builder
    found += _mismatches(parts, "settings", lambda r, k: {a: b for a, b in r[k].items() if a not in PART_SETTINGS})
    if found:  # every kind of difference at once: fixing one should not reveal the next
        raise PoolError("; ".join(found) + ": not parts of one study")
    total = int(parts[0].record["settings"]["groups"])
    expect = 0
    for p in parts:
        if p.first != expect:
            what = "overlap" if p.first < expect else f"groups {expect}..{p.first - 1} are missing"
            raise PoolError(f"the parts do not tile the study's {total} groups: {what} before {p.where} (groups "
                            f"{p.first}..{p.stop - 1})")
        expect = p.stop
    if expect != total:
        raise PoolError(f"the parts reach group {expect - 1} of the study's {total}: groups {expect}..{total - 1} "
                        "are missing: run their shards (the same g2po credit command with --shard I/N) and pool all the parts")
    first = parts[0].record
    data = GroupData.concat([GroupData.from_record(p.record["per_group"], p.gradients) for p in parts])
    settings = {**first["settings"], "shard": 0, "shards": 1}
    summary: dict[str, Any] = {}
    for key in first["summary"]:
        vals = [p.record["summary"].get(key) for p in parts]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            summary[key] = sum(vals)
    n_traj = sum(p.record["summary"]["trajectories"] for p in parts)
    summary["success_rate"] = (sum(p.record["summary"]["success_rate"] * p.record["summary"]["trajectories"]
                                   for p in parts) / n_traj) if n_traj else math.nan
    rows = _concat_rows(parts)
    a = np.array([math.nan if x is None else x for x in rows["a_star"]], dtype=float)
    finite = a[np.isfinite(a)]
    summary["zero_a_star_frac"] = float((np.abs(finite) <= 1e-12).mean()) if finite.size else math.nan
    timing: dict[str, float] = {}
    for p in parts:
        for k, v in (p.record.get("timing") or {}).items():
            if isinstance(v, (int, float)):
                timing[k] = timing.get(k, 0.0) + v
    agreement = None
    if first.get("mode") == "exact" and "a_star_mc" in rows:
        mc = np.array([math.nan if x is None else x for x in rows["a_star_mc"]], dtype=float)
        se = np.array([math.nan if x is None else x for x in rows["a_star_mc_se"]], dtype=float)
        agreement = monte_carlo_agreement(a, mc, se, np.isfinite(a))
    out = {**first, "created": created or first.get("created"), "command": list(command) or first.get("command"),
           "code": code if code is not None else first.get("code"), "settings": settings, "groups": [0, total],
           "tasks": [t for p in parts for t in p.record["tasks"]], "summary": summary, "timing": timing,
           "per_group": data.to_record(), "rows": rows, "agreement": agreement,
           "scores": score_groups(data, first["variants"], settings),
           "parts": [{"where": p.where, "groups": [p.first, p.stop], "created": p.record.get("created"),
                      "code": p.record.get("code"), "machine": p.record.get("machine"),
                      "command": p.record.get("command"), "timing": p.record.get("timing")} for p in parts]}
    return out, data.gradients
