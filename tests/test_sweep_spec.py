"""Sweep specs: expansion, validation before any work, variables, resources, the plan."""

from __future__ import annotations

import pytest
import yaml
from sweep_support import run_cli, toy_spec

from g2po_bench.sweeps.spec import SPEC_DIR, SpecError, expand, load_spec

PAPER_SPECS = {  # spec -> number of runs
    "main_table": 72,
    "g2po_ablation_ladder": 24,
    "normalization_ablation": 36,
    "aggregation_ablation": 12,
    "w_sweep": 21,
}


@pytest.fixture(scope="module")
def paper(tmp_path_factory):
    """Each paper spec expanded once, with model and data folders that exist (validation
    checks that they do): ``(root, {spec name: (spec, runs)})``."""
    root = tmp_path_factory.mktemp("paper")
    for name in ("Qwen2.5-1.5B-Instruct", "Qwen2.5-7B-Instruct", "alfworld", "webshop"):
        (root / name).mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("G2PO_MODEL_1_5B", str(root / "Qwen2.5-1.5B-Instruct"))
        mp.setenv("G2PO_MODEL_7B", str(root / "Qwen2.5-7B-Instruct"))
        mp.setenv("G2PO_ALFWORLD_DATA", str(root / "alfworld"))
        mp.setenv("G2PO_WEBSHOP_DATA", str(root / "webshop"))
        mp.setenv("G2PO_SWEEP_ROOT", str(root / "sweeps"))
        expanded = {}
        for name in PAPER_SPECS:
            spec = load_spec(name)
            expanded[name] = (spec, expand(spec))
    return root, expanded


def _cfg(run):
    return yaml.safe_load(run.config_yaml)


@pytest.mark.parametrize("name, count", sorted(PAPER_SPECS.items()))
def test_paper_specs_expand_and_validate(paper, name, count):
    root, expanded = paper
    spec, runs = expanded[name]
    assert len(runs) == count
    assert len({r.run_id for r in runs}) == count  # distinct configs
    assert spec.output_dir == root / "sweeps" / name
    for r in runs:
        cfg = _cfg(r)
        assert cfg["model"]["path"].startswith(str(root))
        assert cfg["backend"] == "openrlhf" and cfg["progress"] is False
        assert r.run_id.startswith(f"{cfg['env']['name']}-{cfg['algorithm']['name']}-s{r.seed}-")


def test_main_table_rows(paper):
    runs = paper[1]["main_table"][1]
    rows = {(_cfg(r)["env"]["name"], r.labels["setting"].split("_")[1], r.labels["method"]) for r in runs}
    assert len(rows) == 2 * 2 * 6
    modes = {r.labels["method"]: _cfg(r)["algorithm"] for r in runs if r.labels["setting"] == "webshop_7b"}
    assert modes["gigpo_std"]["name"] == modes["gigpo_nostd"]["name"] == "gigpo"
    assert modes["gigpo_std"]["mode"] == "mean_std_norm" and modes["gigpo_nostd"]["mode"] == "mean_norm"
    # each estimator runs with its reference state key: GiGPO the raw observation, G2PO its key
    keys = {(r.labels["method"], _cfg(r)["env"]["state_key"]) for r in runs}
    assert {k for m, k in keys if m.startswith("gigpo")} == {"raw"}
    assert {k for m, k in keys if m == "g2po"} == {"reference"}
    big = [r for r in runs if r.labels["setting"].endswith("7b")]
    assert all(r.resources.gpus == 4 and r.resources.time == 2880 for r in big)
    assert sorted({r.seed for r in runs}) == [0, 1, 2]


