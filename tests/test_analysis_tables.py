"""Table layout: exact cells beside the reference; missing cells are "—", never 0."""

from __future__ import annotations

import pytest
from synthetic_runs import make_eval, write_synthetic_run

from g2po_bench.analysis.aggregate import aggregate_metrics, metrics_long
from g2po_bench.analysis.load import load_runs
from g2po_bench.analysis.reference import load_reference
from g2po_bench.analysis.tables import (
    TABLE1,
    TABLE2,
    build_table,
    format_diff,
    format_ours,
    format_ref,
)

Q15 = "/models/Qwen2.5-1.5B-Instruct"
TYPES = [
    "pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place",
]  # fmt: skip


def per_task(pick: float, rest: float = 0.5) -> dict[str, float]:
    return {t: (pick if t == "pick_and_place_simple" else rest) for t in TYPES}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for seed, (sr, pick) in enumerate([(0.70, 0.84), (0.72, 0.86), (0.74, 0.88)]):
        write_synthetic_run(root / f"grpo-{seed}", algorithm="grpo", seed=seed, model_path=Q15, final=make_eval(100, sr, per_task(pick)))
    write_synthetic_run(root / "g2po-0", algorithm="g2po", seed=0, model_path=Q15, final=make_eval(100, 0.9, per_task(1.0)))
    write_synthetic_run(root / "g2po-w", algorithm="g2po", seed=0, model_path=Q15, step_weight=0.8, final=make_eval(100, 0.1, per_task(0.1)))
    for seed, (sr, score) in enumerate([(0.25, 20.0), (0.30, 22.0)]):
        write_synthetic_run(root / f"app-{seed}", env="appworld", algorithm="gigpo", mode="mean_norm", seed=seed,
                            model_path="/m/Qwen2.5-14B-Instruct", final=make_eval(50, sr, {}, score=score))  # fmt: skip
    write_synthetic_run(root / "tiny-zero", algorithm="grpo", final=make_eval(4, 0.0, per_task(0.0, 0.0)))
    write_synthetic_run(root / "tiny-running", algorithm="g2po", state="running", history=[make_eval(2, 0.25, per_task(0.25))])
    loaded = load_runs(root)
    assert loaded.skipped == []
    cells = aggregate_metrics(metrics_long(loaded.runs), n_boot=1000)
    ref = load_reference()
    return build_table(cells, ref, TABLE1), build_table(cells, ref, TABLE2), cells


def row(table, size, method):
    df = table.to_frame()
    sel = df[(df["Model"] == size) & (df["Method"] == method)]
    assert len(sel) == 1, (size, method)
    return sel.iloc[0]


def test_formatters():
    assert format_ours(72.0, 2.0, 3) == "72.0 ± 2.0"
    assert format_ours(72.0, float("nan"), 1) == "72.0 ± n/a"
    assert format_ours(0.0, 0.0, 2) == "0.0 ± 0.0"
    assert format_ours(float("nan"), float("nan"), 0) == "—"
    assert format_ours(50.0, 1.0, 2, in_progress=True) == "50.0 ± 1.0*"
    assert format_ref(72.8, 3.6, "reported") == "72.8 ± 3.6"
    assert format_ref(4.1, float("nan"), "reported") == "4.1"
    assert format_ref(97.2, float("nan"), "derived") == "≈97.2"
    assert format_ref(float("nan"), float("nan"), "unknown") == "unknown"
    assert format_ref(float("nan"), float("nan"), "") == "—"
    assert format_diff(-0.8, "reported") == "-0.8" and format_diff(2.8, "derived") == "≈+2.8"
    assert format_diff(float("nan"), "reported") == "—"


def test_table1_columns_and_row_order(built):
    t1, _, _ = built
    df = t1.to_frame()
    labels = ["Pick", "Look", "Clean", "Heat", "Cool", "Pick2", "ALFWorld All", "WebShop Score", "WebShop Succ."]
    expected = ["Model", "Method", "Seeds"] + [c for lab in labels for c in (lab, f"{lab} ref.", f"{lab} Δ")]
    assert list(df.columns) == expected
    methods = ["Qwen2.5 (prompting)", "ReAct", "Reflexion", "PPO (critic)", "RLOO", "GRPO", "GiGPO w/ std", "GiGPO w/o std", "G2PO"]
    rows = list(zip(df["Model"], df["Method"]))
    assert rows == (
        [("closed-source", "GPT-4o"), ("closed-source", "Gemini-2.5-Pro")]
        + [("1.5B", m) for m in methods]
        + [("7B", m) for m in methods]
        + [("tiny", "GRPO"), ("tiny", "G2PO")]
    )  # the w=0.8 variant is not a main-table row


