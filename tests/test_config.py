"""Config loading: defaults, YAML + overrides, and errors that name the key before any work."""

import pytest

from g2po_bench.core.config import ConfigError, config_hash, resolve_run_id
from g2po_bench.runconfig import load_config


def test_defaults_are_the_cpu_main_job():
    cfg = load_config()
    assert cfg.env.name == "alfworld" and cfg.env.data_dir is None
    assert cfg.algorithm.name == "g2po" and cfg.algorithm.mode == "mean_std_norm"
    assert cfg.backend == "local" and cfg.model.path is None


def test_yaml_then_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("algorithm:\n  name: gigpo\ntrain:\n  iterations: 3\n")
    cfg = load_config(f, ["train.iterations=5", "seed=7"])
    assert cfg.algorithm.name == "gigpo" and cfg.train.iterations == 5 and cfg.seed == 7


@pytest.mark.parametrize(
    "override, needle",
    [
        (["train.lr=abc"], "train.lr"),
        (["nosuch.key=1"], "nosuch"),
        (["env.max_steps=0"], "env.max_steps"),
        (["algorithm.name=nope"], "algorithm.name"),
        (["algorithm.mode=zscore"], "algorithm.mode"),
        (["env.task_types=[pick_nothing]"], "env.task_types"),
        (["iterations"], "key=value"),
        (["algorithm.options={no_such_option: 1}"], "algorithm.options"),
    ],
)
def test_bad_config_names_the_key(override, needle):
    with pytest.raises(ConfigError) as err:
        load_config(None, override)
    assert needle in str(err.value)


def test_preset_needs_model_path():
    with pytest.raises(ConfigError, match="model.path"):
        load_config(preset="alfworld_1.5b")
    with pytest.raises(ConfigError, match="unknown preset"):
        load_config(preset="nope")


def test_run_id_is_a_function_of_the_config():
    a = load_config(None, ["seed=1"])
    b = load_config(None, ["seed=1", "progress=false", "output_dir=/tmp/x"])
    c = load_config(None, ["seed=2"])
    assert config_hash(a) == config_hash(b) != config_hash(c)
    assert resolve_run_id(a).startswith("alfworld-g2po-s1-")
    assert resolve_run_id(load_config(None, ["run_id=mine"])) == "mine"


def test_state_key_defaults_to_each_estimators_reference_key():
    """docs/design-notes.md "State keys": GiGPO groups by the raw observation, G2PO by its
    reference key; env.state_key=auto (the default) resolves per estimator and the resolved
    config records it; an explicit key overrides (an ablation may cross them)."""
    from g2po_bench.core.config import EnvConfig, config_to_yaml

    assert EnvConfig().state_key == "auto"
    assert load_config(overrides=["algorithm.name=gigpo"]).env.state_key == "raw"
    for name in ("g2po", "grpo", "rloo", "ppo"):
        assert load_config(overrides=[f"algorithm.name={name}"]).env.state_key == "reference", name
    crossed = load_config(overrides=["algorithm.name=gigpo", "env.state_key=reference"])
    assert crossed.env.state_key == "reference"
    assert load_config(overrides=["algorithm.name=g2po", "env.state_key=raw"]).env.state_key == "raw"
    assert "state_key: raw" in config_to_yaml(load_config(overrides=["algorithm.name=gigpo"]))
    with pytest.raises(ConfigError, match="env.state_key"):
        load_config(overrides=["env.state_key=exact"])


def test_string_overrides_keep_their_text_even_when_yaml_reads_a_boolean():
    """``run_id=off`` used to make the run folder ``False`` (YAML reads off/on/yes/no as booleans)."""
    cfg = load_config(None, ["run_id=off", "output_dir=yes", "model.path=null", "resume=off", "seed=3",
                             "env.prompt=auto"])
    assert (cfg.run_id, cfg.output_dir, cfg.model.path) == ("off", "yes", None)
    assert cfg.resume is False and cfg.seed == 3  # non-string fields still parse as before
    assert load_config(None, ["run_id=123"]).run_id == "123"


def test_keys_added_at_their_default_keep_the_committed_run_ids():
    """config.HASH_NEUTRAL_DEFAULTS: a key added after runs were committed does not enter the hash
    while it holds its default, so each committed cpu_proxy config.yaml still hashes to its folder's
    name (tests/test_sweep_spec.py checks that the spec plans them); set to another value, each
    key added since does enter the hash."""
    from pathlib import Path

    from g2po_bench.core.config import HASH_NEUTRAL_DEFAULTS

    root = Path(__file__).resolve().parents[1] / "results" / "proxy" / "sweep" / "runs"
    committed = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert "alfworld-g2po-s0-1acd082ae3" in committed and len(committed) == 35
    for name in committed:
        cfg = load_config(str(root / name / "config.yaml"))
        cfg.run_id = None
        assert resolve_run_id(cfg) == name
    neutral = ["train.mini_batch_split=fixed"]  # the cut whose value stays out of the hash
    base = load_config(None, neutral)
    other = {"env.allow_incomplete_eval_split": "true", "train.mini_batch_split": "balanced",
             "env.webshop_expert": "instruction", "train.sft_micro_batch_size": "4", "model.item_tokens": "true",
             "train.sft_first_step_tasks": "100"}
    assert set(other) <= set(HASH_NEUTRAL_DEFAULTS)
    for key, value in other.items():  # one key away from the neutral config
        assert config_hash(load_config(None, [*neutral, f"{key}={value}"])) != config_hash(base), key


