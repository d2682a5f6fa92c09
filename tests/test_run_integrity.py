"""A run's records across resumes and damaged checkpoints (issue 48, items 3 and 4).

Item 3: ``resume=true`` continues the run's recorded ``config.yaml`` (the command line's keys go on
top); a key that changes what the run is, is refused in one line naming it, before any work; a
resume that fails or is stopped before its first new iteration leaves every record but
``status.json`` as it was, and the status keeps the checkpoint's iteration.

Item 4: checkpoints are written whole, verified (a manifest of file sizes, the safetensors and
torch formats) and kept two deep (``latest``, ``previous``); a resume skips a corrupt ``latest``
with a warning naming the file and plays the same episodes as a run that was never interrupted;
``g2po eval --run`` of a corrupt checkpoint and a resume with no intact checkpoint are one line
naming the file (exit 2), with nothing changed.
"""

from __future__ import annotations

import io
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from rich.console import Console
from sweep_support import is_timing_key

import g2po_bench.algorithms.backends.local.trainer as local_trainer
import g2po_bench.algorithms.backends.loop as training_loop
import g2po_bench.cli as cli
from g2po_bench.algorithms.backends.lifecycle import RunLifecycle
from g2po_bench.cli import main
from g2po_bench.core.checkpoints import check_file, verify_checkpoint
from g2po_bench.core.config import ConfigError
from g2po_bench.core.errors import CheckpointError
from g2po_bench.core.rundir import RunDir, read_jsonl
from g2po_bench.runconfig import load_config
from g2po_bench.runtime.shutdown import ShutdownRequested
from g2po_bench.train import run_train

ROOT = Path(__file__).resolve().parents[1]

