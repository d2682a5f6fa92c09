"""The ``g2po`` command line (issue 15, items 1, 3, 6): ``g2po eval --run`` evaluates a run on
its own config into its own folder; every bad path or value is one line with exit code 2 and
no traceback; each subcommand's help lists its main forms with an example."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from g2po_bench.cli import main
from g2po_bench.runconfig import load_config
from g2po_bench.train import run_train

ROOT = Path(__file__).resolve().parents[1]

TOY = [
    "env.name=toy", "env.max_steps=3", "env.num_workers=1", "train.iterations=1",
    "train.groups_per_batch=2", "train.group_size=2", "train.sft_epochs=1", "train.sft_batch_size=8",
    "train.max_response_tokens=8", "model.hidden_size=32", "model.intermediate_size=64",
    "model.num_heads=2", "model.vocab_size=300", "eval.num_tasks=2", "eval.every=0", "progress=false",
]


def _g2po(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "g2po_bench.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


# ---------------------------------------------------------------------------- item 1: eval --run
@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two finished toy runs (G2PO and GiGPO) side by side in one output folder."""
    root = tmp_path_factory.mktemp("runs")
    runs = []
    for algo in ("g2po", "gigpo"):
        cfg = load_config(None, [*TOY, f"algorithm.name={algo}", f"output_dir={root}",
                                 f"train.warm_start_cache={root.parent / 'ws'}"])
        runs.append(run_train(cfg).root)
    return root, runs


def test_eval_run_uses_the_runs_config_and_writes_inside_the_run(two_runs):
    root, (run_a, run_b) = two_runs
    before = sorted(p.name for p in root.iterdir())
    assert main(["eval", "--run", str(run_a), "eval.num_tasks=3", "--name", "wider"]) == 0
    assert main(["eval", "--run", str(run_b)]) == 0
    # nothing new beside the runs (the old code wrote <output_dir>/<default run id>-eval)
    assert sorted(p.name for p in root.iterdir()) == before
    out_a = run_a / "evals" / "wider"
    (out_b,) = (run_b / "evals").iterdir()
    cfg_a = yaml.safe_load((out_a / "config.yaml").read_text())
    cfg_b = yaml.safe_load((out_b / "config.yaml").read_text())
    # the run's own config (toy env, 3 steps, its algorithm), not the CPU default (alfworld, 15 steps)
    assert cfg_a["env"]["name"] == cfg_b["env"]["name"] == "toy"
    assert cfg_a["env"]["max_steps"] == cfg_b["env"]["max_steps"] == 3
    assert (cfg_a["algorithm"]["name"], cfg_b["algorithm"]["name"]) == ("g2po", "gigpo")
    assert cfg_a["eval"]["num_tasks"] == 3 and cfg_b["eval"]["num_tasks"] == 2  # the override, recorded
    ev_a = json.loads((out_a / "eval.json").read_text())
    ev_b = json.loads((out_b / "eval.json").read_text())
    assert ev_a["kind"] == "evaluation" and ev_a["overrides"] == ["eval.num_tasks=3"] and ev_b["overrides"] == []
    assert ev_a["run"] == str(run_a.resolve()) and ev_b["run"] == str(run_b.resolve())
    assert ev_a["model"] == str(run_a / "checkpoints" / "latest" / "policy")
    assert ev_a["checkpoint_iteration"] == 1
    from g2po_bench.core.rundir import code_version

    assert ev_a["code"] == code_version()  # the commit that evaluated (None outside git)
    assert ev_a["final"]["num_episodes"] == 3 and ev_b["final"]["num_episodes"] == 2
    assert ev_a["final"]["mean_steps"] <= 3
    # the training run's own files are untouched by its evaluation
    assert json.loads((run_a / "eval.json").read_text())["final"]["iteration"] == 1


def test_eval_folders_never_collide(two_runs):
    _, (run_a, _) = two_runs
    assert main(["eval", "--run", str(run_a), "--name", "same"]) == 0
    assert main(["eval", "--run", str(run_a), "--name", "same"]) == 2  # an explicit name is never reused
    n = len(list((run_a / "evals").iterdir()))
    assert main(["eval", "--run", str(run_a)]) == 0
    assert main(["eval", "--run", str(run_a)]) == 0  # same second: a suffixed folder, not an overwrite
    assert len(list((run_a / "evals").iterdir())) == n + 2
    # a model folder (no run): <output_dir>/evals/<env>-<model folder>-<name>, its own folder too
    out = run_a.parent.parent / "model-evals"
    args = ["eval", f"model.path={run_a / 'checkpoints' / 'latest' / 'policy'}", "env.name=toy", "env.max_steps=3",
            "env.num_workers=1", "eval.num_tasks=2", f"output_dir={out}", "progress=false"]
    assert main([*args, "--name", "m"]) == 0 and main([*args, "--name", "m"]) == 2
    ev = json.loads((out / "evals" / "toy-policy-m" / "eval.json").read_text())
    assert ev["kind"] == "evaluation" and ev["run"] is None and ev["final"]["num_episodes"] == 2


