"""Adding an estimator is one file (docs/extending.md): in the estimators package, in another
package installed with an entry point, or in any importable module named by
``algorithm.module``. Each path trains, benchmarks and reports with no other file touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from g2po_bench.algorithms import registry

# One toy iteration: a tiny model on the toy corridor (tests/test_train.py's settings)
TOY = [
    "env.name=toy", "env.max_steps=4", "env.num_workers=1", "train.iterations=1",
    "train.groups_per_batch=2", "train.group_size=3", "train.sft_epochs=1", "train.sft_batch_size=8",
    "train.max_response_tokens=12", "model.hidden_size=32", "model.intermediate_size=64",
    "model.num_heads=2", "model.vocab_size=300", "eval.num_tasks=3", "eval.every=1", "progress=false",
]

# a complete estimator module: options, label, an input from the vocabulary, an oracle
ESTIMATOR_MODULE = '''
"""Test estimator {name}: the episode return minus the task group's mean, plus a bonus for the
action "look" (an input from the vocabulary: action_texts)."""

import numpy as np

from g2po_bench.algorithms.registry import AdvantageResult, register_estimator


def _advantage(batch, bonus, action_texts):
    _, traj = np.unique(batch.traj_id, return_inverse=True)
    episode_return = np.bincount(traj, weights=batch.reward)[traj]
    _, group = np.unique(batch.group_id, return_inverse=True)
    mean = np.bincount(group, weights=episode_return) / np.bincount(group)
    looks = np.array([a == "look" for a in action_texts], dtype=float)
    return episode_return - mean[group] + bonus * looks


def oracle(batch, *, bonus, action_texts):
    returns, group_rows = {{}}, {{}}
    for i in range(len(batch)):
        returns[batch.traj_id[i]] = returns.get(batch.traj_id[i], 0.0) + batch.reward[i]
    for i in range(len(batch)):
        group_rows.setdefault(batch.group_id[i], []).append(returns[batch.traj_id[i]])
    out = []
    for i in range(len(batch)):
        rets = group_rows[batch.group_id[i]]
        out.append(returns[batch.traj_id[i]] - sum(rets) / len(rets) + (bonus if action_texts[i] == "look" else 0.0))
    return np.array(out)


@register_estimator("{name}", options={{"bonus": 0.0}}, inputs=("action_texts",), label="{label}",
                    oracle=oracle, description="test: R - group mean + bonus for 'look'")
def {name}(batch, *, bonus, action_texts):
    return AdvantageResult(advantages=_advantage(batch, bonus, action_texts))
'''


@pytest.fixture
def clean_registry(monkeypatch):
    """The registry as it was, after the test (a copy of the discovered registry is modified)."""
    registry.discover_estimators()
    registered = dict(registry.spec._REGISTRY)
    monkeypatch.setattr(registry.discovery, "_DISCOVERED", registry.discovery._DISCOVERED)
    before = set(sys.modules)
    yield
    registry.spec._REGISTRY.clear()
    registry.spec._REGISTRY.update(registered)
    for mod in set(sys.modules) - before:
        if mod.startswith(("g2po_bench.algorithms.estimators.test_", "g2po_test_", "mod_est_")):
            del sys.modules[mod]


def _toy_config(tmp_path, *extra):
    from g2po_bench.runconfig import load_config

    return load_config(None, [*TOY, f"output_dir={tmp_path / 'runs'}",
                              f"train.warm_start_cache={tmp_path / 'warm_start'}", *extra])


def test_a_new_module_in_the_estimators_package_trains_benchmarks_and_reports(tmp_path, monkeypatch, clean_registry):
    """One new file beside the built-ins (here a temporary folder added to the package's path,
    so the working tree is untouched) is found by discovery and works everywhere."""
    import g2po_bench.algorithms.estimators as package
    from g2po_bench.algorithms.speed import run_advantage_benchmark
    from g2po_bench.algorithms.synthetic import reference_batch, synthetic_inputs
    from g2po_bench.analysis.report import build_report
    from g2po_bench.train import run_train

    extra = tmp_path / "extra_estimators"
    extra.mkdir()
    (extra / "test_lookbonus.py").write_text(ESTIMATOR_MODULE.format(name="test_lookbonus", label="Look bonus"))
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(extra)])
    assert "test_lookbonus" not in registry.spec._REGISTRY
    registry.discover_estimators(force=True)
    assert "test_lookbonus" in registry.available_estimators()
    spec = registry.estimator_spec("test_lookbonus")
    assert spec.module == "g2po_bench.algorithms.estimators.test_lookbonus"
    assert registry.estimator_inputs("test_lookbonus") == ("action_texts",)
    assert "test_lookbonus: test: R - group mean + bonus" in registry.describe_estimators()

    # estimate = oracle on a reference batch
    b = reference_batch(np.random.default_rng(0))
    inputs = synthetic_inputs(b, ["action_texts"], np.random.default_rng(1))
    inputs["action_texts"] = np.where(inputs["action_texts"] == "action 0", "look", inputs["action_texts"])
    np.testing.assert_allclose(registry.estimate("test_lookbonus", b, inputs=inputs, bonus=0.5).advantages,
                               registry.oracle_estimate("test_lookbonus", b, inputs=inputs, bonus=0.5)[0])

    # benchmarks: timed next to its oracle
    rows = run_advantage_benchmark(sizes=(600,), estimators=["test_lookbonus"], repeats=1, min_time=0.0)
    assert rows[0]["estimator"] == "test_lookbonus" and rows[0]["oracle"] == "measured"

    # trains (one toy iteration; the trainer builds the declared input from the rollouts), twice:
    # the main setting and a variant
    runs = [run_train(_toy_config(tmp_path, "algorithm.name=test_lookbonus")),
            run_train(_toy_config(tmp_path, "algorithm.name=test_lookbonus", "algorithm.options.bonus=1.0"))]
    for run in runs:
        metrics = [json.loads(line) for line in run.metrics_path.read_text().splitlines()]
        assert metrics[-1]["iteration"] == 1 and np.isfinite(metrics[-1]["loss/pg_loss"])

    # reports: the registered label, the variant from the explicit option, no duplicate runs
    result = build_report(tmp_path / "runs", tmp_path / "report", figures=False, n_boot=50)
    labels = set(result.loaded.runs["method_label"])
    assert labels == {"Look bonus", "Look bonus [bonus=1]"}
    assert "Look bonus [bonus=1]" in result.report_path.read_text()


def test_a_new_module_in_the_estimators_package_needs_no_edit_of_the_site_or_the_tests(tmp_path, monkeypatch,
                                                                                       clean_registry):
    """Issue 51: docs/extending.md says nothing else is edited, but an in-tree module broke
    `mkdocs build --strict` (its page was not in the nav) and
    tests/test_registry.py::test_builtins_registered_and_reexported (a hand-written list). The nav is
    filled by the site's hook and the registry test derives the list: both take the new module as it is."""
    import importlib.util

    import g2po_bench.algorithms.estimators as package

    extra = tmp_path / "extra_estimators"
    extra.mkdir()
    (extra / "test_navbonus.py").write_text(ESTIMATOR_MODULE.format(name="test_navbonus", label="Nav bonus"))
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(extra)])
    registry.discover_estimators(force=True)
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("docs_pages_ext", root / "scripts" / "docs_pages.py")
    pages = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pages)
    nav = [{"Estimators": ["estimators/index.md"]}]
    pages.on_config({"nav": nav})
    assert {"Test estimator test_navbonus": "estimators/test_navbonus.md"} in nav[0]["Estimators"]
    assert "algorithm.name=test_navbonus" in pages.estimator_pages()["estimators/test_navbonus.md"]
    spec = importlib.util.spec_from_file_location("test_registry_ext", root / "tests" / "test_registry.py")
    registry_tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(registry_tests)
    assert "test_navbonus" in registry_tests.in_tree_estimators()
    registry_tests.test_builtins_registered_and_reexported()


