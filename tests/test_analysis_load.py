"""Loading run folders: columns, naming, and corrupt/partial/in-progress runs (never fatal)."""

from __future__ import annotations

import math

import pytest
from synthetic_runs import make_eval, write_synthetic_run

from g2po_bench.analysis.load import DuplicateRunsError, load_runs
from g2po_bench.analysis.naming import method_name, model_size_of, variant_of
from g2po_bench.core.rundir import RunDir, atomic_write_text

ALF = {
    "pick_and_place_simple": 0.75,
    "look_at_obj_in_light": 0.5,
    "pick_clean_then_place_in_recep": 1.0,
    "pick_heat_then_place_in_recep": 0.25,
    "pick_cool_then_place_in_recep": 0.5,
    "pick_two_obj_and_place": 0.0,
}


def test_naming_rules():
    assert method_name({"algorithm": {"name": "gigpo", "mode": "mean_std_norm"}}) == "GiGPO w/ std"
    assert method_name({"algorithm": {"name": "gigpo", "mode": "mean_norm"}}) == "GiGPO w/o std"
    assert method_name({"algorithm": {"name": "ppo"}}) == "PPO (critic)"
    assert method_name({"algorithm": {"name": "rloo"}}) == "RLOO"
    assert method_name({"algorithm": {"name": "grpo"}}) == "GRPO"
    assert method_name({"algorithm": {"name": "g2po"}}) == "G2PO"
    assert method_name({"kind": "baseline", "baseline": {"name": "react"}}) == "ReAct"
    assert method_name({"baseline": "reflexion"}) == "Reflexion"
    assert method_name({"kind": "baseline", "name": "direct"}) == "Qwen2.5 (prompting)"
    assert model_size_of({"model": {"path": None}}) == "tiny"
    assert model_size_of({"model": {"path": "/models/Qwen/Qwen2.5-1.5B-Instruct/"}}) == "1.5B"
    assert model_size_of({"model": {"path": "qwen2.5-7b-instruct"}}) == "7B"
    assert model_size_of({"model": {"path": "Qwen2.5-14B-Instruct"}}) == "14B"
    assert model_size_of({"model": {"path": "/m/my-model"}}) == "my-model"
    assert model_size_of({"model": {"path": None}, "tags": {"model_size": "7B"}}) == "7B"
    g2 = {"env": {"name": "webshop"}, "algorithm": {"name": "g2po", "mode": "mean_norm", "step_weight": 0.8, "options": {"scope": "batch"}}}
    assert variant_of(g2) == "scope=batch, w=0.8"
    g2["algorithm"].update(step_weight=1.0, options={}, mode="mean_std_norm")
    assert variant_of(g2) == "norm=mean_std_norm"
    assert variant_of({"env": {"name": "webshop"}, "algorithm": {"name": "gigpo", "mode": "mean_std_norm", "step_weight": 1.0}}) == ""
    assert variant_of({"env": {"name": "webshop"}, "algorithm": {"name": "rloo", "mode": "mean_std_norm"}}) == ""