# ---------------------------------------------------------------------------- item 3: bad input
def _bad_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    """(arguments, text the one-line message must hold)."""
    no_ckpt = tmp / "no_ckpt"
    no_ckpt.mkdir()
    (no_ckpt / "config.yaml").write_text("env:\n  name: toy\n")
    no_cfg = tmp / "no_cfg"
    no_cfg.mkdir()
    bad_yaml = tmp / "bad.yaml"
    bad_yaml.write_text("train: [unclosed\n")
    a_file = tmp / "a_file"
    a_file.write_text("x")
    empty = tmp / "empty"
    empty.mkdir()
    missing = str(tmp / "missing")
    return [
        (["train", "--config", missing + ".yaml"], "does not exist"),
        (["train", "train.lr=abc"], "train.lr"),
        (["train", f"env.data_dir={empty}", f"output_dir={tmp / 'runs'}"], "split 'train' not found"),
        (["train", "env.name=webshop", f"env.data_dir={empty}", f"output_dir={tmp / 'runs'}"],
         "no WebShop product file"),
        (["eval", "--run", missing], "does not exist"),
        (["eval", "--run", str(no_cfg)], "no config.yaml"),
        (["eval", "--run", str(no_ckpt)], "no checkpoint"),
        (["eval", "--run", str(no_ckpt), "--config", str(bad_yaml)], "drop --config"),
        (["eval", f"model.path={missing}"], "model.path"),
        (["eval"], "--run RUN_DIR"),
        (["eval", "baseline=react", "baseline.max_trials=-1"], "config error"),
        (["config", "--preset", "nope"], "unknown preset"),
        (["config", "--config", str(bad_yaml)], "not readable YAML"),
        (["data", "generate", "alfworld", "env.generated_train_games=-1"], "env.generated_train_games"),
        (["data", "download", "alfworld", "--dest", str(a_file)], "is a file"),
        (["report", missing], "does not exist"),
        (["report", str(empty), "--out", str(tmp / "empty_report")], "no run folder under"),
        (["config", "train.iteratons=3"], "Did you mean: 'iterations'? Run `g2po config`"),
        (["config", "train.foo=3"], "not in 'TrainConfig'. Run `g2po config`"),
        (["bench", "advantages", "--sizes", "abc"], "'abc'"),
        (["bench", "advantages", "--repeats", "0"], "must be >= 1"),
        (["bench", "alfworld", "--data", missing], "does not exist"),
        (["bench", "webshop", "--data-dir", missing], "does not exist"),
        (["sweep", "status", missing + ".yaml"], "no sweep spec"),
        (["algorithms", "extra"], "unrecognized arguments"),
        (["credit", "--exact"], "env.name=toy --policy toy-scripted"),
        (["credit", "--run", missing], "does not exist"),
        (["credit", "--continuations", "3"], "must be even"),
        (["credit", "env.name=toy", "--policy", "toy-scripted", "--groups", "50"], "lower the groups"),
        (["credit", "train.lr=abc"], "train.lr"),
        (["credit", "--groups", "0"], "must be >= 1"),
        (["credit", "--group-size", "1"], "argument --group-size: '1' must be >= 2"),
        (["credit", "--seed", "-1"], "argument --seed: '-1' must be >= 0"),
        (["credit", "--run", str(a_file)], "is a file, not a folder"),
        (["credit", "--shard", "3/2"], "the shard number must be 1..2"),
        (["credit", "--pool", str(empty)], "pass the shards' output folders"),
        (["credit", "--pool", missing], "does not exist; pass the shards' output folders"),
        (["credit", "--shard", "1/0"], "the count N must be >= 1"),
        (["bench", "credit", "--policy", "toy-scripted"], "env.name=toy"),
        (["config", "env.name=toy", "--config", str(bad_yaml), "notanoverride"],
         "unrecognized arguments: notanoverride"),
        (["config", f"output_dir={a_file}"], "is a file, not a folder"),
        (["credit", "env.name=toy", "--groups", "2", "env.max_steps=5", "--grups", "4"],
         "g2po credit: error: unrecognized arguments: --grups 4 ("),  # not the valid override
        (["config", "run_id=../elsewhere"], "give a plain folder name"),
        (["credit", "env.name=toy", "--policy", "toy-scripted", "--out", str(a_file / "sub")],
         "a folder above it, is a file"),
        (["credit", "--pool", str(tmp), "--out", str(a_file)], "is a file, not a folder"),
        (["credit", "env.name=toy", "--policy", "toy-scripted", "--decisive", "2"], "--decisive must be in [0, 1]"),
    ]


