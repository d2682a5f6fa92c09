"""The report: tables, figures and what is missing, from a results folder, in one Markdown file.

``build_report(results_dir, out_dir)`` loads every run under ``results_dir``
(:func:`g2po_bench.analysis.load.load_runs`), aggregates over seeds (:mod:`g2po_bench.analysis.aggregate`),
turns the runs into rliable's score arrays (:mod:`g2po_bench.analysis.scores`) and their interval
estimates (:mod:`g2po_bench.analysis.estimates`), builds Table 1 and Table 2 beside the published
numbers (:mod:`g2po_bench.analysis.tables`), draws the figures (:mod:`g2po_bench.analysis.figures`) and
writes into ``out_dir``:

- ``report.md``: the tables, the per-cell 95 % bootstrap intervals, the improvement over the warm
  start and the paired differences between methods, rliable's aggregate metrics (IQM, median,
  mean) and probabilities of improvement, the ablation/variant table (if any), the figures, and
  "What is missing" (published cells with no run yet, skipped runs and why, runs in progress,
  warnings, figures not drawn); one function per section (``_SECTIONS``);
- ``table1.md``, ``table1.tex``, ``table2.md``, ``table2.tex``, ``step_2026.*`` (the 2026
  step-level estimators beside the CRBC paper's comparison), ``crbc_ablations.*`` (our CRBC
  variants beside the paper's ablations) (and ``variants.*``);
- ``runs.csv`` (the runs frame), ``cells.csv`` (aggregated cells with CIs),
  ``table1_cells.csv``/``table2_cells.csv`` (ours, reference and difference, numeric),
  ``improvement*.csv``, ``differences*.csv``, ``scores.csv`` (the score arrays, one row per run and
  task type), ``aggregates.csv`` and ``probability_of_improvement.csv`` (rliable's estimates);
- ``figures/*.png``, including rliable's performance profiles and one state graph per G2PO run
  that recorded step tables (:func:`g2po_bench.analysis.graph_cli.report_state_graphs`);
- a "Credit-assignment accuracy" section for every credit study (``credit.json`` of ``g2po
  credit``) under ``results_dir`` (:func:`g2po_bench.analysis.credit.report.credit_section`).

Which interval comes from which bootstrap: ``docs/report.md``.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from g2po_bench.analysis import figures as F
from g2po_bench.analysis.aggregate import (
    DEFAULT_N_BOOT,
    aggregate_metrics,
    improvement_over_warm_start,
    method_differences,
    metrics_long,
)
from g2po_bench.analysis.credit.report import credit_section
from g2po_bench.analysis.estimates import (
    aggregate_estimates,
    improvement_probabilities,
    performance_profiles,
)
from g2po_bench.analysis.graph_cli import report_state_graphs
from g2po_bench.analysis.load import LoadedRuns, baseline_shortfall, load_runs, mark_short_runs
from g2po_bench.analysis.naming import method_sort_key, model_size_sort_key
from g2po_bench.analysis.reference import load_reference
from g2po_bench.analysis.scores import ScoreDict, score_dicts
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


@dataclass
class _Bootstrap:
    """The bootstrap settings of a report."""

    confidence: float
    n_boot: int
    seed: int

    def kw(self) -> dict[str, Any]:
        return {"confidence": self.confidence, "n_boot": self.n_boot, "seed": self.seed}


@dataclass
class _Analysis:
    """Every frame the report shows, computed from the loaded runs (:func:`_analyse`)."""

    cells: pd.DataFrame
    scores: list[ScoreDict]
    aggregates: pd.DataFrame
    probabilities: pd.DataFrame
    improvement: pd.DataFrame
    improvement_t: pd.DataFrame
    improvement_score: pd.DataFrame
    differences: dict[bool, pd.DataFrame]


@dataclass
class _Report:
    """What the sections of ``report.md`` render (one ``_*_section`` function each)."""

    results_dir: str | os.PathLike
    out: Path
    loaded: LoadedRuns
    analysis: _Analysis
    tables: dict[str, Table]
    which: str
    boot: _Bootstrap
    min_iterations: int
    figures: bool
    figs: dict[str, Path | None] = field(default_factory=dict)
    graphs: tuple[list, list] = field(default_factory=lambda: ([], []))
    credit: tuple[list[str], list[str]] = field(default_factory=lambda: ([], []))

    @property
    def pct(self) -> int:
        return int(round(self.boot.confidence * 100))


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
    boot = _Bootstrap(confidence, n_boot, seed)
    analysis = _analyse(loaded, which, boot)
    tables = _build_tables(analysis.cells, reference, loaded.runs)
    _write_files(out, loaded, analysis, tables)
    if not isinstance(results_dir, (str, os.PathLike)):  # the folder as given when there is one
        results_dir = loaded.results_dirs[0]
    rep = _Report(results_dir, out, loaded, analysis, tables, which, boot, min_iterations, figures)
    if figures:
        rep.figs = _draw_figures(out / "figures", loaded, analysis, boot)
        rep.graphs = report_state_graphs(loaded.runs, out / "figures")
    rep.credit = _credit_studies(loaded, out)
    path = out / "report.md"
    path.write_text(_render(rep), encoding="utf-8")
    return ReportResult(path, loaded, analysis.cells, tables, rep.figs)


def _analyse(loaded: LoadedRuns, which: str, boot: _Bootstrap) -> _Analysis:
    """The cells over seeds, the score arrays with rliable's estimates, and the paired comparisons."""
    long = metrics_long(loaded.runs, which=which)
    scores = score_dicts(long)
    return _Analysis(
        cells=aggregate_metrics(long, **boot.kw()),
        scores=scores,
        aggregates=aggregate_estimates(scores, **boot.kw()),
        probabilities=improvement_probabilities(scores, **boot.kw()),
        improvement=improvement_over_warm_start(loaded.runs, **boot.kw()),
        improvement_t=improvement_over_warm_start(loaded.runs, at_train_temperature=True, **boot.kw()),
        improvement_score=improvement_over_warm_start(loaded.runs, metric="score", **boot.kw()),
        differences={t: method_differences(loaded.runs, at_train_temperature=t, **boot.kw()) for t in (False, True)},
    )