def test_a_list_of_strings_is_overridden_as_a_list():
    """``key=[a,b]`` for a ``list[str]`` field is a list (it used to be kept as the text "[a,b]",
    which the schema rejected); a plain ``str`` field still keeps YAML words as text."""
    cfg = load_config(None, ["env.task_types=[pick_and_place_simple,look_at_obj_in_light]",
                             "logging.tags=[a,b]", "logging.group=off"])
    assert cfg.env.task_types == ["pick_and_place_simple", "look_at_obj_in_light"]
    assert cfg.logging.tags == ["a", "b"] and cfg.logging.group == "off"


@pytest.mark.parametrize("key, value", [("mode", "mean_norm"), ("gamma", "0.9"), ("step_weight", "0.5"),
                                        ("invalid_penalty", "0.2"), ("success_reward", "5.0")])
def test_a_common_option_has_one_spelling(key, value, capsys):
    """algorithm.options.mode=mean_norm used to be accepted and to override algorithm.mode silently, while
    config.yaml still said mean_std_norm: now the other spelling is refused at load, naming the key to use."""
    from g2po_bench.cli import main

    with pytest.raises(ConfigError) as err:
        load_config(None, [f"algorithm.options.{key}={value}"])
    assert f"algorithm.{key}={value}" in str(err.value) and f"algorithm.options.{key}" in str(err.value)
    assert main(["config", f"algorithm.options.{key}={value}"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1 and "Traceback" not in out.err
    cfg = load_config(None, [f"algorithm.{key}={value}"])  # the one spelling: recorded as it ran
    assert str(getattr(cfg.algorithm, key)) == value and cfg.algorithm.options == {}


def test_section_shorthands_work_for_training_configs(capsys):
    """``g2po train env=webshop`` failed with "Merge error: str is not a subclass of EnvConfig", although
    the baselines' docs teach ``env=NAME``: the shorthands are now the config's own, on every command."""
    from g2po_bench.cli import main

    cfg = load_config(None, ["env=toy", "algorithm=grpo"])
    assert (cfg.env.name, cfg.algorithm.name) == ("toy", "grpo")
    assert load_config(None, ["env={name: toy}"]).env.name == "toy"  # a mapping is still a mapping
    with pytest.raises(ConfigError, match="model.path"):
        load_config(None, ["model=/no/such/model"])
    assert main(["config", "env=toy"]) == 0
    assert "  name: toy" in capsys.readouterr().out


def test_device_auto_names_the_run_of_the_device_it_resolves_to(monkeypatch):
    """``model.device`` auto and cpu hashed to different run ids, so a plain ``g2po train`` never matched
    the committed cpu_proxy run it is identical to (recorded with device cpu). ``auto`` now enters the hash
    as the device it resolves to: cpu on a CPU machine (the committed G2PO seed-0 run), cuda on a GPU one."""
    import torch

    from g2po_bench.core.config import resolve_device

    cfg = load_config()
    assert cfg.model.device == "auto"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    assert resolve_run_id(cfg) == "alfworld-g2po-s0-1acd082ae3"  # results/proxy/sweep/runs
    assert config_hash(cfg) == config_hash(load_config(None, ["model.device=cpu"]))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda"
    assert config_hash(cfg) == config_hash(load_config(None, ["model.device=cuda"])) != config_hash(
        load_config(None, ["model.device=cpu"]))
    assert config_hash(cfg, device="cpu") == config_hash(load_config(None, ["model.device=cpu"]))


def test_a_model_folder_under_a_preset_with_item_tokens_says_what_to_add(tmp_path):
    """--preset webshop_cpu sets model.item_tokens (the tiny model's tokenizer); a model folder keeps its
    own tokenizer, so model.path without model.item_tokens=false is refused, naming the fix."""
    (tmp_path / "model").mkdir()
    with pytest.raises(ConfigError, match=r"'model.item_tokens'.*add model.item_tokens=false"):
        load_config(None, [f"env.data_dir={tmp_path}", f"model.path={tmp_path / 'model'}"], preset="webshop_cpu")
    cfg = load_config(None, [f"env.data_dir={tmp_path}", f"model.path={tmp_path / 'model'}", "model.item_tokens=false"],
                      preset="webshop_cpu")
    assert cfg.model.path == str(tmp_path / "model") and cfg.model.item_tokens is False
