"""Aggregation over seeds: mean ± std, bootstrap CI, a cell's IQM (exact on known values)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from g2po_bench.analysis.aggregate import aggregate_metrics, mean_std, metrics_long
from g2po_bench.core.stats import bootstrap_ci


def test_mean_std_ddof1():
    mean, std, n = mean_std([70.0, 72.0, 74.0])
    assert (mean, std, n) == (72.0, 2.0, 3)
    mean, std, n = mean_std([0.5])
    assert mean == 0.5 and math.isnan(std) and n == 1
    mean, std, n = mean_std([])
    assert math.isnan(mean) and math.isnan(std) and n == 0
    assert mean_std([1.0, float("nan"), 3.0])[:3] == (2.0, math.sqrt(2.0), 2)


def test_bootstrap_ci_exact_cases():
    assert bootstrap_ci([50.0, 50.0, 50.0]) == (50.0, 50.0)
    # resampled means of {0, 1} (n=2) take values 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4,
    # so the 2.5th and 97.5th percentiles are exactly 0 and 1
    assert bootstrap_ci([0.0, 1.0]) == (0.0, 1.0)
    lo, hi = bootstrap_ci([5.0])
    assert math.isnan(lo) and math.isnan(hi)


def test_bootstrap_ci_is_the_seeded_percentile_bootstrap():
    x = np.array([61.0, 70.0, 72.5, 80.0, 55.0])
    lo, hi = bootstrap_ci(x, n_boot=5000, seed=7, confidence=0.9)
    rng = np.random.default_rng(7)
    means = x[rng.integers(0, 5, size=(5000, 5))].mean(axis=1)
    assert (lo, hi) == tuple(np.percentile(means, [5.0, 95.0]))
    assert bootstrap_ci(x, n_boot=5000, seed=7, confidence=0.9) == (lo, hi)  # reproducible
    assert bootstrap_ci(x, n_boot=5000, seed=8, confidence=0.9) != (lo, hi)
    assert lo <= x.mean() <= hi
    assert x.min() <= lo < hi <= x.max()


def _cell_iqm(values):
    long = pd.DataFrame({"run_id": [f"r{i}" for i in range(len(values))], "seed": range(len(values)),
                         "model_size": "tiny", "method_label": "G2PO", "method": "G2PO", "variant": "",
                         "env": "alfworld", "metric": "success_all", "value": values, "in_progress": False})
    return aggregate_metrics(long, n_boot=50).iloc[0]["iqm"]


def test_a_cells_iqm_is_rliables_interquartile_mean_of_its_seeds():
    assert _cell_iqm([1.0, 2, 3, 4, 5, 6, 7, 8]) == 4.5  # drops 1, 2 and 7, 8
    assert _cell_iqm([1.0, 2.0, 10.0]) == pytest.approx(13 / 3)  # n < 4: nothing trimmed
    assert _cell_iqm([5.0, 1.0, 9.0, 3.0, 7.0]) == pytest.approx((3 + 5 + 7) / 3)  # int(1.25) = 1 each end


def _runs():
    rows = []
    for seed, (sr, pick) in enumerate([(0.70, 0.9), (0.72, 0.8), (0.74, None)]):
        r = {
            "run_id": f"r{seed}", "model_size": "1.5B", "method_label": "GRPO", "method": "GRPO",
            "variant": "", "env": "alfworld", "seed": seed, "in_progress": seed == 2,
            "final.success_rate": sr, "final.score": float("nan"),
        }  # fmt: skip
        if pick is not None:
            r["final.task.pick_and_place_simple"] = pick
        rows.append(r)
    rows.append({
        "run_id": "w0", "model_size": "1.5B", "method_label": "GRPO", "method": "GRPO", "variant": "",
        "env": "webshop", "seed": 0, "in_progress": False, "final.success_rate": 0.5, "final.score": 71.25,
    })  # fmt: skip
    return pd.DataFrame(rows)


def test_metrics_long_units_and_names():
    long = metrics_long(_runs())
    got = {(r.run_id, r.metric): r.value for r in long.itertuples()}
    assert got[("r0", "success_all")] == pytest.approx(70.0)
    assert got[("r1", "success_pick")] == pytest.approx(80.0)
    assert ("r2", "success_pick") not in got  # missing -> no row, never 0
    assert ("r0", "alfworld_score") not in got  # NaN score -> no row
    assert got[("w0", "webshop_success")] == 50.0
    assert got[("w0", "webshop_score")] == 71.25
    with pytest.raises(ValueError):
        metrics_long(_runs(), which="last")


def test_aggregate_metrics_exact():
    cells = aggregate_metrics(metrics_long(_runs()), n_boot=2000)
    c = cells[cells["metric"] == "success_all"].iloc[0]
    assert (c["n"], c["seeds"], bool(c["in_progress"])) == (3, "0,1,2", True)
    assert c["mean"] == pytest.approx(72.0) and c["std"] == pytest.approx(2.0)
    assert c["ci_low"] >= 70.0 - 1e-9 and c["ci_high"] <= 74.0 + 1e-9
    p = cells[cells["metric"] == "success_pick"].iloc[0]
    assert (p["n"], bool(p["in_progress"])) == (2, False)
    assert p["mean"] == pytest.approx(85.0) and p["std"] == pytest.approx(math.sqrt(50.0))
    w = cells[cells["metric"] == "webshop_score"].iloc[0]
    assert w["n"] == 1 and w["mean"] == 71.25 and math.isnan(w["std"]) and math.isnan(w["ci_low"])
    assert aggregate_metrics(metrics_long(_runs().iloc[:0])).empty


def _eval_file(path, before, final, before_t=None, final_t=None):
    import json

    def ev(xs):
        return {"success_rate": float(np.mean(xs)), "episodes": [[f"task{i}", x] for i, x in enumerate(xs)]}

    rec = {"before": ev(before), "final": ev(final)}
    if before_t is not None:
        rec["at_train_temperature"] = {"temperature": 1.0, "before": ev(before_t), "final": ev(final_t)}
    path.mkdir(parents=True)
    (path / "eval.json").write_text(json.dumps(rec))
    return {"env": "alfworld", "model_size": "tiny", "method_label": "G2PO", "path": str(path), "kind": "train",
            "before.success_rate": float(np.mean(before)), "final.success_rate": float(np.mean(final))}


def test_improvement_over_warm_start_at_the_panel_and_at_the_training_temperature(tmp_path):
    from g2po_bench.analysis.aggregate import improvement_over_warm_start

    runs = pd.DataFrame([
        _eval_file(tmp_path / "s0", [0, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 0], [1, 0, 1, 0]),
        _eval_file(tmp_path / "s1", [1, 1, 0, 0], [1, 1, 0, 0], [0, 1, 0, 0], [1, 1, 0, 1]),
    ])
    panel = improvement_over_warm_start(runs, n_boot=200)
    # panel: before (25 + 50) / 2 = 37.5 %, final (50 + 50) / 2 = 50 %, +12.5 points
    assert panel.iloc[0][["before", "final", "improvement"]].tolist() == pytest.approx([37.5, 50.0, 12.5])
    hot = improvement_over_warm_start(runs, n_boot=200, at_train_temperature=True)
    # training temperature: before (25 + 25) / 2 = 25 %, final (50 + 75) / 2 = 62.5 %, +37.5 points
    row = hot.iloc[0]
    assert [row["before"], row["final"], row["improvement"]] == pytest.approx([25.0, 62.5, 37.5])
    assert row["ci_kind"] == "episodes x seeds" and row["ci_low"] <= 37.5 <= row["ci_high"]
    # a group with a run lacking the record is left out (no fallback to another temperature)
    runs = pd.concat([runs, pd.DataFrame([_eval_file(tmp_path / "s2", [0, 0, 0, 0], [1, 1, 1, 1])])])
    assert improvement_over_warm_start(runs, n_boot=200, at_train_temperature=True).empty
    assert len(improvement_over_warm_start(runs, n_boot=200)) == 1


def test_improvement_over_warm_start_in_score_points(tmp_path):
    """The WebShop score (0-100 per episode, ``episode_scores``) is paired like the successes and
    stays in score points; a run without per-episode scores leaves its group out."""
    import json

    from g2po_bench.analysis.aggregate import improvement_over_warm_start

    rows = []
    for name, before, final in (("s0", [0.0, 100.0, 50.0, 90.0], [80.0, 100.0, 50.0, 90.0]),
                                ("s1", [100.0, 0.0, 60.0, 0.0], [100.0, 40.0, 60.0, 0.0])):
        row = _eval_file(tmp_path / name, [x == 100.0 for x in before], [x == 100.0 for x in final])
        ev = json.loads((tmp_path / name / "eval.json").read_text())
        ev["before"]["episode_scores"], ev["final"]["episode_scores"] = before, final
        (tmp_path / name / "eval.json").write_text(json.dumps(ev))
        rows.append({**row, "env": "webshop"})
    runs = pd.DataFrame(rows)
    imp = improvement_over_warm_start(runs, n_boot=500, metric="score").iloc[0]
    # before (60 + 40) / 2 = 50, final (80 + 50) / 2 = 65: +15 score points (s0 +20, s1 +10)
    assert [imp["before"], imp["final"], imp["improvement"]] == pytest.approx([50.0, 65.0, 15.0])
    assert imp["ci_kind"] == "episodes x seeds" and 0.0 <= imp["ci_low"] <= 15.0 <= imp["ci_high"] <= 80.0
    # the successes of the same runs: before 25 %, final 25 %
    assert improvement_over_warm_start(runs, n_boot=200).iloc[0]["improvement"] == pytest.approx(0.0)
    bare = _eval_file(tmp_path / "s2", [0, 0, 1, 1], [0, 1, 1, 1])
    assert improvement_over_warm_start(pd.concat([runs, pd.DataFrame([{**bare, "env": "webshop"}])]),
                                       n_boot=200, metric="score").empty
    with pytest.raises(ValueError, match="metric must be"):
        improvement_over_warm_start(runs, metric="reward")


def test_method_differences_pair_runs_by_seed_and_task(tmp_path):
    from g2po_bench.analysis.aggregate import method_differences

    def run(name, method, seed, final, order=None):
        row = _eval_file(tmp_path / name, [0, 0, 0, 0], final)
        if order is not None:  # the same panel recorded in another order
            import json

            ev = json.loads((tmp_path / name / "eval.json").read_text())
            ev["final"]["episodes"] = [ev["final"]["episodes"][i] for i in order]
            (tmp_path / name / "eval.json").write_text(json.dumps(ev))
        return {**row, "method_label": method, "seed": seed}

    runs = pd.DataFrame([
        run("g0", "GRPO", 0, [1, 0, 0, 0]), run("g1", "GRPO", 1, [1, 1, 0, 0]),
        run("p0", "G2PO", 0, [1, 1, 0, 1], order=[3, 2, 1, 0]), run("p1", "G2PO", 1, [1, 1, 1, 1]),
        run("p2", "G2PO", 2, [0, 0, 0, 0]),  # no GRPO run of seed 2: not paired
    ])
    d = method_differences(runs, n_boot=500)
    assert len(d) == 1
    row = d.iloc[0]
    # the paper's order: G2PO minus GRPO; seeds 0 and 1: (75 - 25) and (100 - 50) -> +50 points
    assert (row["method_label"], row["baseline_label"], row["seeds"]) == ("G2PO", "GRPO", 2)
    assert [row["method_final"], row["baseline_final"], row["difference"]] == pytest.approx([87.5, 37.5, 50.0])
    # per-episode differences (seed 0: 0, 1, 0, 1; seed 1: 0, 0, 1, 1) are all 0 or 1: the CI stays in [0, 100]
    assert 0.0 <= row["ci_low"] < 50.0 < row["ci_high"] <= 100.0
    # the other temperature has no records here; other tasks in one panel: no pair
    assert method_differences(runs, n_boot=100, at_train_temperature=True).empty
    other = run("x1", "GRPO", 1, [1, 1, 0, 0])
    import json

    ev = json.loads((tmp_path / "x1" / "eval.json").read_text())
    ev["final"]["episodes"][0][0] = "another task"
    (tmp_path / "x1" / "eval.json").write_text(json.dumps(ev))
    d = method_differences(pd.DataFrame([runs.iloc[3].to_dict(), other]), n_boot=100)
    assert d.empty