def _build_tables(cells: pd.DataFrame, reference: pd.DataFrame, runs: pd.DataFrame) -> dict[str, Table]:
    """Table 1, Table 2, the 2026 step-level table, the CRBC ablations and (if any) the variants."""
    tables: dict[str, Table] = {
        "table1": build_table(cells, reference, TABLE1),
        "table2": build_table(cells, reference, TABLE2),
        # the estimators' comparison: the prompting baselines' rows belong to Table 1 only
        "step_2026": build_table(_without_baselines(cells, runs), reference, TABLE_STEP_2026, digits=2),
        "crbc_ablations": build_table(_ablation_cells(cells, reference, TABLE_CRBC_ABLATIONS), reference,
                                      TABLE_CRBC_ABLATIONS, include_variants=True, digits=2),
    }
    has_variants = len(cells) and (cells["variant"].fillna("") != "").any()
    if has_variants:
        variant_cells = cells[cells["variant"].fillna("") != ""]
        tables["variants"] = build_table(variant_cells, None, _variants_spec(variant_cells), include_variants=True,
                                         with_reference=False)
    return tables


def _scores_frame(scores: list[ScoreDict]) -> pd.DataFrame:
    """The score arrays in long form: ``env, model_size, method_label, run_id, task, score`` (%)."""
    rows = [{"env": sd.env, "model_size": sd.model_size, "method_label": label, "run_id": run_id, "task": task,
             "score": float(value)}
            for sd in scores for label, frame in sd.frames.items()
            for run_id, rec in frame.iterrows() for task, value in rec.items()]
    return pd.DataFrame.from_records(rows, columns=["env", "model_size", "method_label", "run_id", "task", "score"])


