"""scripts/credit_vs_end_to_end.py on synthetic inputs: the rank correlation across estimators
between a credit instrument and the end-to-end improvement, and its bootstrap CI."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from synthetic_runs import make_eval, panel_episodes, write_synthetic_run

from g2po_bench.analysis.credit.alignment import GroupGradients, block_matrices, gradient_pairs
from g2po_bench.analysis.credit.pool import GroupData
from g2po_bench.analysis.credit.record import write_record
from g2po_bench.analysis.credit.scoring import ORACLE, GroupStats

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))
try:
    import credit_vs_end_to_end as C
finally:
    sys.path.remove(str(SCRIPTS))

ESTIMATORS = ["grpo", "gigpo", "g2po", "crbc"]  # "GRPO", "GiGPO w/ std", "G2PO", "CRBC"
LABELS = ["GRPO", "GiGPO w/ std", "G2PO", "CRBC"]


def _stats(means, groups, rng):
    out = {}
    for name, m in means.items():
        s = np.clip(m + 0.05 * rng.normal(size=groups), -1, 1)
        out[name] = GroupStats(groups=np.arange(groups), spearman=s, pearson=s.copy(), decisive=np.ones(groups),
                               agree=np.ones(groups), mass_decisive=np.ones(groups), mass=np.ones(groups),
                               rows=np.full(groups, 5.0))
    return out


def _gradients(noise, groups, rng):
    """Group vectors whose advantages are the truth plus noise of the given size per estimator
    (less noise, higher alignment), in blocks of 4."""
    d, rows = 20, 6
    j = rng.normal(size=(groups, rows, d))
    true = rng.normal(size=(groups, rows))
    fam = {"a_star/1": true, "a_star/2": true, "a_star": true}
    fam.update({n: true + s * rng.normal(size=(groups, rows)) for n, s in noise.items()})
    vec = {k: np.einsum("gr,grd->gd", a, j) for k, a in fam.items()}
    block = np.arange(groups) // 4
    mats = [block_matrices({k: v[block == b] for k, v in vec.items()}, gradient_pairs(list(noise), ["a_star"]))
            for b in np.unique(block)]
    return GroupGradients.from_blocks(np.arange(groups), block, 4, mats)


def _record(spearman_means, groups=40, seed=0):
    rng = np.random.default_rng(seed)
    stats = _stats({**spearman_means, ORACLE: 0.6}, groups, rng)
    return {"kind": "credit", "version": 2, "tasks": [f"t{i}" for i in range(groups)],
            "config": {"algorithm": {"mode": "mean_std_norm"}},
            "variants": [{"name": n, "estimator": n, "axis": ""} for n in spearman_means],
            "per_group": GroupData(groups=np.arange(groups), stats={"a_star": stats}).to_record(),
            "gradient": {"file": None}}


def _e2e(gains, seeds=4, tasks=60, seed=1):
    """label -> (before, final): before at 20 %, final at 20 % + gain (points), per episode."""
    rng = np.random.default_rng(seed)
    before = (rng.random((seeds, tasks)) < 0.2).astype(float)
    return {lab: (before, (rng.random((seeds, tasks)) < 0.2 + g / 100).astype(float)) for lab, g in gains.items()}


def test_rank_correlation_by_hand():
    assert C.rank_correlation([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert C.rank_correlation([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks (1, 2, 3, 4) against (1.5, 1.5, 3, 4): rho = 0.9487
    assert C.rank_correlation([1, 2, 3, 4], [5, 5, 7, 9]) == pytest.approx(3 / math.sqrt(10), abs=1e-12)
    assert math.isnan(C.rank_correlation([1, 1, 1], [1, 2, 3]))


def test_end_to_end_draws_resample_seeds_then_episodes_alike_for_every_estimator():
    before = np.zeros((2, 3, 4))
    final = np.zeros((2, 3, 4))
    final[0, :, :2] = 1.0  # estimator 0: +50 points; estimator 1: 0
    gain, draws = C.end_to_end_draws(before, final, n_boot=500, seed=0)
    np.testing.assert_allclose(gain, [50.0, 0.0])
    assert draws.shape == (500, 2) and np.all(draws[:, 1] == 0) and 20 < draws[:, 0].mean() < 80


def test_an_instrument_that_orders_the_estimators_as_learning_does_correlates_one():
    gains = dict(zip(LABELS, [5.0, 15.0, 25.0, 35.0]))
    e2e = _e2e(gains)
    record = _record(dict(zip(ESTIMATORS, [0.1, 0.2, 0.3, 0.4])))
    grads = _gradients(dict(zip(ESTIMATORS, [3.0, 2.0, 1.0, 0.3])), 40, np.random.default_rng(2))
    res = C.compare(record, grads, e2e, n_boot=400, seed=0)
    assert [r["label"] for r in res["estimators"]] == LABELS
    assert res["correlations"]["spearman"]["rho"] == pytest.approx(1.0)
    assert res["correlations"]["gradient"]["rho"] == pytest.approx(1.0)
    lo, hi = res["correlations"]["spearman"]["ci"]
    assert hi == pytest.approx(1.0) and lo > 0  # a clear order survives the noise of both sides
    cos = [r["gradient"] for r in res["estimators"]]
    assert cos == sorted(cos) and cos[-1] > 0.9
    # an instrument that orders them backwards: -1
    back = C.compare(_record(dict(zip(ESTIMATORS, [0.4, 0.3, 0.2, 0.1]))), None, e2e, n_boot=200)
    assert back["correlations"]["spearman"]["rho"] == pytest.approx(-1.0) and "gradient" not in back["correlations"]
    text = C.render(res)
    assert "| G2PO | +" in text and "| gradient alignment | +1.00 |" in text
    with pytest.raises(ValueError, match="only 2 estimators"):
        C.compare(record, None, {k: e2e[k] for k in LABELS[:2]}, n_boot=10)


def test_the_script_reads_a_study_and_run_folders(tmp_path, capsys):
    gains = dict(zip(ESTIMATORS, [0.0, 0.1, 0.2, 0.3]))
    write_record(tmp_path / "study", _record(dict(zip(ESTIMATORS, [0.1, 0.2, 0.3, 0.4]))))
    rng = np.random.default_rng(0)
    for name, g in gains.items():
        for seed in (0, 1):
            before = (rng.random(30) < 0.2).astype(float).tolist()
            final = (rng.random(30) < 0.2 + g).astype(float).tolist()
            b, f = make_eval(0, float(np.mean(before))), make_eval(4, float(np.mean(final)))
            b["episodes"], f["episodes"] = panel_episodes(before), panel_episodes(final)
            write_synthetic_run(tmp_path / "runs" / f"{name}-s{seed}", algorithm=name, seed=seed, before=b, final=f)
    assert C.main([str(tmp_path / "study"), "--runs", str(tmp_path / "runs"), "--n-boot", "200"]) == 0
    out = capsys.readouterr().out
    assert "| GiGPO w/ std |" in out and "| Spearman with A* |" in out and "seeds [0, 1]" in out
    assert C.main([str(tmp_path / "nothing"), "--runs", str(tmp_path / "runs")]) == 2


COMMITTED_STUDIES = Path(__file__).resolve().parents[1] / "results" / "credit"


@pytest.mark.parametrize("study", ["g2po54-h15-g208", "warm_start-h15-g208"])
def test_the_committed_studies_vs_end_to_end_is_what_the_script_prints(study, capsys):
    """results/credit/<study>/vs_end_to_end.md is `python scripts/credit_vs_end_to_end.py <study>` on the
    committed study and the committed comparison (results/proxy/sweep/runs): a version 2 study of 208 task
    groups on a clean checkout of a commit of the suite (results/credit/README.md), with a Spearman and a
    gradient alignment for each of the comparison's 7 estimators."""
    import json

    folder = COMMITTED_STUDIES / study
    record = json.loads((folder / "credit.json").read_text())
    assert record["version"] == 2 and record["settings"]["groups"] == 208 and record["groups"] == [0, 208]
    commit = {"g2po54-h15-g208": "0a7c471", "warm_start-h15-g208": "7962ddd"}[study]
    assert record["code"]["commit"].startswith(commit) and record["code"]["dirty"] is False
    runs = COMMITTED_STUDIES.parent / "proxy" / "sweep" / "runs"
    assert C.main([str(folder), "--runs", str(runs)]) == 0
    printed = capsys.readouterr().out
    committed = (folder / "vs_end_to_end.md").read_text()
    # the committed file was written from the repository root with the relative paths
    assert printed.replace(str(folder), f"results/credit/{study}").replace(str(runs), "results/proxy/sweep/runs") \
        == committed
    for label in ("GRPO", "GiGPO w/ std", "G2PO", "CRBC", "HGPO", "GraphGPO", "EMPG"):
        row = next(line for line in committed.splitlines() if line.startswith(f"| {label} |"))
        assert len([c for c in row.split("|") if c.strip()]) == 4 and "n/a" not in row, row


