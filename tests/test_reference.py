"""The published numbers as machine-readable tables (results/reference)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from g2po_bench.analysis.reference import REFERENCE_COLUMNS, load_reference, reference_files

PAPER_RESULTS = Path(__file__).resolve().parents[2] / "shared" / "reference" / "PAPER_RESULTS.md"
T1_METRICS = [
    "success_pick", "success_look", "success_clean", "success_heat", "success_cool",
    "success_pick2", "success_all", "webshop_score", "webshop_success",
]  # fmt: skip


@pytest.fixture(scope="module")
def ref():
    return load_reference()


def cell(ref, size, method, metric, table="Table 1"):
    sel = ref[(ref["table"] == table) & (ref["model_size"] == size) & (ref["method"] == method) & (ref["metric"] == metric)]
    assert len(sel) == 1, (size, method, metric, len(sel))
    return sel.iloc[0]


def test_files_are_the_data_of_results_reference():
    files = reference_files()
    assert files == ["crbc_2026.csv", "other_published.csv", "table1_alfworld_webshop.csv", "table2_appworld.csv"]
    for f in files:
        assert (Path(__file__).resolve().parents[1] / "results" / "reference" / f).is_file()


def test_columns_and_statuses(ref):
    assert tuple(ref.columns) == REFERENCE_COLUMNS
    assert set(ref["status"]) == {"reported", "derived", "unknown"}
    assert ref.loc[ref["status"] == "unknown", "mean"].isna().all()
    assert ref.loc[ref["status"] != "unknown", "mean"].notna().all()
    assert (ref["source"] != "").all()


def test_reported_values(ref):
    r = cell(ref, "1.5B", "GRPO", "success_all")
    assert (r["mean"], r["std"], r["status"], r["paper"], r["iterations"]) == (72.8, 3.6, "reported", "GiGPO", 150)
    assert "GiGPO (arXiv 2505.10978), Table 1, row 'GRPO'" in r["source"]
    r = cell(ref, "7B", "GiGPO w/o std", "webshop_success")
    assert (r["mean"], r["std"]) == (75.2, 3.8)
    r = cell(ref, "1.5B", "Qwen2.5 (prompting)", "success_pick2")
    assert r["mean"] == 0.0 and math.isnan(r["std"]) and r["std_status"] == "not_reported"
    r = cell(ref, "closed-source", "Gemini-2.5-Pro", "webshop_score")
    assert r["mean"] == 42.5


def test_g2po_derived_and_unknown_cells_stay_marked(ref):
    assert cell(ref, "1.5B", "G2PO", "success_pick")["status"] == "derived"
    assert cell(ref, "1.5B", "G2PO", "success_pick")["mean"] == 97.2
    heat = cell(ref, "1.5B", "G2PO", "success_heat")
    assert heat["status"] == "unknown" and math.isnan(heat["mean"])
    look = cell(ref, "1.5B", "G2PO", "success_look")
    assert (look["mean"], look["std"], look["status"]) == (96.3, 5.2, "reported")
    for m in T1_METRICS[:6]:
        assert cell(ref, "7B", "G2PO", m)["status"] == "unknown"
    score7 = cell(ref, "7B", "G2PO", "webshop_score")
    assert score7["mean"] == 89.8 and math.isnan(score7["std"]) and score7["std_status"] == "unknown"
    assert cell(ref, "7B", "G2PO", "success_all")["std"] == 1.3
    assert cell(ref, "1.5B", "G2PO", "success_all")["iterations"] == 100


def test_table1_is_complete(ref):
    t1 = ref[ref["table"] == "Table 1"]
    rows = t1.groupby(["model_size", "method"])["metric"].apply(sorted)
    assert len(rows) == 2 + 2 * 9
    for metrics in rows:
        assert metrics == sorted(T1_METRICS)


def test_table2_appworld(ref):
    t2 = load_reference("Table 2")
    assert set(t2["table"]) == {"Table 2"}
    assert len(t2) == 12
    assert cell(ref, "14B", "G2PO", "appworld_success", "Table 2")["mean"] == 27.6
    assert cell(ref, "14B", "PPO (critic)", "appworld_score", "Table 2")["mean"] == 14.7
    assert "row 'PPO'" in cell(ref, "14B", "PPO (critic)", "appworld_score", "Table 2")["source"]


def test_other_figures(ref):
    single = ref[ref["metric"] == "singleton_frac_pct"].set_index("env")["mean"]
    assert single.to_dict() == {"webshop": 11.9, "alfworld": 8.1}
    rerun = ref[ref["paper"] == "independent rerun"].set_index("metric")["mean"]
    assert rerun.to_dict() == {"success_all": 91.4, "success_all_peak": 95.3}


def test_gigpo_rows_match_paper_results_md(ref):
    """Cross-check every GiGPO Table 1 cell against the Markdown source."""
    if not PAPER_RESULTS.exists():
        pytest.skip(f"{PAPER_RESULTS} not available")
    text = PAPER_RESULTS.read_text(encoding="utf-8")
    section = text.split("## GiGPO Table 1", 1)[1].split("## Other published figures", 1)[0]
    size = "closed-source"
    checked = 0
    for line in section.splitlines():
        if line.startswith("Qwen2.5-1.5B"):
            size = "1.5B"
        elif line.startswith("Qwen2.5-7B"):
            size = "7B"
        if not line.startswith("| ") or line.startswith("| Method") or line.startswith("| Model"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        method, values = cells[0], cells[1:]
        for metric, v in zip(T1_METRICS, values):
            m = re.fullmatch(r"([\d.]+)(?:±([\d.]+))?", v)
            r = cell(ref, size, method, metric)
            assert r["mean"] == float(m.group(1))
            if m.group(2):
                assert r["std"] == float(m.group(2))
            else:
                assert math.isnan(r["std"])
            checked += 1
    assert checked == 18 * 9


def test_crbc_paper_numbers(ref):
    """The CRBC paper (arXiv 2609.35082): its comparison (ALFWorld All, WebShop; 1.5B) and
    ablations."""
    comp = ref[ref["table"] == "CRBC comparison"]
    alf = comp[comp["metric"] == "success_all"].set_index("method")["mean"].to_dict()
    assert alf == {"GRPO": 77.73, "GiGPO": 89.32, "GraphGPO": 90.10, "HGPO": 90.50, "CRBC": 96.09}
    ws = comp[comp["env"] == "webshop"].set_index(["method", "metric"])["mean"].to_dict()
    assert ws == {("GiGPO", "webshop_score"): 88.93, ("GiGPO", "webshop_success"): 75.78,
                  ("CRBC", "webshop_score"): 90.11, ("CRBC", "webshop_success"): 81.51}
    abl = ref[ref["table"] == "CRBC ablations"].set_index("method")["mean"].to_dict()
    assert abl == {
        "CRBC": 96.09,
        "CRBC [closure_depth=0]": 92.97, "CRBC [closure_depth=1]": 92.97,
        "CRBC [closure_depth=2]": 93.75, "CRBC [closure_depth=3]": 93.75,
        "CRBC [beta=0.95]": 95.57, "CRBC [beta=0.99]": 95.31, "CRBC [beta=1]": 93.36,
        "CRBC [state_weight=0]": 76.56, "CRBC [group_weight=0]": 95.31, "CRBC [state_weight=1]": 93.75,
    }
    crbc = ref[ref["paper"] == "CRBC"]
    assert (crbc["model_size"] == "1.5B").all() and crbc["source"].str.contains("arXiv 2609.35082").all()


def test_crbc_ablation_rows_are_named_like_our_variants():
    """A run with one CRBC option changed gets the label of the published ablation row."""
    from g2po_bench.analysis.naming import method_label, method_name, variant_of

    for options, label in (({"closure_depth": 0}, "CRBC [closure_depth=0]"), ({"beta": 1.0}, "CRBC [beta=1]"),
                           ({"beta": 0.95}, "CRBC [beta=0.95]"), ({"state_weight": 0.0}, "CRBC [state_weight=0]"),
                           ({"group_weight": 0.0}, "CRBC [group_weight=0]")):
        cfg = {"env": {"name": "alfworld"}, "algorithm": {"name": "crbc", "mode": "mean_std_norm", "options": options}}
        assert method_label(method_name(cfg), variant_of(cfg)) == label
