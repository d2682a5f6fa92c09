"""Every registered benchmark honours the Benchmark protocol (benchmarks/base.py), and a benchmark
added as one new package with its presets is found by the CLI with no other file touched."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.benchmarks.parsing import PROJECTIONS
from g2po_bench.benchmarks.registry import (
    benchmark_names,
    get_benchmark,
    preset_files,
)
from g2po_bench.core.config import ConfigError
from g2po_bench.core.protocol import Environment, Observation
from g2po_bench.runconfig import load_config

ROOT = Path(__file__).resolve().parents[1]
BUILT_IN = ("alfworld", "appworld", "toy", "webshop")


def test_the_built_in_benchmarks_are_found_without_a_list():
    assert set(BUILT_IN) <= set(benchmark_names())
    for name in BUILT_IN:
        assert get_benchmark(name).name == name
    with pytest.raises(ValueError, match="unknown environment 'nope'; known: alfworld"):
        get_benchmark("nope")


def _small_config(name: str, tmp: Path):
    """The benchmark's embedded default, made small (few generated tasks, caches under ``tmp``)."""
    return load_config(None, [
        f"env.name={name}", "env.generated_train_games=6", "env.generated_eval_games=3",
        f"env.generated_dir={tmp / 'alfworld_generated'}", f"env.cache_dir={tmp}",
        f"env.appworld_generated_dir={tmp / 'appworld'}",
    ])


def _need_appworld(name: str) -> None:
    if name != "appworld":
        return
    from g2po_bench.benchmarks.appworld.runtime import AppWorldUnavailable, find_python

    try:
        find_python(None)
    except AppWorldUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(f"no AppWorld interpreter: {exc}")


@pytest.mark.parametrize("name", BUILT_IN)
def test_conformance(name, tmp_path):
    """The required parts work together on the benchmark's embedded default: tasks load sorted and
    typed, an environment plays the expert's plan to a win, prompts are text, an expert response
    parses back to its action, and the config checks accept the default."""
    _need_appworld(name)
    bench = get_benchmark(name)
    assert isinstance(bench, Benchmark)
    assert bench.task_types and all(isinstance(t, str) for t in bench.task_types)
    assert bench.projection in PROJECTIONS
    assert bench.action_tag in ("action", "code") and bench.agent_intro
    cfg = _small_config(name, tmp_path)
    assert cfg.env.prompt in bench.prompt_styles
    split = "train"
    tasks = bench.load_tasks(cfg.env, split)
    assert tasks and [t.task_id for t in tasks] == sorted(t.task_id for t in tasks) or name == "appworld"
    assert all(t.env == name and t.task_type in bench.task_types for t in tasks)
    assert [t.task_id for t in bench.load_tasks(cfg.env, split)] == [t.task_id for t in tasks]  # deterministic
    task = tasks[0]
    env = bench.make_env(cfg.env)
    assert isinstance(env, Environment)
    try:
        obs = env.reset(task)
        assert isinstance(obs, Observation) and isinstance(obs.state_key, str) and not obs.done
        plan = bench.expert_actions(task)
        assert plan, f"{name}: the expert has no plan for {task.task_id}"
        history: list[tuple[str, str]] = []
        for step, action in enumerate(plan):
            prompt = bench.build_prompt(obs, history, step, cfg.env.history_length, style=cfg.env.prompt)
            assert isinstance(prompt, str) and prompt.strip()
            response = bench.expert_response(action, obs, style=cfg.env.prompt)
            parsed = bench.parse_response(response)
            assert parsed.valid and parsed.action.strip() == action.strip().lower() or \
                (bench.action_tag == "code" and parsed.action.strip() == action.strip()), (response, parsed)
            history.append((obs.text, action))
            obs = env.step(action)
            if obs.done:
                break
        assert obs.done and obs.won, f"{name}: the expert's plan does not win {task.task_id}"
        assert bench.step_reward(obs, 10.0) == 10.0  # the winning step earns the success reward
    finally:
        env.close()
    bench.validate_config(cfg)  # the default passes its own checks
    assert bench.episode_set_score([]) is None or name == "appworld"
    assert isinstance(bench.describe_data(tmp_path), str)