def test_ablation_options_come_from_the_registry(paper):
    from g2po_bench.algorithms.registry import estimator_spec

    expanded = paper[1]
    choices = estimator_spec("g2po").choices["components"]
    ladder = expanded["g2po_ablation_ladder"][1]
    assert {_cfg(r)["algorithm"]["options"]["components"] for r in ladder} == set(choices)
    w = expanded["w_sweep"][1]
    assert sorted({_cfg(r)["algorithm"]["step_weight"] for r in w}) == pytest.approx(
        [0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2])
    agg = expanded["aggregation_ablation"][1]
    assert {_cfg(r)["algorithm"]["options"]["aggregation"] for r in agg} == {True, False}
    norm = expanded["normalization_ablation"][1]
    assert {(_cfg(r)["algorithm"]["name"], _cfg(r)["algorithm"]["mode"]) for r in norm} == {
        (a, m) for a in ("grpo", "gigpo", "g2po") for m in ("mean_std_norm", "mean_norm")}
    # env.state_key=auto (the presets) resolves per estimator and the run's config records it
    assert {(_cfg(r)["algorithm"]["name"], _cfg(r)["env"]["state_key"]) for r in norm} == {
        ("grpo", "reference"), ("gigpo", "raw"), ("g2po", "reference")}


# the committed comparison (results/proxy/sweep/runs): method folder name -> seeds
COMMITTED_CPU_PROXY = {m: range(5) for m in ("grpo", "gigpo", "g2po", "crbc", "hgpo", "graphgpo", "empg")}


def test_cpu_proxy_spec_still_plans_the_committed_runs():
    """Run ids are config hashes: a refactor or a new config key that changed them would orphan the
    committed comparison. Every run folder of results/proxy/sweep/runs (5 seeds of each committed
    method, on the current default, ``train.mini_batch_split=balanced``) is planned by the spec as
    it is, and each committed config.yaml hashes to its folder's name."""
    from pathlib import Path

    from g2po_bench.core.config import resolve_run_id
    from g2po_bench.runconfig import load_config

    runs = Path(__file__).resolve().parents[1] / "results" / "proxy" / "sweep" / "runs"
    ids = sorted(p.name for p in runs.iterdir() if p.is_dir())
    present = sorted((i.split("-")[1], int(i.split("-")[2][1:])) for i in ids)
    assert present == sorted((m, s) for m, seeds in COMMITTED_CPU_PROXY.items() for s in seeds)
    planned = {r.run_id for r in expand(load_spec("cpu_proxy"))}
    assert set(ids) == planned, sorted(set(ids) ^ planned)
    for run_id in ids:
        cfg = load_config(runs / run_id / "config.yaml")
        assert cfg.train.mini_batch_split == "balanced"
        cfg.run_id = None  # derive it from the config again
        assert resolve_run_id(cfg) == run_id


def test_smoke_spec_runs_anywhere():
    runs = expand(load_spec("smoke"))
    assert len(runs) == 4
    assert {(r.labels["algorithm.name"], r.seed) for r in runs} == {(a, s) for a in ("grpo", "g2po") for s in (0, 1)}
    assert all(r.resources.gpus == 0 for r in runs)


CPU_PROXY_STATE_KEYS = {"grpo": "reference", "gigpo": "raw", "g2po": "reference", "crbc": "reference",
                        "hgpo": "raw", "graphgpo": "raw", "empg": "reference"}


def test_cpu_proxy_spec_is_the_default_with_seven_estimators_and_five_seeds():
    from g2po_bench.core.config import config_to_dict
    from g2po_bench.runconfig import load_config

    runs = expand(load_spec("cpu_proxy"))
    assert len(runs) == 35
    got = {(_cfg(r)["algorithm"]["name"], _cfg(r)["algorithm"]["mode"], _cfg(r)["env"]["state_key"], r.seed)
           for r in runs}
    assert got == {(name, "mean_std_norm", key, s) for name, key in CPU_PROXY_STATE_KEYS.items() for s in range(5)}
    # apart from the estimator, its state key, the seed and the device, every run is the embedded default
    default = config_to_dict(load_config())
    for r in runs:
        cfg = _cfg(r)
        for section in ("train", "eval", "model"):
            for key, value in default[section].items():
                if (section, key) != ("model", "device"):
                    assert cfg[section][key] == value, (section, key)
        assert cfg["env"]["prompt"] == "compact" and cfg["env"]["max_steps"] == default["env"]["max_steps"]
        assert cfg["algorithm"]["options"] == {} and cfg["algorithm"]["module"] is None
    assert all(r.resources.gpus == 0 for r in runs)


