"""Aggregation over seeds: mean ± std and bootstrap confidence intervals per table cell, and the
paired comparisons (improvement over the warm start, differences between methods).

Conventions:

- ``std`` is the sample standard deviation (``ddof=1``); with one value it is NaN (the tables
  print "n/a"), never 0.
- Every interval is the suite's percentile bootstrap (:mod:`g2po_bench.core.stats`, one seeded
  generator per cell, so a cell's interval depends only on its values and ``seed``): over seeds for
  a cell (:func:`g2po_bench.core.stats.bootstrap_ci`), over seeds then panel episodes for the
  paired comparisons (:func:`g2po_bench.core.stats.paired_improvement_ci`). Fewer than two values
  give (NaN, NaN).
- A cell's ``iqm`` is rliable's interquartile mean of its seeds' values
  (``rliable.metrics.aggregate_iqm``: sort, drop ``int(0.25 * n)`` values at each end, average
  the rest; with fewer than four values nothing is dropped). The IQM over runs x ALFWorld task
  types, with its stratified-bootstrap interval, is :mod:`g2po_bench.analysis.estimates`'.

Missing values (NaN) are dropped before aggregating; they never count as 0.

Example::

    from g2po_bench.analysis.aggregate import metrics_long, aggregate_metrics
    long = metrics_long(loaded.runs, which="final")      # one row per run x metric, in %
    cells = aggregate_metrics(long)                       # one row per method/size/metric
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from rliable import metrics as rly_metrics

from g2po_bench.analysis.naming import (
    ALFWORLD_TASK_TYPES,
    TASK_TYPE_METRIC,
    env_metric_names,
    method_sort_key,
)
from g2po_bench.core.stats import DEFAULT_N_BOOT, bootstrap_ci, paired_improvement_ci

__all__ = [
    "mean_std",
    "metrics_long",
    "aggregate_metrics",
    "DEFAULT_N_BOOT",
    "GROUP_COLUMNS",
    "improvement_over_warm_start",
    "method_differences",
]

#: The cell of a table: which rows of ``metrics_long`` are seeds of the same thing.
GROUP_COLUMNS = ("model_size", "method_label", "method", "variant", "env", "metric")


def mean_std(values: Sequence[float] | np.ndarray) -> tuple[float, float, int]:
    """(mean, sample std with ddof=1, n) of the finite values; std NaN when n < 2, all NaN when n == 0."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return math.nan, math.nan, 0
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n >= 2 else math.nan
    return mean, std, n


# ---------------------------------------------------------------------------- frames
_RUN_ID_COLUMNS = ("run_id", "model_size", "method_label", "method", "variant", "env", "seed", "in_progress",
                   "short_run")


def metrics_long(runs: pd.DataFrame, which: str = "final") -> pd.DataFrame:
    """Table metrics of every run, one row per (run, metric), in the reference's units.

    Args:
        runs: ``LoadedRuns.runs``.
        which: "final", "best" or "before": which evaluation of each run.

    Returns:
        DataFrame with columns ``run_id, model_size, method_label, method, variant, env, seed,
        in_progress, short_run, metric, value`` (``short_run`` False where ``runs`` has no such
        column, :func:`g2po_bench.analysis.load.mark_short_runs`). ``metric`` names follow :mod:`g2po_bench.analysis.reference`
        (ALFWorld: ``success_all`` and ``success_<pick|look|clean|heat|cool|pick2>``; other
        envs: ``<env>_success`` and ``<env>_score``). Success rates are converted from
        fractions to % (x 100); scores are taken as logged (WebShop: mean reward x 100). The
        ALFWorld ``score`` (mean final env reward x 100, on the 0/10 reward scale) is not a
        paper metric and is left out.
        Missing values produce no row (never 0).
    """
    if which not in ("final", "best", "before"):
        raise ValueError(f"which must be final, best or before, got {which!r}")
    cols = list(_RUN_ID_COLUMNS) + ["metric", "value"]
    out: list[dict] = []
    for _, r in runs.iterrows():
        base = {c: r.get(c) for c in _RUN_ID_COLUMNS}
        base["short_run"] = bool(base["short_run"]) if base["short_run"] is not None else False
        env = str(r.get("env"))
        succ_name, score_name = env_metric_names(env)

        def add(metric: str, value: object, scale: float, base: dict = base) -> None:
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                out.append({**base, "metric": metric, "value": float(value) * scale})

        add(succ_name, r.get(f"{which}.success_rate"), 100.0)
        if env != "alfworld":
            add(score_name, r.get(f"{which}.score"), 1.0)
        if env == "alfworld":
            for t in ALFWORLD_TASK_TYPES:
                add(TASK_TYPE_METRIC[t], r.get(f"{which}.task.{t}"), 100.0)
    if not out:
        return pd.DataFrame(columns=cols)
    return pd.DataFrame.from_records(out, columns=cols)


