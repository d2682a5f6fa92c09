"""scripts/proxy_temperature.py: the paired table from copied evaluation records (hand-computed)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "proxy_temperature.py"


def _module():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import proxy_temperature
    finally:
        sys.path.pop(0)
    return proxy_temperature


def _record(path: Path, successes: list[int], temperature: float = 1.0) -> None:
    episodes = [[f"eval/task-{i}", s] for i, s in enumerate(successes)]
    path.write_text(json.dumps({"kind": "evaluation", "overrides": [f"eval.temperature={temperature}"],
                                "final": {"episodes": episodes, "success_rate": sum(successes) / len(successes)}}))


def _config(path: Path, algorithm: str, seed: int) -> None:
    path.write_text(yaml.safe_dump({"seed": seed, "env": {"name": "alfworld"},
                                    "algorithm": {"name": algorithm, "mode": "mean_std_norm"}}))


def test_summary_pairs_each_run_with_its_seeds_warm_start(tmp_path):
    pt = _module()
    evals = tmp_path / "evals"
    evals.mkdir()
    # warm start: seed 0 solves 1 of 4 episodes, seed 1 solves 0 of 4
    _record(evals / "warm_start-abc-s0.json", [1, 0, 0, 0])
    _record(evals / "warm_start-abc-s1.json", [0, 0, 0, 0])
    # G2PO after RL: seed 0 solves 3 of 4 (+50 points), seed 1 solves 1 of 4 (+25 points)
    for seed, after in ((0, [1, 1, 1, 0]), (1, [0, 0, 1, 0])):
        _config(evals / f"g2po-s{seed}.config.yaml", "g2po", seed)
        _record(evals / f"g2po-s{seed}.json", after)
    # GRPO: no change on seed 0
    _config(evals / "grpo-s0.config.yaml", "grpo", 0)
    _record(evals / "grpo-s0.json", [1, 0, 0, 0])
    res = pt.summarize(tmp_path)
    assert res["temperature"] == 1.0
    g = res["methods"]["G2PO"]
    assert g["seeds"] == [0, 1] and g["episodes_per_seed"] == 4
    assert g["before_pct"] == 12.5 and g["after_pct"] == 50.0 and g["after_per_seed_pct"] == [75.0, 25.0]
    assert g["improvement_points"] == 37.5
    lo, hi = g["ci95_points"]
    assert 0 <= lo <= 37.5 <= hi <= 75.0
    r = res["methods"]["GRPO"]
    assert r["improvement_points"] == 0.0 and r["ci95_points"] == [0.0, 0.0]
    text = pt.write(tmp_path, res, "header")
    assert "| G2PO | 2 | 12.5 | 50.0 (75.0, 25.0) | +37.5 [" in text
    assert json.loads((tmp_path / "temperature.json").read_text()) == res


def test_a_run_without_its_warm_start_evaluation_is_an_error(tmp_path):
    pt = _module()
    evals = tmp_path / "evals"
    evals.mkdir()
    _config(evals / "g2po-s3.config.yaml", "g2po", 3)
    _record(evals / "g2po-s3.json", [1, 0])
    with pytest.raises(SystemExit, match="seed 3"):
        pt.summarize(tmp_path)


def test_runs_without_checkpoints_are_refused_with_the_reason(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode != 0 and "no training run with a checkpoint" in out.stderr


def test_proxy_bench_reports_the_training_temperature_improvement(tmp_path):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import proxy_bench
    finally:
        sys.path.pop(0)
    res = {"runs": [], "uptime": "up", "code": None,
           "at_train_temperature": {"temperature": 1.0, "methods": {"G2PO": {
               "seeds": [0, 1, 2], "before_pct": 8.1, "after_pct": 15.0, "improvement_points": 6.9,
               "ci95_points": [1.5, 12.0]}}}}
    text = proxy_bench.render(res)
    assert ("At the training temperature (1.0), same panel" in text and "G2PO before RL 8.1 %, after RL 15.0 %, "
            "improvement **+6.9 points** (95 % paired CI [+1.5, +12.0], 3 seeds; target >= 15 with the CI above 0: "
            "FAIL)" in text)
    res["at_train_temperature"]["methods"]["G2PO"].update(improvement_points=22.5, ci95_points=[15.0, 30.0])
    assert "+22.5 points** (95 % paired CI [+15.0, +30.0], 3 seeds; target >= 15 with the CI above 0: PASS)" in (
        proxy_bench.render(res))
    # the target needs both: >= 15 points and the CI's lower end above 0
    assert [proxy_bench._passes(d, lo) for d, lo in ((15.0, 0.1), (14.9, 5.0), (20.0, 0.0), (20.0, -1.0))] == [
        True, False, False, False]


def test_proxy_bench_reads_the_runs_own_training_temperature_records(tmp_path):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import proxy_bench
    finally:
        sys.path.pop(0)

    def ev(xs, iteration):
        return {"iteration": iteration, "success_rate": sum(xs) / len(xs),
                "episodes": [[f"task{i}", x] for i, x in enumerate(xs)]}

    for seed, (b, f) in enumerate([([0, 1, 0, 0], [1, 1, 0, 0]), ([0, 0, 0, 0], [1, 1, 1, 0])]):
        run = tmp_path / "runs" / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "eval.json").write_text(json.dumps({
            "before": ev([0, 0, 0, 0], 0), "final": ev([0, 0, 0, 0], 16),
            "at_train_temperature": {"temperature": 1.0, "before": ev(b, 0), "final": ev(f, 16)}}))
    own = proxy_bench._own_train_temperature(tmp_path)
    g = own["methods"]["G2PO"]
    # before (25 + 0) / 2 = 12.5 %, after (50 + 75) / 2 = 62.5 %, +50 points
    assert (own["temperature"], g["seeds"], g["before_pct"], g["after_pct"], g["improvement_points"]) == (
        1.0, [0, 1], 12.5, 62.5, 50.0)
    assert g["ci95_points"][0] <= 50.0 <= g["ci95_points"][1]
    assert "the runs' own evaluations" in proxy_bench.render({"runs": [], "uptime": "up", "code": None,
                                                             "at_train_temperature": own})
    # a run without the record: None (the script then re-evaluates with proxy_temperature.py)
    (tmp_path / "runs" / "seed2").mkdir()
    (tmp_path / "runs" / "seed2" / "eval.json").write_text(json.dumps({"before": ev([0], 0), "final": ev([1], 16)}))
    assert proxy_bench._own_train_temperature(tmp_path) is None
