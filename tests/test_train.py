"""The local trainer end to end on the toy environment (fast), plus resume from a checkpoint."""

import json
import shutil

import numpy as np
import pytest

from g2po_bench.core.rundir import read_jsonl
from g2po_bench.runconfig import load_config
from g2po_bench.train import run_train

TOY = [
    "env.name=toy", "env.max_steps=4", "env.num_workers=1", "train.iterations=2",
    "train.groups_per_batch=2", "train.group_size=3", "train.sft_epochs=2", "train.sft_batch_size=8",
    "train.max_response_tokens=12", "model.hidden_size=32", "model.intermediate_size=64",
    "model.num_heads=2", "model.vocab_size=300", "eval.num_tasks=3", "eval.every=1", "progress=false",
]


def _cfg(tmp_path, *extra):
    return load_config(None, [*TOY, f"output_dir={tmp_path / 'runs'}",
                              f"train.warm_start_cache={tmp_path / 'warm_start'}", *extra])


@pytest.mark.parametrize("algorithm", ["g2po", "grpo", "gigpo", "rloo", "ppo"])
def test_training_writes_a_complete_run_folder(tmp_path, monkeypatch, algorithm):
    from g2po_bench.algorithms.registry import EstimatorSpec

    cfg = _cfg(tmp_path, f"algorithm.name={algorithm}")
    checked = []  # the estimator's option checks during training
    original = EstimatorSpec.check_options
    monkeypatch.setattr(EstimatorSpec, "check_options",
                        lambda self, options: (checked.append(self.name), original(self, options))[1])
    run = run_train(cfg)
    metrics = read_jsonl(run.metrics_path)
    assert [m["iteration"] for m in metrics] == [1, 2]
    # the trainer binds the estimator once (registry.bind_run_estimator) and calls it
    # every iteration: its options are checked once per run, not once per iteration
    assert checked == [algorithm]
    for m in metrics:
        assert np.isfinite(m["loss/pg_loss"]) and m["train/steps"] > 0
        assert 0.0 <= m["train/success_rate"] <= 1.0
    ev = json.loads(run.eval_path.read_text())
    assert ev["before"]["iteration"] == 0 and ev["final"]["iteration"] == 2
    assert ev["final"]["num_episodes"] == 3
    # the panel size is recorded (issue 39, item 5): eval.num_tasks=3 of the toy's split
    assert ev["panel"]["size"] == 3 and ev["final"]["panel_size"] == 3
    assert json.loads(run.status_path.read_text())["state"] == "done"
    assert (run.checkpoint_dir / "policy" / "config.json").exists()
    # the tiny model's marker travels with the checkpoint (env.prompt=auto picks its prompt)
    assert (run.checkpoint_dir / "policy" / "g2po_tiny.json").exists()
    assert "algorithm:" in run.config_path.read_text()
    if algorithm == "ppo":
        assert "loss/value" in metrics[-1]
    # the actor's AdamW carries the reference weight decay (train.weight_decay 0.01)
    import torch

    state = torch.load(run.checkpoint_dir / "optim.pt", weights_only=False)
    assert state["optimizer"]["param_groups"][0]["weight_decay"] == 0.01


def test_same_seed_same_training(tmp_path):
    a = run_train(_cfg(tmp_path / "a", "train.iterations=1"))
    b = run_train(_cfg(tmp_path / "b", "train.iterations=1"))
    ma, mb = read_jsonl(a.metrics_path)[0], read_jsonl(b.metrics_path)[0]
    for key in ("train/success_rate", "train/steps", "loss/pg_loss", "loss/kl"):
        assert ma[key] == mb[key], key