def test_algorithm_module_imports_an_estimator_before_validation(tmp_path, monkeypatch, clean_registry):
    from g2po_bench.core.config import ConfigError, config_hash
    from g2po_bench.runconfig import load_config

    (tmp_path / "mod_est_half.py").write_text(ESTIMATOR_MODULE.format(name="mod_est_half", label="Half"))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="unknown advantage estimator|registered estimators"):
        load_config(overrides=["algorithm.name=mod_est_half"])
    cfg = load_config(overrides=["algorithm.name=mod_est_half", "algorithm.module=mod_est_half",
                                 "algorithm.options.bonus=2.0"])
    assert cfg.algorithm.module == "mod_est_half" and cfg.algorithm.options == {"bonus": 2.0}
    with pytest.raises(ConfigError, match="algorithm.module.*no_such_module.*importable from this Python"):
        load_config(overrides=["algorithm.module=no_such_module"])
    # a module that is found but fails on import says so, with the file and line, not "not importable"
    (tmp_path / "mod_est_broken.py").write_text("import numpy\n\nx = undefined_name\n")
    (tmp_path / "mod_est_dep.py").write_text("import no_such_dependency\n")
    with pytest.raises(ConfigError, match=r"found but failed to import: .*mod_est_broken.py:3: NameError"):
        load_config(overrides=["algorithm.module=mod_est_broken"])
    with pytest.raises(ConfigError, match="mod_est_dep.*found but failed.*no_such_dependency"):
        load_config(overrides=["algorithm.module=mod_est_dep"])
    # an estimator that returns the wrong shape, or crashes, fails at the config load (before the
    # warm start), naming what came back or the file and line
    (tmp_path / "mod_est_shape.py").write_text(
        "import numpy as np\nfrom g2po_bench.algorithms.registry import AdvantageResult, register_estimator\n"
        "@register_estimator('mod_est_shape')\ndef f(batch):\n    return AdvantageResult(np.zeros(len(batch) + 1))\n")
    (tmp_path / "mod_est_crash.py").write_text(
        "from g2po_bench.algorithms.registry import register_estimator\n"
        "@register_estimator('mod_est_crash')\ndef f(batch):\n    return batch.no_such_field\n")
    with pytest.raises(ConfigError, match=r"algorithm.name.*'mod_est_shape' fails on a small synthetic batch.*"
                                          r"advantages of shape \(21,\), expected \(20,\)"):
        load_config(overrides=["algorithm.name=mod_est_shape", "algorithm.module=mod_est_shape"])
    with pytest.raises(ConfigError, match=r"'mod_est_crash' fails on a small synthetic batch.*"
                                          r"mod_est_crash.py:4: AttributeError"):
        load_config(overrides=["algorithm.name=mod_est_crash", "algorithm.module=mod_est_crash"])
    # the report names a run of such a module by its registered label: it imports the run's module
    from g2po_bench.analysis.naming import method_name

    (tmp_path / "mod_est_label.py").write_text(ESTIMATOR_MODULE.format(name="mod_est_label", label="Labelled"))
    run_cfg = {"algorithm": {"name": "mod_est_label", "module": "mod_est_label"}}
    assert method_name({"algorithm": {"name": "mod_est_label"}}) == "mod_est_label"  # not imported yet
    assert method_name(run_cfg) == "Labelled"
    assert method_name({"algorithm": {"name": "gone", "module": "mod_est_broken"}}) == "gone"
    # the key is in the hash once set, and out of it at its default (run ids of older configs)
    base = load_config()
    assert config_hash(load_config(overrides=["algorithm.module=mod_est_half"])) != config_hash(base)
    from g2po_bench.core.config import HASH_NEUTRAL_DEFAULTS, NON_SEMANTIC_KEYS, config_to_dict

    # the hash of the default is the hash of its dict without algorithm.module (nor the other keys
    # added at their defaults after runs were recorded), as before the key existed
    assert HASH_NEUTRAL_DEFAULTS["algorithm.module"] is None
    d = config_to_dict(base)
    for k in NON_SEMANTIC_KEYS:
        d.pop(k, None)
    d["algorithm"].pop("module")
    d["env"].pop("cache_dir")
    d["env"].pop("allow_incomplete_eval_split")
    # the WebShop CPU keys (docs/webshop-cpu.md), added at their defaults after the committed runs
    for section, key in (("env", "webshop_expert"), ("train", "sft_micro_batch_size"), ("model", "item_tokens"),
                         ("train", "sft_first_step_tasks"), ("env", "max_train_tasks"),
                         ("env", "webshop_train_reward")):
        assert d[section].pop(key) == HASH_NEUTRAL_DEFAULTS[f"{section}.{key}"]
    assert d["train"]["mini_batch_split"] == "balanced"  # not the neutral "fixed": it stays in the hash
    from g2po_bench.core.config import resolve_device

    assert d["model"]["device"] == "auto"
    d["model"]["device"] = resolve_device("auto")  # auto enters the hash as the device it resolves to
    import hashlib

    assert hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:10] == config_hash(base)