def aggregate_metrics(
    long: pd.DataFrame,
    *,
    by: Sequence[str] = GROUP_COLUMNS,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> pd.DataFrame:
    """Mean ± std and bootstrap CI over seeds for every cell of ``long`` (from :func:`metrics_long`).

    Returns:
        One row per group of ``by`` with columns ``*by, n, mean, std, ci_low, ci_high, iqm,
        in_progress`` (True if any run of the cell is still running), ``short_run`` (True if any
        run of the cell is short), ``seeds`` (sorted
        comma-separated seeds), ``run_ids`` (comma-separated). ``std``/``ci_*`` are NaN for
        one run.
    """
    by = list(by)
    cols = by + ["n", "mean", "std", "ci_low", "ci_high", "iqm", "in_progress", "short_run", "seeds", "run_ids"]
    if long is None or len(long) == 0:
        return pd.DataFrame(columns=cols)
    rows = []
    for key, grp in long.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        vals = grp["value"].to_numpy(dtype=float)
        mean, std, n = mean_std(vals)
        lo, hi = bootstrap_ci(vals, confidence=confidence, n_boot=n_boot, seed=seed)
        finite = vals[np.isfinite(vals)]
        seeds = sorted({int(s) for s in grp["seed"] if pd.notna(s)}) if "seed" in grp else []
        rows.append(
            {
                **dict(zip(by, key)),
                "n": n,
                "mean": mean,
                "std": std,
                "ci_low": lo,
                "ci_high": hi,
                "iqm": float(rly_metrics.aggregate_iqm(finite)) if finite.size else math.nan,
                "in_progress": bool(grp["in_progress"].astype(bool).any()) if "in_progress" in grp else False,
                "short_run": bool(grp["short_run"].astype(bool).any()) if "short_run" in grp else False,
                "seeds": ",".join(str(s) for s in seeds),
                "run_ids": ",".join(str(x) for x in grp["run_id"]) if "run_id" in grp else "",
            }
        )
    return pd.DataFrame.from_records(rows, columns=cols)


def improvement_over_warm_start(
    runs: pd.DataFrame,
    *,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    at_train_temperature: bool = False,
    metric: str = "success",
) -> pd.DataFrame:
    """Held-out success (or score) after RL minus before RL (after the warm start), per method.

    For each (env, model size, method label), the runs' ``eval.json`` ``before`` and ``final``
    evaluations give per-episode successes on the same panel; the improvement is their mean
    difference over seeds and episodes, with the paired two-level bootstrap CI of
    :func:`g2po_bench.core.stats.paired_improvement_ci` (seeds, then panel episodes). Runs whose
    ``eval.json`` has no per-episode record (older runs) fall back to one value per seed
    (``final - before``) and a bootstrap over seeds.

    Args:
        runs: :attr:`g2po_bench.analysis.load.LoadedRuns.runs` (needs ``path``, ``before.success_rate``,
            ``final.success_rate`` and the identity columns).
        at_train_temperature: use the panel played at the training temperature instead
            (``eval.json`` ``at_train_temperature``, written with ``eval.at_train_temperature``): a
            group is kept only when every run has that record with per-episode successes (no
            fallback), and ``before``/``final`` are then the means of those episodes.
        metric: ``"success"`` (per-episode successes, in %) or ``"score"`` (the per-episode scores
            of ``eval.json`` ``episode_scores``, 0-100: WebShop's purchase reward x 100, 0 for an
            episode that never buys, the paper's WebShop score). For the score a group is kept only
            when every run has per-episode scores before and after (no fallback over seeds).

    Returns:
        One row per group: ``env, model_size, method_label, seeds, before, final, improvement,
        ci_low, ci_high, ci_kind`` (success in %, or score points; ``ci_kind`` "episodes x seeds"
        or "seeds").

    Raises:
        ValueError: ``metric`` is neither "success" nor "score".
    """
    if metric not in ("success", "score"):
        raise ValueError(f"metric must be 'success' or 'score', not {metric!r}")
    rows = []
    if runs is None or runs.empty or "before.success_rate" not in runs:
        return pd.DataFrame(columns=["env", "model_size", "method_label", "seeds", "before", "final",
                                     "improvement", "ci_low", "ci_high", "ci_kind"])
    scale = 100.0 if metric == "success" else 1.0
    exact = at_train_temperature or metric == "score"
    train = runs[runs.get("kind", "train") == "train"] if "kind" in runs else runs
    for (env, size, label), grp in train.groupby(["env", "model_size", "method_label"], sort=True):
        grp = grp.dropna(subset=["before.success_rate", "final.success_rate"])
        if grp.empty:
            continue
        before_eps, final_eps = [], []
        for p in grp["path"]:
            try:
                ev = json.loads((Path(p) / "eval.json").read_text())
                if at_train_temperature:
                    ev = ev["at_train_temperature"]
                if metric == "score":
                    b = [float(x) for x in ev["before"]["episode_scores"]]
                    f = [float(x) for x in ev["final"]["episode_scores"]]
                else:
                    b = [e[1] for e in ev["before"]["episodes"]]
                    f = [e[1] for e in ev["final"]["episodes"]]
            except (OSError, ValueError, KeyError, TypeError, IndexError):
                break
            if len(b) != len(f) or len(b) < 2:
                break
            before_eps.append(b)
            final_eps.append(f)
        paired = len(before_eps) == len(grp) and len({len(b) for b in before_eps}) == 1
        if exact and not paired:
            continue
        b_mean = float(grp["before.success_rate"].mean()) * 100
        f_mean = float(grp["final.success_rate"].mean()) * 100
        if exact:
            b_mean = scale * float(np.mean([np.mean(b) for b in before_eps]))
            f_mean = scale * float(np.mean([np.mean(f) for f in final_eps]))
        if paired:
            d, lo, hi = paired_improvement_ci(before_eps, final_eps, confidence=confidence, n_boot=n_boot,
                                              seed=seed)
            kind = "episodes x seeds"
        else:
            diffs = (grp["final.success_rate"] - grp["before.success_rate"]).to_numpy(float)
            d = float(diffs.mean())
            lo, hi = bootstrap_ci(diffs, confidence=confidence, n_boot=n_boot, seed=seed)
            kind = "seeds"
        rows.append({"env": env, "model_size": size, "method_label": label, "seeds": len(grp),
                     "before": b_mean, "final": f_mean, "improvement": scale * d,
                     "ci_low": scale * lo, "ci_high": scale * hi, "ci_kind": kind})
    return pd.DataFrame(rows)


def _final_episodes(path: str, at_train_temperature: bool) -> dict[str, float] | None:
    """Task id -> success of a run's final evaluation (``eval.json``), or None without records."""
    try:
        ev = json.loads((Path(path) / "eval.json").read_text())
        if at_train_temperature:
            ev = ev["at_train_temperature"]
        eps = ev["final"]["episodes"]
        out = {str(e[0]): float(e[1]) for e in eps}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    return out if len(out) == len(eps) and len(out) >= 2 else None


def method_differences(
    runs: pd.DataFrame,
    *,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    at_train_temperature: bool = False,
) -> pd.DataFrame:
    """Final held-out success of one method minus another's, paired by seed and panel episode.

    For every two methods of the same (env, model size) that share seeds, the runs of a common
    seed played the same held-out panel after RL (the same tasks; the episodes are matched by
    task id, so the two panels must hold the same tasks); the difference ``method - baseline`` is
    the mean over common seeds and episodes, with the two-level paired bootstrap CI of
    :func:`g2po_bench.core.stats.paired_improvement_ci` (seeds, then episodes; the baseline's final
    evaluation plays the role of "before"). Pairing by seed only removes noise when both methods
    started RL from the same warm start and panel, as in a sweep with a shared warm start. Runs
    without per-episode records, duplicated seeds or panels of other tasks are left out; a pair
    with fewer than one common seed is not reported.

    Args:
        runs: :attr:`g2po_bench.analysis.load.LoadedRuns.runs` (``path``, ``seed`` and identity columns).
        at_train_temperature: compare the panels played at the training temperature
            (``eval.json`` ``at_train_temperature``) instead.

    Returns:
        One row per pair of methods, ``method`` the later of the two in the tables' row order
        (:data:`g2po_bench.analysis.naming.METHOD_ORDER`, e.g. G2PO after GRPO): ``env, model_size,
        method_label, baseline_label, seeds, method_final, baseline_final, difference, ci_low,
        ci_high`` (success values in %, difference in points).
    """

    cols = ["env", "model_size", "method_label", "baseline_label", "seeds", "method_final",
            "baseline_final", "difference", "ci_low", "ci_high"]
    if runs is None or runs.empty or "seed" not in runs or "path" not in runs:
        return pd.DataFrame(columns=cols)
    train = runs[runs["kind"] == "train"] if "kind" in runs else runs
    rows = []
    for (env, size), grp in train.groupby(["env", "model_size"], sort=True):
        finals: dict[str, dict[int, dict[str, float]]] = {}
        for label, mgrp in grp.groupby("method_label", sort=True):
            by_seed = {}
            for s_, p in zip(mgrp["seed"], mgrp["path"]):
                eps = _final_episodes(p, at_train_temperature)
                if eps is not None and not pd.isna(s_) and int(s_) not in by_seed:
                    by_seed[int(s_)] = eps
            if by_seed:
                finals[str(label)] = by_seed
        labels = sorted(finals, key=method_sort_key)  # the paper's row order: later minus earlier
        for i, base in enumerate(labels):
            for meth in labels[i + 1:]:
                common = sorted(s_ for s_ in set(finals[base]) & set(finals[meth])
                                if finals[base][s_].keys() == finals[meth][s_].keys())
                if not common:
                    continue
                tasks = [sorted(finals[base][s_]) for s_ in common]
                if len({len(t) for t in tasks}) != 1:
                    continue
                b = [[finals[base][s_][t] for t in ts] for s_, ts in zip(common, tasks)]
                m = [[finals[meth][s_][t] for t in ts] for s_, ts in zip(common, tasks)]
                d, lo, hi = paired_improvement_ci(b, m, confidence=confidence, n_boot=n_boot, seed=seed)
                rows.append({"env": env, "model_size": size, "method_label": meth, "baseline_label": base,
                             "seeds": len(common), "method_final": 100 * float(np.mean(m)),
                             "baseline_final": 100 * float(np.mean(b)), "difference": 100 * d,
                             "ci_low": 100 * lo, "ci_high": 100 * hi})
    return pd.DataFrame(rows, columns=cols)