@pytest.mark.parametrize("name", BUILT_IN)
def test_a_benchmark_checks_its_own_settings(name):
    bench = get_benchmark(name)
    with pytest.raises(ConfigError, match="env.task_types"):
        load_config(None, [f"env.name={name}", "env.task_types=[not_a_type]"])
    if "compact" not in bench.prompt_styles:
        with pytest.raises(ConfigError, match="env.prompt"):
            load_config(None, [f"env.name={name}", "env.prompt=compact"])


def test_benchmark_specific_settings_fail_before_any_work():
    with pytest.raises(ConfigError, match="env.webshop_observation_mode"):
        load_config(None, ["env.name=webshop", "env.webshop_observation_mode=html"])
    with pytest.raises(ConfigError, match="env.appworld_difficulties"):
        load_config(None, ["env.name=appworld", "env.appworld_difficulties=[4]"])
    with pytest.raises(ConfigError, match="env.generated_eval_scenes"):
        load_config(None, ["env.generated_eval_scenes=elsewhere"])
    # every registered benchmark is named: the built-in ones, and any a test of this process registered
    # (tests/faulty_toy.py registers one in the process that imports it)
    names = ", ".join(benchmark_names())
    assert {"alfworld", "appworld", "toy", "webshop"} <= set(benchmark_names())
    with pytest.raises(ConfigError, match=f"env.name.*'minecraft'; choose one of {names}$"):
        load_config(None, ["env.name=minecraft"])


def test_every_preset_belongs_to_a_benchmark_and_loads(tmp_path):
    files = preset_files()
    assert {"alfworld_cpu", "alfworld_1.5b", "webshop_1.5b", "webshop_cpu", "appworld_cpu"} <= set(files)
    model = tmp_path / "model"
    model.mkdir()
    for name, path in files.items():
        bench_name = path.parent.parent.name
        # the CPU presets build the tiny model (webshop_cpu's tokenizer: model.item_tokens, no model folder)
        given = [f"env.data_dir={tmp_path}"] + ([] if name.endswith("_cpu") else [f"model.path={model}"])
        cfg = load_config(None, given, preset=name)
        assert cfg.env.name == bench_name, name


def test_optional_hooks_have_defaults():
    class Minimal(Benchmark):
        name = "minimal"
        task_types = ("t",)
        projection = "alfworld"

        def load_tasks(self, cfg, split):
            return []

        def make_env(self, cfg):
            raise NotImplementedError

        def build_prompt(self, obs, history, step, history_length, style="reference"):
            return ""

        def expert_actions(self, task):
            return []

        def expert_response(self, action, obs, style="reference"):
            return f"<think>x</think><action>{action}</action>"

    m = Minimal()
    assert m.parse_response("<think>a</think><action>Go East</action>").action == "go east"
    # the reference reward: success_reward on the winning step, 0 on every other (whatever the env's own reward)
    won = Observation("You win.", "", None, "s", reward=1.0, done=True, won=True)
    lost = Observation("You lose.", "", None, "s", reward=0.4, done=True, won=False)
    assert m.step_reward(won, 10.0) == 10.0 and m.step_reward(won, 3.0) == 3.0 and m.step_reward(lost, 10.0) == 0.0
    assert m.episode_set_score([{"task_id": "a", "success": True}]) is None
    assert m.generate(None) is None and m.speed_benchmark([]) is None and m.failure_hint(["x"], 0.0) is None
    assert m.plan_sentence(None, [], "Do it.") == "My goal: Do it."
    assert m.format_observation("text", "instr") == "text"
    assert m.preload_worker_modules() is None
    assert m.expert_detour is None and m.expert_stall is None and m.expert_mistake is None
    from g2po_bench.core.errors import DataDownloadError

    with pytest.raises(DataDownloadError, match="has no data download"):
        m.download(Path("."))
    with pytest.raises(TypeError, match="unknown projection"):
        type("Bad", (Minimal,), {"name": "bad", "projection": "nope"})


