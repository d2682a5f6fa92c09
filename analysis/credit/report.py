"""The Markdown report of a credit-accuracy study, and its section in ``g2po report``.

:func:`write_study_report` writes ``report.md`` (and the figures of
:mod:`g2po_bench.analysis.credit.figures`) next to a ``credit.json``;
:func:`credit_section` renders the studies found under a results folder for the suite report
(:mod:`g2po_bench.analysis.report`). Both read only the record
(:mod:`g2po_bench.analysis.credit.record`), so a committed study can be re-rendered anywhere.

Table columns (each with its 95 % bootstrap CI over task groups): mean within-group Spearman
and Pearson correlation with A*, the groups where it is defined (``n/u``: defined/undefined),
sign agreement on decisive steps, the fraction of credit mass on decisive steps, and the
Spearman correlation with the pooled A*.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from g2po_bench.analysis.credit.groundtruth import TARGET_LABELS
from g2po_bench.analysis.credit.record import find_records, read_record

__all__ = ["summary_table", "studies_table", "write_study_report", "credit_section", "ceiling_line"]


def _f(x: Any, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{float(x):.{digits}f}"


def _ci(ci: Any, digits: int = 2) -> str:
    if not ci or ci[0] is None or ci[1] is None:
        return ""
    return f" [{_f(ci[0], digits)}, {_f(ci[1], digits)}]"


def summary_table(record: dict[str, Any], *, axes: bool = True) -> str:
    """The Markdown table of every scored row (and the oracle) of a record."""
    sc = record["scores"]["a_star"]["rows"]
    pool = record["scores"].get("a_star_pool", {}).get("rows", {})
    variants = record.get("variants", [])
    names = [v["name"] for v in variants if axes or not v.get("axis")] + ["oracle"]
    axis_of = {v["name"]: v.get("axis") or "" for v in variants}
    axis_of["oracle"] = "half A vs half B"
    lines = ["| row | axis | Spearman with A* | Pearson | n/u | sign agreement (decisive) | decisive mass | "
             "Spearman with pooled A* |", "|---|---|---|---|---|---|---|---|"]
    for n in names:
        r = sc[n]
        sp, pe = r["spearman"], r["pearson"]
        sa, dm = r["sign_agreement"], r["decisive_mass"]
        pp = pool.get(n, {}).get("spearman", {})
        lines.append(
            f"| {n} | {axis_of.get(n, '')} | {_f(sp['mean'])}{_ci(sp['ci'])} | {_f(pe['mean'])}{_ci(pe['ci'])} | "
            f"{sp['groups']}/{sp['undefined']} | {_f(sa['value'])}{_ci(sa['ci'])} | {_f(dm['value'])}{_ci(dm['ci'])} | "
            f"{_f(pp.get('mean'))}{_ci(pp.get('ci'))} |")
    return "\n".join(lines) + "\n"


def studies_table(records: list[tuple[str, dict[str, Any]]], *, baseline: str = "grpo") -> str:
    """The main rows of several studies side by side (one column per study).

    Each cell is the mean within-group Spearman correlation with A* and its 95 % CI, then the
    paired difference to ``baseline`` on the same task groups (``Δ``, with its CI) where the
    study scored both; the last rows are the oracle and the Monte-Carlo ceiling.

    Args:
        records: (column name, credit record) pairs, in column order.
        baseline: the row the paired differences are taken against.

    Returns:
        A Markdown table ("—" where a study has no such row).
    """
    names: list[str] = []
    for _, rec in records:
        names += [v["name"] for v in rec.get("variants", []) if not v.get("axis") and v["name"] not in names]
    lines = ["| row | " + " | ".join(f"`{c}`" for c, _ in records) + " |",
             "|---|" + "---|" * len(records)]

    def cell(rec: dict[str, Any], name: str) -> str:
        r = rec["scores"]["a_star"]["rows"].get(name)
        if r is None:
            return "—"
        sp = r["spearman"]
        text = f"{_f(sp['mean'])}{_ci(sp['ci'])}"
        for d in rec["scores"]["a_star"].get("differences", []):
            if d["a"] == name and d["b"] == baseline:
                m = d["spearman"]["mean"]  # None when no task group defines both correlations
                text += f"; Δ {'n/a' if m is None else format(float(m), '+.2f')}{_ci(d['spearman']['ci'])}"
        return text

    for n in names + ["oracle"]:
        lines.append(f"| {n} | " + " | ".join(cell(rec, n) for _, rec in records) + " |")
    ceil = []
    for _, rec in records:
        c = rec["scores"]["a_star"].get("ceiling")
        ceil.append(f"{_f(c['ceiling']['mean'])}{_ci(c['ceiling']['ci'])}" if c else "1 (exact)")
    lines.append("| ceiling sqrt(reliability) | " + " | ".join(ceil) + " |")
    return "\n".join(lines) + "\n"


def ceiling_line(record: dict[str, Any], target: str = "a_star") -> str:
    """One sentence: split-half r, Spearman-Brown reliability and the ceiling, with CIs (exact
    mode: the ground truth has no noise; the continuations' own figures follow when there are)."""
    if record.get("mode") == "exact":
        mc = (record.get("monte_carlo_ceiling") or {}).get(target)
        text = "exact ground truth, ceiling 1"
        return text if not mc else text + f" (the K continuations alone: {_ceiling_text(mc)})"
    return _ceiling_text(record["scores"][target]["ceiling"])


def _ceiling_text(c: dict[str, Any]) -> str:
    return (f"split-half Spearman r = {_f(c['split_half']['mean'])}{_ci(c['split_half']['ci'])}, "
            f"reliability 2r/(1+r) = {_f(c['reliability']['mean'])}{_ci(c['reliability']['ci'])}, "
            f"ceiling sqrt(reliability) = {_f(c['ceiling']['mean'])}{_ci(c['ceiling']['ci'])}")


def _differences(record: dict[str, Any], main_only: bool) -> str:
    diffs = record["scores"]["a_star"].get("differences", [])
    axis_of = {v["name"]: v.get("axis") or "" for v in record.get("variants", [])}
    lines = ["| a - b | mean difference of Spearman | 95 % CI | groups |", "|---|---|---|---|"]
    n = 0
    for d in diffs:
        main = not axis_of.get(d["a"]) and not axis_of.get(d["b"])
        if main != main_only:
            continue
        s = d["spearman"]
        lines.append(f"| {d['a']} - {d['b']} | {_f(s['mean'], 3)} | {_ci(s['ci'], 3).strip()} | {s['groups']} |")
        n += 1
    return "\n".join(lines) + "\n" if n else "_none_\n"


def _decisive_frac(record: dict[str, Any]) -> float | None:
    """The fraction of rows whose A* is decisive (the same for every estimator row)."""
    rows = record["scores"]["a_star"]["rows"]
    first = next((v["name"] for v in record.get("variants", []) if v["name"] in rows), None)
    return rows[first]["decisive_frac"] if first else None


def _provenance(record: dict[str, Any]) -> str:
    code = record.get("code") or {}
    commit = (code.get("commit") or "not recorded")[:10]
    dirty = {True: " (dirty)", False: ""}.get(code.get("dirty"), "")
    m = record.get("machine") or {}
    machine = ", ".join(str(x) for x in (m.get("cpu"), m.get("cpu_capability"), f"{m.get('cpus')} CPUs") if x)
    return f"commit `{commit}`{dirty}; machine: {machine or 'not recorded'}; created {record.get('created')}"


def write_study_report(folder: str | os.PathLike, record: dict[str, Any], *, figures: bool = True) -> Path:
    """Write ``folder/report.md`` (and ``folder/figures/*.png`` unless ``figures`` is False)
    for a credit record; returns the report's path."""
    out = Path(folder)
    figs = {}
    if figures:
        # lazy: matplotlib (about 1 s to import) only when figures are drawn, never for `g2po --help`
        from g2po_bench.analysis.credit.figures import plot_correlations, plot_scatter

        figs["correlations"] = plot_correlations(record, out / "figures" / "correlations.png")
        figs["scatter"] = plot_scatter(record, out / "figures" / "scatter.png")
        figs["correlations_pooled"] = plot_correlations(record, out / "figures" / "correlations_pooled.png",
                                                        target="a_star_pool")
    s = record["settings"]
    summ = record["summary"]
    exact = record.get("mode") == "exact"
    md = [
        "# Credit-assignment accuracy",
        "",
        f"Command: `{' '.join(record.get('command') or ['g2po', 'credit'])}`  ",
        f"{_provenance(record)}.",
        "",
        f"Policy: {record['policy'].get('kind')} `{record['policy'].get('path', '')}`; environment "
        f"`{record['env']}` (step limit {record['config']['env']['max_steps']}, refusal stop "
        f"{record['config']['env']['stop_after_refusals']}); {s['groups']} task groups x {s['group_size']} rollouts "
        f"sampled as in training (temperature {record['config']['train']['temperature']}); "
        + ("ground truth **exact** (dynamic programming)" if exact else
           f"ground truth from K = {s['continuations']} continuations per prefix (coupling `{s['coupling']}`)")
        + f"; seed {s['seed']}.",
        "",
        f"Rows: {summ['rows']} steps of {summ['trajectories']} trajectories (success {100 * summ['success_rate']:.1f} %), "
        f"{summ['prefixes']} distinct prefixes, {summ['continuation_episodes']} continuation episodes "
        f"({summ.get('merged_continuations', 0)} took the end of an earlier one with the same history and seed); "
        f"A* = 0 on {100 * (summ['zero_a_star_frac'] or 0):.0f} % of the rows; {summ['decisive_rows']} decisive rows "
        f"(|A*| >= {s['decisive']}); rows without ground truth (crashed trajectories): {summ['rows_without_truth']}; "
        f"crashed continuations: {summ['crashed_continuations']}.",
        "",
        f"**Ceiling** (A*): {ceiling_line(record)}. Pooled A*: {ceiling_line(record, 'a_star_pool')}.",
        "",
    ]
    if record.get("agreement"):
        a = record["agreement"]
        md += [f"**Exact vs Monte Carlo**: the Monte-Carlo A* lies within 1.96 SE of the exact A* on "
               f"{100 * a['within_ci']:.1f} % of {a['rows']} rows (mean z {_f(a['mean_z'])}, max |z| {_f(a['max_abs_z'])}).",
               ""]
    md += ["## Estimators against A*", "",
           "Mean within-group correlation (task groups with a defined value; n/u = defined/undefined groups), "
           "sign agreement on decisive steps and the fraction of |A| on them (the fraction of decisive rows is "
           f"{_f(_decisive_frac(record))}), each with its 95 % bootstrap CI over "
           "task groups. The oracle scores A* from half of the continuations against the other half.", "",
           summary_table(record).rstrip("\n"), "",
           "## Paired differences (main rows)", "", _differences(record, True).rstrip("\n"), "",
           "## Ablations minus their estimator's main row", "", _differences(record, False).rstrip("\n"), ""]
    if record.get("skipped"):
        md += ["## Not scored", ""] + [f"- {k}: {v}" for k, v in record["skipped"].items()] + [""]
    t = record.get("timing") or {}
    if t:
        md += ["## Time", "", "| phase | seconds |", "|---|---|"]
        md += [f"| {k} | {v:.1f} |" for k, v in t.items() if isinstance(v, (int, float))] + [""]
    drawn = {k: p for k, p in figs.items() if p is not None}
    if drawn:
        md += ["## Figures", ""]
        for k, p in drawn.items():
            md += [f"![{k}]({p.relative_to(out).as_posix()})", ""]
    md += [f"Targets: {', '.join(f'`{k}` = {v}' for k, v in TARGET_LABELS.items())}; every row's values are in "
           "`credit.json`.", ""]
    path = out / "report.md"
    path.write_text("\n".join(md), encoding="utf-8")
    return path


def credit_section(results_dir: str | os.PathLike, out_dir: str | os.PathLike) -> tuple[list[str], list[str]]:
    """The ``g2po report`` section for the credit studies under ``results_dir``.

    Returns:
        (Markdown lines, one line per unreadable record: ``path: reason``); ([], []) when there
        is no study.
    """
    lines: list[str] = []
    problems: list[str] = []
    read: list[tuple[str, dict[str, Any]]] = []
    for path in find_records(results_dir):
        try:
            rec = read_record(path)
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        read.append((os.path.relpath(path.parent, results_dir), rec))
        rel = os.path.relpath(path.parent, out_dir)
        s = rec["settings"]
        lines += [f"### `{os.path.relpath(path.parent, results_dir)}`", "",
                  f"{rec['env']}, policy {rec['policy'].get('kind')}, {s['groups']} groups x {s['group_size']}, "
                  + ("exact" if rec.get("mode") == "exact" else f"K = {s['continuations']}")
                  + f"; {_provenance(rec)}. Full report: [{rel}/report.md]({rel}/report.md).", "",
                  f"Ceiling: {ceiling_line(rec)}.", "", summary_table(rec, axes=False).rstrip("\n"), ""]
        fig = path.parent / "figures" / "correlations.png"
        if fig.exists():
            lines += [f"![credit correlations]({os.path.relpath(fig, out_dir)})", ""]
    if len(read) > 1:
        lines = ["Mean within-group Spearman correlation with A* [95 % CI]; Δ = paired difference to GRPO on the "
                 "same task groups [95 % CI].", "", studies_table(read).rstrip("\n"), ""] + lines
    if lines:
        lines = ["## Credit-assignment accuracy", "",
                 "Studies by `g2po credit` (step advantages against Monte-Carlo ground truth; main rows here, every "
                 "variant in each study's report).", ""] + lines
    return lines, problems
