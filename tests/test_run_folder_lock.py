"""One process per run folder (g2po_bench/core/runlock.py; docs/run-folder.md).

The bug: a ``g2po train`` stopped by SIGTERM finished its iteration's bookkeeping after a second
``g2po train`` of the same config had started in the same folder, and the second run's
``metrics.jsonl`` got a stray line from the first (iteration 4 between iterations 2 and 3). Now a
second process of the same run id is refused before any work (one line naming the run and the
holding process, exit 2), and a process whose folder was replaced (deleted and created again)
writes nothing more into it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import training_process as tp

from g2po_bench.algorithms.backends.lifecycle import RunLifecycle
from g2po_bench.core.errors import RunFolderBusy, RunFolderLost
from g2po_bench.core.rundir import RunDir
from g2po_bench.core.runlock import LOCK_FILE, RunLock, held_lock
from g2po_bench.runconfig import load_config
from g2po_bench.sweeps.job import RunTask, train_one
from g2po_bench.train import run_train

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 600

_HOLDER = """
import os, sys, time
from g2po_bench.core.runlock import RunLock
lock = RunLock.acquire(sys.argv[1])
if sys.argv[2] == "fork-and-die":
    child = os.fork()
    if child == 0:  # a worker that outlives its parent, as environment workers may for a moment
        time.sleep(60)
        os._exit(0)
    print("held", child, flush=True)
    os._exit(0)  # dies without unlocking (as a SIGKILL would)
print("held", os.getpid(), flush=True)
time.sleep(60)
"""


def _hold(folder: Path, how: str = "hold") -> tuple[subprocess.Popen, int]:
    """A process holding the run folder ``folder``, and the pid it printed (its own, or with
    ``fork-and-die`` its child's)."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(folder), how], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    word, pid = proc.stdout.readline().split()
    assert word == "held"
    return proc, int(pid)


def test_a_second_holder_is_refused_naming_the_run_and_the_process(tmp_path):
    folder = tmp_path / "runs" / "r"
    holder, _ = _hold(folder)
    try:
        with pytest.raises(RunFolderBusy) as err:
            RunLock.acquire(folder)
        msg = str(err.value)
        assert f"run folder {folder} is in use by process {holder.pid}" in msg and "run_id=NAME" in msg, msg
        assert "\n" not in msg
    finally:
        holder.kill()
        holder.wait()
    with RunLock.acquire(folder) as lock:  # free once the holder is gone
        assert lock.owned() and (folder / LOCK_FILE).read_text().strip() == str(os.getpid())
        with RunLock.acquire(folder) as again:  # the same process may hold it again (nested)
            assert again is lock
        assert held_lock(folder) is lock and lock.owned()
    assert held_lock(folder) is None and not lock.owned()


def test_a_process_forked_under_the_lock_does_not_keep_it(tmp_path):
    """The holder dies without unlocking while a child it forked lives on: the child closed its
    copy of the lock file after the fork, so the lock ends with the holder."""
    folder = tmp_path / "r"
    holder, child = _hold(folder, "fork-and-die")
    holder.wait(timeout=60)
    try:
        deadline = time.time() + 10  # the child closes its copy right after the fork; it lives 60 s
        while True:
            try:
                RunLock.acquire(folder).release()
                break
            except RunFolderBusy:
                assert time.time() < deadline, "the forked child kept the dead holder's lock"
                time.sleep(0.05)
        assert tp.alive(child)
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_stale_lifecycle_writes_nothing_into_the_folder_that_replaced_its_own(tmp_path):
    """In one process: the run folder is deleted and created again (with a new run's records and
    its own ``.lock``) while a lifecycle still runs; its next record, its failure and its stop
    write nothing, and a save is refused."""
    cfg = load_config(None, ["env.name=toy", f"output_dir={tmp_path}", "run_id=r", "progress=false",
                             "train.iterations=3"])
    folder = tmp_path / "r"

    def write(staging, iteration, state):
        (staging / "weights.json").write_text(json.dumps({"iteration": iteration}))

    with RunLock.acquire(folder):
        lc = RunLifecycle(cfg, backend="local", write_checkpoint=write)
        lc.start()
        lc.begin_training()
        lc.end_iteration({"iteration": 1, "train/success_rate": 0.5})
        assert [m["iteration"] for m in lc.run.read_metrics()] == [1]
        shutil.rmtree(folder)
        folder.mkdir()  # the new run's folder, as another process leaves it
        (folder / LOCK_FILE).write_text("12345\n")
        (folder / "metrics.jsonl").write_text('{"iteration": 1, "new": true}\n')
        (folder / "status.json").write_text('{"state": "running", "iteration": 1}\n')
        before = {p.name: p.read_bytes() for p in folder.iterdir()}
        assert not lc.run.owned()
        with pytest.raises(RunFolderLost, match=rf"run folder {folder} was replaced while this process trained it"):
            lc.end_iteration({"iteration": 2, "train/success_rate": 0.5})
        with pytest.raises(RunFolderLost):
            lc.save_checkpoint(2)
        with pytest.raises(RunFolderLost):
            lc.write_setup({"warm_start/key": "k"}, time.time())
        lc.fail(RuntimeError("boom"))
        lc.checkpoint_clean_state()
        msg = lc.stop_on_signal(signal.SIGTERM)
        assert "was replaced meanwhile" in msg
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_sweep_job_or_script_of_a_held_run_is_refused_before_any_work(tmp_path, monkeypatch):
    """``run_train`` (what sweep jobs call) refuses while another process holds the run folder,
    before its checks and before any backend is reached."""
    import g2po_bench.algorithms.backends.local.trainer as local_trainer

    monkeypatch.setattr(local_trainer, "train", lambda *a, **k: pytest.fail("the trainer backend was reached"))
    cfg = load_config(None, ["env.name=toy", f"output_dir={tmp_path}", "run_id=r", "progress=false"])
    holder, _ = _hold(tmp_path / "r")
    try:
        with pytest.raises(RunFolderBusy, match=f"in use by process {holder.pid}"):
            run_train(cfg)
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [LOCK_FILE]


def test_a_sweep_job_skips_a_run_another_process_trains_and_leaves_its_folder_alone(tmp_path):
    """A sweep job whose run is held by another process (a ``g2po train`` of the same run id)
    skips it, naming the holder, before it empties the ``metrics.jsonl`` of a run without a
    checkpoint (what it does for a fresh start)."""
    task = RunTask(run_id="toy-g2po-s0-x", config_yaml="{}", sweep_dir=str(tmp_path), workdir=str(tmp_path))
    run = task.runs_dir / task.run_id
    holder, _ = _hold(run)
    try:
        (run / "metrics.jsonl").write_text('{"iteration": 1}\n')
        (run / "status.json").write_text('{"state": "running", "iteration": 1}\n')
        before = _records(run)
        res = train_one(task)
    finally:
        holder.kill()
        holder.wait()
    assert res["state"] == "skipped" and f"in use by process {holder.pid}" in res["reason"], res
    assert _records(run) == before
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["skipped"]
    assert not list(task.claims_dir.glob("*.json"))  # the claim was released


def _records(run: Path) -> dict[str, bytes]:
    """Every file of the run folder but its lock, by relative path."""
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != LOCK_FILE}


