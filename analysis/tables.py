"""The paper's tables from aggregated runs, with the published value and the difference beside ours.

Layouts (rows = methods, grouped by model size; :data:`TABLE1`, :data:`TABLE2`):

- Table 1: Pick, Look, Clean, Heat, Cool, Pick2, ALFWorld All, WebShop Score, WebShop Succ.
  (reference: both papers' "Table 1" rows of :func:`g2po_bench.analysis.reference.load_reference`).
- Table 2: AppWorld Success, Score (reference: the G2PO paper's "Table 2").

Each column has three sub-columns: ours (mean ± std over seeds, %), ref. (the published value)
and Δ (ours − ref., percentage points). Cell text:

=================  ==========================================================================
ours               "72.0 ± 2.0"; one seed: "72.0 ± n/a"; no run: "—"; a trailing "*" marks a
                   cell that includes runs still in progress
ref.               "72.8 ± 3.6"; single published number: "4.1"; derived: "≈97.2";
                   unknown: "unknown"; nothing published: "—"
Δ                  "-0.8"; "≈+1.2" against a derived value; "—" when either side is missing
                   or the reference is unknown
=================  ==========================================================================

Missing cells are always "—" (never 0). A ``Seeds`` column gives the number of runs per cell
of the row ("3", or "2–3" when cells differ). Rows exist for every (model size, method) with a
run or a published value; runs with a non-empty ``variant`` (ablations, w sweep) are left out
unless ``include_variants=True``. A run row named "GiGPO w/ std" or "GiGPO w/o std" with no
published row of that exact name is compared with a published "GiGPO" row of the same size
(Table 2 does not say which variant); that published-only "GiGPO" row is then not repeated.

Example::

    from g2po_bench.analysis.tables import TABLE1, build_table
    t1 = build_table(cells, load_reference(), TABLE1)   # cells = aggregate_metrics(...)
    print(t1.to_markdown()); open("table1.tex", "w").write(t1.to_latex())
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from g2po_bench.analysis.naming import method_sort_key, model_size_sort_key

__all__ = [
    "TableSpec",
    "Table",
    "TABLE1",
    "TABLE2",
    "TABLE_STEP_2026",
    "TABLE_CRBC_ABLATIONS",
    "MISSING",
    "build_table",
    "format_ours",
    "format_ref",
    "format_diff",
    "REFERENCE_ALIASES",
]

MISSING = "—"


@dataclass(frozen=True)
class TableSpec:
    """What a table shows: ``columns`` are (label, metric) pairs; ``reference_table`` selects
    the reference rows (``table`` column of the reference)."""

    name: str
    title: str
    reference_table: str
    columns: tuple[tuple[str, str], ...]

    @property
    def metrics(self) -> list[str]:
        return [m for _, m in self.columns]


TABLE1 = TableSpec(
    "table1",
    "Table 1: ALFWorld (success % per task type and All) and WebShop (score, success %)",
    "Table 1",
    (
        ("Pick", "success_pick"),
        ("Look", "success_look"),
        ("Clean", "success_clean"),
        ("Heat", "success_heat"),
        ("Cool", "success_cool"),
        ("Pick2", "success_pick2"),
        ("ALFWorld All", "success_all"),
        ("WebShop Score", "webshop_score"),
        ("WebShop Succ.", "webshop_success"),
    ),
)
TABLE2 = TableSpec(
    "table2",
    "Table 2: AppWorld (success %, score)",
    "Table 2",
    (("AppWorld Success", "appworld_success"), ("AppWorld Score", "appworld_score")),
)

TABLE_STEP_2026 = TableSpec(
    "step_2026",
    "The 2026 step-level estimators: ALFWorld All and WebShop (score, success %), beside the CRBC paper's comparison",
    "CRBC comparison",
    (("ALFWorld All", "success_all"), ("WebShop Score", "webshop_score"), ("WebShop Succ.", "webshop_success")),
)
TABLE_CRBC_ABLATIONS = TableSpec(
    "crbc_ablations",
    "CRBC ablations (closure depth K, beta, (w_G, w_S)): ALFWorld All, beside the CRBC paper's",
    "CRBC ablations",
    (("ALFWorld All", "success_all"),),
)

#: Our method name -> published row name to compare with when no exact published row exists.
REFERENCE_ALIASES = {"GiGPO w/ std": "GiGPO", "GiGPO w/o std": "GiGPO"}

SIZE_TITLES = {"closed-source": "Closed-source prompting", "tiny": "tiny (CPU model)"}


def _finite(x: Any) -> bool:
    try:
        return x is not None and not pd.isna(x) and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def format_ours(mean: Any, std: Any, n: Any, in_progress: bool = False, digits: int = 1,
                short_run: bool = False) -> str:
    """"m ± s", "m ± n/a" (one seed), "—" (no run); "*" appended for runs in progress, "†" for a
    cell that includes a short run (:func:`g2po_bench.analysis.load.mark_short_runs`)."""
    if not _finite(mean) or not _finite(n) or int(n) == 0:
        return MISSING
    s = f"{float(std):.{digits}f}" if _finite(std) else "n/a"
    return f"{float(mean):.{digits}f} ± {s}" + ("*" if in_progress else "") + ("†" if short_run else "")


def format_ref(mean: Any, std: Any, status: Any, digits: int = 1) -> str:
    """Published value: "m ± s", "m", "≈m" (derived), "unknown", or "—" (none)."""
    if status is None or (isinstance(status, float) and math.isnan(status)) or status == "":
        return MISSING
    if status == "unknown" or not _finite(mean):
        return "unknown"
    if status == "derived":
        return f"≈{float(mean):.{digits}f}"
    if _finite(std):
        return f"{float(mean):.{digits}f} ± {float(std):.{digits}f}"
    return f"{float(mean):.{digits}f}"


def format_diff(diff: Any, status: Any, digits: int = 1) -> str:
    """Ours − ref.: "+1.2" / "-0.8", "≈+1.2" against a derived value, "—" when undefined."""
    if not _finite(diff):
        return MISSING
    return ("≈" if status == "derived" else "") + f"{float(diff):+.{digits}f}"


@dataclass
class Table:
    """A built table.

    ``cells``: one row per (model_size, method, metric) with columns ``model_size, method,
    label, metric, n, mean, std, ci_low, ci_high, in_progress, short_run, ref_method, ref_mean, ref_std,
    ref_status, ref_std_status, ref_source, diff`` (numbers; NaN where missing).
    ``rows``: the (model_size, method) rows in display order.
    """

    spec: TableSpec
    cells: pd.DataFrame
    rows: list[tuple[str, str]]
    with_reference: bool = True
    digits: int = 1
    notes: list[str] = field(default_factory=list)

    def _lookup(self) -> dict[tuple[str, str, str], dict[str, Any]]:
        if getattr(self, "_index", None) is None or self._index_len != len(self.cells):
            self._index = {
                (str(r["model_size"]), str(r["method"]), str(r["metric"])): r
                for r in self.cells.to_dict("records")
            }
            self._index_len = len(self.cells)
        return self._index

    def _cell(self, size: str, method: str, metric: str) -> dict[str, Any] | None:
        return self._lookup().get((size, method, metric))

    def _seeds(self, size: str, method: str) -> str:
        idx = self._lookup()
        ns = sorted(
            {
                int(c["n"])
                for m in self.spec.metrics
                if (c := idx.get((size, method, m))) is not None and _finite(c["n"]) and int(c["n"]) > 0
            }
        )
        if not ns:
            return MISSING
        return str(ns[0]) if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"

    def to_frame(self) -> pd.DataFrame:
        """The displayed table as strings: ``Model, Method, Seeds`` then, per column label L,
        ``L`` (ours), ``L ref.`` and ``L Δ`` (without reference: only ``L``)."""
        recs = []
        for size, method in self.rows:
            rec: dict[str, str] = {"Model": size, "Method": method, "Seeds": self._seeds(size, method)}
            for label, metric in self.spec.columns:
                c = self._cell(size, method, metric) or {}
                rec[label] = format_ours(c.get("mean"), c.get("std"), c.get("n"), bool(c.get("in_progress")), self.digits,
                                         short_run=bool(c.get("short_run")))
                if self.with_reference:
                    rec[f"{label} ref."] = format_ref(c.get("ref_mean"), c.get("ref_std"), c.get("ref_status"), self.digits)
                    rec[f"{label} Δ"] = format_diff(c.get("diff"), c.get("ref_status"), self.digits)
            recs.append(rec)
        cols = ["Model", "Method", "Seeds"]
        for label, _ in self.spec.columns:
            cols += [label, f"{label} ref.", f"{label} Δ"] if self.with_reference else [label]
        return pd.DataFrame.from_records(recs, columns=cols)

    def to_markdown(self) -> str:
        """GitHub-flavoured Markdown (one header row; ``|`` in cells escaped)."""
        df = self.to_frame()
        if df.empty:
            return "_No rows: no runs and no published values for this table._\n"

        def esc(s: Any) -> str:
            return str(s).replace("|", "\\|")

        lines = ["| " + " | ".join(esc(c) for c in df.columns) + " |"]
        lines.append("|" + "|".join(["---"] * 2 + ["---:"] * (len(df.columns) - 2)) + "|")
        for _, r in df.iterrows():
            lines.append("| " + " | ".join(esc(v) for v in r.tolist()) + " |")
        return "\n".join(lines) + "\n"

    def to_latex(self, label: str | None = None) -> str:
        """A LaTeX ``table`` (needs ``\\usepackage{booktabs,graphicx}``); model sizes as sections."""
        df = self.to_frame()
        sub = 3 if self.with_reference else 1
        ncols = 2 + sub * len(self.spec.columns)
        out = [
            "% Generated by g2po_bench.analysis.tables; needs \\usepackage{booktabs} and \\usepackage{graphicx}.",
            "\\begin{table}[t]",
            "\\centering",
            f"\\caption{{{_latex_escape(self.spec.title)}}}",
            f"\\label{{tab:{label or self.spec.name}}}",
            "\\resizebox{\\linewidth}{!}{%",
            "\\begin{tabular}{l" + "c" + "r" * (sub * len(self.spec.columns)) + "}",
            "\\toprule",
        ]
        if self.with_reference:
            head = ["", ""] + [f"\\multicolumn{{3}}{{c}}{{{_latex_escape(lab)}}}" for lab, _ in self.spec.columns]
            out.append(" & ".join(head) + " \\\\")
            out.append(
                " ".join(f"\\cmidrule(lr){{{3 + 3 * i}-{5 + 3 * i}}}" for i in range(len(self.spec.columns)))
            )
            out.append(" & ".join(["Method", "Seeds"] + ["Ours", "Ref.", "$\\Delta$"] * len(self.spec.columns)) + " \\\\")
        else:
            out.append(" & ".join(["Method", "Seeds"] + [_latex_escape(lab) for lab, _ in self.spec.columns]) + " \\\\")
        current = None
        for _, r in df.iterrows():
            if r["Model"] != current:
                current = r["Model"]
                out.append("\\midrule")
                title = SIZE_TITLES.get(current, f"Model size {current}")
                out.append(f"\\multicolumn{{{ncols}}}{{l}}{{\\textit{{{_latex_escape(title)}}}}} \\\\")
            vals = [r["Method"], r["Seeds"]] + r.tolist()[3:]
            out.append(" & ".join(_latex_cell(v) for v in vals) + " \\\\")
        if df.empty:
            out.append("\\midrule")
            out.append(f"\\multicolumn{{{ncols}}}{{l}}{{no rows}} \\\\")
        out += ["\\bottomrule", "\\end{tabular}}", "\\end{table}"]
        return "\n".join(out) + "\n"

    def missing_cells(self) -> pd.DataFrame:
        """Published cells (any status, "unknown" included) that have no run yet:
        columns ``model_size, method, label, metric, ref_status``."""
        if not self.with_reference or self.cells.empty:
            return pd.DataFrame(columns=["model_size", "method", "label", "metric", "ref_status"])
        has_ref = self.cells["ref_status"].fillna("") != ""
        no_ours = ~self.cells["n"].map(lambda n: _finite(n) and int(n) > 0)
        sel = self.cells[has_ref & no_ours]
        return sel[["model_size", "method", "label", "metric", "ref_status"]].reset_index(drop=True)


def _latex_escape(s: str) -> str:
    repl = {
        "\\": "\\textbackslash{}",
        "&": "\\&",
        "%": "\\%",
        "$": "\\$",
        "#": "\\#",
        "_": "\\_",
        "{": "\\{",
        "}": "\\}",
        "~": "\\textasciitilde{}",
        "^": "\\textasciicircum{}",
    }
    return "".join(repl.get(ch, ch) for ch in str(s))


def _latex_cell(v: Any) -> str:
    s = _latex_escape(str(v))
    star = s.endswith("*")
    if star:
        s = s[:-1]
    s = s.replace(" ± ", "$\\pm$").replace("—", "--").replace("≈", "$\\approx$").replace("–", "--")
    return s + ("$^*$" if star else "")


def _keyed_cells(
    cells: pd.DataFrame | None, reference: pd.DataFrame | None, spec: TableSpec, *, include_variants: bool,
    with_reference: bool, include_closed: bool,
) -> tuple[dict[tuple[str, str, str], pd.Series], dict[tuple[str, str, str], pd.Series]]:
    """Our cells and the published ones of ``spec``'s metrics, keyed by (model size, method, metric)."""
    metrics = spec.metrics
    ours = cells if cells is not None else pd.DataFrame()
    if len(ours):
        ours = ours[ours["metric"].isin(metrics)]
        if not include_variants and "variant" in ours:
            ours = ours[ours["variant"].fillna("") == ""]
    ref = pd.DataFrame()
    if with_reference and reference is not None and len(reference):
        ref = reference[(reference["table"] == spec.reference_table) & reference["metric"].isin(metrics)]
        if not include_closed:
            ref = ref[ref["model_size"] != "closed-source"]
    ours_key = {}
    for _, r in ours.iterrows():
        ours_key[(str(r["model_size"]), str(r["method_label"]), str(r["metric"]))] = r
    ref_key = {}
    for _, r in ref.iterrows():
        ref_key[(str(r["model_size"]), str(r["method"]), str(r["metric"]))] = r
    return ours_key, ref_key