def _write_files(out: Path, loaded: LoadedRuns, analysis: _Analysis, tables: dict[str, Table]) -> None:
    """The tables (Markdown, LaTeX, CSV) and every frame as CSV (an empty optional frame writes no file)."""
    for name, t in tables.items():
        (out / f"{name}.md").write_text(t.to_markdown(), encoding="utf-8")
        (out / f"{name}.tex").write_text(t.to_latex(), encoding="utf-8")
        t.cells.to_csv(out / f"{name}_cells.csv", index=False)
    loaded.runs.to_csv(out / "runs.csv", index=False)
    analysis.cells.to_csv(out / "cells.csv", index=False)
    analysis.improvement.to_csv(out / "improvement.csv", index=False)
    optional = {"improvement_at_train_temperature.csv": analysis.improvement_t,
                "improvement_score.csv": analysis.improvement_score,
                "differences.csv": analysis.differences[False],
                "differences_at_train_temperature.csv": analysis.differences[True],
                "scores.csv": _scores_frame(analysis.scores),
                "aggregates.csv": analysis.aggregates,
                "probability_of_improvement.csv": analysis.probabilities}
    for name, frame in optional.items():
        if not frame.empty:
            frame.to_csv(out / name, index=False)


def _draw_figures(fig_dir: Path, loaded: LoadedRuns, analysis: _Analysis, boot: _Bootstrap) -> dict[str, Path | None]:
    """Every figure of the report: its path, or None when its data are absent (see :mod:`figures`)."""
    differences = analysis.differences
    profiles = [(f"{sd.env} · {sd.model_size}", *performance_profiles(sd, **boot.kw())) for sd in analysis.scores]
    return {
        "learning_curves": F.plot_learning_curves(loaded.evals, fig_dir / "learning_curves.png", curves=loaded.curves),
        "paired_differences": F.plot_paired_differences(
            {"at the evaluation temperature": differences[False],
             "at the training temperature": differences[True]}, fig_dir / "paired_differences.png"),
        "performance_profiles": F.plot_performance_profiles(profiles, fig_dir / "performance_profiles.png"),
        "ablation_ladder": F.plot_ablation_ladder(loaded.runs, fig_dir / "ablation_ladder.png"),
        "w_sweep": F.plot_w_sweep(loaded.runs, fig_dir / "w_sweep.png"),
        "node_sizes": F.plot_node_sizes(loaded.curves, fig_dir / "node_sizes.png"),
        "singleton_fraction": F.plot_singleton_fraction(loaded.curves, fig_dir / "singleton_fraction.png"),
    }


def _credit_studies(loaded: LoadedRuns, out: Path) -> tuple[list[str], list[str]]:
    """The credit-study sections of every results folder: (Markdown lines, unreadable records)."""
    credit_lines: list[str] = []
    credit_problems: list[str] = []
    for root in loaded.results_dirs:
        lines, problems = credit_section(root, out)
        credit_lines += lines
        credit_problems += problems
    return credit_lines, credit_problems


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
    "performance_profiles": ("Performance profiles (rliable: fraction of runs × ALFWorld task types with success "
                             "above τ; bands = 95 % stratified bootstrap CI)"),
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


def _interval(low: Any, high: Any, digits: int = 1) -> str:
    """``[low, high]``, or ``n/a`` without an interval."""
    return "n/a" if pd.isna(low) else f"[{_fmt(low, digits)}, {_fmt(high, digits)}]"