def test_load_complete_runs(tmp_path):
    for seed in (0, 1):
        write_synthetic_run(
            tmp_path / f"g2po-s{seed}",
            algorithm="g2po",
            seed=seed,
            model_path="/models/Qwen2.5-1.5B-Instruct",
            before=make_eval(0, 0.1, {k: 0.1 for k in ALF}),
            history=[make_eval(2, 0.8, ALF), make_eval(4, 0.5, ALF)],
            final=make_eval(4, 0.5, ALF),
            metrics=[{"iteration": i, "time_s": i * 1.0, "adv/singleton_frac": 0.1 * i} for i in (1, 2, 3, 4)],
        )
    write_synthetic_run(tmp_path / "sub" / "ws", env="webshop", algorithm="gigpo", mode="mean_norm",
                        final=make_eval(4, 0.25, {"webshop": 0.25}, score=61.5))  # fmt: skip
    loaded = load_runs(tmp_path)
    assert loaded.problems == []
    runs = loaded.runs.set_index("run_id")
    assert sorted(runs.index) == ["g2po-s0", "g2po-s1", "sub/ws"]
    r = runs.loc["g2po-s0"]
    assert (r["method"], r["model_size"], r["env"], r["seed"], r["variant"]) == ("G2PO", "1.5B", "alfworld", 0, "")
    assert r["final.success_rate"] == 0.5 and r["final.iteration"] == 4 and r["final.source"] == "final"
    assert r["best.success_rate"] == 0.8 and r["best.iteration"] == 2  # no "best" in eval.json: max of history
    assert r["before.success_rate"] == 0.1
    assert r["final.task.pick_heat_then_place_in_recep"] == 0.25
    assert r["algorithm.name"] == "g2po" and r["model.path"] == "/models/Qwen2.5-1.5B-Instruct"  # flattened config
    assert r["state"] == "done" and not r["in_progress"] and r["metrics.rows"] == 4
    w = runs.loc["sub/ws"]
    assert (w["method"], w["model_size"], w["final.score"]) == ("GiGPO w/o std", "tiny", 61.5)
    assert math.isnan(w["before.success_rate"])
    # curves and evals
    c = loaded.curves
    assert len(c) == 2 * 4 + 4 and list(c.loc[c["run_id"] == "g2po-s0", "adv/singleton_frac"]) == pytest.approx([0.1, 0.2, 0.3, 0.4])
    e = loaded.evals[loaded.evals["run_id"] == "g2po-s0"]
    assert list(e["iteration"]) == [0, 2, 4] and list(e["source"]) == ["before", "history", "final"]


def test_corrupt_and_partial_runs_are_reported_and_skipped(tmp_path):
    good = write_synthetic_run(tmp_path / "good", final=make_eval(4, 0.5, ALF))
    # garbage config
    bad = write_synthetic_run(tmp_path / "bad-config", final=make_eval(4, 0.5, ALF))
    atomic_write_text(bad.config_path, "seed: [unclosed\n  : :")
    # a YAML mapping that is not a run config
    nk = write_synthetic_run(tmp_path / "not-a-config", final=make_eval(4, 0.5, ALF))
    atomic_write_text(nk.config_path, "::: not yaml [")
    # no config at all (partial)
    RunDir(tmp_path / "no-config").create().write_status("running", 1, 4)
    # corrupt eval.json of a finished run
    ce = write_synthetic_run(tmp_path / "corrupt-eval", final=make_eval(4, 0.5, ALF))
    ce.eval_path.write_text('{"final": {"success_rate": 0.', encoding="utf-8")
    # failed
    write_synthetic_run(tmp_path / "failed", final=make_eval(4, 0.5, ALF), state="failed", error="CUDA out of memory")
    # done but no eval.json (partial)
    write_synthetic_run(tmp_path / "no-eval", write_eval=False)
    # success rate in % instead of a fraction
    write_synthetic_run(tmp_path / "percent", final=make_eval(4, 72.0, {}))
    # running, no evaluation yet
    write_synthetic_run(tmp_path / "running-early", write_eval=False, state="running",
                        metrics=[{"iteration": 1, "time_s": 1.0}])  # fmt: skip
    # no status.json and no final: partial
    p = write_synthetic_run(tmp_path / "no-status", history=[make_eval(2, 0.3, ALF)])
    p.status_path.unlink()

    loaded = load_runs(tmp_path)  # never raises
    assert list(loaded.runs["run_id"]) == ["good"]
    skipped = {p.run_id: p.reason for p in loaded.skipped}
    assert "no env.name" in skipped.pop("not-a-config")
    assert set(skipped) == {"bad-config", "no-config", "corrupt-eval", "failed", "no-eval", "percent", "running-early", "no-status"}
    assert "config.yaml does not parse" in skipped["bad-config"]
    assert "no config.yaml" in skipped["no-config"]
    assert "eval.json does not parse" in skipped["corrupt-eval"]
    assert "CUDA out of memory" in skipped["failed"]
    assert "no evaluation" in skipped["no-eval"]
    assert "not a fraction" in skipped["percent"]
    assert skipped["running-early"].startswith("running, no evaluation yet")
    assert "partial run" in skipped["no-status"]
    assert loaded.warnings == []
    # the running run's curve is kept for the learning-curve figures
    assert set(loaded.curves["run_id"]) == {"good", "running-early"}
    assert good.root.name == "good"


