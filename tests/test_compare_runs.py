"""scripts/compare_runs.py: two runs are identical only when every episode and non-timing metric is."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))
try:
    import compare_runs as C
finally:
    sys.path.remove(str(SCRIPTS))

EVAL = {
    "before": {"iteration": 0, "episodes": [["eval/a", 0], ["eval/b", 1]]},
    "history": [{"iteration": 2, "episodes": [["eval/a", 1], ["eval/b", 1]]}],
    "final": {"iteration": 2, "episodes": [["eval/a", 1], ["eval/b", 1]]},
    "at_train_temperature": {"temperature": 1.0, "before": {"episodes": [["eval/a", 0], ["eval/b", 0]]},
                             "final": {"episodes": [["eval/a", 1], ["eval/b", 0]]}},
}  # fmt: skip
METRICS = [{"iteration": 1, "train/success_rate": 0.25, "iter_s": 9.0, "rollout/generated_tokens_per_s": 50.0},
           {"iteration": 2, "train/success_rate": 0.5, "iter_s": 8.0, "record/bytes": 100}]  # fmt: skip


def _run(root: Path, ev=EVAL, metrics=METRICS) -> Path:
    root.mkdir(parents=True)
    (root / "eval.json").write_text(json.dumps(ev), encoding="utf-8")
    (root / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics), encoding="utf-8")
    return root


def test_timings_may_differ(tmp_path, capsys):
    faster = copy.deepcopy(METRICS)
    faster[0]["iter_s"], faster[0]["rollout/generated_tokens_per_s"], faster[1]["record/bytes"] = 5.0, 90.0, 7
    a, b = _run(tmp_path / "a"), _run(tmp_path / "b", metrics=faster)
    res = C.compare_runs(a, b)
    assert res["identical"] and res["metric_diffs"] == [] and res["lines"] == (2, 2)
    assert res["evaluations"] == {"T_before": (True, 0, 0), "T_final": (True, 1, 1), "before": (True, 1, 1),
                                  "final": (True, 2, 2), "iter2": (True, 2, 2)}  # fmt: skip
    assert C.main([str(a), str(b)]) == 0 and capsys.readouterr().out.rstrip().endswith("identical")


def test_one_episode_or_metric_makes_them_different(tmp_path, capsys):
    a = _run(tmp_path / "a")
    ev = copy.deepcopy(EVAL)
    ev["at_train_temperature"]["final"]["episodes"][1][1] = 1
    b = _run(tmp_path / "b", ev=ev)
    res = C.compare_runs(a, b)
    assert not res["identical"] and res["evaluations"]["T_final"] == (False, 1, 2)
    metrics = copy.deepcopy(METRICS)
    metrics[1]["train/success_rate"] = 0.375
    c = _run(tmp_path / "c", metrics=metrics)
    res = C.compare_runs(a, c)
    assert not res["identical"] and res["metric_diffs"] == [(2, "train/success_rate", 0.5, 0.375)]
    shorter = _run(tmp_path / "d", metrics=METRICS[:1])
    assert not C.compare_runs(a, shorter)["identical"]
    assert C.main([str(a), str(c)]) == 1 and "NOT identical" in capsys.readouterr().out


def test_a_folder_without_records_is_refused(tmp_path, capsys):
    a = _run(tmp_path / "a")
    (tmp_path / "empty").mkdir()
    assert C.main([str(a), str(tmp_path / "empty")]) == 2
    assert "no eval.json, metrics.jsonl" in capsys.readouterr().err


def test_nothing_to_compare_is_not_identical_and_bad_json_is_bad_input(tmp_path, capsys):
    bare = {"before": {"iteration": 0}, "final": {"iteration": 2}}
    a, b = _run(tmp_path / "a", ev=bare), _run(tmp_path / "b", ev=bare)
    res = C.compare_runs(a, b)
    assert not res["identical"] and res["evaluations"]["before"] == (False, 0, 0)
    long = {"history": [{"iteration": k, "episodes": [["eval/a", 1]]} for k in (100, 12, 0)]}
    c = _run(tmp_path / "c", ev=long)
    assert list(C.compare_runs(c, c)["evaluations"]) == ["iter0", "iter12", "iter100"]
    broken = _run(tmp_path / "broken")
    (broken / "metrics.jsonl").write_text("{not json\n", encoding="utf-8")
    assert C.main([str(a), str(broken)]) == 2 and "does not parse" in capsys.readouterr().err
    assert C.main([str(a), str(tmp_path / "nope")]) == 2 and "no such folder" in capsys.readouterr().err