PACKAGE = '''
"""A benchmark added from outside the suite: the toy corridor under another name."""
from g2po_bench.benchmarks.toy import ToyBenchmark, load_tasks


class EchoBenchmark(ToyBenchmark):
    name = "echo"
    generates = True

    def generate(self, cfg):
        return None


BENCHMARK = EchoBenchmark()
'''

PRESET = '''
env: {name: echo, max_steps: 4, num_workers: 1}
train: {iterations: 1, groups_per_batch: 2, group_size: 2, sft_epochs: 1, max_response_tokens: 12,
        warm_start_cache: null}
model: {hidden_size: 32, intermediate_size: 64, num_heads: 2, vocab_size: 300, device: cpu}
eval: {num_tasks: 2, every: 0, at_train_temperature: false}
'''


def test_a_benchmark_added_as_one_package_with_presets_is_found_and_trains(tmp_path):
    """One new package (here outside the tree, registered through the entry point group
    ``g2po.benchmarks`` of a dist-info folder) plus its presets: `g2po config --presets` lists its
    preset, `g2po data generate` offers it, and `g2po train --preset` runs it, with no other file
    of the suite touched."""
    site = tmp_path / "site"
    pkg = site / "echo_bench"
    (pkg / "presets").mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(PACKAGE), encoding="utf-8")
    (pkg / "presets" / "echo_cpu.yaml").write_text(textwrap.dedent(PRESET), encoding="utf-8")
    dist = site / "echo_bench-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-bench\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text("[g2po.benchmarks]\necho = echo_bench:BENCHMARK\n", encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))

    def g2po(*args):
        return subprocess.run([sys.executable, "-m", "g2po_bench.cli", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)

    listed = g2po("config", "--presets")
    assert listed.returncode == 0, listed.stderr
    assert "echo_cpu" in listed.stdout and "alfworld_cpu" in listed.stdout
    gen = g2po("data", "generate", "--help")
    assert "echo" in gen.stdout
    shown = g2po("config", "--preset", "echo_cpu")
    assert shown.returncode == 0 and "name: echo" in shown.stdout, shown.stderr
    run = g2po("train", "--preset", "echo_cpu", f"output_dir={tmp_path / 'runs'}", "run_id=echo", "progress=false")
    assert run.returncode == 0, run.stderr[-3000:]
    import json

    status = json.loads((tmp_path / "runs" / "echo" / "status.json").read_text(encoding="utf-8"))
    assert status["state"] == "done"
    rows = [json.loads(x) for x in (tmp_path / "runs" / "echo" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1] and np.isfinite(rows[0]["loss/pg_loss"]) and rows[0]["train/steps"] > 0


class _EntryPoint:
    """A stand-in for an ``importlib.metadata.EntryPoint`` of the group ``g2po.benchmarks``."""

    def __init__(self, name: str, value: str, load):
        self.name, self.value, self.module = name, value, value.split(":")[0]
        self._load = load

    def load(self):
        return self._load()


def _missing_package():
    raise ModuleNotFoundError("No module named 'no_such_bench_pkg'", name="no_such_bench_pkg")


def test_a_broken_benchmark_entry_point_is_reported_not_raised(monkeypatch):
    """An entry point that does not import, one whose BENCHMARK is not a Benchmark and one that
    takes a built-in's name are each left out with one warning naming it and its error; the
    built-ins stay, every query gives the same answer, and the unknown-name errors name the
    failed loads."""
    import warnings
    from importlib import metadata

    from g2po_bench.benchmarks import registry
    from g2po_bench.benchmarks.toy import ToyBenchmark

    class Clash(ToyBenchmark):
        pass  # name "toy", another object

    eps = [_EntryPoint("bad", "no_such_bench_pkg:BENCHMARK", _missing_package),
           _EntryPoint("notbench", "g2po_bench.benchmarks.toy:load_tasks", lambda: object()),
           _EntryPoint("clash", "g2po_bench.benchmarks.toy:BENCHMARK", lambda: Clash())]
    monkeypatch.setattr(registry, "_FOUND", {})  # discovery runs again, with the entry points below
    monkeypatch.setattr(registry, "_DISCOVERED", False, raising=False)
    monkeypatch.setattr(registry, "_LOAD_ERRORS", {}, raising=False)
    monkeypatch.setattr(metadata, "entry_points",
                        lambda group=None: list(eps) if group == registry.ENTRY_POINT_GROUP else [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = get_benchmark("toy")
        second = get_benchmark("toy")
        names = benchmark_names()
    assert first is second and type(first) is ToyBenchmark
    assert names == sorted(BUILT_IN)
    messages = sorted(str(w.message) for w in caught if issubclass(w.category, registry.BenchmarkLoadWarning))
    assert len(messages) == 3, [str(w.message) for w in caught]  # once each, not once per query
    assert messages[0].startswith("g2po benchmark entry point bad = no_such_bench_pkg:BENCHMARK failed to load "
                                  "(ModuleNotFoundError: No module named 'no_such_bench_pkg')")
    assert "entry point clash = g2po_bench.benchmarks.toy:BENCHMARK failed to load (ValueError: benchmark " \
           "'toy' of entry point 'clash'" in messages[1]
    assert "entry point notbench = g2po_bench.benchmarks.toy:load_tasks failed to load (TypeError: " in messages[2]
    assert list(registry.benchmark_load_errors()) == [
        "entry point bad = no_such_bench_pkg:BENCHMARK",
        "entry point clash = g2po_bench.benchmarks.toy:BENCHMARK",
        "entry point notbench = g2po_bench.benchmarks.toy:load_tasks"]
    with pytest.raises(ValueError, match=r"unknown environment 'bad'; known: alfworld, appworld, toy, webshop; "
                                         r"entry point bad = no_such_bench_pkg:BENCHMARK failed to load "
                                         r"\(ModuleNotFoundError: No module named 'no_such_bench_pkg'\)"):
        get_benchmark("bad")
    with pytest.raises(ConfigError, match=r"env.name.*'bad'; choose one of alfworld, appworld, toy, webshop; "
                                          r"entry point bad = no_such_bench_pkg:BENCHMARK failed to load"):
        load_config(None, ["env.name=bad"])
    with pytest.raises(ConfigError, match=r"unknown preset 'bad_cpu'.*; entry point bad = no_such_bench_pkg"):
        load_config(None, [], preset="bad_cpu")
    assert load_config(None, ["env.name=toy"]).env.name == "toy"


def test_a_broken_benchmark_plugin_does_not_stop_the_command(tmp_path):
    """With an installed package whose ``g2po.benchmarks`` entry point does not import, every
    command still runs: one ``warning:`` line names the entry point and its error, and
    ``g2po config --presets`` lists it as not loaded."""
    site = tmp_path / "site"
    dist = site / "bad_bench-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: bad-bench\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text("[g2po.benchmarks]\nbad = no_such_bench_pkg:BENCHMARK\n",
                                           encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    warning = ("warning: g2po benchmark entry point bad = no_such_bench_pkg:BENCHMARK failed to load "
               "(ModuleNotFoundError: No module named 'no_such_bench_pkg'); its benchmark and presets are not "
               "available")
    for args in (["--help"], ["algorithms"], ["config", "env.name=toy"], ["config", "--presets"]):
        out = subprocess.run([sys.executable, "-m", "g2po_bench.cli", *args], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, (args, out.stderr[-2000:])
        assert out.stderr.splitlines().count(warning) == 1, (args, out.stderr[-2000:])
        assert "Traceback" not in out.stderr, args
    assert "alfworld_cpu" in out.stdout
    assert "not loaded: entry point bad = no_such_bench_pkg:BENCHMARK (ModuleNotFoundError: No module named " \
           "'no_such_bench_pkg')" in out.stdout