def test_in_progress_and_lesser_defects_are_included(tmp_path):
    write_synthetic_run(
        tmp_path / "running",
        seed=1,
        iterations=10,
        state="running",
        before=make_eval(0, 0.1, ALF),
        history=[make_eval(2, 0.2, ALF), make_eval(4, 0.4, ALF)],
        metrics=[{"iteration": i} for i in range(1, 6)],
    )
    torn = write_synthetic_run(tmp_path / "torn", seed=2, final=make_eval(4, 0.5, ALF))
    with open(torn.metrics_path, "a", encoding="utf-8") as fh:
        fh.write('{"iteration": 5, "ti')
    ns = write_synthetic_run(tmp_path / "no-status", seed=3, final=make_eval(4, 0.6, ALF))
    ns.status_path.unlink()
    # eval.json missing, but evaluation metrics logged in metrics.jsonl
    write_synthetic_run(tmp_path / "metrics-eval", seed=4, write_eval=False,
                        metrics=[{"iteration": 4, "eval/success_rate": 0.75, "eval/success/pick_and_place_simple": 1.0, "eval/per_task_type/look_at_obj_in_light": 0.5}])  # fmt: skip
    done_no_final = write_synthetic_run(tmp_path / "done-no-final", seed=5, history=[make_eval(3, 0.3, ALF)])
    assert done_no_final.read_status()["state"] == "done"

    loaded = load_runs(tmp_path)
    runs = loaded.runs.set_index("run_id")
    assert sorted(runs.index) == ["done-no-final", "metrics-eval", "no-status", "running", "torn"]
    r = runs.loc["running"]
    assert bool(r["in_progress"]) and r["state"] == "running"
    assert (r["final.success_rate"], r["final.iteration"], r["final.source"]) == (0.4, 4, "history")
    assert (r["status.iteration"], r["status.total_iterations"]) == (5, 10)
    assert runs.loc["metrics-eval", "final.success_rate"] == 0.75
    assert runs.loc["metrics-eval", "final.task.pick_and_place_simple"] == 1.0
    assert runs.loc["metrics-eval", "final.task.look_at_obj_in_light"] == 0.5
    assert runs.loc["no-status", "state"] == "unknown"
    warned: dict[str, str] = {}
    for p in loaded.warnings:
        warned[p.run_id] = warned.get(p.run_id, "") + p.reason + "; "
    assert "torn line" in warned["torn"]
    assert "no status.json" in warned["no-status"]
    assert "no final evaluation" in warned["done-no-final"]
    assert loaded.skipped == []


def test_overrides_duplicates_and_empty(tmp_path):
    write_synthetic_run(tmp_path / "a", seed=0, final=make_eval(4, 0.5, ALF))
    write_synthetic_run(tmp_path / "b", seed=0, final=make_eval(4, 0.7, ALF))
    loaded = load_runs(tmp_path, column_overrides={"a": {"model_size": "7B"}})
    runs = loaded.runs.set_index("run_id")
    assert runs.loc["a", "model_size"] == "7B" and runs.loc["b", "model_size"] == "tiny"
    assert loaded.warnings == []
    # same method/size/env/seed: an error naming both folders (each would count as a seed)
    with pytest.raises(DuplicateRunsError) as err:
        load_runs(tmp_path)
    assert f"{str(tmp_path / 'a')!r} and {str(tmp_path / 'b')!r}" in str(err.value)
    assert "G2PO, tiny, alfworld, seed 0" in str(err.value)
    write_synthetic_run(tmp_path / "b", seed=1, final=make_eval(4, 0.7, ALF))  # a distinct seed: fine
    assert sorted(load_runs(tmp_path).runs["seed"]) == [0, 1]
    empty = tmp_path / "empty"
    empty.mkdir()
    e = load_runs(empty)
    assert e.runs.empty and e.curves.empty and e.problems == [] and "method" in e.runs.columns
    with pytest.raises(FileNotFoundError):
        load_runs(tmp_path / "does-not-exist")


