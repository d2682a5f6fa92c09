"""The Markdown report of a credit-accuracy study, and its section in ``g2po report``.

:func:`write_study_report` writes ``report.md`` (and the figures of
:mod:`g2po_bench.analysis.credit.figures`) next to a ``credit.json``;
:func:`credit_section` renders the studies found under a results folder for the suite report
(:mod:`g2po_bench.analysis.report`). Both read only the record
(:mod:`g2po_bench.analysis.credit.record`), so a committed study can be re-rendered anywhere.

Tables (each figure with its 95 % bootstrap CI over task groups):

- **against A\\***: mean within-group Spearman and Pearson correlation with A* on the study's shared
  groups (those where the oracle and every main row are defined; ``n/u`` = defined/undefined
  among them), sign agreement on decisive steps, the fraction of credit mass on decisive steps,
  the Spearman correlation with the pooled A*, and the gradient alignment (the cosine of the
  row's policy gradient with the true one in a training batch);
- **update direction**: the gradient alignment against each target, the plain (noise-attenuated)
  cosine beside it and the true gradient's split-half reliability;
- **paired differences** (main rows; ablations against their estimator's main row), per metric:
  the difference and its CI, the Holm-adjusted p-value over the study's family, the simultaneous
  (Bonferroni) CI, and the groups that would resolve a difference of 0.05 at 80 % power (alone /
  under Holm over the family).

Records of version 1 (before the shared groups and the gradient alignment) render what they have.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from g2po_bench.analysis.credit.groundtruth import TARGET_LABELS
from g2po_bench.analysis.credit.record import find_records, read_record
from g2po_bench.analysis.credit.resolution import RESOLVE_DELTA, RESOLVE_POWER

__all__ = ["summary_table", "gradient_table", "differences_table", "studies_table", "write_study_report",
           "credit_section", "ceiling_line", "shared_line"]


def _f(x: Any, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{float(x):.{digits}f}"


def _ci(ci: Any, digits: int = 2) -> str:
    if not ci or ci[0] is None or ci[1] is None or not all(math.isfinite(float(c)) for c in ci):
        return ""
    return f" [{_f(ci[0], digits)}, {_f(ci[1], digits)}]"


def _p(p: Any) -> str:
    if p is None or (isinstance(p, float) and not math.isfinite(p)):
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _n(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return str(int(math.ceil(float(x))))


def _gradient(record: dict[str, Any], target: str = "a_star") -> dict[str, Any] | None:
    return ((record.get("scores") or {}).get(target) or {}).get("gradient")


def shared_line(record: dict[str, Any], target: str = "a_star") -> str:
    """One sentence: the shared groups every row is scored on (empty for a version 1 record)."""
    sc = record["scores"][target]
    sh = sc.get("shared")
    if not sh:
        return ""
    return (f"Every row is scored on the same {sh['groups']} of the {sc['groups']} task groups: {sh['rule']} "
            "(a group where either side is constant has no correlation)")


def summary_table(record: dict[str, Any], *, axes: bool = True) -> str:
    """The Markdown table of every scored row (and the oracle) of a record."""
    sc = record["scores"]["a_star"]["rows"]
    pool = record["scores"].get("a_star_pool", {}).get("rows", {})
    grad = _gradient(record)
    variants = record.get("variants", [])
    names = [v["name"] for v in variants if axes or not v.get("axis")] + ["oracle"]
    axis_of = {v["name"]: v.get("axis") or "" for v in variants}
    axis_of["oracle"] = "half A vs half B"
    head = ("| row | axis | Spearman with A* | Pearson | n/u | sign agreement (decisive) | decisive mass | "
            "Spearman with pooled A* |")
    rule = "|---|---|---|---|---|---|---|---|"
    if grad:
        head += f" gradient alignment (batch of {grad['batch']}) |"
        rule += "---|"
    lines = [head, rule]
    for n in names:
        r = sc[n]
        sp, pe = r["spearman"], r["pearson"]
        sa, dm = r["sign_agreement"], r["decisive_mass"]
        pp = pool.get(n, {}).get("spearman", {})
        line = (f"| {n} | {axis_of.get(n, '')} | {_f(sp['mean'])}{_ci(sp['ci'])} | {_f(pe['mean'])}{_ci(pe['ci'])} | "
                f"{sp['groups']}/{sp['undefined']} | {_f(sa['value'])}{_ci(sa['ci'])} | {_f(dm['value'])}{_ci(dm['ci'])} | "
                f"{_f(pp.get('mean'))}{_ci(pp.get('ci'))} |")
        if grad:
            g = grad["rows"].get(n)
            line += f" {_f(g['cosine'])}{_ci(g['ci'])} |" if g else " — |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def gradient_table(record: dict[str, Any], *, axes: bool = True) -> str:
    """The update-direction table: every row's gradient alignment against each target, and the
    plain cosine with the K-continuation A* (empty without gradients)."""
    grads = {t: _gradient(record, t) for t in TARGET_LABELS}
    grads = {t: g for t, g in grads.items() if g}
    if not grads:
        return ""
    first = next(iter(grads.values()))
    names = [v["name"] for v in record.get("variants", []) if (axes or not v.get("axis")) and v["name"] in first["rows"]]
    axis_of = {v["name"]: v.get("axis") or "" for v in record.get("variants", [])}
    head = "| row | axis | " + " | ".join(f"cosine with {TARGET_LABELS[t]}" for t in grads) + \
        " | plain cosine with A* (attenuated) |"
    lines = [head, "|---|---|" + "---|" * (len(grads) + 1)]
    for n in names:
        cells = [f"{_f(g['rows'][n]['cosine'])}{_ci(g['rows'][n]['ci'])}" for g in grads.values()]
        lines.append(f"| {n} | {axis_of.get(n, '')} | " + " | ".join(cells) + f" | {_f(first['rows'][n]['naive'])} |")
    return "\n".join(lines) + "\n"


def differences_table(record: dict[str, Any], main_only: bool, target: str = "a_star") -> str:
    """Paired differences of the Spearman correlation and of the gradient alignment, with the
    Holm-adjusted p-value, the family-wise CI and the groups that resolve 0.05."""
    sc = record["scores"][target]
    diffs = sc.get("differences", [])
    grad = {(d["a"], d["b"]): d for d in (sc.get("gradient") or {}).get("differences", [])}
    axis_of = {v["name"]: v.get("axis") or "" for v in record.get("variants", [])}
    head = ("| a - b | Δ Spearman [95 % CI] | groups | Holm p | family-wise CI | groups for ±0.05 (Holm) |")
    rule = "|---|---|---|---|---|---|"
    if grad:
        head += " Δ gradient alignment [95 % CI] | Holm p | family-wise CI | groups for ±0.05 (Holm) |"
        rule += "---|---|---|---|"
    lines = [head, rule]
    n = 0
    for d in diffs:
        main = not axis_of.get(d["a"]) and not axis_of.get(d["b"])
        if main != main_only:
            continue
        s = d["spearman"]
        line = (f"| {d['a']} - {d['b']} | {_f(s['mean'], 3)}{_ci(s['ci'], 3)} | {s['groups']} | {_p(s.get('p_holm'))} | "
                f"{_ci(s.get('ci_family'), 3).strip() or 'n/a'} | {_n(s.get('groups_needed'))} "
                f"({_n(s.get('groups_needed_holm'))}) |")
        if grad:
            g = grad.get((d["a"], d["b"]))
            line += (f" {_f(g['mean'], 3)}{_ci(g['ci'], 3)} | {_p(g.get('p_holm'))} | "
                     f"{_ci(g.get('ci_family'), 3).strip() or 'n/a'} | {_n(g.get('groups_needed'))} "
                     f"({_n(g.get('groups_needed_holm'))}) |" if g else " — | | | |")
        lines.append(line)
        n += 1
    return "\n".join(lines) + "\n" if n else "_none_\n"


def studies_table(records: list[tuple[str, dict[str, Any]]], *, baseline: str = "grpo",
                  metric: str = "spearman") -> str:
    """The main rows of several studies side by side (one column per study).

    Each cell is the figure (``metric``: the mean within-group Spearman correlation with A*, or
    ``"gradient"``: the gradient alignment) and its 95 % CI, then the paired difference to
    ``baseline`` on the same task groups (``Δ``, with its CI) where the study scored both; for the
    Spearman correlation the last rows are the oracle and the Monte-Carlo reliability index
    sqrt(reliability), for the gradient alignment the true gradient's split-half reliability.

    Args:
        records: (column name, credit record) pairs, in column order.
        baseline: the row the paired differences are taken against.
        metric: ``"spearman"`` or ``"gradient"``.

    Returns:
        A Markdown table ("—" where a study has no such row).

    Raises:
        ValueError: an unknown metric.
    """
    if metric not in ("spearman", "gradient"):
        raise ValueError(f"metric must be spearman or gradient, got {metric!r}")
    names: list[str] = []
    for _, rec in records:
        names += [v["name"] for v in rec.get("variants", []) if not v.get("axis") and v["name"] not in names]
    lines = ["| row | " + " | ".join(f"`{c}`" for c, _ in records) + " |",
             "|---|" + "---|" * len(records)]

    def cell(rec: dict[str, Any], name: str) -> str:
        sc = rec["scores"]["a_star"]
        if metric == "gradient":
            g = sc.get("gradient")
            r = (g or {}).get("rows", {}).get(name)
            if r is None:
                return "—"
            text = f"{_f(r['cosine'])}{_ci(r['ci'])}"
            for d in (g or {}).get("differences", []):
                if d["a"] == name and d["b"] == baseline:
                    text += f"; Δ {'n/a' if d['mean'] is None else format(float(d['mean']), '+.2f')}{_ci(d['ci'])}"
            return text
        r = sc["rows"].get(name)
        if r is None:
            return "—"
        sp = r["spearman"]
        text = f"{_f(sp['mean'])}{_ci(sp['ci'])}"
        for d in sc.get("differences", []):
            if d["a"] == name and d["b"] == baseline:
                m = d["spearman"]["mean"]  # None when no task group defines both correlations
                text += f"; Δ {'n/a' if m is None else format(float(m), '+.2f')}{_ci(d['spearman']['ci'])}"
        return text

    if metric == "gradient":
        for n in names:
            lines.append(f"| {n} | " + " | ".join(cell(rec, n) for _, rec in records) + " |")
        rel = []
        for _, rec in records:
            g = rec["scores"]["a_star"].get("gradient")
            rel.append(f"{_f(g['truth']['reliability'])}{_ci(g['truth']['ci'])}" if g else "—")
        lines.append("| true gradient's split-half reliability | " + " | ".join(rel) + " |")
        return "\n".join(lines) + "\n"
    for n in names + ["oracle"]:
        lines.append(f"| {n} | " + " | ".join(cell(rec, n) for _, rec in records) + " |")
    ceil = []
    for _, rec in records:
        c = rec["scores"]["a_star"].get("ceiling")
        ceil.append(f"{_f(c['ceiling']['mean'])}{_ci(c['ceiling']['ci'])}" if c else "1 (exact)")
    lines.append("| reliability index sqrt(reliability) | " + " | ".join(ceil) + " |")
    shared = []
    for _, rec in records:
        sc = rec["scores"]["a_star"]
        shared.append(f"{sc['shared']['groups']} of {sc['groups']}" if sc.get("shared") else "not recorded")
    lines.append("| shared groups (every row defined) | " + " | ".join(shared) + " |")
    return "\n".join(lines) + "\n"


def ceiling_line(record: dict[str, Any], target: str = "a_star") -> str:
    """One sentence: split-half r, Spearman-Brown reliability and the reliability index, with CIs
    (exact mode: the ground truth has no noise; the continuations' own figures follow when there are)."""
    if record.get("mode") == "exact":
        sc = record["scores"].get(target, {})
        mc = sc.get("mc_ceiling") or (record.get("monte_carlo_ceiling") or {}).get(target)
        text = "exact ground truth, ceiling 1"
        return text if not mc else text + f" (the K continuations alone: {_ceiling_text(mc)})"
    return _ceiling_text(record["scores"][target]["ceiling"])


def _ceiling_text(c: dict[str, Any]) -> str:
    return (f"split-half Spearman r = {_f(c['split_half']['mean'])}{_ci(c['split_half']['ci'])}, "
            f"reliability 2r/(1+r) = {_f(c['reliability']['mean'])}{_ci(c['reliability']['ci'])}, "
            f"reliability index sqrt(reliability) = {_f(c['ceiling']['mean'])}{_ci(c['ceiling']['ci'])}")


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
    text = f"commit `{commit}`{dirty}; machine: {machine or 'not recorded'}; created {record.get('created')}"
    parts = record.get("parts")
    if parts:
        commits = sorted({(p.get("code") or {}).get("commit", "")[:10] for p in parts} - {""})
        text += f"; pooled from {len(parts)} parts (commits {', '.join(f'`{c}`' for c in commits) or 'not recorded'})"
    return text


def _gradient_section(record: dict[str, Any]) -> list[str]:
    grad = _gradient(record)
    note = (record.get("gradient") or {}).get("note")
    if not grad:
        return (["## Update direction", "", f"Gradient alignment {note}.", ""] if note else [])
    check = grad.get("sketch_check") or {}
    diffs = [abs(grad["rows"][n]["cosine"] - c) for n, c in check.items()
             if c is not None and grad["rows"][n]["cosine"] is not None
             and math.isfinite(c) and math.isfinite(grad["rows"][n]["cosine"])]
    sketch = (f" Two independent sketches of the gradients give cosines (against A*) that differ by at most "
              f"{max(diffs):.3f} (mean {sum(diffs) / len(diffs):.3f}): the error the compression adds." if diffs else "")
    return ["## Update direction", "",
            f"The cosine between the policy gradient of the trainer's loss under the row's advantages and under "
            f"the true advantages, in a training batch of {grad['batch']} task groups (ratio of expectations over "
            f"batches; the true gradient's norm from two independent halves of the continuations, so the noise of "
            f"A* does not shrink it; 95 % bootstrap CI over the {grad['groups']} groups). Gradients: {note}. The "
            f"true gradient's split-half reliability: {_f(grad['truth']['reliability'])}{_ci(grad['truth']['ci'])}."
            + sketch, "", gradient_table(record).rstrip("\n"), ""]


def _run_checkpoint(policy: dict[str, Any]) -> str:
    """`` (checkpoint of iteration 54 of 54, the run done)`` for a run's policy (empty otherwise, and
    for records written before the run's state was recorded)."""
    if policy.get("kind") != "run" or "checkpoint_iteration" not in policy:
        return ""
    state = policy.get("run_state") or "without a status"
    note = "" if state == "done" else f", **the run {state}, not done**"
    return (f" (checkpoint of iteration {policy.get('checkpoint_iteration')} of "
            f"{policy.get('total_iterations')}{note})")


def _grown_line(grown: dict[str, Any] | None) -> str:
    """The sentence of a study grown with ``--target-half-width`` (empty otherwise)."""
    if not grown:
        return ""
    widest = grown.get("widest_half_width")
    widest_text = "none has a CI yet" if widest is None else f"the widest is {widest:.3f}"
    if grown.get("reached"):
        return (f" Grown with `--target-half-width {grown['target_half_width']}`: reached at {grown['groups']} "
                f"groups ({widest_text}).")
    return (f" Grown with `--target-half-width {grown['target_half_width']}`: **not reached**, stopped at "
            f"{grown['groups']} groups ({widest_text}).")


def write_study_report(folder: str | os.PathLike, record: dict[str, Any], *, figures: bool = True) -> Path:
    """Write ``folder/report.md`` (and ``folder/figures/*.png`` unless ``figures`` is False)
    for a credit record; returns the report's path."""
    out = Path(folder)
    figs = {}
    if figures:
        # lazy: matplotlib (about 1 s to import) only when figures are drawn, never for `g2po --help`
        from g2po_bench.analysis.credit.figures import (
            plot_correlations,
            plot_gradient,
            plot_scatter,
        )

        figs["correlations"] = plot_correlations(record, out / "figures" / "correlations.png")
        figs["scatter"] = plot_scatter(record, out / "figures" / "scatter.png")
        figs["correlations_pooled"] = plot_correlations(record, out / "figures" / "correlations_pooled.png",
                                                        target="a_star_pool")
        figs["gradient"] = plot_gradient(record, out / "figures" / "gradient.png")
    s = record["settings"]
    summ = record["summary"]
    exact = record.get("mode") == "exact"
    shard = (f" Shard {s['shard'] + 1} of {s['shards']}: groups {record['groups'][0]}..{record['groups'][1] - 1} of "
             f"{s['groups']}." if s.get("shards", 1) > 1 else "")
    md = [
        "# Credit-assignment accuracy",
        "",
        f"Command: `{' '.join(record.get('command') or ['g2po', 'credit'])}`  ",
        f"{_provenance(record)}.",
        "",
        f"Policy: {record['policy'].get('kind')} `{record['policy'].get('path', '')}`"
        + _run_checkpoint(record["policy"]) + "; environment "
        f"`{record['env']}` (step limit {record['config']['env']['max_steps']}, refusal stop "
        f"{record['config']['env']['stop_after_refusals']}); {len(record.get('tasks', []))} task groups x "
        f"{s['group_size']} rollouts sampled as in training (temperature {record['config']['train']['temperature']})"
        + (f", in blocks of {s['batch_groups']} (a training batch)" if "batch_groups" in s else "") + "; "
        + ("ground truth **exact** (dynamic programming)" if exact else
           f"ground truth from K = {s['continuations']} continuations per prefix (coupling `{s['coupling']}`)")
        + f"; seed {s['seed']}.{shard}",
        "",
        f"Rows: {summ['rows']} steps of {summ['trajectories']} trajectories (success {100 * summ['success_rate']:.1f} %), "
        f"{summ['prefixes']} distinct prefixes, {summ['continuation_episodes']} continuation episodes "
        f"({summ.get('merged_continuations', 0)} took the end of an earlier one with the same history and seed); "
        f"A* = 0 on {100 * (summ['zero_a_star_frac'] or 0):.0f} % of the rows; {summ['decisive_rows']} decisive rows "
        f"(|A*| >= {s['decisive']}); rows without ground truth (crashed trajectories): {summ['rows_without_truth']}; "
        f"crashed continuations: {summ['crashed_continuations']}."
        + _grown_line(record.get("grown")),
        "",
        f"**Reliability of the ground truth** (A*): {ceiling_line(record)}. Pooled A*: "
        f"{ceiling_line(record, 'a_star_pool')}. The index sqrt(reliability) is what an estimator equal to the true "
        "advantage would reach against the K-continuation A* (a reliability index, not a bound).",
        "",
    ]
    if shared_line(record):
        md += [shared_line(record) + ".", ""]
    if record.get("agreement"):
        a = record["agreement"]
        md += [f"**Exact vs Monte Carlo**: the Monte-Carlo A* lies within 1.96 SE of the exact A* on "
               f"{100 * a['within_ci']:.1f} % of {a['rows']} rows (mean z {_f(a['mean_z'])}, max |z| {_f(a['max_abs_z'])}).",
               ""]
    md += ["## Estimators against A*", "",
           "Mean within-group correlation (n/u = defined/undefined groups among the shared ones), "
           "sign agreement on decisive steps and the fraction of |A| on them (the fraction of decisive rows is "
           f"{_f(_decisive_frac(record))}), each with its 95 % bootstrap CI over "
           "task groups. The oracle scores A* from half of the continuations against the other half.", "",
           summary_table(record).rstrip("\n"), ""]
    md += _gradient_section(record)
    md += ["## Paired differences (main rows)", "",
           f"Holm p: the p-value adjusted over the study's {_family(record)} paired differences of that metric; "
           f"family-wise CI: the simultaneous (Bonferroni) interval of the same family; groups for ±{RESOLVE_DELTA}: "
           f"the task groups that would resolve a difference of {RESOLVE_DELTA} at {RESOLVE_POWER:.0%} power "
           "(two-sided 5 %) from this study's between-group SD, alone (in brackets: under Holm over the family).", "",
           differences_table(record, True).rstrip("\n"), "",
           "## Ablations minus their estimator's main row", "", differences_table(record, False).rstrip("\n"), ""]
    if record.get("skipped"):
        md += ["## Not scored", ""] + [f"- {v}" if str(v).startswith(f"{k}:") else f"- {k}: {v}"
                                       for k, v in record["skipped"].items()] + [""]
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


def _family(record: dict[str, Any]) -> str:
    diffs = record["scores"]["a_star"].get("differences", [])
    fam = next((d["spearman"].get("family") for d in diffs if d["spearman"].get("family")), None)
    return str(fam) if fam else "n/a"


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
                  f"{rec['env']}, policy {rec['policy'].get('kind')}, {len(rec.get('tasks', []))} groups x "
                  f"{s['group_size']}, "
                  + ("exact" if rec.get("mode") == "exact" else f"K = {s['continuations']}")
                  + f"; {_provenance(rec)}. Full report: [{rel}/report.md]({rel}/report.md).", "",
                  f"Ground truth: {ceiling_line(rec)}." + (f" {shared_line(rec)}." if shared_line(rec) else ""), "",
                  summary_table(rec, axes=False).rstrip("\n"), ""]
        fig = path.parent / "figures" / "correlations.png"
        if fig.exists():
            lines += [f"![credit correlations]({os.path.relpath(fig, out_dir)})", ""]
    if len(read) > 1:
        lines = ["Mean within-group Spearman correlation with A* [95 % CI]; Δ = paired difference to GRPO on the "
                 "same task groups [95 % CI].", "", studies_table(read).rstrip("\n"), ""] + lines
        if any(_gradient(rec) for _, rec in read):
            lines = ["Gradient alignment (cosine of the policy gradient with the true one in a training batch) "
                     "[95 % CI]; Δ to GRPO [95 % CI].", "", studies_table(read, metric="gradient").rstrip("\n"),
                     ""] + lines
    if lines:
        lines = ["## Credit-assignment accuracy", "",
                 "Studies by `g2po credit` (step advantages against Monte-Carlo ground truth; main rows here, every "
                 "variant in each study's report).", ""] + lines
    return lines, problems