def _table_rows(ours_key: dict, ref_key: dict, ref_method_for) -> list[tuple[str, str]]:
    """The (model size, method) rows in table order: ours, and the published rows no row of ours
    stands for under another name (an alias)."""
    our_rows = {(s, m) for s, m, _ in ours_key}
    ref_rows = {(s, m) for s, m, _ in ref_key}
    consumed = set()
    for s, m in our_rows:
        rm = ref_method_for(s, m)
        if rm is not None and rm != m:
            consumed.add((s, rm))
    return sorted(
        our_rows | {r for r in ref_rows if r not in consumed or r in our_rows},
        key=lambda sm: (model_size_sort_key(sm[0]), method_sort_key(sm[1])),
    )


def _cell_record(o: pd.Series | None, rr: pd.Series | None, rm: str | None) -> dict[str, Any]:
    """The numbers of one table cell: ours (``o``), the published one (``rr`` of row ``rm``) and Δ."""
    mean = float(o["mean"]) if o is not None else math.nan
    ref_mean = float(rr["mean"]) if rr is not None and _finite(rr["mean"]) else math.nan
    diff = mean - ref_mean if _finite(mean) and _finite(ref_mean) else math.nan
    return {
        "n": int(o["n"]) if o is not None else 0,
        "mean": mean,
        "std": float(o["std"]) if o is not None else math.nan,
        "ci_low": float(o["ci_low"]) if o is not None else math.nan,
        "ci_high": float(o["ci_high"]) if o is not None else math.nan,
        "in_progress": bool(o["in_progress"]) if o is not None else False,
        "short_run": bool(o.get("short_run", False)) if o is not None else False,
        "ref_method": rm if rr is not None else "",
        "ref_mean": ref_mean,
        "ref_std": float(rr["std"]) if rr is not None and _finite(rr["std"]) else math.nan,
        "ref_status": str(rr["status"]) if rr is not None else "",
        "ref_std_status": str(rr["std_status"]) if rr is not None else "",
        "ref_source": str(rr["source"]) if rr is not None else "",
        "diff": diff,
    }