def test_cpu_ablation_reuses_the_committed_main_cells_and_ablates_one_axis_each():
    """The ablation's g2po and grpo cells are the cpu_proxy runs, id for id (the committed
    comparison's records serve both); each ablated cell changes one setting of its main cell."""
    ablation = expand(load_spec("cpu_ablation"))
    proxy = {r.run_id for r in expand(load_spec("cpu_proxy"))}
    main = {r.run_id for r in ablation if r.labels["method"] in ("g2po", "grpo")}
    assert len(main) == 10 and main <= proxy
    new = [r for r in ablation if r.run_id not in proxy]
    assert len(new) == 15 and {r.labels["method"] for r in new} == {"g2po_no_aggregation", "g2po_mean_norm",
                                                                     "grpo_mean_norm"}
    by_cell = {(r.labels["method"], r.seed): _cfg(r) for r in ablation}
    for method, main_cell, path, value in (("g2po_no_aggregation", "g2po", ("algorithm", "options"),
                                            {"aggregation": False}),
                                           ("g2po_mean_norm", "g2po", ("algorithm", "mode"), "mean_norm"),
                                           ("grpo_mean_norm", "grpo", ("algorithm", "mode"), "mean_norm")):
        for seed in range(5):
            cfg, ref = by_cell[(method, seed)], by_cell[(main_cell, seed)]
            assert cfg[path[0]][path[1]] == value
            cfg[path[0]][path[1]] = ref[path[0]][path[1]]
            assert cfg == ref, method


WEBSHOP_CPU_ESTIMATORS = {"grpo": ("mean_norm", "reference"), "gigpo": ("mean_std_norm", "raw"),
                          "g2po": ("mean_norm", "reference"), "crbc": ("mean_norm", "reference"),
                          "hgpo": ("mean_norm", "raw"), "graphgpo": ("mean_norm", "raw"),
                          "empg": ("mean_norm", "reference")}


def test_webshop_cpu_spec_is_the_preset_with_seven_estimators_and_three_seeds(tmp_path, monkeypatch):
    """The WebShop comparison: the cpu_proxy's seven estimators x 3 seeds on ``--preset
    webshop_cpu``, each with its WebShop mode (GiGPO w/ std: mean_std_norm; the others the
    preset's mean_norm) and its own state key; apart from those, the seed, the device and the
    data folder (``G2PO_WEBSHOP_DATA``), every run is the preset."""
    from g2po_bench.core.config import config_to_dict
    from g2po_bench.runconfig import load_config

    monkeypatch.setenv("G2PO_WEBSHOP_DATA", str(tmp_path))
    runs = expand(load_spec("webshop_cpu"))
    assert len(runs) == 21 and len({r.run_id for r in runs}) == 21
    got = {(_cfg(r)["algorithm"]["name"], _cfg(r)["algorithm"]["mode"], _cfg(r)["env"]["state_key"], r.seed)
           for r in runs}
    assert got == {(name, mode, key, s) for name, (mode, key) in WEBSHOP_CPU_ESTIMATORS.items() for s in range(3)}
    preset = config_to_dict(load_config(None, [f"env.data_dir={tmp_path}"], preset="webshop_cpu"))
    for r in runs:
        cfg = _cfg(r)
        assert r.preset == "webshop_cpu" and cfg["env"]["data_dir"] == str(tmp_path)
        for section in ("train", "eval", "model"):
            for key, value in preset[section].items():
                if (section, key) != ("model", "device"):
                    assert cfg[section][key] == value, (section, key)
        assert {k: v for k, v in cfg["env"].items() if k != "state_key"} == \
            {k: v for k, v in preset["env"].items() if k != "state_key"}
        assert cfg["algorithm"]["options"] == {} and cfg["model"]["device"] == "cpu"
    assert all(r.resources.gpus == 0 and r.resources.cpus == 1 for r in runs)