TOY = [
    "env.name=toy", "env.max_steps=3", "env.num_workers=1", "train.groups_per_batch=2", "train.group_size=2",
    "train.sft_epochs=1", "train.sft_batch_size=8", "train.max_response_tokens=8", "model.hidden_size=32",
    "model.intermediate_size=64", "model.num_heads=2", "model.vocab_size=300", "eval.num_tasks=2",
    "eval.every=0", "progress=false",
]
RECORDS = ("config.yaml", "metrics.jsonl", "eval.json")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A finished toy run ``r`` of 2 iterations and a straight 3-iteration run of the same config."""
    root = tmp_path_factory.mktemp("integrity")
    out = {}
    for name, iterations in (("r", 2), ("straight", 3)):
        cfg = load_config(None, [*TOY, f"train.iterations={iterations}", f"run_id={name}",
                                 f"output_dir={root / 'runs'}", f"train.warm_start_cache={root / 'ws'}"])
        out[name] = run_train(cfg).root
    return out


def _copy(run: Path, tmp_path: Path) -> Path:
    """A copy of the run folder ``run`` under ``tmp_path/runs`` (same run id)."""
    dst = tmp_path / "runs" / run.name
    shutil.copytree(run, dst)
    return dst


def _snapshot(run: Path, names=RECORDS) -> dict[str, bytes]:
    return {n: (run / n).read_bytes() for n in names}


def _rows(run: Path) -> list[dict]:
    return [{k: v for k, v in m.items() if not is_timing_key(k)} for m in read_jsonl(run / "metrics.jsonl")]


@pytest.fixture
def no_backend(monkeypatch):
    """The local trainer may not be reached (a refused resume must fail before any work)."""
    def reached(*args, **kwargs):
        raise AssertionError("the trainer backend was reached")

    monkeypatch.setattr(local_trainer, "train", reached)


# ---------------------------------------------------------------------------- item 3: the recorded config
def test_resume_from_the_command_line_continues_the_recorded_config(runs, tmp_path, monkeypatch, capsys):
    """``g2po train run_id=RUN output_dir=DIR resume=true train.iterations=3`` (the form of
    ``g2po train --help``) continues the toy run with 3 iterations; the defaults (ALFWorld, 54
    iterations, the CPU default's model) do not replace the recorded config."""
    run = _copy(runs["r"], tmp_path)
    before_eval = json.loads((run / "eval.json").read_text())["before"]
    real = cli.run_train
    seen = []

    def checked(cfg, **kwargs):
        seen.append((cfg.env.name, cfg.train.iterations, cfg.model.hidden_size, cfg.env.max_steps))
        assert seen[-1] == ("toy", 3, 32, 3), f"the resume runs another config: {seen[-1]}"
        return real(cfg, **kwargs)

    monkeypatch.setattr(cli, "run_train", checked)
    assert main(["train", "run_id=r", f"output_dir={tmp_path / 'runs'}", "resume=true", "train.iterations=3"]) == 0
    assert seen == [("toy", 3, 32, 3)]
    recorded = yaml.safe_load((run / "config.yaml").read_text())
    assert recorded["env"]["name"] == "toy" and recorded["train"]["iterations"] == 3
    assert [m["iteration"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3]
    ev = json.loads((run / "eval.json").read_text())
    assert ev["before"] == before_eval and ev["final"]["iteration"] == 3 and ev["final"]["num_episodes"] == 2
    assert json.loads((run / "status.json").read_text())["state"] == "done"
    # the resumed iteration 3 is the straight run's iteration 3: the same episodes
    assert _rows(run)[2] == _rows(runs["straight"])[2]


@pytest.mark.parametrize("override,key", [
    ("env.name=alfworld", "env.name"), ("algorithm.name=grpo", "algorithm.name"), ("seed=1", "seed"),
    ("model.hidden_size=64", "model.hidden_size"), ("train.lr=0.001", "train.lr"),
    ("env.generated_train_games=10", "env.generated_train_games"),
])
def test_a_resume_refuses_a_key_that_changes_the_run(runs, tmp_path, capsys, no_backend, override, key):
    run = _copy(runs["r"], tmp_path)
    before = _snapshot(run, (*RECORDS, "status.json"))
    code = main(["train", "run_id=r", f"output_dir={tmp_path / 'runs'}", "resume=true", override])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    recorded = yaml.safe_load(before["config.yaml"])
    section, _, leaf = key.rpartition(".")
    old = (recorded[section] if section else recorded)[leaf]
    assert f"{override} (recorded: {old})" in err, err
    assert "train.iterations" in err  # the keys that may change are listed
    assert _snapshot(run, (*RECORDS, "status.json")) == before  # nothing touched


def test_run_train_refuses_a_resume_with_another_config(runs, tmp_path, no_backend):
    """The same check for a config object (the sweeps and scripts call run_train directly)."""
    run = _copy(runs["r"], tmp_path)
    cfg = load_config(run / "config.yaml", [f"output_dir={tmp_path / 'runs'}", "resume=true",
                                            "algorithm.name=grpo", "train.kl_coef=0.1"])
    with pytest.raises(ConfigError, match=r"^resume: algorithm\.name=grpo \(recorded: g2po\), "
                                          r"train\.kl_coef=0\.1 \(recorded: 0\.05\) differ"):
        run_train(cfg)
    cfg = load_config(run / "config.yaml", [f"output_dir={tmp_path / 'runs'}", "resume=true", "train.iterations=1"])
    with pytest.raises(ConfigError, match=r"train\.iterations=1 is below the iteration of the run's checkpoint \(2"):
        run_train(cfg)


def test_a_resume_may_change_what_the_docs_list(runs, tmp_path):
    """Overrides equal to the recorded values and the keys a resume may change are accepted."""
    run = _copy(runs["r"], tmp_path)
    args = ["train", "run_id=r", f"output_dir={tmp_path / 'runs'}", "resume=true", "env.name=toy",
            "model.hidden_size=32", "train.iterations=2", "env.num_workers=2", "model.num_threads=1",
            "train.checkpoint_every=5", "train.crash_retries=0", "logging.backends=[jsonl]", "record_graphs=false"]
    assert main(args) == 0
    recorded = yaml.safe_load((run / "config.yaml").read_text())
    assert recorded["env"]["num_workers"] == 2 and recorded["logging"]["backends"] == ["jsonl"]
    assert [m["iteration"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2]


@pytest.mark.parametrize("how", ["stopped", "failed"])
def test_a_resume_that_ends_before_its_first_iteration_leaves_the_records_untouched(runs, tmp_path, monkeypatch,
                                                                                   how):
    """The issue's case: a resume stopped while it loads its tasks (generating games) emptied
    ``metrics.jsonl`` and said "no checkpoint yet" beside ``checkpoints/latest``. Here the run also
    holds a metrics line past its checkpoint (a kill after recording iteration 3, before its
    checkpoint): only a resume that starts training drops it."""
    run = _copy(runs["r"], tmp_path)
    line3 = {**read_jsonl(run / "metrics.jsonl")[-1], "iteration": 3}
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps(line3) + "\n")
    before = _snapshot(run)
    real = training_loop.load_task_splits

    def ends(cfg, bench):
        if how == "stopped":
            raise ShutdownRequested(signal.SIGTERM)
        raise RuntimeError("no games")

    monkeypatch.setattr(training_loop, "load_task_splits", ends)
    cfg = load_config(run / "config.yaml", [f"output_dir={tmp_path / 'runs'}", "resume=true", "train.iterations=4"])
    with pytest.raises(SystemExit if how == "stopped" else RuntimeError):
        run_train(cfg)
    assert _snapshot(run) == before  # metrics (all 3 lines), eval.json, config.yaml (2 iterations)
    status = json.loads((run / "status.json").read_text())
    assert status["iteration"] == 2, status
    if how == "stopped":
        assert status["state"] == "interrupted"
        assert status["error"].endswith("resume=true continues from the checkpoint of iteration 2"), status
    else:
        assert status["state"] == "failed" and status["error"] == "RuntimeError: no games"

    # the next resume that trains drops the line past the checkpoint and replays iteration 3
    monkeypatch.setattr(training_loop, "load_task_splits", real)
    run_train(cfg)
    assert [m["iteration"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3, 4]
    # iteration 3 replayed: the straight run's (whose last iteration it is: its final evaluation aside)
    assert _rows(run)[2] == {k: v for k, v in _rows(runs["straight"])[2].items() if not k.startswith("eval/")}
    assert yaml.safe_load((run / "config.yaml").read_text())["train"]["iterations"] == 4


# ---------------------------------------------------------------------------- item 4: checkpoints
def test_checkpoints_are_kept_two_deep_with_a_manifest(runs):
    ckpts = runs["r"] / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["latest", "previous"]  # no staging folder left
    for name, it in (("latest", 2), ("previous", 1)):
        manifest = json.loads((ckpts / name / "manifest.json").read_text())
        assert manifest["iteration"] == it
        assert json.loads((ckpts / name / "trainer_state.json").read_text())["iteration"] == it
        files = {p.relative_to(ckpts / name).as_posix(): p.stat().st_size
                 for p in (ckpts / name).rglob("*") if p.is_file() and p.name != "manifest.json"}
        assert {"policy/model.safetensors", "optim.pt", "trainer_state.json"} <= set(files)
        assert {k: v["bytes"] for k, v in manifest["files"].items()} == files


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_eval_of_a_corrupt_checkpoint_is_one_line_naming_the_file(runs, tmp_path):
    run = _copy(runs["r"], tmp_path)
    bad = run / "checkpoints" / "latest" / "policy" / "model.safetensors"
    _truncate(bad)
    res = subprocess.run([sys.executable, "-m", "g2po_bench.cli", "eval", "--run", str(run)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    err = res.stderr.strip()
    assert res.returncode == 2, res.stderr[-3000:]
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("checkpoint error: ") and str(bad) in err
    assert "checkpoints/previous (iteration 1) is intact" in err and "model.path=" in err
    assert not (run / "evals").exists()


def test_resume_skips_a_corrupt_latest_and_plays_the_same_episodes(runs, tmp_path):
    """``latest`` (iteration 2) truncated: the resume warns, naming the file, continues from
    ``previous`` (iteration 1), and its iterations 2 and 3 are those of the straight run."""
    run = _copy(runs["r"], tmp_path)
    _truncate(run / "checkpoints" / "latest" / "policy" / "model.safetensors")
    cfg = load_config(run / "config.yaml", [f"output_dir={tmp_path / 'runs'}", "resume=true", "train.iterations=3"])
    with pytest.warns(UserWarning, match=r"checkpoints/latest is corrupt \(.*latest/policy/model\.safetensors: "
                                         r".*; resuming from checkpoints/previous \(iteration 1\)"):
        run_train(cfg)
    assert _rows(run) == _rows(runs["straight"])
    ckpts = run / "checkpoints"
    assert [json.loads((ckpts / n / "trainer_state.json").read_text())["iteration"]
            for n in ("latest", "previous")] == [3, 2]


def test_a_resume_without_an_intact_checkpoint_refuses_and_changes_nothing(runs, tmp_path, capsys):
    run = _copy(runs["r"], tmp_path)
    _truncate(run / "checkpoints" / "latest" / "optim.pt", 0.9)
    _truncate(run / "checkpoints" / "previous" / "policy" / "model.safetensors", 0.9)
    before = _snapshot(run, (*RECORDS, "status.json"))
    assert main(["train", "run_id=r", f"output_dir={tmp_path / 'runs'}", "resume=true", "train.iterations=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("checkpoint error: resume: no intact checkpoint"), err
    assert str(run / "checkpoints" / "latest" / "optim.pt") in err
    assert str(run / "checkpoints" / "previous" / "policy" / "model.safetensors") in err
    assert _snapshot(run, (*RECORDS, "status.json")) == before


def test_a_resume_of_a_run_with_no_checkpoint_says_it_starts_from_the_beginning(tmp_path):
    """``resume=true`` on a folder with no checkpoint (how every sweep job starts a run; or a
    mistyped ``run_id``) trains from the beginning and says so in the log."""
    log = io.StringIO()
    cfg = load_config(None, [*TOY, "train.iterations=1", "run_id=typo", f"output_dir={tmp_path / 'runs'}",
                             f"train.warm_start_cache={tmp_path / 'ws'}", "resume=true", "progress=true"])
    run_train(cfg, console=Console(file=log, width=200))
    assert "resume=true: the run folder holds no checkpoint yet, so the run starts from its beginning" in \
        log.getvalue(), log.getvalue()
    # the log names the data the tasks came from (an empty env.data_dir= is unset: the embedded default)
    assert "from the embedded default data of toy (env.data_dir unset)" in log.getvalue()
    assert [m["iteration"] for m in read_jsonl(tmp_path / "runs" / "typo" / "metrics.jsonl")] == [1]


def test_a_checkpoint_written_incomplete_is_refused_and_the_previous_ones_kept(tmp_path):
    """A writer whose model file comes out short (a full disk, a torn write): the save fails
    naming the file, and ``latest`` and ``previous`` are the checkpoints that were there."""
    cfg = load_config(overrides=[f"output_dir={tmp_path}", "run_id=w", "progress=false", "env.name=toy"])
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    tensor_file = len(header).to_bytes(8, "little") + header + bytes(16)
    cut = {"at": None}

    def write(staging, iteration, state):
        data = tensor_file if iteration != cut["at"] else tensor_file[:-5]
        (staging / "policy").mkdir()
        (staging / "policy" / "model.safetensors").write_bytes(data)

    lc = RunLifecycle(cfg, backend="local", write_checkpoint=write)
    lc.start()
    lc.save_checkpoint(1)
    lc.save_checkpoint(2)
    cut["at"] = 3
    with pytest.raises(CheckpointError, match=r"iteration 3 was written incomplete \(.*model\.safetensors: "
                                              r"\d+ bytes, its safetensors header declares \d+\)"):
        lc.save_checkpoint(3)
    run = RunDir(tmp_path / "w")
    assert [json.loads((d / "trainer_state.json").read_text())["iteration"]
            for d in (run.checkpoint_dir, run.previous_checkpoint_dir)] == [2, 1]
    assert sorted(p.name for p in (tmp_path / "w" / "checkpoints").iterdir()) == ["latest", "previous"]
    assert lc.checkpoint_iteration == 2


def test_a_corrupt_latest_is_not_kept_as_previous(tmp_path):
    """The next save drops a corrupt ``latest`` rather than rotating it into ``previous``, so an
    intact fallback survives; a staging folder left by a killed attempt is removed."""
    cfg = load_config(overrides=[f"output_dir={tmp_path}", "run_id=w", "progress=false", "env.name=toy"])

    def write(staging, iteration, state):
        (staging / "weights.json").write_text(json.dumps({"iteration": iteration}))

    lc = RunLifecycle(cfg, backend="local", write_checkpoint=write)
    lc.start()
    lc.save_checkpoint(1)
    lc.save_checkpoint(2)
    run = RunDir(tmp_path / "w")
    (run.checkpoint_dir / "weights.json").write_text('{"iteration": 2')  # torn
    leftover = run.checkpoint_dir.with_name(".latest.999999.tmp")
    leftover.mkdir()
    assert run.find_checkpoint().path == run.previous_checkpoint_dir
    lc.save_checkpoint(3)
    assert [json.loads((d / "weights.json").read_text())["iteration"]
            for d in (run.checkpoint_dir, run.previous_checkpoint_dir)] == [3, 1]
    assert sorted(p.name for p in run.checkpoint_dir.parent.iterdir()) == ["latest", "previous"]
    # killed between the two renames of a save: latest is gone, previous is what a resume loads
    run.checkpoint_dir.rename(run.checkpoint_dir.with_name(".latest.1.tmp"))
    choice = run.find_checkpoint()
    assert (choice.path, choice.iteration, choice.rejected) == (run.previous_checkpoint_dir, 1, [])


def test_format_checks_catch_a_cut_file_without_a_manifest(tmp_path):
    """Checkpoints written before the manifest existed still get the format checks."""
    folder = tmp_path / "old"
    (folder / "policy").mkdir(parents=True)
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    (folder / "policy" / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    torch.save({"x": torch.zeros(1000)}, folder / "optim.pt")
    (folder / "trainer_state.json").write_text(json.dumps({"iteration": 4}))
    assert verify_checkpoint(folder) is None
    st = folder / "policy" / "model.safetensors"
    st.write_bytes(st.read_bytes()[:-1])
    assert check_file(st) == f"{8 + len(header) + 7} bytes, its safetensors header declares {8 + len(header) + 8}"
    assert verify_checkpoint(folder).startswith(f"{st}: ")
    st.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    _truncate(folder / "optim.pt", 0.8)
    assert check_file(folder / "optim.pt").startswith("not a complete torch file")
    (folder / "optim.pt").unlink()
    (folder / "trainer_state.json").write_text('{"iteration": ')
    assert "trainer_state.json: not valid JSON" in verify_checkpoint(folder)