def build_table(
    cells: pd.DataFrame,
    reference: pd.DataFrame | None,
    spec: TableSpec,
    *,
    include_variants: bool = False,
    with_reference: bool = True,
    model_sizes: list[str] | None = None,
    include_closed: bool = True,
    digits: int = 1,
) -> Table:
    """Build ``spec`` from aggregated cells and the reference.

    Args:
        cells: :func:`g2po_bench.analysis.aggregate.aggregate_metrics` output (columns ``model_size,
            method_label, variant, metric, n, mean, std, ci_low, ci_high, in_progress``).
        reference: :func:`g2po_bench.analysis.reference.load_reference` output (any tables; rows of
            ``spec.reference_table`` are used), or None for no reference.
        spec: :data:`TABLE1`, :data:`TABLE2` or your own :class:`TableSpec`.
        include_variants: also show runs with a non-empty ``variant`` (as ``method [variant]``).
        with_reference: False drops the ref./Δ sub-columns and the published-only rows.
        model_sizes: keep only these model sizes (None: all).
        include_closed: keep the published closed-source prompting rows (GPT-4o, Gemini).
        digits: decimals shown.

    Returns:
        :class:`Table`.
    """
    ours_key, ref_key = _keyed_cells(cells, reference, spec, include_variants=include_variants,
                                     with_reference=with_reference, include_closed=include_closed)
    ref_methods_by_size: dict[str, set[str]] = {}
    for s, m, _ in ref_key:
        ref_methods_by_size.setdefault(s, set()).add(m)

    def ref_method_for(size: str, method: str) -> str | None:
        if method in ref_methods_by_size.get(size, set()):
            return method
        alias = REFERENCE_ALIASES.get(method)
        if alias and alias in ref_methods_by_size.get(size, set()):
            return alias
        return None

    rows = _table_rows(ours_key, ref_key, ref_method_for)
    if model_sizes is not None:
        rows = [r for r in rows if r[0] in model_sizes]
    recs = []
    for size, method in rows:
        rm = ref_method_for(size, method) if with_reference else None
        for label, metric in spec.columns:
            o = ours_key.get((size, method, metric))
            rr = ref_key.get((size, rm, metric)) if rm is not None else None
            recs.append({"model_size": size, "method": method, "label": label, "metric": metric,
                         **_cell_record(o, rr, rm)})
    cols = [
        "model_size", "method", "label", "metric", "n", "mean", "std", "ci_low", "ci_high",
        "in_progress", "short_run", "ref_method", "ref_mean", "ref_std", "ref_status", "ref_std_status",
        "ref_source", "diff",
    ]  # fmt: skip
    cells_df = pd.DataFrame.from_records(recs, columns=cols)
    notes = []
    aliased = cells_df[(cells_df["ref_method"] != "") & (cells_df["ref_method"] != cells_df["method"])]
    for (size, method, rm), _ in aliased.groupby(["model_size", "method", "ref_method"]):
        notes.append(f"{method} ({size}) is compared with the published '{rm}' row (variant not stated).")
    return Table(spec, cells_df, rows, with_reference, digits, notes)