def test_every_spec_in_the_folder_is_covered():
    assert {p.stem for p in SPEC_DIR.glob("*.yaml")} == set(PAPER_SPECS) | {"smoke", "cpu_proxy", "cpu_ablation",
                                                                          "credit_trained", "credit_warm_start",
                                                                          "webshop_cpu"}


def test_missing_variable_names_the_environment_variable(monkeypatch):
    for v in ("G2PO_MODEL_1_5B", "G2PO_MODEL_7B", "G2PO_ALFWORLD_DATA", "G2PO_WEBSHOP_DATA"):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(SpecError, match="G2PO_MODEL_1_5B"):
        expand(load_spec("main_table"))


def test_var_and_where_select_a_subset(tmp_path, monkeypatch):
    for v in ("G2PO_MODEL_1_5B", "G2PO_MODEL_7B", "G2PO_WEBSHOP_DATA"):
        monkeypatch.delenv(v, raising=False)
    (tmp_path / "Qwen2.5-1.5B-Instruct").mkdir()
    (tmp_path / "alf").mkdir()
    spec = load_spec("main_table", {"model_1_5b": str(tmp_path / "Qwen2.5-1.5B-Instruct"),
                                    "alfworld_data": str(tmp_path / "alf")})
    # the 7B / WebShop variables are unset: only the selected rows are resolved
    runs = expand(spec, where=["setting=alfworld_1.5b", "method=g2po,grpo", "seed=0"])
    assert [r.labels["method"] for r in runs] == ["grpo", "g2po"]
    with pytest.raises(SpecError, match="no such label"):
        expand(spec, where=["setting=alfworld_3b"])
    with pytest.raises(SpecError, match="no such variable"):
        load_spec("main_table", {"model_3b": "/x"})


@pytest.mark.parametrize("change, needle", [
    ({"grid": {"algorithm.name": ["g2po", "nope"]}}, "algorithm.name"),
    ({"grid": {"algorithm.options.components": ["ep", "bogus"]}}, "algorithm.options"),
    ({"grid": {"trian.iterations": [1, 2]}}, "trian"),
    ({"grid": {"method": {"a": {"sett": {"seed": 1}}}}}, "unknown key"),
    ({"grid": {"method": {"a": {"set": {"seed": 1}}}}}, "set by the launcher"),
    ({"resources": {"gpus": 2, "cpus": 1}}, "backend=openrlhf"),
    ({"resources": {"gpu": 1}}, "unknown resource key"),
    ({"seeds": [0, 0]}, "repeat"),
    ({"typo_key": 1}, "unknown key"),
])
def test_broken_spec_fails_before_any_work(tmp_path, change, needle):
    spec = toy_spec(tmp_path / "s.yaml", "broken", extra=change)
    out = tmp_path / "out"
    with pytest.raises(SpecError) as err:
        expand(load_spec(spec, output_dir=out))
    assert needle in str(err.value)
    assert not out.exists()


def test_same_config_twice_is_one_run(tmp_path):
    # algorithm.step_weight=1.0 is the default: both grid points resolve to the same config
    spec = toy_spec(tmp_path / "s.yaml", "dup", extra={"grid": {"algorithm.step_weight": [1.0, 1]}})
    runs = expand(load_spec(spec))
    assert len(runs) == 1 and len(runs[0].aliases) == 1