def test_local_trainer_eval_layout(tmp_path):
    """The local trainer rewrites eval.json at every evaluation: history starts at iteration 0,
    final = the latest entry, best = max over history (iteration 0 included)."""
    rd = RunDir(tmp_path / "alfworld-g2po-s0-abc").create()
    atomic_write_text(rd.config_path, "seed: 0\nenv:\n  name: alfworld\nalgorithm:\n  name: g2po\n  mode: mean_std_norm\n  step_weight: 1.0\n  options: {}\nmodel:\n  path: null\n")
    hist = [make_eval(0, 0.25, ALF, score=250.0), make_eval(6, 0.5, ALF, score=500.0)]
    from g2po_bench.core.rundir import atomic_write_json

    atomic_write_json(rd.eval_path, {"env": "alfworld", "panel": {"split": "valid_seen"}, "history": hist,
                                     "before": hist[0], "final": hist[-1], "best": hist[-1]})  # fmt: skip
    rd.write_status("running", 7, 12)
    for i in range(1, 8):
        rec = {"iteration": i, "adv/singleton_frac": 0.1, "adv/node_size_mean": 5.0}
        if i == 6:
            rec.update({"eval/success_rate": 0.5, "eval/score": 500.0, "eval/success/pick_and_place_simple": 0.75})
        rd.log_metrics(rec)
    loaded = load_runs(tmp_path)
    r = loaded.runs.iloc[0]
    assert bool(r["in_progress"]) and r["final.source"] == "final" and r["final.iteration"] == 6
    assert r["before.success_rate"] == 0.25 and r["best.success_rate"] == 0.5
    assert list(loaded.evals["iteration"]) == [0, 6] and list(loaded.evals["source"]) == ["before", "final"]
    from g2po_bench.analysis.aggregate import metrics_long

    assert "alfworld_score" not in set(metrics_long(loaded.runs)["metric"])  # not a paper metric


def test_evaluation_folders_are_not_seeds(tmp_path):
    """One G2PO run and a g2po eval folder of its checkpoint: one seed, the evaluation reported
    as such (the old report said "Seeds 2" and averaged the two)."""
    run = write_synthetic_run(tmp_path / "alfworld-g2po-s0-abc", seed=0, final=make_eval(4, 0.5, ALF))
    cfg_text = run.config_path.read_text()
    from g2po_bench.core.rundir import atomic_write_json

    # as ``g2po eval --run`` wrote it before (a sibling ``-eval`` folder: config.yaml + eval.json)
    legacy = RunDir(tmp_path / "alfworld-g2po-s0-abc-eval").create()
    atomic_write_text(legacy.config_path, cfg_text)
    ev = make_eval(0, 0.9, ALF)
    atomic_write_json(legacy.eval_path, {"env": "alfworld", "model": "x/checkpoints/latest/policy",
                                         "history": [ev], "before": ev, "final": ev, "best": ev})
    # as it writes now, should such a folder sit in the results folder (kind: evaluation)
    new = RunDir(tmp_path / "copied-eval").create()
    atomic_write_text(new.config_path, cfg_text)
    atomic_write_json(new.eval_path, {"kind": "evaluation", "env": "alfworld", "run": str(run.root),
                                      "model": "m", "history": [ev], "before": ev, "final": ev, "best": ev})
    # and inside the run folder (RUN/evals/<name>): never searched
    inner = RunDir(run.root / "evals" / "20260101-000000").create()
    atomic_write_text(inner.config_path, cfg_text)
    atomic_write_json(inner.eval_path, {"kind": "evaluation", "history": [ev], "final": ev})
    loaded = load_runs(tmp_path)
    assert list(loaded.runs["run_id"]) == ["alfworld-g2po-s0-abc"]
    assert loaded.runs["final.success_rate"].tolist() == [0.5]
    skipped = {p.run_id: p.reason for p in loaded.skipped}
    assert set(skipped) == {"alfworld-g2po-s0-abc-eval", "copied-eval"}
    assert all(r.startswith("evaluation-only folder") and "not counted as a seed" in r for r in skipped.values())
    assert set(loaded.curves["run_id"]) == {"alfworld-g2po-s0-abc"}


def _cfg(env, name, mode="mean_std_norm", options=None, **common):
    return {"env": {"name": env}, "model": {"path": None},
            "algorithm": {"name": name, "mode": mode, "gamma": 0.95, "step_weight": 1.0, "invalid_penalty": 0.1,
                          "success_reward": 10.0, "options": dict(options or {}), **common}}