def _ci_table(cells: pd.DataFrame, confidence: float) -> str:
    if cells.empty:
        return "_No runs yet._\n"
    df = _in_table_order(cells, "env", "metric")
    recs = []
    for _, r in df.iterrows():
        recs.append(
            {
                "Model": r["model_size"],
                "Method": r["method_label"],
                "Metric": r["metric"],
                "n": int(r["n"]),
                "Mean ± std": format_ours(r["mean"], r["std"], r["n"], bool(r["in_progress"]),
                                         short_run=bool(r.get("short_run", False))),
                f"{int(round(confidence * 100))} % CI": _interval(r["ci_low"], r["ci_high"]),
                "Seeds": r["seeds"] or MISSING,
            }
        )
    return _md_table(pd.DataFrame(recs))


def _aggregates_table(agg: pd.DataFrame, confidence: float) -> str:
    if agg.empty:
        return "_No ALFWorld runs with per-task-type results yet._\n"
    pct = int(round(confidence * 100))
    recs = []
    for _, r in _in_table_order(agg).iterrows():
        rec = {
            "Model": r["model_size"],
            "Method": r["method_label"] + ("*" if r["in_progress"] else "") + ("†" if r.get("short_run") else ""),
            "Runs": int(r["runs"]),
            "Task types": int(r["tasks"]),
        }
        for name, title in (("iqm", "IQM"), ("median", "Median"), ("mean", "Mean")):
            rec[f"{title} (%)"] = _fmt(r[name])
            rec[f"{title} {pct} % CI"] = _interval(r[f"{name}_low"], r[f"{name}_high"])
        recs.append(rec)
    return _md_table(pd.DataFrame(recs))


def _probabilities_table(poi: pd.DataFrame, confidence: float) -> str:
    df = pd.DataFrame({
        "env": poi["env"], "size": poi["model_size"],
        "method > baseline": [f"{m} > {b}" for m, b in zip(poi["method_label"], poi["baseline_label"])],
        "runs": [f"{a} vs {b}" for a, b in zip(poi["runs"], poi["baseline_runs"])], "task types": poi["tasks"],
        "P(method > baseline)": poi["probability"].map(lambda v: _fmt(v, 2)),
        f"{int(round(confidence * 100))} % CI": [_interval(a, b, 2) for a, b in zip(poi["ci_low"], poi["ci_high"])],
    })
    return _md_table(df)


def _improvement_table(imp: pd.DataFrame | None, unit: str = "%") -> str:
    if imp is None or imp.empty:
        return "_No run with an evaluation before and after RL._"
    df = pd.DataFrame({
        "env": imp["env"], "size": imp["model_size"], "method": imp["method_label"], "seeds": imp["seeds"],
        f"before ({unit})": imp["before"].map(_fmt), f"final ({unit})": imp["final"].map(_fmt),
        "improvement (points)": imp["improvement"].map(lambda v: f"{v:+.1f}"),
        "CI": [f"[{_fmt(a)}, {_fmt(b)}]" for a, b in zip(imp["ci_low"], imp["ci_high"])],
        "CI over": imp["ci_kind"],
    })
    return _md_table(df)


def _differences_table(diff: pd.DataFrame) -> str:
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


# ---------------------------------------------------------------------------- the sections of report.md
def _header_section(rep: _Report) -> list[str]:
    runs, loaded = rep.loaded.runs, rep.loaded
    n_prog = int(runs["in_progress"].sum()) if len(runs) else 0
    now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    return [
        "# G2PO suite report",
        "",
        (f"Results folder: `{rep.results_dir}`" if len(loaded.results_dirs) <= 1 else
         "Results folders: " + ", ".join(f"`{p}`" for p in loaded.results_dirs))
        + f"; generated {now}; evaluation used: **{rep.which}**.",
        f"Runs: {len(runs)} included ({n_prog} still in progress), {len(loaded.skipped)} skipped, "
        f"{len(loaded.warnings)} warning(s). See [What is missing](#what-is-missing).",
        "",
        "Legend: ours = mean ± std over seeds (std with ddof = 1; \"n/a\" with one seed), success in %, "
        "WebShop score = mean reward × 100; ref. = published value (`results/reference`); "
        "Δ = ours − ref. in points; \"≈\" = derived published value; \"unknown\" = not available in the "
        f"transcriptions; {MISSING} = no run / nothing published (never 0); * = includes runs still in progress; "
        f"† = includes a short run (fewer RL iterations than {rep.min_iterations or DEFAULT_MIN_ITERATIONS} or than the "
        "longest run of its environment and model size here, or a prompting baseline on fewer tasks or steps than "
        "the published protocol; listed under What is missing with its tasks and steps). "
        "The 2026 table's published rows are the CRBC paper's (arXiv 2609.35082; its own runs of GRPO, "
        "GiGPO, GraphGPO and HGPO beside CRBC, 1.5B); its ablation rows are named like our variants.",
        "",
    ]