def test_variant_blocks_presets_and_resources(tmp_path):
    spec = toy_spec(tmp_path / "s.yaml", "variants", extra={
        "vars": {"iters": 3},
        "grid": {"method": {"small": {"set": {"algorithm.name": "grpo", "train.iterations": "${vars.iters}"},
                                      "resources": {"mem_gb": 3}},
                            "big": {"set": ["algorithm.name=g2po", "train.iterations=4"],
                                    "resources": {"cpus": 2, "time": 90, "partition": "cpu"}}}},
        "runs": [{"label": "a", "set": {"algorithm.gamma": 0.9}}, {"label": "b"}],
    })
    runs = expand(load_spec(spec))
    assert len(runs) == 4
    by = {(r.labels["method"], r.labels["run"]): r for r in runs}
    assert yaml.safe_load(by["small", "a"].config_yaml)["train"]["iterations"] == 3
    assert yaml.safe_load(by["small", "a"].config_yaml)["algorithm"]["gamma"] == 0.9
    assert by["big", "b"].resources.cpus == 2 and by["big", "b"].resources.partition == "cpu"
    assert by["small", "b"].resources.mem_gb == 3
    assert by["big", "b"].resources.key() != by["small", "b"].resources.key()
    assert "g2po train" in by["big", "b"].command() and "train.iterations=4" in by["big", "b"].command()