def test_an_option_that_differs_within_a_method_makes_a_variant_on_every_benchmark():
    """variants_in_set: the mode is a variant on the toy corridor (no reference mode there) and for an
    estimator that leaves it out of its variant_options (RLOO ignores it) as soon as two runs of the
    method differ in it; a set whose runs share their settings keeps variant_of's names."""
    from g2po_bench.analysis.naming import variants_in_set

    toy = {"a": _cfg("toy", "g2po", options={"aggregation": False}),
           "b": _cfg("toy", "g2po", mode="mean_norm", options={"aggregation": False}),
           "c": _cfg("toy", "grpo", mode="mean_norm")}  # alone in its method: no part
    assert variants_in_set(toy) == {"a": "aggregation=false", "b": "aggregation=false, norm=mean_norm", "c": ""}
    assert variant_of(toy["b"]) == "aggregation=false"  # one run alone: toy has no reference mode
    rloo = {"x": _cfg("alfworld", "rloo"), "y": _cfg("alfworld", "rloo", mode="mean_norm"),
            "z": _cfg("alfworld", "rloo", success_reward=5.0)}
    assert variant_of(rloo["y"]) == variant_of(rloo["z"]) == ""  # options RLOO's function does not take
    assert variants_in_set(rloo) == {"x": "", "y": "norm=mean_norm", "z": "success_reward=5"}
    appworld = {"p": _cfg("appworld", "g2po", gamma=0.9), "q": _cfg("appworld", "g2po", gamma=0.9, mode="mean_norm")}
    assert variants_in_set(appworld) == {"p": "gamma=0.9", "q": "gamma=0.9, norm=mean_norm"}
    same = {f"s{i}": _cfg("alfworld", "g2po") for i in range(3)}
    assert variants_in_set(same) == {"s0": "", "s1": "", "s2": ""}
    lead = {"main": _cfg("alfworld", "g2po"), "agg": _cfg("alfworld", "g2po", options={"aggregation": False}),
            "norm": _cfg("alfworld", "g2po", mode="mean_norm"), "grpo": _cfg("alfworld", "grpo"),
            "grpo_norm": _cfg("alfworld", "grpo", mode="mean_norm")}
    assert variants_in_set(lead) == {"main": "", "agg": "aggregation=false", "norm": "norm=mean_norm",
                                     "grpo": "", "grpo_norm": "norm=mean_norm"}


def test_runs_that_differ_outside_the_algorithm_are_named_in_the_duplicate_error(tmp_path):
    """Two runs of one label and seed whose configs differ elsewhere (here train.lr) are still two
    seeds of one row: the error names the keys they differ in."""
    write_synthetic_run(tmp_path / "a", seed=0, final=make_eval(4, 0.5, ALF), extra_config={"train": {"lr": 0.001}})
    write_synthetic_run(tmp_path / "b", seed=0, final=make_eval(4, 0.7, ALF), extra_config={"train": {"lr": 0.0003}})
    with pytest.raises(DuplicateRunsError) as err:
        load_runs(tmp_path)
    assert "(their configs differ in train.lr (0.001 / 0.0003))" in str(err.value)


def test_an_estimator_whose_module_is_not_importable_is_a_warning_naming_the_module(tmp_path, capsys):
    """Issue 51: `g2po report` without PYTHONPATH dropped an out-of-tree estimator's label silently (the
    row took the raw name). The run is still included, with a warning that names algorithm.module."""
    from g2po_bench.cli import main

    for seed in (0, 1):
        write_synthetic_run(tmp_path / f"mine-s{seed}", algorithm="my_estimator", seed=seed,
                            final=make_eval(4, 0.5, ALF),
                            extra_config={"algorithm": {"name": "my_estimator", "module": "my_lab.not_on_this_path",
                                                        "mode": "mean_std_norm", "step_weight": 1.0, "options": {}}})
    loaded = load_runs(tmp_path)
    assert list(loaded.runs["method"]) == ["my_estimator", "my_estimator"]
    (w0, w1) = loaded.warnings
    assert "'my_lab.not_on_this_path' (algorithm.module) is not importable here" in w0.reason
    assert "PYTHONPATH" in w0.reason and w1.run_id == "mine-s1"
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "report"), "--no-figures", "--n-boot", "20"]) == 0
    err = capsys.readouterr().err
    assert "warning mine-s0: estimator 'my_estimator': its module 'my_lab.not_on_this_path'" in err
    assert "my_lab.not_on_this_path" in (tmp_path / "report" / "report.md").read_text()