def _tables_section(rep: _Report) -> list[str]:
    md: list[str] = []
    for name, title in (("table1", TABLE1.title), ("table2", TABLE2.title),
                        ("step_2026", TABLE_STEP_2026.title), ("crbc_ablations", TABLE_CRBC_ABLATIONS.title)):
        t = rep.tables[name]
        md += [f"## {title}", "", t.to_markdown().rstrip("\n"), ""]
        for note in t.notes:
            md.append(f"Note: {note}")
        md += [f"Files: `{name}.md`, `{name}.tex`, `{name}_cells.csv`.", ""]
    return md


def _cell_intervals_section(rep: _Report) -> list[str]:
    return [
        f"## {rep.pct} % confidence intervals per cell",
        "",
        f"Percentile bootstrap over seeds ({rep.boot.n_boot} resamples, seed {rep.boot.seed}); n/a with fewer than "
        "two runs.",
        "",
        _ci_table(rep.analysis.cells, rep.boot.confidence).rstrip("\n"),
        "",
    ]


def _improvement_section(rep: _Report) -> list[str]:
    md = [
        "## Improvement over the warm start",
        "",
        "Held-out success after RL (final evaluation) minus success before RL (after the warm start), "
        f"mean over seeds, in points, with a {rep.pct} % paired bootstrap CI (seeds, then panel episodes, "
        "`g2po_bench.core.stats.paired_improvement_ci`; over seeds only where a run lacks per-episode records). "
        "File: `improvement.csv`.",
        "",
        _improvement_table(rep.analysis.improvement).rstrip("\n"),
        "",
    ]
    if not rep.analysis.improvement_t.empty:
        md += [
            "Played at the training temperature (`eval.at_train_temperature`: the same panel before RL and "
            "after the last iteration, sampled at `train.temperature`; `eval.json` `at_train_temperature`), "
            "same CI. File: `improvement_at_train_temperature.csv`.",
            "",
            _improvement_table(rep.analysis.improvement_t).rstrip("\n"),
            "",
        ]
    if not rep.analysis.improvement_score.empty:
        md += [
            "The score (WebShop: the purchase reward x 100 averaged over every episode, 0 for one that never "
            "buys; runs whose `eval.json` has `episode_scores`), after minus before RL in score points, same "
            "CI. File: `improvement_score.csv`.",
            "",
            _improvement_table(rep.analysis.improvement_score, unit="score").rstrip("\n"),
            "",
        ]
    return md


def _differences_section(rep: _Report) -> list[str]:
    md: list[str] = []
    for at_t, diff in sorted(rep.analysis.differences.items()):
        if diff is None or diff.empty:
            continue
        md += [
            "## Differences between methods, paired by seed" + (" (at the training temperature)" if at_t else ""),
            "",
            "Final held-out success of the later method in the table order minus the earlier one's, over "
            "the seeds both ran, with a "
            f"{rep.pct} % paired bootstrap CI (seeds, then panel episodes matched by task; "
            "`g2po_bench.analysis.aggregate.method_differences`). Pairing by seed is meaningful when the runs of a seed "
            "start RL from the same warm start and play the same panel (a shared warm-start cache). File: "
            + ("`differences_at_train_temperature.csv`." if at_t else "`differences.csv`.")
            + (" Figure: [figures/paired_differences.png](figures/paired_differences.png)."
               if rep.figs.get("paired_differences") is not None else ""),
            "",
            _differences_table(diff).rstrip("\n"),
            "",
        ]
    return md