def test_held_out_success_is_also_measured_at_the_training_temperature(tmp_path):
    """eval.at_train_temperature: the panel at train.temperature before RL and at the end, with the
    same episodes; it changes nothing in training."""
    on = run_train(_cfg(tmp_path / "on", "train.temperature=0.9"))
    off = run_train(_cfg(tmp_path / "off", "train.temperature=0.9", "eval.at_train_temperature=false"))
    ev_on, ev_off = json.loads(on.eval_path.read_text()), json.loads(off.eval_path.read_text())
    at_t = ev_on["at_train_temperature"]
    assert at_t["temperature"] == 0.9 and "at_train_temperature" not in ev_off
    assert (at_t["before"]["iteration"], at_t["final"]["iteration"]) == (0, 2)
    assert [e[0] for e in at_t["before"]["episodes"]] == [e[0] for e in ev_on["before"]["episodes"]]
    assert at_t["final"]["num_episodes"] == ev_on["final"]["num_episodes"] == 3
    # the main panel (eval.temperature) and the training itself are the same with it off
    assert ev_on["history"] == ev_off["history"]
    for a, b in zip(read_jsonl(on.metrics_path), read_jsonl(off.metrics_path)):
        for key in ("train/success_rate", "train/steps", "loss/pg_loss", "loss/kl"):
            assert a[key] == b[key], key
    # resumed with more iterations: "before" is kept, "final" is played again at the new last iteration
    more = run_train(_cfg(tmp_path / "on", "train.temperature=0.9", "train.iterations=3", "resume=true"))
    at_t3 = json.loads(more.eval_path.read_text())["at_train_temperature"]
    assert at_t3["before"] == at_t["before"] and at_t3["final"]["iteration"] == 3


def test_resume_continues_from_the_checkpoint(tmp_path):
    """A finished run resumed with more iterations continues after its checkpoint. Nothing is
    killed here: tests/test_signals.py kills (kill -9) and signals real training processes
    mid-iteration and compares the resumed runs with uninterrupted ones."""
    cfg = _cfg(tmp_path, "train.iterations=3", "eval.every=0")
    first = run_train(_cfg(tmp_path, "train.iterations=3", "eval.every=0"))
    status = json.loads(first.status_path.read_text())
    assert status["state"] == "done"
    lines = read_jsonl(first.metrics_path)
    assert [m["iteration"] for m in lines] == [1, 2, 3]
    # a resumed run with more iterations continues at 4 and keeps 1..3
    cfg.train.iterations = 4
    cfg.resume = True
    cfg.run_id = first.run_id
    resumed = run_train(cfg)
    assert [m["iteration"] for m in read_jsonl(resumed.metrics_path)] == [1, 2, 3, 4]


def test_one_iteration_on_generated_alfworld_games(tmp_path):
    """The main job's path end to end on the real ALFWorld engine: generated games, expert
    demonstrations, tiny model, SFT warm start, one G2PO iteration, evaluations."""
    cfg = load_config(None, [
        f"output_dir={tmp_path / 'runs'}", f"train.warm_start_cache={tmp_path / 'warm_start'}",
        f"env.generated_dir={tmp_path / 'games'}", "env.generated_train_games=6",
        "env.generated_eval_games=6", "env.max_steps=12", "env.num_workers=2", "train.iterations=1",
        "train.groups_per_batch=2", "train.group_size=2", "train.sft_epochs=1",
        "model.hidden_size=32", "model.intermediate_size=64", "model.num_heads=2", "model.vocab_size=400",
        "eval.num_tasks=6", "progress=false",
    ])
    run = run_train(cfg)
    (m,) = read_jsonl(run.metrics_path)
    assert m["iteration"] == 1 and m["train/steps"] > 0 and np.isfinite(m["loss/pg_loss"])
    assert set(k.split("/")[-1] for k in m if k.startswith("train/success/")) <= {
        "pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
        "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place"}
    setup = json.loads((run.root / "setup.json").read_text())
    assert setup["demo/replay_success"] == 1.0 and setup["demo/steps"] > 6
    ev = json.loads(run.eval_path.read_text())
    assert ev["before"]["num_episodes"] == 6 and ev["final"]["iteration"] == 1
    assert "adv/singleton_frac" in m
    # the evaluation record carries its episodes and their bootstrap interval
    from g2po_bench.core.stats import bootstrap_ci

    final = ev["final"]
    wins = [w for _, w in final["episodes"]]
    assert len(wins) == 6 and sum(wins) / 6 == final["success_rate"]
    assert final["success_ci"] == list(bootstrap_ci(wins, n_boot=2000, seed=0))
    assert set(final["per_task_type_ci"]) == set(final["per_task_type"])
    timing = json.loads((run.root / "timing.json").read_text())["seconds"]
    assert {"expert replay", "warm start (SFT)", "evaluation", "RL iterations"} <= set(timing)


