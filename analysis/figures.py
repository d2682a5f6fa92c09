"""Figures (seaborn on matplotlib's Agg backend; PNG files).

Every function takes the frames of :func:`g2po_bench.analysis.load.load_runs`, writes one PNG and returns
its path, or returns None (writing nothing) when the data for that figure are absent, so a
report on a partial set of runs simply has fewer figures; :func:`figure_skip_reason` then
says why in words (for the report's "missing" list).

- :func:`plot_learning_curves`: evaluation success (%) vs. iteration, mean over seeds with a
  band of ± one std (seaborn ``errorbar="sd"``), one line per method, one panel per
  (environment, model size). Data: ``evals`` (eval.json's before/history/final, or the
  ``eval/success_rate`` of metrics.jsonl). Needs at least one evaluation.
- :func:`plot_ablation_ladder`: final success (%) of GRPO, the G2PO variants and G2PO as bars
  (mean, error bar ± std, seeds as dots), per environment. Needs a G2PO run with a variant
  other than a pure ``w=...`` one.
- :func:`plot_w_sweep`: final success (%) vs. ``algorithm.step_weight`` for GiGPO/G2PO runs
  whose only variant is ``w`` (mean ± std over seeds), per environment; the paper's best
  w = 0.8 is marked. Needs two distinct w values for one method.
- :func:`plot_node_sizes`: histogram of the node-size diagnostics. Uses a logged histogram
  (``adv/node_size_hist``: ``{size: count}`` or a list of counts indexed by size) when present,
  else the distribution over iterations of ``adv/node_size_mean`` (the paper: about 5).
- :func:`plot_singleton_fraction`: ``adv/singleton_frac`` (%) vs. iteration per method and
  environment, with the paper's 8.1 % (ALFWorld) and 11.9 % (WebShop) as dashed lines.
- :func:`plot_performance_profiles`: rliable's performance profiles (the fraction of run x task-type
  success rates above a threshold, with 95 % stratified-bootstrap bands;
  :func:`g2po_bench.analysis.estimates.performance_profiles`), one panel per environment and model
  size, drawn by ``rliable.plot_utils.plot_performance_profiles``. Needs a score array.
- :func:`plot_paired_differences`: a forest plot of the paired differences between methods
  (:func:`g2po_bench.analysis.aggregate.method_differences`): one line per pair "method − baseline"
  with its difference (points) as a dot and its 95 % paired bootstrap CI as a bar, a line at 0;
  one panel per (environment, model size) and evaluation temperature. Variants are paired with
  their main row like any two methods. Needs one pair with common seeds.

Learning curves and the two diagnostics figures show main-table runs only (``variant == ""``)
unless ``include_variants=True``; the ablation and w-sweep figures exist to show variants.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from rliable import plot_utils as rly_plot  # noqa: E402

from g2po_bench.analysis.naming import method_sort_key, model_size_sort_key  # noqa: E402

__all__ = [
    "plot_learning_curves",
    "plot_ablation_ladder",
    "plot_w_sweep",
    "plot_node_sizes",
    "plot_singleton_fraction",
    "plot_paired_differences",
    "plot_performance_profiles",
    "figure_skip_reason",
    "PAPER_SINGLETON_PCT",
    "PAPER_BEST_W",
]

PAPER_SINGLETON_PCT = {"alfworld": 8.1, "webshop": 11.9}
PAPER_NODE_SIZE_MEAN = 5.0
PAPER_BEST_W = 0.8

_SKIP: dict[str, str] = {}


def figure_skip_reason(name: str) -> str | None:
    """Why the last call of figure ``name`` (e.g. "learning_curves") drew nothing, or None."""
    return _SKIP.get(name)


def _skip(name: str, reason: str) -> None:
    _SKIP[name] = reason
    return None


def _save(fig: Any, out_path: str | os.PathLike, name: str) -> Path:
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    _SKIP.pop(name, None)
    return out


def _hue_order(labels: Any) -> list[str]:
    return sorted({str(x) for x in labels}, key=method_sort_key)


def _panel(df: pd.DataFrame) -> pd.Series:
    return df["env"].astype(str) + " · " + df["model_size"].astype(str)


def _panel_order(df: pd.DataFrame) -> list[str]:
    pairs = sorted({(str(e), str(s)) for e, s in zip(df["env"], df["model_size"])}, key=lambda es: (es[0], model_size_sort_key(es[1])))
    return [f"{e} · {s}" for e, s in pairs]


def _scaled_ylim(values: pd.Series, pad: float = 5.0) -> tuple[float, float]:
    """y-limits (%) around the data with ``pad`` points of margin, clipped to [0, 100]."""
    lo, hi = float(values.min()), float(values.max())
    return max(-1.0, lo - pad), min(101.0, hi + pad)


def plot_learning_curves(
    evals: pd.DataFrame, out_path: str | os.PathLike, *, include_variants: bool = False,
    curves: pd.DataFrame | None = None,
) -> Path | None:
    """Held-out success (%) vs. iteration, mean over seeds with a 95 % bootstrap CI band; with
    ``curves`` (the ``metrics.jsonl`` rows), training success (%) in a second row of panels.
    The y-axis is scaled to the data. None when there is no evaluation."""
    name = "learning_curves"
    if evals is None or evals.empty or "success_rate" not in evals:
        return _skip(name, "no evaluations")
    df = evals.dropna(subset=["success_rate", "iteration"]).copy()
    if not include_variants:
        df = df[df["variant"].fillna("") == ""]
    if df.empty:
        return _skip(name, "no evaluations of main-table runs")
    df["success (%)"] = df["success_rate"].astype(float) * 100.0
    df["iteration"] = df["iteration"].astype(float)
    df["curve"] = "held-out (evaluation panel)"
    frames = [df]
    if curves is not None and not curves.empty and "train/success_rate" in curves:
        tr = curves.dropna(subset=["train/success_rate", "iteration"]).copy()
        if not include_variants and "variant" in tr:
            tr = tr[tr["variant"].fillna("") == ""]
        if not tr.empty:
            tr["success (%)"] = tr["train/success_rate"].astype(float) * 100.0
            tr["iteration"] = tr["iteration"].astype(float)
            tr["curve"] = "training rollouts"
            frames.append(tr)
    data = pd.concat(frames, ignore_index=True)
    data["panel"] = _panel(data)
    order = _panel_order(data)
    hue_order = _hue_order(data["method_label"])
    rows = [c for c in ("held-out (evaluation panel)", "training rollouts") if (data["curve"] == c).any()]
    g = sns.relplot(
        data=data,
        x="iteration",
        y="success (%)",
        hue="method_label",
        hue_order=hue_order,
        col="panel",
        col_order=order,
        row="curve",
        row_order=rows,
        kind="line",
        errorbar=("ci", 95),
        n_boot=1000,
        seed=0,
        marker="o",
        markersize=3,
        height=3.0,
        aspect=1.4,
        facet_kws={"sharey": False, "sharex": False},
    )
    g.set_titles("{row_name} | {col_name}")
    for (row, col), ax in g.axes_dict.items():
        sub = data[(data["curve"] == row) & (data["panel"] == col)]["success (%)"]
        if len(sub):
            ax.set_ylim(*_scaled_ylim(sub))
    if g.legend is not None:
        g.legend.set_title("method")
    g.figure.suptitle("Success vs. iteration (mean over seeds, 95 % bootstrap CI band)", y=1.02)
    return _save(g.figure, out_path, name)


def plot_ablation_ladder(runs: pd.DataFrame, out_path: str | os.PathLike) -> Path | None:
    """Bars of final success (%) for GRPO, G2PO variants and G2PO, per environment."""
    name = "ablation_ladder"
    if runs is None or runs.empty:
        return _skip(name, "no runs")
    variant = runs["variant"].fillna("")
    w_only = variant.str.fullmatch(r"w=[-0-9.e+]+")
    g2po_variants = runs[(runs["method"] == "G2PO") & (variant != "") & ~w_only]
    if g2po_variants.empty:
        return _skip(name, "no G2PO ablation runs (G2PO with algorithm.options set)")
    envs = set(g2po_variants["env"])
    sizes = set(g2po_variants["model_size"])
    keep = runs["env"].isin(envs) & runs["model_size"].isin(sizes) & (
        ((runs["method"] == "G2PO") & ~w_only) | ((runs["method"] == "GRPO") & (variant == ""))
    )
    df = runs[keep].dropna(subset=["final.success_rate"]).copy()
    df["success (%)"] = df["final.success_rate"].astype(float) * 100.0
    df["panel"] = _panel(df)
    labels = sorted(set(df["method_label"]))
    order = (
        [x for x in labels if x == "GRPO"]
        + sorted(x for x in labels if x not in ("GRPO", "G2PO"))
        + [x for x in labels if x == "G2PO"]
    )
    panels = _panel_order(df)
    fig, axes = plt.subplots(1, len(panels), figsize=(max(4.5, 1.3 * len(order)) * len(panels), 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        sub = df[df["panel"] == panel]
        present = [o for o in order if o in set(sub["method_label"])]
        sns.barplot(data=sub, x="method_label", y="success (%)", order=present, errorbar="sd", ax=ax, color="#7aa6c2", capsize=0.15)
        sns.stripplot(data=sub, x="method_label", y="success (%)", order=present, ax=ax, color="black", size=4)
        ax.set_title(panel)
        ax.set_xlabel("")
        ax.set_ylim(0, 102)
        ax.tick_params(axis="x", rotation=30)
        for lab in ax.get_xticklabels():
            lab.set_horizontalalignment("right")
    fig.suptitle("Ablation ladder: final success (mean ± std over seeds; dots = seeds)", y=1.02)
    fig.tight_layout()
    return _save(fig, out_path, name)


def plot_w_sweep(runs: pd.DataFrame, out_path: str | os.PathLike) -> Path | None:
    """Final success (%) vs. step weight w for GiGPO/G2PO. None without two w values."""
    name = "w_sweep"
    if runs is None or runs.empty or "step_weight" not in runs:
        return _skip(name, "no runs")
    variant = runs["variant"].fillna("")
    w_only = (variant == "") | variant.str.fullmatch(r"w=[-0-9.e+]+")
    df = runs[runs["method"].str.startswith(("G2PO", "GiGPO")) & w_only].dropna(subset=["final.success_rate", "step_weight"]).copy()
    if df.empty:
        return _skip(name, "no GiGPO/G2PO runs")
    counts = df.groupby(["env", "model_size", "method"])["step_weight"].nunique()
    if counts.max() < 2:
        return _skip(name, "fewer than two step_weight values for every method")
    good = counts[counts >= 2].index
    df = df.set_index(["env", "model_size", "method"]).loc[good].reset_index()
    df["success (%)"] = df["final.success_rate"].astype(float) * 100.0
    df["panel"] = _panel(df)
    panels = _panel_order(df)
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        sub = df[df["panel"] == panel]
        sns.lineplot(data=sub, x="step_weight", y="success (%)", hue="method", hue_order=_hue_order(sub["method"]), errorbar="sd", marker="o", ax=ax)
        ax.axvline(PAPER_BEST_W, ls=":", color="gray")
        ax.text(PAPER_BEST_W, ax.get_ylim()[1], " paper best w", va="top", fontsize=8, color="gray")
        ax.set_title(panel)
        ax.set_xlabel("step weight w (algorithm.step_weight)")
    fig.suptitle("w sweep: final success (mean ± std over seeds)", y=1.03)
    fig.tight_layout()
    return _save(fig, out_path, name)


def _hist_counts(value: Any) -> dict[float, float] | None:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            try:
                out[float(k)] = float(v)
            except (TypeError, ValueError):
                return None
        return out
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value):
        return {float(i): float(v) for i, v in enumerate(value)}
    return None


def _main_only(curves: pd.DataFrame, include_variants: bool) -> pd.DataFrame:
    if include_variants or "variant" not in curves:
        return curves
    return curves[curves["variant"].fillna("") == ""]


def plot_node_sizes(curves: pd.DataFrame, out_path: str | os.PathLike, *, include_variants: bool = False) -> Path | None:
    """Node-size histogram from ``adv/node_size_hist``, else of ``adv/node_size_mean``
    (main-table runs only unless ``include_variants``)."""
    name = "node_sizes"
    if curves is None or curves.empty:
        return _skip(name, "no metrics")
    curves = _main_only(curves, include_variants)
    if "adv/node_size_hist" in curves:
        rows = []
        for _, r in curves.dropna(subset=["adv/node_size_hist"]).iterrows():
            h = _hist_counts(r["adv/node_size_hist"])
            for size, count in (h or {}).items():
                rows.append({"method": r["method_label"], "env": r["env"], "node size": size, "count": count})
        if rows:
            df = pd.DataFrame(rows).groupby(["env", "method", "node size"], as_index=False)["count"].sum()
            df["fraction"] = df["count"] / df.groupby(["env", "method"])["count"].transform("sum")
            g = sns.catplot(data=df, x="node size", y="fraction", hue="method", col="env", kind="bar", height=3.4, aspect=1.4, sharey=False)
            g.figure.suptitle("Node sizes (adv/node_size_hist, all iterations and runs)", y=1.03)
            return _save(g.figure, out_path, name)
    if "adv/node_size_mean" not in curves:
        return _skip(name, "no adv/node_size_hist or adv/node_size_mean in metrics.jsonl")
    df = curves.dropna(subset=["adv/node_size_mean"]).copy()
    df = df[pd.to_numeric(df["adv/node_size_mean"], errors="coerce").notna()]
    if df.empty:
        return _skip(name, "adv/node_size_mean never logged")
    df["mean node size"] = df["adv/node_size_mean"].astype(float)
    df["method"] = df["method_label"]
    g = sns.displot(data=df, x="mean node size", hue="method", hue_order=_hue_order(df["method"]), col="env", kind="hist", element="step", stat="density", common_norm=False, height=3.4, aspect=1.4, facet_kws={"sharex": False, "sharey": False})
    for ax in g.axes.flat:
        ax.axvline(PAPER_NODE_SIZE_MEAN, ls="--", color="gray")
    g.figure.suptitle("Mean node size per iteration (adv/node_size_mean); dashed: paper ≈ 5", y=1.03)
    return _save(g.figure, out_path, name)


def plot_singleton_fraction(curves: pd.DataFrame, out_path: str | os.PathLike, *, include_variants: bool = False) -> Path | None:
    """``adv/singleton_frac`` (%) vs. iteration (main-table runs only unless
    ``include_variants``); None when it was never logged."""
    name = "singleton_fraction"
    if curves is None or curves.empty or "adv/singleton_frac" not in curves:
        return _skip(name, "no adv/singleton_frac in metrics.jsonl")
    df = _main_only(curves, include_variants).copy()
    df["singleton"] = pd.to_numeric(df["adv/singleton_frac"], errors="coerce")
    df = df.dropna(subset=["singleton", "iteration"])
    if df.empty:
        return _skip(name, "adv/singleton_frac never logged")
    df["steps in singleton nodes (%)"] = df["singleton"] * 100.0
    df["method"] = df["method_label"]
    envs = sorted(set(df["env"]))
    fig, axes = plt.subplots(1, len(envs), figsize=(5 * len(envs), 3.6), squeeze=False)
    for ax, env in zip(axes[0], envs):
        sub = df[df["env"] == env]
        sns.lineplot(data=sub, x="iteration", y="steps in singleton nodes (%)", hue="method", hue_order=_hue_order(sub["method"]), errorbar="sd", marker="o", ax=ax)
        ref = PAPER_SINGLETON_PCT.get(str(env))
        if ref is not None and not math.isnan(ref):
            ax.axhline(ref, ls="--", color="gray")
            ax.text(ax.get_xlim()[0], ref, f" paper {ref:g} %", va="bottom", fontsize=8, color="gray")
        ax.set_title(str(env))
        ax.set_ylim(bottom=0)
    fig.suptitle("Fraction of steps in singleton nodes (mean ± std over seeds)", y=1.03)
    fig.tight_layout()
    return _save(fig, out_path, name)


#: colours of the forest plot: CI above 0, below 0, across 0
_SIGN_COLOURS = {"above": "#2c7bb6", "below": "#d7191c", "across": "#636363"}


def plot_paired_differences(differences: pd.DataFrame | dict[str, pd.DataFrame],
                            out_path: str | os.PathLike) -> Path | None:
    """Forest plot of paired differences between methods (points, with their CIs).

    Args:
        differences: :func:`g2po_bench.analysis.aggregate.method_differences` output (columns ``env,
            model_size, method_label, baseline_label, seeds, difference, ci_low, ci_high``, in
            points), or a mapping title -> such a frame (one column of panels each, e.g. the
            evaluation temperature and the training temperature).
        out_path: the PNG to write.

    Returns:
        The PNG path; None (nothing written) when no frame holds a pair.
    """
    name = "paired_differences"
    frames = {"": differences} if isinstance(differences, pd.DataFrame) else dict(differences or {})
    frames = {t: f for t, f in frames.items() if f is not None and not f.empty}
    if not frames:
        return _skip(name, "no pair of methods with common seeds and per-episode records (eval.json final.episodes)")
    panels = sorted({(str(e), str(s_)) for f in frames.values() for e, s_ in zip(f["env"], f["model_size"])},
                    key=lambda es: (es[0], model_size_sort_key(es[1])))
    rows_per_panel = {p: max(int(((f["env"].astype(str) == p[0]) & (f["model_size"].astype(str) == p[1])).sum())
                             for f in frames.values()) for p in panels}
    heights = [max(1, n) for n in rows_per_panel.values()]
    longest = max(len(f"{m} − {b}") for f in frames.values() for m, b in zip(f["method_label"], f["baseline_label"]))
    width = 4.0 + 0.07 * longest  # the pair names stand left of each panel (8 pt: about 0.07 in a character)
    fig, axes = plt.subplots(len(panels), len(frames), squeeze=False, sharex=False,
                             figsize=(width * len(frames), 0.9 + 0.32 * sum(heights) + 0.6 * len(panels)),
                             gridspec_kw={"height_ratios": heights})
    for col, (title, frame) in enumerate(frames.items()):
        for row, (env, size) in enumerate(panels):
            ax = axes[row][col]
            sub = frame[(frame["env"].astype(str) == env) & (frame["model_size"].astype(str) == size)]
            labels = [f"{m} − {b}" for m, b in zip(sub["method_label"], sub["baseline_label"])]
            ys = list(range(len(sub)))[::-1]  # the table's first pair on top
            for y, (_, r) in zip(ys, sub.iterrows()):
                lo, hi, d = float(r["ci_low"]), float(r["ci_high"]), float(r["difference"])
                sign = "above" if lo > 0 else ("below" if hi < 0 else "across")
                ax.errorbar(d, y, xerr=[[d - lo], [hi - d]], fmt="o", color=_SIGN_COLOURS[sign], capsize=3,
                            markersize=5, linewidth=1.5)
            ax.axvline(0.0, color="black", lw=0.8, ls="--")
            ax.set_yticks(ys)
            ax.set_yticklabels(labels, fontsize=8)
            ax.set_ylim(-0.7, max(len(sub), 1) - 0.3)
            ax.set_xlabel("difference in held-out success (points)")
            head = f"{env} · {size}" + (f" | {title}" if title else "")
            ax.set_title(head, fontsize=10)
            ax.grid(axis="x", alpha=0.3)
    for row_axes in axes:  # one scale per (environment, model size): the temperatures side by side
        lows, highs = zip(*(ax.get_xlim() for ax in row_axes))
        for ax in row_axes:
            ax.set_xlim(min(lows), max(highs))
    fig.suptitle("Paired differences by seed and panel task: mean, 95 % paired bootstrap CI "
                 "(blue: above 0, red: below 0, grey: includes 0)", y=1.0, fontsize=10)
    fig.tight_layout()
    return _save(fig, out_path, name)


def plot_performance_profiles(panels: list[tuple[str, Any, dict[str, Any], dict[str, Any]]],
                              out_path: str | os.PathLike) -> Path | None:
    """rliable's performance profiles: the fraction of run x task scores above each threshold.

    Args:
        panels: one ``(title, taus, profiles, cis)`` per panel (an environment and model size), as
            :func:`g2po_bench.analysis.estimates.performance_profiles` returns them with a title:
            ``taus`` ``(k,)`` thresholds (%), ``profiles[method]`` ``(k,)`` fractions, ``cis[method]``
            ``(2, k)`` the band (a method without one is drawn without a band).
        out_path: the PNG to write.

    Returns:
        The PNG path; None (nothing written) when no panel has a profile.
    """
    name = "performance_profiles"
    panels = [p for p in panels if p[2]]
    if not panels:
        return _skip(name, "no score array (ALFWorld runs with per-task-type success) to draw profiles from")
    labels = _hue_order(m for _, _, profiles, _ in panels for m in profiles)
    colours = dict(zip(labels, sns.color_palette("colorblind", n_colors=len(labels))))
    fig, axes = plt.subplots(1, len(panels), squeeze=False, figsize=(6.0 * len(panels), 4.2))
    for ax, (title, taus, profiles, cis) in zip(axes[0], panels):
        ordered = {m: profiles[m] for m in _hue_order(profiles)}
        rly_plot.plot_performance_profiles(
            ordered, taus, performance_profile_cis={m: tuple(cis[m]) for m in ordered if m in cis}, ax=ax,
            colors=colours, xlabel="success threshold τ (%)", ylabel="fraction of runs × task types above τ",
            labelsize="medium", ticklabelsize="small")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8, title="method", title_fontsize=8)
    fig.suptitle("Performance profiles (rliable score distributions; bands: 95 % stratified bootstrap CI)",
                 y=1.02, fontsize=10)
    fig.tight_layout()
    return _save(fig, out_path, name)