def _aggregates_section(rep: _Report) -> list[str]:
    return [
        "## Aggregate metrics: IQM, median and mean over runs × ALFWorld task types",
        "",
        "rliable's aggregate metrics (Agarwal et al., 2021; `rliable.metrics`) of each method's score array "
        "(one row per seed, one column per ALFWorld task type, success in %; file `scores.csv`): the interquartile "
        "mean (IQM) of all (run, task type) success rates, the median and the mean of the per-task-type means; "
        f"{rep.pct} % stratified bootstrap intervals (runs resampled per task type, {rep.boot.n_boot} resamples, "
        f"seed {rep.boot.seed}; `g2po_bench.core.stats.stratified_bootstrap_ci`). File: `aggregates.csv`.",
        "",
        _aggregates_table(rep.analysis.aggregates, rep.boot.confidence).rstrip("\n"),
        "",
    ]


def _probabilities_section(rep: _Report) -> list[str]:
    poi = rep.analysis.probabilities
    if poi.empty:
        return []
    return [
        "## Probability of improvement",
        "",
        "rliable's probability of improvement P(method > baseline) (`rliable.metrics.probability_of_improvement`): "
        "the probability that a run of the later method in the table order has a higher success rate than a run "
        "of the earlier one on a task type drawn at random (ties count one half), averaged over the task types "
        f"both have; 0.5 = no difference. {rep.pct} % stratified bootstrap CI, each method's runs resampled "
        "independently per task type. Runs are independent samples here (no pairing by seed). "
        "File: `probability_of_improvement.csv`.",
        "",
        _probabilities_table(poi, rep.boot.confidence).rstrip("\n"),
        "",
    ]


def _variants_section(rep: _Report) -> list[str]:
    if "variants" not in rep.tables:
        return []
    return [
        "## Ablations and variants",
        "",
        "Runs whose config differs from the main-table setting (`algorithm.options`; w ≠ 1, a "
        "non-reference normalization, or another common option that is away from its reference or differs "
        "between the runs of the method); no published values.",
        "",
        rep.tables["variants"].to_markdown().rstrip("\n"),
        "",
    ]


def _figures_section(rep: _Report) -> list[str]:
    md = ["## Figures", ""]
    drawn = {k: v for k, v in rep.figs.items() if v is not None}
    if not rep.figures:
        md.append("_Figures were not requested._")
    elif not drawn:
        md.append("_No figure could be drawn from the runs so far._")
    for key, p in drawn.items():
        rel = p.relative_to(rep.out).as_posix()
        md += [f"### {_FIG_TITLES.get(key, key)}", "", f"![{key}]({rel})", ""]
    return md


def _state_graphs_section(rep: _Report) -> list[str]:
    drawn_graphs = rep.graphs[0]
    if not drawn_graphs:
        return []
    md = ["## State graphs (G2PO runs)", "",
          "One task group of the last recorded iteration of each G2PO run (`g2po graph RUN` draws "
          "any other, with an interactive HTML). Node size: visits; node colour: V(n); edge width: "
          "trajectories; edge colour: mean advantage (red < 0 < blue); square: start state; "
          "star / cross: terminal success / failure.", ""]
    for run_id, d in drawn_graphs:
        rel = d.png.relative_to(rep.out).as_posix()
        md += [f"### `{run_id}`: iteration {d.iteration}, group {d.group}", "",
               f"![state graph of {run_id}]({rel})", "", d.caption, ""]
    return md


def _credit_section(rep: _Report) -> list[str]:
    credit_lines = rep.credit[0]
    return [""] + credit_lines if credit_lines else []