def test_table1_exact_cells(built):
    t1, _, _ = built
    g = row(t1, "1.5B", "GRPO")
    assert g["Seeds"] == "3"
    assert (g["ALFWorld All"], g["ALFWorld All ref."], g["ALFWorld All Δ"]) == ("72.0 ± 2.0", "72.8 ± 3.6", "-0.8")
    assert (g["Pick"], g["Pick ref."], g["Pick Δ"]) == ("86.0 ± 2.0", "85.3 ± 1.5", "+0.7")
    assert (g["Heat"], g["Heat ref."], g["Heat Δ"]) == ("50.0 ± 0.0", "78.2 ± 7.9", "-28.2")
    # no WebShop run: ours and Δ missing, the reference still shown
    assert (g["WebShop Score"], g["WebShop Score ref."], g["WebShop Score Δ"]) == ("—", "75.8 ± 3.5", "—")
    s = row(t1, "1.5B", "G2PO")
    assert (s["ALFWorld All"], s["ALFWorld All ref."], s["ALFWorld All Δ"]) == ("90.0 ± n/a", "95.0 ± 0.8", "-5.0")
    assert (s["Pick"], s["Pick ref."], s["Pick Δ"]) == ("100.0 ± n/a", "≈97.2", "≈+2.8")
    assert (s["Heat"], s["Heat ref."], s["Heat Δ"]) == ("50.0 ± n/a", "unknown", "—")
    p = row(t1, "1.5B", "Qwen2.5 (prompting)")
    assert (p["Pick2"], p["Pick2 ref."], p["Pick2 Δ"], p["Seeds"]) == ("—", "0.0", "—", "—")
    seven = row(t1, "7B", "G2PO")
    assert (seven["Look ref."], seven["WebShop Score ref."], seven["WebShop Succ. ref."]) == ("unknown", "89.8", "78.3 ± 0.6")
    z = row(t1, "tiny", "GRPO")
    assert (z["ALFWorld All"], z["ALFWorld All ref."], z["ALFWorld All Δ"]) == ("0.0 ± n/a", "—", "—")  # a real 0 is shown as 0
    r = row(t1, "tiny", "G2PO")
    assert r["ALFWorld All"] == "25.0 ± n/a*"  # still running


def test_missing_cells_are_never_zero(built):
    t1, _, _ = built
    cells = t1.cells
    no_run = cells[cells["n"] == 0]
    assert len(no_run) > 0
    assert no_run["mean"].isna().all() and no_run["diff"].isna().all()
    df = t1.to_frame()
    for _, r in df.iterrows():
        for lab, metric in TABLE1.columns:
            c = cells[(cells["model_size"] == r["Model"]) & (cells["method"] == r["Method"]) & (cells["metric"] == metric)].iloc[0]
            if c["n"] == 0:
                assert r[lab] == "—" and r[f"{lab} Δ"] == "—"
    miss = t1.missing_cells()
    grpo = miss[(miss["model_size"] == "1.5B") & (miss["method"] == "GRPO")]
    assert list(grpo["label"]) == ["WebShop Score", "WebShop Succ."]
    assert len(miss[(miss["model_size"] == "7B") & (miss["method"] == "G2PO")]) == 9


def test_table2_with_gigpo_alias(built):
    _, t2, _ = built
    df = t2.to_frame()
    assert list(df["Method"]) == ["ReAct", "PPO (critic)", "RLOO", "GRPO", "GiGPO w/o std", "G2PO"]
    g = row(t2, "14B", "GiGPO w/o std")
    assert (g["AppWorld Success"], g["AppWorld Success ref."], g["AppWorld Success Δ"]) == ("27.5 ± 3.5", "25.7", "+1.8")
    assert (g["AppWorld Score"], g["AppWorld Score ref."], g["AppWorld Score Δ"]) == ("21.0 ± 1.4", "19.2", "+1.8")
    assert any("published 'GiGPO' row" in n for n in t2.notes)


def test_markdown_and_latex(built):
    t1, _, cells = built
    md = t1.to_markdown().splitlines()
    assert md[0].startswith("| Model | Method | Seeds | Pick | Pick ref. | Pick Δ | Look |")
    assert len(md) == 2 + len(t1.rows)
    assert "| 1.5B | GRPO | 3 | 86.0 ± 2.0 | 85.3 ± 1.5 | +0.7 |" in md[2 + t1.rows.index(("1.5B", "GRPO"))]
    tex = t1.to_latex()
    assert "\\begin{tabular}" in tex and "\\multicolumn{3}{c}{Pick}" in tex and "\\bottomrule" in tex
    assert "72.0$\\pm$2.0" in tex and "$\\approx$97.2" in tex and "25.0$\\pm$n/a$^*$" in tex
    assert "±" not in tex and "—" not in tex and "≈" not in tex
    assert "\\textit{Model size 1.5B}" in tex
    v = build_table(cells, None, TABLE1, include_variants=True, with_reference=False)
    assert ("1.5B", "G2PO [w=0.8]") in v.rows
    assert list(v.to_frame().columns)[:5] == ["Model", "Method", "Seeds", "Pick", "Look"]
    assert "G2PO [w=0.8]" in v.to_latex()
    assert v.cells["ref_mean"].isna().all()