def test_a_log_file_gets_one_readable_line_per_phase_and_iteration(tmp_path):
    """Without a terminal (a log file) progress arrives as plain lines: the run folder first,
    each phase, one line per iteration, and the summary with CIs and seconds per phase."""
    import io

    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False, width=80)
    run = run_train(_cfg(tmp_path, "progress=true", "eval.every=0"), console=console)
    lines = buf.getvalue().splitlines()
    assert lines[0] == f"run folder: {run.root}"
    assert any(line.startswith("expert replay: ") for line in lines)
    assert any(line.startswith("warm start: SFT 2 epoch(s)") and "(first step)" in line for line in lines)
    assert any(line.startswith("evaluation before RL: success ") for line in lines)
    its = [line for line in lines if line.startswith("iteration ")]
    assert [line.split(":")[0] for line in its] == ["iteration 1/2", "iteration 2/2"]
    assert "held-out success" in its[-1] and "held-out success" not in its[0]
    assert any(line.startswith("held-out success before RL:") for line in lines)
    assert any(line.startswith("held-out success final:") for line in lines)
    assert any(line.startswith("held-out success at the training temperature 1: before RL ") for line in lines)
    summary = [line for line in lines if line.startswith("time: ")]
    assert len(summary) == 1 and "RL iterations" in summary[0]
    assert all(len(line) < 400 for line in lines) and not any("\x1b[" in line for line in lines)


def test_a_fresh_start_refuses_to_overwrite_a_finished_run(tmp_path):
    """The default run id is a hash of the config, so the same command names the same folder:
    running it again (resume=false) must not empty the finished run's records; it fails before
    any work, naming resume=true / run_id / deleting the folder. A folder without a finished run
    or checkpoint (stopped before its first checkpoint) is started over."""
    from g2po_bench.core.config import ConfigError

    cfg = _cfg(tmp_path, "eval.every=0")
    run = run_train(cfg)
    before = {p: p.read_bytes() for p in (run.metrics_path, run.eval_path, run.status_path)}
    with pytest.raises(ConfigError, match=r"already holds a finished run \(2 of 2 iterations\).*resume=true.*run_id="):
        run_train(cfg)
    assert {p: p.read_bytes() for p in before} == before  # nothing touched
    # a run that never reached a checkpoint is started over
    shutil.rmtree(run.root / "checkpoints")
    run.write_status("interrupted", 0, 2)
    again = run_train(cfg)
    assert json.loads(again.status_path.read_text())["state"] == "done"
    assert [m["iteration"] for m in read_jsonl(again.metrics_path)] == [1, 2]


@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_resume_gives_the_same_metrics_as_a_straight_run(tmp_path, algorithm):
    """Issue 39, item 2: 4 iterations straight and 2 iterations then resume=true to 4 give the same
    metrics, timings aside. PPO's critic resumes with its AdamW state (its moments and step count
    were lost before: loss/value differed from iteration 3 on)."""
    from sweep_support import is_timing_key

    def rows(run):
        return [{k: v for k, v in m.items() if not is_timing_key(k)} for m in read_jsonl(run.metrics_path)]

    straight = run_train(_cfg(tmp_path / "straight", f"algorithm.name={algorithm}", "train.iterations=4",
                              "eval.every=0"))
    first = run_train(_cfg(tmp_path / "resumed", f"algorithm.name={algorithm}", "train.iterations=2",
                           "eval.every=0"))
    cfg = _cfg(tmp_path / "resumed", f"algorithm.name={algorithm}", "train.iterations=4", "eval.every=0",
               "resume=true", f"run_id={first.run_id}")
    resumed = run_train(cfg)
    a, b = rows(straight), rows(resumed)
    assert [m["iteration"] for m in b] == [1, 2, 3, 4]
    # iteration 2 was the first run's last: it also holds that run's final evaluation
    no_eval = [{k: v for k, v in m.items() if not k.startswith("eval/")} for m in (a[1], b[1])]
    assert no_eval[0] == no_eval[1]
    assert a[0] == b[0] and a[2] == b[2] and a[3] == b[3]
    if algorithm == "ppo":
        assert "loss/value" in b[2]