def test_bench_and_algorithms_commands_take_a_module(tmp_path, monkeypatch, clean_registry, capsys):
    from g2po_bench.cli import main

    (tmp_path / "mod_est_cli.py").write_text(ESTIMATOR_MODULE.format(name="mod_est_cli", label="CLI"))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["algorithms", "--module", "mod_est_cli"]) == 0
    assert "mod_est_cli: test" in capsys.readouterr().out
    assert main(["bench", "advantages", "--module", "mod_est_cli", "--estimators", "mod_est_cli",
                 "--sizes", "500", "--repeats", "1"]) == 0
    assert "mod_est_cli" in capsys.readouterr().out
    assert main(["algorithms", "--module", "no_such_module_here"]) == 2


def _build_wheel(root: Path) -> Path:
    """A pure-Python wheel of the package ``g2po_test_estimator`` (one estimator module) with the
    entry point ``g2po.estimators: test_plugin = g2po_test_estimator.plugin``, built with
    zipfile (what setuptools would write, without needing build tools here)."""
    import base64
    import hashlib
    import zipfile

    dist = "g2po_test_estimator-0.1.0.dist-info"
    files = {
        "g2po_test_estimator/__init__.py": "",
        "g2po_test_estimator/plugin.py": ESTIMATOR_MODULE.format(name="test_plugin", label="Plugin"),
        f"{dist}/METADATA": "Metadata-Version: 2.1\nName: g2po-test-estimator\nVersion: 0.1.0\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}/entry_points.txt": "[g2po.estimators]\ntest_plugin = g2po_test_estimator.plugin\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    wheel = root / "g2po_test_estimator-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return wheel


@pytest.mark.slow
def test_an_installed_package_registers_through_its_entry_point(tmp_path):
    """A package built and installed beside the suite (pip, into a target folder on
    PYTHONPATH): `g2po algorithms` lists its estimator and `g2po train` trains with it."""
    wheel = _build_wheel(tmp_path)
    site = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                          "--target", str(site), str(wheel)], capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr
    assert (site / "g2po_test_estimator-0.1.0.dist-info" / "entry_points.txt").is_file()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    listed = subprocess.run([sys.executable, "-m", "g2po_bench.cli", "algorithms"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    assert "test_plugin: test: R - group mean" in listed.stdout
    assert "module g2po_test_estimator.plugin" in listed.stdout
    trained = subprocess.run(
        [sys.executable, "-m", "g2po_bench.cli", "train", *TOY, "algorithm.name=test_plugin",
         f"output_dir={tmp_path / 'runs'}", f"train.warm_start_cache={tmp_path / 'warm_start'}"],
        env=env, capture_output=True, text=True, timeout=900)
    assert trained.returncode == 0, trained.stderr[-2000:]
    (run,) = (tmp_path / "runs").iterdir()
    assert run.name.startswith("toy-test_plugin-s0-")
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["iteration"] == 1
    # without the package on the path the estimator is unknown: a config error, exit code 2
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    missing = subprocess.run([sys.executable, "-m", "g2po_bench.cli", "config", "algorithm.name=test_plugin"],
                             env=bare, capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "test_plugin" in missing.stderr


def test_a_broken_entry_point_is_reported_not_raised(monkeypatch, clean_registry):
    from importlib import metadata

    class Broken:
        name, value = "broken", "no_such_package.module"

        def load(self):
            raise ImportError("no module named no_such_package")

    monkeypatch.setattr(registry.discovery, "_DISCOVERED", False)
    monkeypatch.setattr(registry.discovery, "_LOAD_ERRORS", {})
    monkeypatch.setattr(metadata, "entry_points", lambda group=None: [Broken()] if group == registry.ENTRY_POINT_GROUP else [])
    with pytest.warns(RuntimeWarning, match="entry point broken = no_such_package.module failed to load"):
        registry.discover_estimators()
    assert "g2po" in registry.available_estimators()
    assert "not loaded: entry point broken" in registry.describe_estimators()
    # asking for the estimator the package would have registered names the failed load
    with pytest.raises(ValueError, match=r"unknown advantage estimator 'broken_est'.*; entry point broken = "
                                         r"no_such_package.module failed to load \(ImportError: no module named"):
        registry.estimator_spec("broken_est")
    from g2po_bench.core.config import ConfigError
    from g2po_bench.runconfig import load_config

    with pytest.raises(ConfigError, match=r"algorithm.name.*'broken_est'.*entry point broken = no_such_package"):
        load_config(overrides=["algorithm.name=broken_est"])


@pytest.mark.parametrize("name", ["crbc", "hgpo", "graphgpo", "empg"])
def test_the_2026_estimators_train_one_toy_iteration(tmp_path_factory, name):
    """The trainer supplies each one's inputs (CRBC's action texts, EMPG's sampler entropies)
    and records them in the step table where they have a column."""
    from g2po_bench.core.steptable import read_step_table
    from g2po_bench.train import run_train

    shared = tmp_path_factory.getbasetemp() / "toy_2026"
    run = run_train(_toy_config(shared, f"algorithm.name={name}", f"output_dir={shared / name}"))
    metrics = [json.loads(line) for line in run.metrics_path.read_text().splitlines()]
    assert metrics[-1]["iteration"] == 1 and np.isfinite(metrics[-1]["loss/pg_loss"])
    table = read_step_table(run.root, 1)
    if name == "empg":
        assert "entropy" in table.frame.columns and (table.frame["entropy"] > 0).all()
        assert metrics[-1]["adv/entropy_max"] > 0
    if name == "graphgpo":  # the observation each step led to, the last one included
        assert table.frame["next_state_key"].dtype == np.int64
        inner = table.frame["traj_id"].to_numpy()[1:] == table.frame["traj_id"].to_numpy()[:-1]
        np.testing.assert_array_equal(table.frame["next_state_key"].to_numpy()[:-1][inner],
                                      table.frame["state_key"].to_numpy()[1:][inner])