def test_every_subcommand_fails_bad_input_in_one_line_without_traceback(tmp_path):
    cases = _bad_inputs(tmp_path)
    assert {c[0][0] for c in cases} >= {"train", "eval", "config", "data", "report", "bench", "sweep",
                                        "algorithms", "credit"}
    for args, needle in cases:
        res = _g2po(*args)
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert res.returncode == 2, (args, res.returncode, res.stderr[-2000:])
        assert "Traceback" not in res.stderr + res.stdout, (args, res.stderr[-2000:])
        assert needle in res.stderr, (args, res.stderr)
        assert len(lines) == 1, (args, res.stderr)  # argparse's own errors too: no usage block
        if needle in ("must be >= 1", "unrecognized arguments", "'abc'"):
            assert "--help lists the options" in res.stderr, (args, res.stderr)
    assert not Path(tmp_path / "missing").exists()  # the report did not create the folder it was given
    assert not Path(tmp_path / "empty_report").exists()  # nor an empty report for a folder without runs


def test_overrides_may_come_before_and_after_the_options(tmp_path, capsys):
    """``key=value`` words anywhere among a command's options, applied in the order given (a later
    word for the same key wins)."""
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert main(["config", "env.name=toy", "env.max_steps=3", "--config", str(empty), "env.max_steps=7",
                 "seed=4"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert (cfg["env"]["name"], cfg["env"]["max_steps"], cfg["seed"]) == ("toy", 7, 4)


# ---------------------------------------------------------------------------- item 6: help
@pytest.mark.parametrize("command", ["train", "eval", "config", "data", "algorithms", "report", "bench", "sweep",
                                     "credit"])
def test_help_lists_the_main_forms_with_examples(command, capsys):
    with pytest.raises(SystemExit) as ex:
        main([command, "--help"])
    assert ex.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out
    examples = out.split("examples:", 1)[1]
    assert f"  g2po {command}" in examples
    if command == "eval":
        for form in ("--run", "model.path=", "baseline=react", "baseline=reflexion", "baseline=direct"):
            assert f"g2po eval {form}" in examples, form
    if command == "data":
        assert "g2po data download" in examples and "g2po data generate" in examples
    if command == "sweep":
        for sub in ("list", "launch", "status", "cancel"):
            assert f"g2po sweep {sub}" in examples


# ---------------------------------------------------------------------------- committed records
COMMITTED_GRPO = ROOT / "results" / "proxy" / "sweep" / "runs" / "alfworld-grpo-s0-c9b97b2b94"


def test_eval_of_a_finished_record_without_checkpoints_says_what_it_is(tmp_path, capsys):
    """Issue 51: `g2po eval --run` on a committed run said "the run has not finished an iteration yet"; it
    is done, its checkpoints are not committed. The message says so and how to get the weights back."""
    assert json.loads((COMMITTED_GRPO / "status.json").read_text())["state"] == "done"
    assert main(["eval", "--run", str(COMMITTED_GRPO)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not finished an iteration" not in err
    assert "finished (54 of 54 iterations), but its folder holds no checkpoint" in err
    assert "g2po train --config RUN/config.yaml run_id=null output_dir=results/runs resume=false" in err
    # a run that never checkpointed keeps the old message
    young = tmp_path / "young"
    young.mkdir()
    (young / "config.yaml").write_text((COMMITTED_GRPO / "config.yaml").read_text())
    (young / "status.json").write_text(json.dumps({"state": "running", "iteration": 0, "total_iterations": 54}))
    assert main(["eval", "--run", str(young)]) == 2
    assert "has not finished an iteration yet" in capsys.readouterr().err


def test_graph_of_a_record_copied_without_steps_reads_its_config(tmp_path, capsys):
    """Issue 51: `g2po graph` on a committed GRPO run said "trained with record_graphs=false" while its
    config.yaml says true (the committed GRPO and CRBC records were copied without their step tables)."""
    assert yaml.safe_load((COMMITTED_GRPO / "config.yaml").read_text())["record_graphs"] is True
    assert main(["graph", str(COMMITTED_GRPO)]) == 2
    err = capsys.readouterr().err
    assert "record_graphs=false" not in err and "config.yaml says record_graphs=true" in err
    off = tmp_path / "off"
    off.mkdir()
    (off / "config.yaml").write_text("record_graphs: false\n")
    assert main(["graph", str(off)]) == 2
    assert "it was trained with record_graphs=false" in capsys.readouterr().err
