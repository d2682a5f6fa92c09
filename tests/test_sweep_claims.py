"""Idempotence rules without training: per-run claims (fresh, held, stale, requeued, raced),
jobs that skip claimed or finished runs, and what a relaunch submits."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import time

import pytest
from sweep_support import toy_spec

from g2po_bench.core.rundir import RunDir
from g2po_bench.sweeps import claims, scheduler
from g2po_bench.sweeps.claims import acquire, claim_state, read_claim
from g2po_bench.sweeps.job import RunTask, train_one
from g2po_bench.sweeps.launcher import SweepState, plan_launch
from g2po_bench.sweeps.scheduler import HOST, JobState, process_start
from g2po_bench.sweeps.spec import expand, load_spec


def _sleeper():
    p = subprocess.Popen(["sleep", "300"])
    return p, {"kind": "process", "job_id": f"{HOST}:{p.pid}", "host": HOST, "pid": p.pid,
               "start": process_start(p.pid)}


def _dead_owner():
    p, owner = _sleeper()
    p.kill()
    p.wait()
    return owner


def test_claim_is_exclusive_while_its_owner_lives(tmp_path):
    p, owner = _sleeper()
    try:
        c1, holder, how = acquire(tmp_path, "run-a", owner=owner)
        assert c1 is not None and holder is None and how == "fresh claim"
        c2, holder, why = acquire(tmp_path, "run-a")  # this test process: another owner
        assert c2 is None and holder["pid"] == p.pid and "alive" in why
        assert claim_state(read_claim(tmp_path, "run-a"))[0] == "alive"
        c1.release()
        assert read_claim(tmp_path, "run-a") is None
        c3, _, how = acquire(tmp_path, "run-a")
        assert c3 is not None and how == "fresh claim"
        c3.release()
    finally:
        p.kill()
        p.wait()


def test_claim_of_a_dead_job_is_stale_and_taken_over(tmp_path):
    c1, _, _ = acquire(tmp_path, "run-b", owner=_dead_owner())
    c1._stop.set()  # the owner "died": no release
    assert claim_state(read_claim(tmp_path, "run-b"))[0] == "stale"
    c2, holder, how = acquire(tmp_path, "run-b")
    assert c2 is not None and "stale" in how and "process exited" in how
    assert list(tmp_path.glob("run-b.stale-*.json"))  # kept for forensics
    c2.release()


def test_same_job_takes_its_claim_back_after_a_requeue(tmp_path):
    owner = {"kind": "slurm", "job_id": "77_3", "host": "node1", "pid": 1234, "start": 1}
    c1, _, _ = acquire(tmp_path, "run-c", owner=owner)
    c1._stop.set()
    c2, _, how = acquire(tmp_path, "run-c", owner={**owner, "pid": 999, "host": "node2"})
    assert c2 is not None and "same job" in how
    c2._stop.set()


@pytest.mark.parametrize("state, expected", [
    (JobState("running", "RUNNING"), "alive"),
    (JobState("pending", "REQUEUED"), "alive"),
    (JobState("ended", "CANCELLED by 0"), "stale"),
    (JobState("gone", "not known to squeue/sacct"), "stale"),
])
def test_slurm_owner_liveness_comes_from_the_scheduler(tmp_path, monkeypatch, state, expected):
    monkeypatch.setattr(scheduler, "slurm_states", lambda ids, timeout=30.0: {i: state for i in ids})
    c, _, _ = acquire(tmp_path, "run-d", owner={"kind": "slurm", "job_id": "5_1", "host": "n", "pid": 1})
    c._stop.set()
    assert claim_state(read_claim(tmp_path, "run-d"))[0] == expected


def test_owner_that_cannot_be_asked_goes_stale_without_heartbeat(tmp_path, monkeypatch):
    monkeypatch.setattr(scheduler, "slurm_states", lambda ids, timeout=30.0: {
        i: JobState("unknown", "squeue unavailable") for i in ids})
    c, _, _ = acquire(tmp_path, "run-e", owner={"kind": "slurm", "job_id": "9", "host": "n", "pid": 1})
    c._stop.set()
    assert claim_state(read_claim(tmp_path, "run-e"))[0] == "alive"  # fresh heartbeat
    old = time.time() - claims.STALE_AFTER_S - 5
    os.utime(tmp_path / "run-e.json", (old, old))
    state, why = claim_state(read_claim(tmp_path, "run-e"))
    assert state == "stale" and "no heartbeat" in why


def _race(args):
    claims_dir, run_id, barrier = args
    barrier.wait()
    c, _, _ = acquire(claims_dir, run_id)
    ok = c is not None
    time.sleep(0.5)  # keep it while the others try
    if c is not None:
        c.release()
    return ok


@pytest.mark.parametrize("stale_first", [False, True])
def test_racing_claimants_exactly_one_wins(tmp_path, monkeypatch, stale_first):
    for var in ("SLURM_JOB_ID", "SUBMITIT_LOCAL_JOB_ID"):  # each racer is its own process
        monkeypatch.delenv(var, raising=False)
    if stale_first:  # a dead job's claim: the takeover itself is raced
        c, _, _ = acquire(tmp_path, "run-f", owner=_dead_owner())
        c._stop.set()
    ctx = mp.get_context("fork")
    n = 6
    barrier = ctx.Manager().Barrier(n)
    with ctx.Pool(n) as pool:
        wins = pool.map(_race, [(str(tmp_path), "run-f", barrier)] * n)
    assert sum(wins) == 1


def _task(tmp_path, run_id="toy-g2po-s0-x"):
    return RunTask(run_id=run_id, config_yaml="{}", sweep_dir=str(tmp_path), workdir=str(tmp_path))


def test_job_skips_a_run_claimed_by_a_live_job_and_a_finished_run(tmp_path):
    p, owner = _sleeper()
    try:
        task = _task(tmp_path)
        c, _, _ = acquire(task.claims_dir, task.run_id, owner=owner)
        res = train_one(task)
        assert res["state"] == "skipped" and f"process {p.pid}@" in res["reason"]
        c.release()
    finally:
        p.kill()
        p.wait()
    rd = RunDir(task.runs_dir / task.run_id).create()
    rd.write_status("done", 2, 2)
    assert train_one(task) == {"run_id": task.run_id, "state": "skipped", "reason": "already done"}
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["skipped", "skipped"]
    assert not list(task.claims_dir.glob("*.json"))  # nothing left claimed


def test_relaunch_decisions(tmp_path):
    spec = load_spec(toy_spec(tmp_path / "s.yaml", "rules", algorithms=("grpo", "g2po", "rloo", "gigpo", "ppo")),
                     output_dir=tmp_path / "out")
    runs = {r.labels["algorithm.name"]: r for r in expand(spec)}
    state = SweepState(spec.output_dir)
    live, _ = _sleeper()
    try:
        # grpo: finished; g2po: its job is still alive; rloo: failed; gigpo: claimed by a live
        # job not in the state file; ppo: never launched
        RunDir(spec.runs_dir / runs["grpo"].run_id).create().write_status("done", 2, 2)
        state.run(runs["g2po"].run_id)["submissions"].append(
            {"cluster": "local", "job_id": str(live.pid), "host": HOST, "start": process_start(live.pid)})
        RunDir(spec.runs_dir / runs["rloo"].run_id).create().write_status("failed", 1, 2, error="OOM")
        c, _, _ = acquire(spec.output_dir / "claims", runs["gigpo"].run_id,
                          owner={"kind": "process", "job_id": "x", "host": HOST, "pid": live.pid,
                                 "start": process_start(live.pid)})
        got = {d.run.labels["algorithm.name"]: (d.action, d.reason) for d in plan_launch(spec, list(runs.values()), state)}
        c.release()
    finally:
        live.kill()
        live.wait()
    assert got["grpo"] == ("skip", "done")
    assert got["g2po"][0] == "skip" and "running: local job" in got["g2po"][1]
    assert got["rloo"][0] == "submit" and "OOM" in got["rloo"][1]
    assert got["gigpo"][0] == "skip" and "alive" in got["gigpo"][1]
    assert got["ppo"] == ("submit", "new")
    # once the job is gone, g2po is resubmitted (it resumes from its checkpoint)
    again = {d.run.labels["algorithm.name"]: d.action for d in plan_launch(spec, [runs["g2po"]], state)}
    assert again == {"g2po": "submit"}


def test_job_records_a_config_that_fails_on_the_node(tmp_path):
    import yaml

    spec = load_spec(toy_spec(tmp_path / "s.yaml", "node"), output_dir=tmp_path / "out")
    (run,) = expand(spec)
    cfg = yaml.safe_load(run.config_yaml)
    cfg["env"]["data_dir"] = str(tmp_path / "not-on-this-node")
    task = RunTask(run_id=run.run_id, config_yaml=yaml.safe_dump(cfg), sweep_dir=str(spec.output_dir),
                   workdir=str(tmp_path))
    res = train_one(task)
    assert res["state"] == "failed" and "env.data_dir" in res["error"]
    from g2po_bench.sweeps.launcher import sweep_status

    (row,) = sweep_status(spec)
    assert row.state == "failed" and "not-on-this-node" in row.detail


ALLOC_VARS = ("G2PO_SWEEP_CLUSTER", "G2PO_NUM_NODES", "G2PO_NODE_RANK", "G2PO_NODELIST", "G2PO_HEAD_NODE",
              "G2PO_GPUS_PER_NODE", "G2PO_CPUS_PER_TASK", "G2PO_MEM_GB", "G2PO_RAY_ADDRESS", "OMP_NUM_THREADS")


def test_allocation_is_passed_to_the_backend(monkeypatch):
    from g2po_bench.sweeps.job import export_allocation

    for k in ALLOC_VARS:
        monkeypatch.setenv(k, "")  # restored after the test
    monkeypatch.delenv("OMP_NUM_THREADS")
    # a 2-node Slurm allocation, seen from the second node
    for k, v in {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[07-08]",
                 "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1", "SLURM_PROCID": "1", "SLURM_LOCALID": "0",
                 "SLURM_NTASKS": "2"}.items():
        monkeypatch.setenv(k, v)
    got = export_allocation({"gpus": 8, "cpus": 64, "mem_gb": 512, "nodes": 2}, "slurm")
    assert got["G2PO_NODELIST"] == "gpu07,gpu08" and got["G2PO_HEAD_NODE"] == "gpu07"
    assert got["G2PO_NUM_NODES"] == "2" and got["G2PO_NODE_RANK"] == "1"
    assert got["G2PO_GPUS_PER_NODE"] == "8" and got["G2PO_CPUS_PER_TASK"] == "64"
    assert got["G2PO_RAY_ADDRESS"] == "gpu07:6379"
    assert all(os.environ[k] == v for k, v in got.items()) and os.environ["OMP_NUM_THREADS"] == "64"
    # the OpenRLHF backend reads the same contract
    try:
        from g2po_bench.algorithms.backends.openrlhf.cluster import read_allocation
    except ImportError:
        return
    alloc = read_allocation()
    assert (alloc.num_nodes, alloc.node_rank, alloc.hosts, alloc.gpus_per_node, alloc.port) == (
        2, 1, ["gpu07", "gpu08"], 8, 6379)
