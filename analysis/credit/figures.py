"""Figures of a credit-accuracy study (matplotlib on the Agg backend, seaborn's style; PNG).

- :func:`plot_scatter`: one panel per main estimator (and the oracle): each sampled step's
  advantage A (y) against its ground truth A* (x), with the panel's mean within-group Spearman.
- :func:`plot_correlations`: every scored row's mean within-group Spearman with its 95 % CI
  (horizontal bars, coloured by ablation axis), with the reliability index sqrt(reliability) of the ground truth
  and the oracle (split-half) as vertical lines.
- :func:`plot_gradient`: every scored row's gradient alignment (the cosine of its policy gradient
  with the true one in a training batch) with its 95 % CI, the same layout.

Both read a ``credit.json`` record (:mod:`g2po_bench.analysis.credit.record`), so ``g2po report``
can redraw them; each returns the PNG path, or None when the record has nothing to draw.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import seaborn as sns  # noqa: E402

from g2po_bench.analysis.credit.groundtruth import TARGET_LABELS  # noqa: E402
from g2po_bench.analysis.credit.record import row_dicts  # noqa: E402

__all__ = ["plot_scatter", "plot_correlations", "plot_gradient"]



def _save(fig, out: str | os.PathLike) -> Path:
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def plot_scatter(record: dict[str, Any], out: str | os.PathLike, *, target: str = "a_star") -> Path | None:
    """Scatter of A against the target for the main rows (axis "") and the oracle; None
    without rows."""
    rows = row_dicts(record)
    main = [v["name"] for v in record.get("variants", []) if not v.get("axis")]
    if not rows or not main:
        return None
    sc = record["scores"][target]["rows"]
    y_true = np.array([_num(r[target]) for r in rows])
    names = main + ["oracle"]
    ncol = min(4, len(names))
    nrow = math.ceil(len(names) / ncol)
    sns.set_style("whitegrid")
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.2 * ncol, 2.9 * nrow), squeeze=False)
    for ax, name in zip(axes.flat, names):
        if name == "oracle":
            x = np.array([_num(r.get(target)) for r in rows])
            ax.set_title("oracle (shown: A* of all K)", fontsize=9)
            y = x
        else:
            x = y_true
            y = np.array([_num(r["advantages"].get(name)) for r in rows])
            ax.set_title(name, fontsize=9)
        m = np.isfinite(x) & np.isfinite(y)
        ax.scatter(x[m], y[m], s=6, alpha=0.35, color="tab:blue", linewidths=0)
        ax.axhline(0, color="0.6", lw=0.6)
        ax.axvline(0, color="0.6", lw=0.6)
        rho = sc.get(name, {}).get("spearman", {}).get("mean")
        if rho is not None:
            ax.text(0.03, 0.95, f"within-group rho = {rho:.2f}", transform=ax.transAxes, fontsize=8, va="top")
        ax.set_xlabel(TARGET_LABELS.get(target, target), fontsize=8)
        ax.set_ylabel("A (estimator)", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.suptitle(f"Step advantages against the ground truth ({record.get('env')}, {record.get('mode')})", fontsize=10)
    fig.tight_layout()
    return _save(fig, out)


def plot_correlations(record: dict[str, Any], out: str | os.PathLike, *, target: str = "a_star") -> Path | None:
    """Horizontal bars of mean within-group Spearman with CIs, one per scored row; None without
    scores."""
    sc = (record.get("scores") or {}).get(target)
    if not sc:
        return None
    variants = record.get("variants", [])
    names = [v["name"] for v in variants] + ["oracle"]
    axis_of = {v["name"]: v.get("axis") or "main" for v in variants}
    axis_of["oracle"] = "oracle"
    means = np.array([_num(sc["rows"][n]["spearman"]["mean"]) for n in names])
    lo = np.array([_num(sc["rows"][n]["spearman"]["ci"][0]) for n in names])
    hi = np.array([_num(sc["rows"][n]["spearman"]["ci"][1]) for n in names])
    axes_list = list(dict.fromkeys(axis_of[n] for n in names))
    palette = dict(zip(axes_list, sns.color_palette("tab20", len(axes_list))))
    sns.set_style("whitegrid")
    fig, ax = plt.subplots(figsize=(7.5, 0.28 * len(names) + 1.4))
    yy = np.arange(len(names))[::-1]
    err = np.vstack([np.nan_to_num(means - lo), np.nan_to_num(hi - means)])
    ax.barh(yy, np.nan_to_num(means), xerr=err, color=[palette[axis_of[n]] for n in names], height=0.7,
            error_kw={"lw": 0.8, "capsize": 2})
    ax.set_yticks(yy)
    ax.set_yticklabels(names, fontsize=8)
    ceil = sc.get("ceiling", {})
    c = _num(ceil.get("ceiling", {}).get("mean"))
    if math.isfinite(c):
        ax.axvline(c, color="black", ls="--", lw=1, label=f"reliability index sqrt(reliability) = {c:.2f}")
    r = _num(ceil.get("split_half", {}).get("mean"))
    if math.isfinite(r):
        ax.axvline(r, color="0.4", ls=":", lw=1, label=f"split-half r = {r:.2f}")
    ax.axvline(0, color="0.5", lw=0.6)
    ax.set_xlabel(f"mean within-group Spearman with {TARGET_LABELS.get(target, target)} (95 % CI over groups)",
                  fontsize=8)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="lower right")
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return _save(fig, out)


def plot_gradient(record: dict[str, Any], out: str | os.PathLike, *, target: str = "a_star") -> Path | None:
    """Horizontal bars of every row's gradient alignment with its CI; None without gradients."""
    grad = ((record.get("scores") or {}).get(target) or {}).get("gradient")
    if not grad:
        return None
    variants = record.get("variants", [])
    names = [v["name"] for v in variants if v["name"] in grad["rows"]]
    axis_of = {v["name"]: v.get("axis") or "main" for v in variants}
    means = np.array([_num(grad["rows"][n]["cosine"]) for n in names])
    lo = np.array([_num(grad["rows"][n]["ci"][0]) for n in names])
    hi = np.array([_num(grad["rows"][n]["ci"][1]) for n in names])
    axes_list = list(dict.fromkeys(axis_of[n] for n in names))
    palette = dict(zip(axes_list, sns.color_palette("tab20", len(axes_list))))
    sns.set_style("whitegrid")
    fig, ax = plt.subplots(figsize=(7.5, 0.28 * len(names) + 1.4))
    yy = np.arange(len(names))[::-1]
    err = np.vstack([np.nan_to_num(np.maximum(means - lo, 0)), np.nan_to_num(np.maximum(hi - means, 0))])
    ax.barh(yy, np.nan_to_num(means), xerr=err, color=[palette[axis_of[n]] for n in names], height=0.7,
            error_kw={"lw": 0.8, "capsize": 2})
    ax.set_yticks(yy)
    ax.set_yticklabels(names, fontsize=8)
    ax.axvline(0, color="0.5", lw=0.6)
    ax.axvline(1, color="black", ls="--", lw=1, label="the true advantages (1)")
    ax.set_xlabel(f"gradient alignment with {TARGET_LABELS.get(target, target)}: cosine in a batch of "
                  f"{grad['batch']} groups (95 % CI over groups)", fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return _save(fig, out)