@pytest.mark.slow
def test_a_second_train_is_refused_and_a_replaced_folder_gets_nothing_from_the_first(tmp_path):
    """Real processes: A trains; a second ``g2po train`` of the same run is refused (exit 2, one
    line naming the run and A's pid) and changes nothing; A is paused, its folder deleted and C
    trains a run of the same run id in it to the end; A then continues, stops with one line
    (exit 2), and C's records are untouched."""
    a = tp.start_training(tmp_path, "run_id=shared", log=tmp_path / "a.log")
    try:
        run = None
        deadline = time.time() + TIMEOUT
        while run is None or (RunDir(run).read_status() or {}).get("iteration", 0) < 1:  # iteration 1 recorded
            assert a.poll() is None and time.time() < deadline, (tmp_path / "a.log").read_text()[-3000:]
            time.sleep(0.02)
            if (tmp_path / "runs").is_dir():
                run = next((p for p in (tmp_path / "runs").iterdir() if p.is_dir()), None)
        os.kill(a.pid, signal.SIGSTOP)  # A is now inside iteration 2, far from its next record
        before = _records(run)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        b = subprocess.run([sys.executable, "-m", "g2po_bench.cli", "train", *tp.train_args(tmp_path, "run_id=shared")],
                           cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=TIMEOUT)
        err = b.stderr.strip()
        assert b.returncode == 2, b.stderr[-3000:]
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert err.startswith(f"run folder error: run folder {run} is in use by process {a.pid}"), err
        assert _records(run) == before

        shutil.rmtree(run)
        # C: a shorter run in the same folder (same run id), from its start
        c = tp.start_training(tmp_path, "run_id=shared", "train.iterations=1", log=tmp_path / "c.log")
        assert c.wait(timeout=TIMEOUT) == 0, (tmp_path / "c.log").read_text()[-3000:]
        new = _records(run)
        assert [json.loads(x)["iteration"] for x in new["metrics.jsonl"].decode().splitlines()] == [1]
    finally:
        os.kill(a.pid, signal.SIGCONT)
    assert a.wait(timeout=TIMEOUT) == 2, (tmp_path / "a.log").read_text()[-3000:]
    last = (tmp_path / "a.log").read_text().strip().splitlines()[-1]
    assert last.startswith(f"run folder error: run folder {run} was replaced while this process trained it"), last
    assert _records(run) == new