def test_dry_run_prints_the_plan_and_submits_nothing(tmp_path):
    out = tmp_path / "out"
    proc = run_cli(["launch", "smoke", "--cluster", "slurm", "--dry-run", "--output-dir", str(out)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("submit: new") == 4
    assert "1 job array of 4 task(s), at most 2 running at a time" in proc.stdout
    assert str(out / "runs") in proc.stdout
    assert not out.exists()
    bad = run_cli(["launch", str(toy_spec(tmp_path / "b.yaml", "b", extra={"grid": {"algorithm.name": ["x"]}})),
                   "--cluster", "local", "--output-dir", str(out)], cwd=tmp_path)
    assert bad.returncode == 2 and "algorithm.name" in bad.stderr and not out.exists()


def test_a_dry_run_plans_unset_variables_with_placeholders(tmp_path, monkeypatch):
    """Issue 51: `g2po sweep launch main_table --dry-run`, documented as printing the plan, exited 2 on unset
    environment variables. The dry run plans them as placeholders (runs validated in all but their folders,
    run ids ending in "?"); a launch still refuses them, naming the variables."""
    for v in ("G2PO_MODEL_1_5B", "G2PO_MODEL_7B", "G2PO_ALFWORLD_DATA", "G2PO_WEBSHOP_DATA"):
        monkeypatch.delenv(v, raising=False)
    spec = load_spec("main_table", output_dir=tmp_path / "main_table")
    runs = expand(spec, placeholders=True)
    assert len(runs) == 72 == len({tuple(sorted(r.labels.items())) for r in runs})
    first = runs[0]
    assert first.run_id == "alfworld-ppo-s0-?" and first.needs == ["$G2PO_ALFWORLD_DATA", "$G2PO_MODEL_1_5B"]
    cfg = yaml.safe_load(first.config_yaml)
    assert cfg["model"]["path"] == "<unset:$G2PO_MODEL_1_5B>" and cfg["env"]["max_steps"] == 50
    assert cfg["env"]["prompt"] == "reference"  # resolved as for a real model folder, not the tiny model's
    with pytest.raises(SpecError, match="G2PO_MODEL_1_5B"):
        expand(spec)  # the spec itself keeps its variables: a launch needs them
    proc = run_cli(["launch", "main_table", "--dry-run", "--cluster", "local", "--output-dir", str(tmp_path / "mt")],
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("submit: new (needs $G2PO_") == 72 and "72 run(s): 72 to submit" in proc.stdout
    assert "72 run(s) use unset spec variables ($G2PO_ALFWORLD_DATA, $G2PO_MODEL_1_5B, $G2PO_MODEL_7B, " \
           "$G2PO_WEBSHOP_DATA)" in proc.stderr
    assert not (tmp_path / "mt").exists()
    bad = run_cli(["launch", "main_table", "--cluster", "local", "--output-dir", str(tmp_path / "mt")], cwd=tmp_path)
    assert bad.returncode == 2 and "G2PO_MODEL_1_5B" in bad.stderr and not (tmp_path / "mt").exists()


def test_slurm_without_its_commands_is_one_line_before_anything_is_submitted(tmp_path):
    """Issue 51: `g2po sweep launch smoke --cluster slurm` on a machine without Slurm passed its dry run, then
    printed a 31-line Submitit traceback ending 'Could not detect "srun"'. The dry run now says a launch
    would fail, and the launch fails in one line (exit 2) with nothing recorded."""
    bare = tmp_path / "bin"  # a PATH without sbatch and srun (CI installs a Slurm; the CLI runs by sys.executable)
    bare.mkdir()
    env = {"PATH": str(bare)}
    out = tmp_path / "out"
    dry = run_cli(["launch", "smoke", "--cluster", "slurm", "--dry-run", "--output-dir", str(out)], cwd=tmp_path, env=env)
    assert dry.returncode == 0 and "note: a launch would fail here: --cluster slurm: sbatch and srun not found" in dry.stderr
    proc = run_cli(["launch", "smoke", "--cluster", "slurm", "--output-dir", str(out)], cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "sweep launch failed: --cluster slurm: sbatch and srun not found on PATH" in proc.stderr
    assert "--cluster local" in proc.stderr and not (out / "sweep.json").exists()


def test_a_jobs_device_auto_is_hashed_as_the_device_its_resources_give(tmp_path, monkeypatch):
    """model.device=auto names the run of the device the job gets (cpu without GPUs, cuda with), whatever
    the launching machine has: a spec with auto plans the same run ids as one with the device written."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a login node with a GPU
    ids = {}
    for device in ("auto", "cpu"):
        spec = load_spec(toy_spec(tmp_path / f"{device}.yaml", device, algorithms=("grpo",),
                                  extra={"grid": {"algorithm.name": ["grpo"], "model.device": [device]}}))
        ids[device] = [r.run_id for r in expand(spec)]
    assert ids["auto"] == ids["cpu"]


# ------------------------------------------------------------------ credit studies as shards
def _credit_spec(tmp_path, **credit):
    block = {"groups": 8, "shards": 3, "args": ["env.name=toy", "--policy", "toy-scripted", "--batch-groups", "2"]}
    block.update(credit)
    path = tmp_path / "credit_toy.yaml"
    path.write_text(yaml.safe_dump({"kind": "credit", "credit": block, "resources": {"cpus": 1, "time": 10}}))
    return path


def test_a_credit_spec_expands_into_its_shards(tmp_path):
    spec = load_spec(_credit_spec(tmp_path))
    runs = expand(spec)
    assert spec.kind == "credit" and len(runs) == 3
    assert [r.argv[-2:] for r in runs] == [["--shard", "1/3"], ["--shard", "2/3"], ["--shard", "3/3"]]
    assert runs[0].argv[:2] == ["--groups", "8"] and "--policy" in runs[0].argv
    assert runs[0].run_id.startswith("credit-") and runs[0].run_id.endswith("-01-of-03")
    assert len({r.run_id.rsplit("-", 3)[0] for r in runs}) == 1  # one study
    assert runs[1].command().startswith("g2po credit --groups 8 env.name=toy")
    assert [r.run_id for r in expand(spec, ["shard=2"])] == [runs[1].run_id]
    other = expand(load_spec(_credit_spec(tmp_path, groups=10)))
    assert other[0].run_id != runs[0].run_id  # another study, other run ids


def _minimal_checkpoint(folder) -> None:
    """The smallest folder :func:`g2po_bench.core.checkpoints.verify_checkpoint` takes as intact."""
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text('{"iteration": 54}')


def test_the_committed_credit_specs_shard_208_groups_into_13_blocks(monkeypatch, tmp_path):
    monkeypatch.delenv("G2PO_CREDIT_RUN", raising=False)
    monkeypatch.chdir(tmp_path)  # the default run folder is relative to where the launch runs
    default_run = "results/runs/alfworld-g2po-s0-ac5faa397e"
    with pytest.raises(SpecError, match=f"credit.args --run {default_run}: the folder does not exist .*G2PO_CREDIT_RUN"):
        expand(load_spec("credit_trained"))  # a fresh clone: no trained run, no shard submitted to fail
    (tmp_path / default_run).mkdir(parents=True)
    with pytest.raises(SpecError, match="is no run folder"):
        expand(load_spec("credit_trained"))
    (tmp_path / default_run / "config.yaml").write_text("env:\n  name: alfworld\n")
    with pytest.raises(SpecError, match="has no intact checkpoint yet"):
        expand(load_spec("credit_trained"))  # g2po credit would refuse it in every shard
    _minimal_checkpoint(tmp_path / default_run / "checkpoints" / "latest")
    for name, policy in (("credit_trained", ["--run", default_run]), ("credit_warm_start", [])):
        runs = expand(load_spec(name))
        assert len(runs) == 13 and runs[12].argv[-2:] == ["--shard", "13/13"]
        assert runs[0].argv[:2 + len(policy)] == ["--groups", "208", *policy]
    (tmp_path / "g2po").mkdir()
    (tmp_path / "g2po" / "config.yaml").write_text("")
    _minimal_checkpoint(tmp_path / "g2po" / "checkpoints" / "latest")
    monkeypatch.setenv("G2PO_CREDIT_RUN", str(tmp_path / "g2po"))
    assert expand(load_spec("credit_trained"))[0].argv[2:4] == ["--run", str(tmp_path / "g2po")]


@pytest.mark.parametrize("credit, message", [
    ({"args": ["--out", "x"]}, "may not set --out"),
    ({"args": ["--groups=4"]}, "may not set --groups"),
    ({"shards": 0}, "credit.shards must be an integer >= 1"),
    ({"shards": 9}, "more than the groups"),
    ({"seeds": 3}, "unknown key"),
])
def test_a_bad_credit_spec_fails_before_any_work(tmp_path, credit, message):
    with pytest.raises(SpecError, match=message):
        expand(load_spec(_credit_spec(tmp_path, **credit)))


def test_a_credit_block_belongs_to_a_credit_spec(tmp_path):
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump({"credit": {"groups": 2}, "grid": {"algorithm.name": ["grpo"]}}))
    with pytest.raises(SpecError, match="a spec of kind credit has a credit: block"):
        load_spec(path)
    path.write_text(yaml.safe_dump({"kind": "credit", "credit": {"groups": 2}, "grid": {"algorithm.name": ["grpo"]}}))
    with pytest.raises(SpecError, match="not from base/grid/runs"):
        load_spec(path)


# the committed ablation runs (results/proxy/ablation/runs): ablated method -> seeds
COMMITTED_CPU_ABLATION = {"g2po_no_aggregation": range(5), "g2po_mean_norm": range(5), "grpo_mean_norm": range(5)}


def test_the_committed_ablation_runs_are_the_specs_finished_runs():
    """Every run folder of results/proxy/ablation/runs is planned by the cpu_ablation spec (as an
    ablated cell, never one of the cpu_proxy cells it reuses), hashes to its folder's name and finished
    its 54 iterations on a clean commit; the committed cells are those listed above."""
    import json
    from pathlib import Path

    from g2po_bench.core.config import resolve_run_id
    from g2po_bench.runconfig import load_config

    runs = Path(__file__).resolve().parents[1] / "results" / "proxy" / "ablation" / "runs"
    planned = {r.run_id: (r.labels["method"], r.seed) for r in expand(load_spec("cpu_ablation"))}
    ids = sorted(p.name for p in runs.iterdir() if p.is_dir())
    assert sorted(planned[i] for i in ids) == sorted(
        (m, s) for m, seeds in COMMITTED_CPU_ABLATION.items() for s in seeds), sorted(set(ids) - set(planned))
    for run_id in ids:
        cfg = load_config(runs / run_id / "config.yaml")
        cfg.run_id = None
        assert resolve_run_id(cfg) == run_id
        status = json.loads((runs / run_id / "status.json").read_text())
        assert status["state"] == "done" and status["iteration"] == 54 and not status["code"]["dirty"]