def _provenance_section(rep: _Report) -> list[str]:
    return ["", "## Code and machines", "",
            "What produced the runs (`status.json` `code` and `machine`): the same commit, config and seed "
            "give the same episodes only on a CPU with the same kernels (`g2po_bench.core.rundir.machine_info`). "
            "Columns `code.commit`, `code.dirty`, `machine` in `runs.csv`.", "",
            *_provenance_lines(rep.loaded.runs)]


def _in_progress_lines(runs: pd.DataFrame) -> list[str]:
    if not len(runs) or not int(runs["in_progress"].sum()):
        return ["- none"]
    lines = []
    for _, r in runs[runs["in_progress"]].iterrows():
        it, tot = r.get("status.iteration"), r.get("status.total_iterations")
        lines.append(f"- `{r['run_id']}`: iteration {it}/{tot}, latest evaluation at iteration "
                     f"{_fmt(r.get('final.iteration'), 0)} ({r.get('final.source')})")
    return lines


def _short_run_lines(runs: pd.DataFrame, min_iterations: int) -> list[str]:
    short = runs[runs["short_run"].astype(bool)] if len(runs) and "short_run" in runs else runs.iloc[0:0]
    if not len(short):
        return ["- none"]
    lines = []
    longest = runs[runs["kind"] == "train"].groupby(["env", "model_size"], dropna=False)["iterations"].max()
    for _, r in short.iterrows():
        shortfall = baseline_shortfall(r)
        if shortfall is not None:
            lines.append(f"- `{r['run_id']}` ({r['method_label']}, prompting baseline): {shortfall}")
            continue
        top = longest.get((r["env"], r["model_size"]), math.nan)
        lines.append(f"- `{r['run_id']}`: {_fmt(r['iterations'], 0)} RL iterations (minimum "
                     f"{min_iterations or DEFAULT_MIN_ITERATIONS}; longest {r['env']} {r['model_size']} run here: "
                     f"{_fmt(top, 0)})")
    return lines


def _missing_section(rep: _Report) -> list[str]:
    loaded, runs = rep.loaded, rep.loaded.runs
    md = ["", "## What is missing", "", "### Published cells without runs", ""]
    md += _missing_lines(rep.tables) or ["- none"]
    md += ["", "(Closed-source prompting rows are not listed.)", "", "### Skipped runs", ""]
    md += [f"- `{p.run_id}`: {p.reason}" for p in loaded.skipped] or ["- none"]
    md += ["", "### Runs in progress (included with their latest evaluation)", ""]
    md += _in_progress_lines(runs)
    md += ["", "### Short runs (included, marked †)", ""]
    md += _short_run_lines(runs, rep.min_iterations)
    md += ["", "### Warnings", ""]
    md += ([f"- `{p.run_id}`: {p.reason}" for p in loaded.warnings]
           + [f"- credit study {line}" for line in rep.credit[1]]) or ["- none"]
    if rep.figures:
        md += ["", "### Figures not drawn", ""]
        not_drawn = [k for k, v in rep.figs.items() if v is None]
        md += ([f"- {k}: {F.figure_skip_reason(k) or 'no data'}" for k in not_drawn]
               + [f"- {line}" for line in rep.graphs[1]]) or ["- none"]
    return md


#: the sections of report.md, in order
_SECTIONS: tuple[Callable[[_Report], list[str]], ...] = (
    _header_section, _tables_section, _cell_intervals_section, _improvement_section, _differences_section,
    _aggregates_section, _probabilities_section, _variants_section, _figures_section, _state_graphs_section,
    _credit_section, _provenance_section, _missing_section,
)


def _render(rep: _Report) -> str:
    """report.md: the sections of :data:`_SECTIONS`, one after the other."""
    md = [line for section in _SECTIONS for line in section(rep)]
    md.append("")
    return "\n".join(md)