def test_the_webshop_study_vs_end_to_end_is_what_the_script_prints(capsys):
    """results/credit/webshop-hasty-h10-g96/vs_end_to_end.md is the script on that study (the WebShop
    preset's warm start, a clean checkout of ``fe75a3a``) and the committed WebShop comparison
    (results/webshop_cpu/sweep/runs, from the same warm start); six estimators match (the study's GiGPO
    row is at the preset's mean_norm, the comparison's GiGPO at mean_std_norm)."""
    import json

    study = "webshop-hasty-h10-g96"
    folder = COMMITTED_STUDIES / study
    record = json.loads((folder / "credit.json").read_text())
    assert record["code"]["commit"].startswith("fe75a3a") and record["code"]["dirty"] is False
    assert record["policy"]["warm_start_key"] == "382fa471a598"
    runs = COMMITTED_STUDIES.parent / "webshop_cpu" / "sweep" / "runs"
    assert C.main([str(folder), "--runs", str(runs)]) == 0
    printed = capsys.readouterr().out
    committed = (folder / "vs_end_to_end.md").read_text()
    assert printed.replace(str(folder), f"results/credit/{study}").replace(str(runs), "results/webshop_cpu/sweep/runs") \
        == committed
    for label in ("GRPO", "G2PO", "CRBC", "HGPO", "GraphGPO", "EMPG"):
        row = next(line for line in committed.splitlines() if line.startswith(f"| {label} |"))
        assert len([c for c in row.split("|") if c.strip()]) == 4 and "n/a" not in row, row
