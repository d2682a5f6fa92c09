"""rliable's interval estimates of score arrays (analysis/scores.py, analysis/estimates.py) and the
report's sections that print them: rliable's functions (``rliable.metrics``) on the resamples of the
suite's seeded stratified bootstrap, checked against a loop that applies rliable itself."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from rliable import metrics as rly_metrics
from synthetic_runs import make_eval, write_synthetic_run

from g2po_bench.analysis import estimates as E
from g2po_bench.analysis.naming import ALFWORLD_TASK_TYPES
from g2po_bench.analysis.report import build_report
from g2po_bench.analysis.scores import TASK_TYPE_METRICS, score_dicts

RLIABLE = {"iqm": rly_metrics.aggregate_iqm, "median": rly_metrics.aggregate_median,
           "mean": rly_metrics.aggregate_mean}


def _long(scores: dict[str, list[list[float]]], metrics=TASK_TYPE_METRICS[:3], **extra) -> pd.DataFrame:
    """metrics_long rows of hand-made score matrices (method -> runs x tasks; NaN = no row)."""
    rows = []
    for label, runs in scores.items():
        for i, vals in enumerate(runs):
            for metric, v in zip(metrics, vals):
                if not np.isnan(v):
                    rows.append({"run_id": f"{label}-{i}", "model_size": "tiny", "method_label": label,
                                 "env": "alfworld", "metric": metric, "value": float(v), "in_progress": False,
                                 "short_run": False, **extra})
    return pd.DataFrame(rows)


def _rliable_interval(fn, *mats, n_boot, seed, confidence=0.95):
    """rliable's function applied resample by resample to the stratified draws of default_rng(seed):
    for each matrix in turn, every (resample, run slot, task) draws a run of that task."""
    rng = np.random.default_rng(seed)
    draws = [m[rng.integers(0, len(m), size=(n_boot, *m.shape)), np.arange(m.shape[1])] for m in mats]
    stats = np.array([fn(*(d[b] for d in draws)) for b in range(n_boot)])
    alpha = 100 * (1 - confidence) / 2
    return np.percentile(stats, [alpha, 100 - alpha], axis=0)


def test_score_dicts_are_rliables_score_arrays():
    nan = float("nan")
    long = _long({"GRPO": [[10, 20, 30], [40, 50, 60], [70, nan, 90]],   # run 2 lacks a task: dropped
                  "G2PO": [[1, 2, nan], [3, 4, nan]]})                    # no run played task 3: dropped
    (sd,) = score_dicts(long)
    assert (sd.env, sd.model_size, list(sd.frames)) == ("alfworld", "tiny", ["GRPO", "G2PO"])  # table order
    assert np.array_equal(sd.scores["GRPO"], [[10, 20, 30], [40, 50, 60]])
    assert np.array_equal(sd.scores["G2PO"], [[1, 2], [3, 4]])
    tasks, common = sd.on_common_tasks()
    assert tasks == TASK_TYPE_METRICS[:2]
    assert np.array_equal(common["GRPO"], [[10, 20], [40, 50]]) and common["G2PO"].shape == (2, 2)
    assert score_dicts(long[long["metric"] == "success_all"]) == [] and score_dicts(long.iloc[:0]) == []


def test_each_resampled_statistic_is_rliables_function_on_every_resample():
    rng = np.random.default_rng(0)
    for runs, tasks in ((2, 1), (3, 6), (5, 6), (4, 2)):
        r = rng.integers(0, 5, size=(40, runs, tasks)).astype(float) * 25  # many ties, as success rates have
        for name, fn in RLIABLE.items():
            got = E._RESAMPLED[name](r)
            assert np.allclose(got, [fn(x) for x in r], rtol=0, atol=1e-12), name
        y = rng.integers(0, 5, size=(40, runs + 1, tasks)).astype(float) * 25
        got = E._improvement_resampled(r, y)
        assert np.allclose(got, [rly_metrics.probability_of_improvement(a, b) for a, b in zip(r, y)], atol=1e-12)
        assert np.allclose(E._improvement_resampled(r, r), 0.5)  # identical samples (rliable's special case)
        taus = np.array([0.0, 25.0, 60.0, 100.0])
        assert np.array_equal(E._profile_resampled(taus)(r), [[np.mean(x > t) for t in taus] for x in r])


def test_hand_computed_probability_of_improvement_and_profile():
    x, y = np.array([[2.0], [3.0]]), np.array([[1.0], [3.0]])
    # pairs: 2>1, 2<3, 3>1, 3=3 (one half): 2.5 / 4
    assert E._improvement_resampled(x[None], y[None])[0] == 0.625 == rly_metrics.probability_of_improvement(x, y)
    profile = E._profile_resampled(np.array([0.0, 40.0, 90.0]))(np.array([[[10.0, 50.0], [30.0, 90.0]]]))
    assert profile.tolist() == [[1.0, 0.5, 0.0]]  # strictly above tau


def test_aggregate_estimates_are_rliables_with_the_seeded_stratified_bootstrap():
    long = _long({"GRPO": [[0, 50, 100], [25, 75, 75], [50, 50, 0], [100, 25, 25]],
                  "G2PO": [[75, 100, 50], [50, 100, 100], [25, 75, 75]]})
    sds = score_dicts(long)
    agg = E.aggregate_estimates(sds, n_boot=150, seed=5).set_index("method_label")
    for label, arr in sds[0].scores.items():
        row = agg.loc[label]
        assert (row["runs"], row["tasks"]) == arr.shape
        for k, (name, fn) in enumerate(RLIABLE.items()):
            assert row[name] == fn(arr)
            lo, hi = _rliable_interval(lambda m: np.array([f(m) for f in RLIABLE.values()]), arr, n_boot=150, seed=5)
            assert (row[f"{name}_low"], row[f"{name}_high"]) == pytest.approx((lo[k], hi[k]), abs=1e-9)
    # sorted: 0 0 25 | 25 25 50 50 50 75 | 75 100 100: the IQM drops 3 at each end
    assert agg.loc["GRPO", "iqm"] == pytest.approx((25 + 25 + 50 + 50 + 50 + 75) / 6)
    poi = E.improvement_probabilities(sds, n_boot=150, seed=5).iloc[0]
    x, y = sds[0].scores["G2PO"], sds[0].scores["GRPO"]
    assert (poi["method_label"], poi["baseline_label"]) == ("G2PO", "GRPO")  # later minus earlier in table order
    assert poi["probability"] == rly_metrics.probability_of_improvement(x, y)
    lo, hi = _rliable_interval(rly_metrics.probability_of_improvement, x, y, n_boot=150, seed=5)
    assert (poi["ci_low"], poi["ci_high"]) == pytest.approx((lo, hi), abs=1e-12)
    taus, profiles, cis = E.performance_profiles(sds[0], np.array([0.0, 50.0]), n_boot=150, seed=5)
    assert profiles["GRPO"].tolist() == [np.mean(y > 0), np.mean(y > 50)]
    lo, hi = _rliable_interval(lambda m: np.array([np.mean(m > t) for t in taus]), y, n_boot=150, seed=5)
    assert np.allclose(cis["GRPO"], [lo, hi])


def test_one_run_has_a_point_estimate_and_no_interval():
    sds = score_dicts(_long({"GRPO": [[10, 20, 30]], "G2PO": [[40, 50, 60], [20, 30, 40]]}))
    agg = E.aggregate_estimates(sds, n_boot=50).set_index("method_label")
    assert agg.loc["GRPO", "iqm"] == 20.0 and np.isnan(agg.loc["GRPO", "iqm_low"])
    assert not np.isnan(agg.loc["G2PO", "mean_low"])
    poi = E.improvement_probabilities(sds, n_boot=50).iloc[0]
    assert poi["probability"] == 1.0 and np.isnan(poi["ci_low"])
    _, profiles, cis = E.performance_profiles(sds[0], n_boot=50)
    assert set(profiles) == {"GRPO", "G2PO"} and set(cis) == {"G2PO"}


def _interval(lo, hi, digits):
    return f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def test_the_report_prints_rliables_interval_estimates(tmp_path):
    """On synthetic runs: the report's aggregate and probability tables are rliable's functions on
    resamples of the seeded stratified bootstrap (recomputed here with rliable in a loop), and the
    performance profiles are drawn and linked."""
    offsets = np.linspace(-0.3, 0.3, len(ALFWORLD_TASK_TYPES))
    level = {"grpo": 0.4, "g2po": 0.55}
    arrays: dict[str, list[list[float]]] = {"GRPO": [], "G2PO": []}
    for algo, label in (("grpo", "GRPO"), ("g2po", "G2PO")):
        for seed in range(4):
            per = {t: round(float(np.clip(level[algo] + o + 0.07 * ((seed * (k + 2)) % 3 - 1), 0, 1)), 2)
                   for k, (t, o) in enumerate(zip(ALFWORLD_TASK_TYPES, offsets))}
            arrays[label].append([100 * per[t] for t in ALFWORLD_TASK_TYPES])
            write_synthetic_run(tmp_path / "runs" / f"{algo}-s{seed}", algorithm=algo, seed=seed, iterations=2,
                                final=make_eval(2, float(np.mean(list(per.values()))), per))
    res = build_report(tmp_path / "runs", tmp_path / "out", n_boot=120, seed=3, min_iterations=0)
    text = res.report_path.read_text(encoding="utf-8")
    agg_fn = lambda m: np.array([f(m) for f in RLIABLE.values()])  # noqa: E731
    for label in ("GRPO", "G2PO"):
        arr = np.array(arrays[label])
        lo, hi = _rliable_interval(agg_fn, arr, n_boot=120, seed=3)
        cells = [f"{fn(arr):.1f} | {_interval(lo[k], hi[k], 1)}" for k, fn in enumerate(RLIABLE.values())]
        assert f"| tiny | {label} | 4 | 6 | {' | '.join(cells)} |" in text, label
    x, y = np.array(arrays["G2PO"]), np.array(arrays["GRPO"])
    p = rly_metrics.probability_of_improvement(x, y)
    lo, hi = _rliable_interval(rly_metrics.probability_of_improvement, x, y, n_boot=120, seed=3)
    assert f"| alfworld | tiny | G2PO > GRPO | 4 vs 4 | 6 | {p:.2f} | {_interval(lo, hi, 2)} |" in text
    out = tmp_path / "out"
    assert pd.read_csv(out / "aggregates.csv")["iqm"].tolist() == pytest.approx(
        [rly_metrics.aggregate_iqm(np.array(arrays[m])) for m in ("GRPO", "G2PO")])
    scores = pd.read_csv(out / "scores.csv")
    assert len(scores) == 2 * 4 * 6 and set(scores["method_label"]) == {"GRPO", "G2PO"}
    assert (out / "probability_of_improvement.csv").is_file()
    assert res.figures["performance_profiles"] == out / "figures" / "performance_profiles.png"
    assert "![performance_profiles](figures/performance_profiles.png)" in text
