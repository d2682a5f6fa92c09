"""The report: tables, figures and what is missing, from a results folder, in one Markdown file.

``build_report(results_dir, out_dir)`` loads every run under ``results_dir``
(:func:`g2po_bench.analysis.load.load_runs`), aggregates over seeds (:mod:`g2po_bench.analysis.aggregate`), builds
Table 1 and Table 2 beside the published numbers (:mod:`g2po_bench.analysis.tables`), draws the figures
(:mod:`g2po_bench.analysis.figures`) and writes into ``out_dir``:

- ``report.md``: the tables, the per-cell 95 % bootstrap intervals, the IQM aggregate, the
  ablation/variant table (if any), the figures, and "What is missing" (published cells with no
  run yet, skipped runs and why, runs in progress, warnings, figures not drawn);
- ``table1.md``, ``table1.tex``, ``table2.md``, ``table2.tex``, ``step_2026.*`` (the 2026
  step-level estimators beside the CRBC paper's comparison), ``crbc_ablations.*`` (our CRBC
  variants beside the paper's ablations) (and ``variants.*``);
- ``runs.csv`` (the runs frame), ``cells.csv`` (aggregated cells with CIs),
  ``table1_cells.csv``/``table2_cells.csv`` (ours, reference and difference, numeric);
- ``figures/*.png``, including one state graph per G2PO run that recorded step tables
  (:func:`g2po_bench.analysis.graph_cli.report_state_graphs`);
- a "Credit-assignment accuracy" section for every credit study (``credit.json`` of ``g2po
  credit``) under ``results_dir`` (:func:`g2po_bench.analysis.credit.report.credit_section`).

It works on an empty folder, a partial set of runs and runs still in progress; the only fatal
error is a ``results_dir`` that does not exist (:class:`FileNotFoundError`).

Command line: ``python -m analysis RESULTS_DIR --out DIR`` (or ``g2po report`` once wired with
:func:`g2po_bench.analysis.cli.add_report_arguments` and :func:`g2po_bench.analysis.cli.run_report`), or
:func:`main` with an argv list.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from g2po_bench.analysis import figures as F
from g2po_bench.analysis.aggregate import (
    DEFAULT_N_BOOT,
    aggregate_iqm,
    aggregate_metrics,
    improvement_over_warm_start,
    method_differences,
    metrics_long,
)
from g2po_bench.analysis.credit.report import credit_section
from g2po_bench.analysis.graph_cli import report_state_graphs
from g2po_bench.analysis.load import LoadedRuns, baseline_shortfall, load_runs, mark_short_runs
from g2po_bench.analysis.naming import method_sort_key, model_size_sort_key
from g2po_bench.analysis.reference import load_reference
from g2po_bench.analysis.tables import (
    MISSING,
    TABLE1,
    TABLE2,
    TABLE_CRBC_ABLATIONS,
    TABLE_STEP_2026,
    Table,
    TableSpec,
    build_table,
    format_ours,
)
from g2po_bench.core.config import TrainConfig

__all__ = ["ReportResult", "build_report", "DEFAULT_MIN_ITERATIONS", "MethodSelectionError"]

#: runs with fewer RL iterations are *short* in the report (``--min-iterations``): the CPU
#: default's ``train.iterations``
DEFAULT_MIN_ITERATIONS = int(TrainConfig.iterations)


class MethodSelectionError(ValueError):
    """``methods`` of :func:`build_report` names a method no run has (the message lists those there are)."""


class ReportResult:
    """What :func:`build_report` produced (paths and frames), for callers that want more than the path."""

    def __init__(self, report_path: Path, loaded: LoadedRuns, cells: pd.DataFrame, tables: dict[str, Table], figures: dict[str, Path | None]):
        self.report_path = report_path
        self.loaded = loaded
        self.cells = cells
        self.tables = tables
        self.figures = figures


def build_report(
    results_dir: str | os.PathLike | Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    *,
    which: str = "final",
    reference: pd.DataFrame | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    confidence: float = 0.95,
    figures: bool = True,
    column_overrides: Mapping[str, Mapping[str, Any]] | None = None,
    min_iterations: int | None = None,
    methods: Sequence[str] | None = None,
) -> ReportResult:
    """Write ``report.md`` (and the files listed in the module docstring); returns the frames,
    tables and figures with the report's path.

    Args:
        results_dir: folder searched for run folders, or several read as one set of runs
            (:func:`g2po_bench.analysis.load.load_runs`), e.g. an ablation's runs and the committed
            comparison's.
        methods: keep only the runs of these methods (the row name before `` [``, e.g. "G2PO", or
            ``algorithm.name``, e.g. "g2po"), their variants included; None keeps every run.
        out_dir: where to write (created).
        which: "final" or "best" evaluation of each run.
        reference: published numbers (default :func:`g2po_bench.analysis.reference.load_reference`).
        n_boot, seed, confidence: bootstrap settings.
        figures: False skips the PNG figures (faster).
        column_overrides: passed to :func:`g2po_bench.analysis.load.load_runs`.
        min_iterations: a training run with fewer RL iterations (or fewer than the longest run of
            its environment and model size here) is *short*: "†" on its cells, listed under "What is
            missing" (:func:`g2po_bench.analysis.load.mark_short_runs`); None = :data:`DEFAULT_MIN_ITERATIONS`.

    Raises:
        ValueError: ``which`` is neither "final" nor "best".
        MethodSelectionError: a name of ``methods`` matches no run (the message lists the methods there are).
        FileNotFoundError: ``results_dir`` (or one of them) does not exist.
    """
    if which not in ("final", "best"):
        raise ValueError(f"which must be 'final' or 'best', got {which!r}")
    if reference is None:
        reference = load_reference()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    loaded = load_runs(results_dir, column_overrides=column_overrides)
    if methods:
        _keep_methods(loaded, methods)
    min_iterations = DEFAULT_MIN_ITERATIONS if min_iterations is None else int(min_iterations)
    loaded.runs = mark_short_runs(loaded.runs, min_iterations)
    long = metrics_long(loaded.runs, which=which)
    cells = aggregate_metrics(long, confidence=confidence, n_boot=n_boot, seed=seed)
    iqm_df = aggregate_iqm(long, confidence=confidence, n_boot=n_boot, seed=seed)
    improvement = improvement_over_warm_start(loaded.runs, confidence=confidence, n_boot=n_boot, seed=seed)
    improvement_t = improvement_over_warm_start(loaded.runs, confidence=confidence, n_boot=n_boot, seed=seed,
                                                at_train_temperature=True)
    differences = {t: method_differences(loaded.runs, confidence=confidence, n_boot=n_boot, seed=seed,
                                         at_train_temperature=t) for t in (False, True)}

    tables: dict[str, Table] = {
        "table1": build_table(cells, reference, TABLE1),
        "table2": build_table(cells, reference, TABLE2),
        # the estimators' comparison: the prompting baselines' rows belong to Table 1 only
        "step_2026": build_table(_without_baselines(cells, loaded.runs), reference, TABLE_STEP_2026, digits=2),
        "crbc_ablations": build_table(_ablation_cells(cells, reference, TABLE_CRBC_ABLATIONS), reference,
                                      TABLE_CRBC_ABLATIONS, include_variants=True, digits=2),
    }
    has_variants = len(cells) and (cells["variant"].fillna("") != "").any()
    if has_variants:
        variant_cells = cells[cells["variant"].fillna("") != ""]
        tables["variants"] = build_table(variant_cells, None, _variants_spec(variant_cells), include_variants=True,
                                         with_reference=False)
    for name, t in tables.items():
        (out / f"{name}.md").write_text(t.to_markdown(), encoding="utf-8")
        (out / f"{name}.tex").write_text(t.to_latex(), encoding="utf-8")
        t.cells.to_csv(out / f"{name}_cells.csv", index=False)
    loaded.runs.to_csv(out / "runs.csv", index=False)
    cells.to_csv(out / "cells.csv", index=False)
    improvement.to_csv(out / "improvement.csv", index=False)
    if not improvement_t.empty:
        improvement_t.to_csv(out / "improvement_at_train_temperature.csv", index=False)
    if not differences[False].empty:
        differences[False].to_csv(out / "differences.csv", index=False)
    if not differences[True].empty:
        differences[True].to_csv(out / "differences_at_train_temperature.csv", index=False)

    figs: dict[str, Path | None] = {}
    fig_dir = out / "figures"
    if figures:
        figs["learning_curves"] = F.plot_learning_curves(loaded.evals, fig_dir / "learning_curves.png",
                                                         curves=loaded.curves)
        figs["paired_differences"] = F.plot_paired_differences(
            {"at the evaluation temperature": differences[False],
             "at the training temperature": differences[True]}, fig_dir / "paired_differences.png")
        figs["ablation_ladder"] = F.plot_ablation_ladder(loaded.runs, fig_dir / "ablation_ladder.png")
        figs["w_sweep"] = F.plot_w_sweep(loaded.runs, fig_dir / "w_sweep.png")
        figs["node_sizes"] = F.plot_node_sizes(loaded.curves, fig_dir / "node_sizes.png")
        figs["singleton_fraction"] = F.plot_singleton_fraction(loaded.curves, fig_dir / "singleton_fraction.png")
    graphs: tuple[list, list] = ([], [])
    if figures:

        graphs = report_state_graphs(loaded.runs, fig_dir)

    credit_lines: list[str] = []
    credit_problems: list[str] = []
    for root in loaded.results_dirs:
        lines, problems = credit_section(root, out)
        credit_lines += lines
        credit_problems += problems
    credit = (credit_lines, credit_problems)
    if not isinstance(results_dir, (str, os.PathLike)):  # the folder as given when there is one
        results_dir = loaded.results_dirs[0]
    text = _render(results_dir, out, loaded, cells, iqm_df, tables, figs, which, confidence, n_boot, seed, figures,
                   improvement, graphs, improvement_t, differences, min_iterations, credit)
    path = out / "report.md"
    path.write_text(text, encoding="utf-8")
    return ReportResult(path, loaded, cells, tables, figs)


def _keep_methods(loaded: LoadedRuns, methods: Sequence[str]) -> None:
    """Keep (in place) the runs of ``methods`` (``method`` or ``algorithm`` names) in every frame.

    Raises:
        MethodSelectionError: a name matches no run; the message lists the methods there are.
    """
    runs = loaded.runs
    wanted = {str(m) for m in methods}
    lowered = {m.lower() for m in wanted}
    if runs.empty:
        raise MethodSelectionError(f"--methods {' '.join(sorted(wanted))}: there are no runs")
    names = runs["method"].astype(str)
    algos = runs["algorithm"].astype(str).str.lower() if "algorithm" in runs else names.str.lower()
    unknown = sorted(m for m in wanted if not ((names == m).any() or (algos == m.lower()).any()))
    if unknown:
        raise MethodSelectionError(f"--methods: no run of {', '.join(unknown)}; the methods here: "
                         f"{', '.join(sorted(set(names)))}")
    keep_ids = set(runs.loc[names.isin(wanted) | algos.isin(lowered), "run_id"])
    loaded.runs = runs[runs["run_id"].isin(keep_ids)].reset_index(drop=True)
    for attr in ("curves", "evals"):
        frame = getattr(loaded, attr)
        if len(frame):
            setattr(loaded, attr, frame[frame["run_id"].isin(keep_ids) | frame["method"].isin(wanted)]
                    .reset_index(drop=True))


def _variants_spec(cells: pd.DataFrame) -> TableSpec:
    """The columns of the variants table: Table 1's, then Table 2's, then any other benchmark's
    metrics (the toy corridor's ``toy_success``, ...), each where a variant has a value."""
    present = set(cells["metric"])
    known = [*TABLE1.columns, *TABLE2.columns]
    columns = [(label, m) for label, m in known if m in present]
    known_metrics = {m for _, m in known}
    for m in sorted(present - known_metrics):
        env, _, what = str(m).partition("_")
        columns.append((f"{env.capitalize()} {what.capitalize()}".strip(), m))
    return TableSpec("variants", "Ablations and variants", "", tuple(columns))


def _without_baselines(cells: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """``cells`` without the rows of prompting-baseline runs (``kind`` "baseline" in ``runs``)."""
    if cells is None or cells.empty or runs is None or runs.empty or "kind" not in runs:
        return cells
    baseline_labels = set(runs.loc[runs["kind"] == "baseline", "method_label"].astype(str))
    return cells[~cells["method_label"].astype(str).isin(baseline_labels)]


def _ablation_cells(cells: pd.DataFrame, reference: pd.DataFrame | None, spec) -> pd.DataFrame:
    """Our cells of the methods whose ablations ``spec``'s published table holds (the row name
    before `` [``), variants included: the rows that can stand beside those published values."""
    if cells is None or cells.empty or reference is None or reference.empty:
        return cells.iloc[0:0] if cells is not None else pd.DataFrame()
    published = reference[reference["table"] == spec.reference_table]["method"]
    bases = {m.split(" [", 1)[0] for m in published}
    keep = cells["method_label"].map(lambda m: str(m).split(" [", 1)[0] in bases)
    return cells[keep]


# ---------------------------------------------------------------------------- rendering
_FIG_TITLES = {
    "learning_curves": "Learning curves (held-out and training success vs. iteration; bands = 95 % bootstrap CI over seeds)",
    "paired_differences": ("Paired differences between methods (forest plot of the tables \"Differences between "
                           "methods, paired by seed\": dot = mean difference, bar = 95 % paired bootstrap CI)"),
    "ablation_ladder": "Ablation ladder (final success; bars = mean, error bars = ± std, dots = seeds)",
    "w_sweep": "w sweep (final success vs. algorithm.step_weight)",
    "node_sizes": "Node sizes (estimator diagnostics)",
    "singleton_fraction": "Steps in singleton nodes (estimator diagnostics)",
}


def _md_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "_none_\n"
    lines = ["| " + " | ".join(str(c) for c in df.columns) + " |", "|" + "|".join("---" for _ in df.columns) + "|"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in r.tolist()) + " |")
    return "\n".join(lines) + "\n"


def _fmt(x: Any, digits: int = 1) -> str:
    try:
        if x is None or pd.isna(x):
            return "n/a"
    except (TypeError, ValueError):
        pass
    return f"{float(x):.{digits}f}"


def _in_table_order(df: pd.DataFrame, *then: str) -> pd.DataFrame:
    """``df`` sorted as the tables order rows: model size, method, then the columns ``then``."""
    df = df.copy()
    df["_s"] = df["model_size"].map(model_size_sort_key)
    df["_m"] = df["method_label"].map(method_sort_key)
    return df.sort_values(["_s", "_m", *then])


def _ci_cell(r: pd.Series) -> str:
    """``[low, high]`` of a row's ``ci_low``/``ci_high``, or ``n/a`` without an interval."""
    return "n/a" if pd.isna(r["ci_low"]) else f"[{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]"


def _ci_section(cells: pd.DataFrame, confidence: float) -> str:
    if cells.empty:
        return "_No runs yet._\n"
    df = _in_table_order(cells, "env", "metric")
    recs = []
    for _, r in df.iterrows():
        ci = _ci_cell(r)
        recs.append(
            {
                "Model": r["model_size"],
                "Method": r["method_label"],
                "Metric": r["metric"],
                "n": int(r["n"]),
                "Mean ± std": format_ours(r["mean"], r["std"], r["n"], bool(r["in_progress"]),
                                         short_run=bool(r.get("short_run", False))),
                f"{int(round(confidence * 100))} % CI": ci,
                "Seeds": r["seeds"] or MISSING,
            }
        )
    return _md_table(pd.DataFrame(recs))


def _iqm_section(iqm_df: pd.DataFrame, confidence: float) -> str:
    if iqm_df.empty:
        return "_No ALFWorld runs with per-task-type results yet._\n"
    df = _in_table_order(iqm_df)
    recs = []
    for _, r in df.iterrows():
        ci = _ci_cell(r)
        recs.append(
            {
                "Model": r["model_size"],
                "Method": r["method_label"] + ("*" if r["in_progress"] else "") + ("†" if r.get("short_run") else ""),
                "Runs": int(r["runs"]),
                "Task types": int(r["tasks"]),
                "IQM (%)": _fmt(r["iqm"]),
                f"{int(round(confidence * 100))} % CI (stratified bootstrap)": ci,
                "Mean (%)": _fmt(r["mean"]),
            }
        )
    return _md_table(pd.DataFrame(recs))


def _improvement_section(imp: pd.DataFrame | None) -> str:
    if imp is None or imp.empty:
        return "_No run with an evaluation before and after RL._"
    df = pd.DataFrame({
        "env": imp["env"], "size": imp["model_size"], "method": imp["method_label"], "seeds": imp["seeds"],
        "before (%)": imp["before"].map(_fmt), "final (%)": imp["final"].map(_fmt),
        "improvement (points)": imp["improvement"].map(lambda v: f"{v:+.1f}"),
        "CI": [f"[{_fmt(a)}, {_fmt(b)}]" for a, b in zip(imp["ci_low"], imp["ci_high"])],
        "CI over": imp["ci_kind"],
    })
    return _md_table(df)


def _differences_section(diff: pd.DataFrame) -> str:
    df = pd.DataFrame({
        "env": diff["env"], "size": diff["model_size"],
        "method minus baseline": [f"{m} - {b}" for m, b in zip(diff["method_label"], diff["baseline_label"])],
        "common seeds": diff["seeds"], "method final (%)": diff["method_final"].map(_fmt),
        "baseline final (%)": diff["baseline_final"].map(_fmt),
        "difference (points)": diff["difference"].map(lambda v: f"{v:+.1f}"),
        "CI": [f"[{_fmt(a)}, {_fmt(b)}]" for a, b in zip(diff["ci_low"], diff["ci_high"])],
    })
    return _md_table(df)


def _provenance_lines(runs: pd.DataFrame) -> list[str]:
    """A Markdown table: one row per (commit, dirty, machine) with the runs that share it.

    ``runs`` is :attr:`LoadedRuns.runs`; a run without the columns or without a record shows
    "not recorded".
    """
    if runs.empty:
        return ["- no runs"]
    cols = ("code.commit", "code.dirty", "machine")
    frame = runs.reindex(columns=[*cols, "run_id"]).astype(object)
    frame = frame.where(frame.notna(), None)
    groups: dict[tuple, list[str]] = {}
    for rec in frame.itertuples(index=False):
        commit, dirty, machine, run_id = rec
        key = (commit[:7] if isinstance(commit, str) else "not recorded",
               "dirty" if dirty is True else ("clean" if dirty is False else "not recorded"),
               machine or "not recorded")
        groups.setdefault(key, []).append(str(run_id))
    lines = ["| commit | working tree | machine | runs |", "|---|---|---|---|"]
    for (commit, dirty, machine), ids in sorted(groups.items()):
        lines.append(f"| `{commit}` | {dirty} | {machine} | {len(ids)}: {', '.join(f'`{i}`' for i in sorted(ids))} |")
    return lines


def _missing_lines(tables: dict[str, Table]) -> list[str]:
    lines = []
    for name in ("table1", "table2", "step_2026", "crbc_ablations"):
        t = tables.get(name)
        if t is None:
            continue
        miss = t.missing_cells()
        miss = miss[miss["model_size"] != "closed-source"]
        total = len(t.spec.columns)
        for (size, method), grp in miss.groupby(["model_size", "method"], sort=False):
            labels = grp["label"].tolist()
            what = f"all {total} cells" if len(labels) == total else ", ".join(labels)
            lines.append(f"- {t.spec.reference_table}, {method} ({size}): {what}")
    return lines


def _render(
    results_dir: str | os.PathLike,
    out: Path,
    loaded: LoadedRuns,
    cells: pd.DataFrame,
    iqm_df: pd.DataFrame,
    tables: dict[str, Table],
    figs: dict[str, Path | None],
    which: str,
    confidence: float,
    n_boot: int,
    seed: int,
    figures: bool,
    improvement: pd.DataFrame | None = None,
    graphs: tuple[list, list] = ([], []),
    improvement_t: pd.DataFrame | None = None,
    differences: dict[bool, pd.DataFrame] | None = None,
    min_iterations: int | None = None,
    credit: tuple[list[str], list[str]] = ([], []),
) -> str:
    runs = loaded.runs
    n_runs = len(runs)
    n_prog = int(runs["in_progress"].sum()) if n_runs else 0
    now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    pct = int(round(confidence * 100))
    md: list[str] = [
        "# G2PO suite report",
        "",
        (f"Results folder: `{results_dir}`" if len(loaded.results_dirs) <= 1 else
         "Results folders: " + ", ".join(f"`{p}`" for p in loaded.results_dirs))
        + f"; generated {now}; evaluation used: **{which}**.",
        f"Runs: {n_runs} included ({n_prog} still in progress), {len(loaded.skipped)} skipped, "
        f"{len(loaded.warnings)} warning(s). See [What is missing](#what-is-missing).",
        "",
        "Legend: ours = mean ± std over seeds (std with ddof = 1; \"n/a\" with one seed), success in %, "
        "WebShop score = mean reward × 100; ref. = published value (`results/reference`); "
        "Δ = ours − ref. in points; \"≈\" = derived published value; \"unknown\" = not available in the "
        f"transcriptions; {MISSING} = no run / nothing published (never 0); * = includes runs still in progress; "
        f"† = includes a short run (fewer RL iterations than {min_iterations or DEFAULT_MIN_ITERATIONS} or than the "
        "longest run of its environment and model size here, or a prompting baseline on fewer tasks or steps than "
        "the published protocol; listed under What is missing with its tasks and steps). "
        "The 2026 table's published rows are the CRBC paper's (arXiv 2609.35082; its own runs of GRPO, "
        "GiGPO, GraphGPO and HGPO beside CRBC, 1.5B); its ablation rows are named like our variants.",
        "",
    ]
    for name, title in (("table1", TABLE1.title), ("table2", TABLE2.title),
                        ("step_2026", TABLE_STEP_2026.title), ("crbc_ablations", TABLE_CRBC_ABLATIONS.title)):
        t = tables[name]
        md += [f"## {title}", "", t.to_markdown().rstrip("\n"), ""]
        for note in t.notes:
            md.append(f"Note: {note}")
        md += [f"Files: `{name}.md`, `{name}.tex`, `{name}_cells.csv`.", ""]
    md += [
        f"## {pct} % confidence intervals per cell",
        "",
        f"Percentile bootstrap over seeds ({n_boot} resamples, seed {seed}); n/a with fewer than two runs.",
        "",
        _ci_section(cells, confidence).rstrip("\n"),
        "",
        "## Improvement over the warm start",
        "",
        "Held-out success after RL (final evaluation) minus success before RL (after the warm start), "
        f"mean over seeds, in points, with a {pct} % paired bootstrap CI (seeds, then panel episodes, "
        "`g2po_bench.core.stats.paired_improvement_ci`; over seeds only where a run lacks per-episode records). "
        "File: `improvement.csv`.",
        "",
        _improvement_section(improvement).rstrip("\n"),
        "",
    ]
    if improvement_t is not None and not improvement_t.empty:
        md += [
            "Played at the training temperature (`eval.at_train_temperature`: the same panel before RL and "
            "after the last iteration, sampled at `train.temperature`; `eval.json` `at_train_temperature`), "
            "same CI. File: `improvement_at_train_temperature.csv`.",
            "",
            _improvement_section(improvement_t).rstrip("\n"),
            "",
        ]
    for at_t, diff in sorted((differences or {}).items()):
        if diff is None or diff.empty:
            continue
        md += [
            "## Differences between methods, paired by seed" + (" (at the training temperature)" if at_t else ""),
            "",
            "Final held-out success of the later method in the table order minus the earlier one's, over "
            "the seeds both ran, with a "
            f"{pct} % paired bootstrap CI (seeds, then panel episodes matched by task; "
            "`g2po_bench.analysis.aggregate.method_differences`). Pairing by seed is meaningful when the runs of a seed "
            "start RL from the same warm start and play the same panel (a shared warm-start cache). File: "
            + ("`differences_at_train_temperature.csv`." if at_t else "`differences.csv`.")
            + (" Figure: [figures/paired_differences.png](figures/paired_differences.png)."
               if figs.get("paired_differences") is not None else ""),
            "",
            _differences_section(diff).rstrip("\n"),
            "",
        ]
    md += [
        "## Aggregate: IQM over runs × ALFWorld task types",
        "",
        "Interquartile mean of all (run, task type) success rates, following rliable "
        "(Agarwal et al., 2021), with a stratified bootstrap interval (runs resampled per task type).",
        "",
        _iqm_section(iqm_df, confidence).rstrip("\n"),
        "",
    ]
    if "variants" in tables:
        md += [
            "## Ablations and variants",
            "",
            "Runs whose config differs from the main-table setting (`algorithm.options`; w ≠ 1, a "
            "non-reference normalization, or another common option that is away from its reference or differs "
            "between the runs of the method); no published values.",
            "",
            tables["variants"].to_markdown().rstrip("\n"),
            "",
        ]
    md += ["## Figures", ""]
    drawn = {k: v for k, v in figs.items() if v is not None}
    if not figures:
        md.append("_Figures were not requested._")
    elif not drawn:
        md.append("_No figure could be drawn from the runs so far._")
    for key, p in drawn.items():
        rel = p.relative_to(out).as_posix()
        md += [f"### {_FIG_TITLES.get(key, key)}", "", f"![{key}]({rel})", ""]
    drawn_graphs, graphs_missing = graphs
    if drawn_graphs:
        md += ["## State graphs (G2PO runs)", "",
               "One task group of the last recorded iteration of each G2PO run (`g2po graph RUN` draws "
               "any other, with an interactive HTML). Node size: visits; node colour: V(n); edge width: "
               "trajectories; edge colour: mean advantage (red < 0 < blue); square: start state; "
               "star / cross: terminal success / failure.", ""]
        for run_id, d in drawn_graphs:
            rel = d.png.relative_to(out).as_posix()
            md += [f"### `{run_id}`: iteration {d.iteration}, group {d.group}", "",
                   f"![state graph of {run_id}]({rel})", "", d.caption, ""]
    credit_lines, credit_problems = credit
    if credit_lines:
        md += [""] + credit_lines
    md += ["", "## Code and machines", "",
           "What produced the runs (`status.json` `code` and `machine`): the same commit, config and seed "
           "give the same episodes only on a CPU with the same kernels (`g2po_bench.core.rundir.machine_info`). "
           "Columns `code.commit`, `code.dirty`, `machine` in `runs.csv`.", ""]
    md += _provenance_lines(runs)
    md += ["", "## What is missing", "", "### Published cells without runs", ""]
    miss = _missing_lines(tables)
    md += miss or ["- none"]
    md += ["", "(Closed-source prompting rows are not listed.)", "", "### Skipped runs", ""]
    md += [f"- `{p.run_id}`: {p.reason}" for p in loaded.skipped] or ["- none"]
    md += ["", "### Runs in progress (included with their latest evaluation)", ""]
    if n_prog:
        for _, r in runs[runs["in_progress"]].iterrows():
            it, tot = r.get("status.iteration"), r.get("status.total_iterations")
            md.append(f"- `{r['run_id']}`: iteration {it}/{tot}, latest evaluation at iteration {_fmt(r.get('final.iteration'), 0)} ({r.get('final.source')})")
    else:
        md.append("- none")
    md += ["", "### Short runs (included, marked †)", ""]
    short = runs[runs["short_run"].astype(bool)] if n_runs and "short_run" in runs else runs.iloc[0:0]
    if len(short):
        longest = runs[runs["kind"] == "train"].groupby(["env", "model_size"], dropna=False)["iterations"].max()
        for _, r in short.iterrows():
            shortfall = baseline_shortfall(r)
            if shortfall is not None:
                md.append(f"- `{r['run_id']}` ({r['method_label']}, prompting baseline): {shortfall}")
                continue
            top = longest.get((r["env"], r["model_size"]), math.nan)
            md.append(f"- `{r['run_id']}`: {_fmt(r['iterations'], 0)} RL iterations (minimum "
                      f"{min_iterations or DEFAULT_MIN_ITERATIONS}; longest {r['env']} {r['model_size']} run here: "
                      f"{_fmt(top, 0)})")
    else:
        md.append("- none")
    md += ["", "### Warnings", ""]
    md += ([f"- `{p.run_id}`: {p.reason}" for p in loaded.warnings]
           + [f"- credit study {line}" for line in credit_problems]) or ["- none"]
    if figures:
        md += ["", "### Figures not drawn", ""]
        not_drawn = [k for k, v in figs.items() if v is None]
        md += ([f"- {k}: {F.figure_skip_reason(k) or 'no data'}" for k in not_drawn]
               + [f"- {line}" for line in graphs_missing]) or ["- none"]
    md.append("")
    return "\n".join(md)
