"""Sweeps end to end, with the local executor and on a real single-node Slurm cluster.

The Slurm cases start the cluster with ``sweeps/slurm/start_cluster.sh`` (root; Debian's
slurmctld/slurmd/munge, installed if missing) when ``G2PO_TEST_SLURM=1`` or ``CI`` is set, or
reuse the cluster of ``$SLURM_CONF``; otherwise they are skipped with that reason.

- the smoke sweep (toy env, GRPO and G2PO x 2 seeds): two launches at the same moment submit
  every run once, every run finishes, the analysis code finds the results, and a relaunch
  skips the finished runs;
- a preempted job (the USR2 Slurm sends before preemption/timeout, to every process of the
  job, environment workers included): the trainer stops at a safe point, Submitit checkpoints
  and requeues it, and it resumes from the checkpoint by itself; then the training job is killed
  with SIGKILL: the relaunch resumes from the checkpoint and finishes with iterations 1..N
  exactly once, no torn file, and metrics equal to an uninterrupted run of the same config;
- a cancelled job (``g2po sweep cancel``: Slurm's scancel sends SIGTERM to every process of the
  job; the local executor SIGINT): no crashed iteration is recorded, and the relaunch finishes
  with metrics equal to an uninterrupted run's (timings aside);
- a credit study as shards (a spec of ``kind: credit``): every shard runs once, a relaunch skips
  them, and the shards pooled (``g2po credit --pool``) equal the study run at once, group for group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import yaml
from sweep_support import (
    assert_complete_run,
    checkpoint_iteration,
    events,
    frozen_until_signalled,
    kill_tree,
    metrics_without_timings,
    reference_metrics,
    run_cli,
    slurm_cluster,
    slurm_wanted,
    start_cli,
    stop_slurm_cluster,
    toy_spec,
    wait_for,
)

from g2po_bench.sweeps import launcher
from g2po_bench.sweeps.spec import expand, load_spec

pytestmark = pytest.mark.slow
TIMEOUT = 600


@pytest.fixture(scope="module")
def slurm_env(tmp_path_factory):
    if not slurm_wanted():
        pytest.skip("Slurm sweep tests run when G2PO_TEST_SLURM=1 or CI is set: they start a single-node "
                    "cluster as root with sweeps/slurm/start_cluster.sh")
    if os.geteuid() != 0 and not os.environ.get("SLURM_CONF"):
        pytest.fail("G2PO_TEST_SLURM/CI is set but the Slurm cluster needs root to start "
                    "(or export SLURM_CONF of a running cluster)")
    state = tmp_path_factory.mktemp("slurm")
    env, started = slurm_cluster(state)
    yield env
    if started:
        stop_slurm_cluster(state)


@pytest.fixture(params=["local", "slurm"])
def cluster(request, monkeypatch):
    if request.param == "slurm":
        for k, v in request.getfixturevalue("slurm_env").items():
            monkeypatch.setenv(k, v)
    return request.param


def _launch(args, cwd):
    proc = run_cli(["launch", *args], cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_smoke_sweep_concurrent_launches_then_relaunch(cluster, tmp_path):
    out = tmp_path / "out"
    args = ["launch", "smoke", "--cluster", cluster, "--output-dir", str(out)]
    procs = [start_cli(args, cwd=tmp_path, log=tmp_path / f"launch{i}.log") for i in range(2)]
    for i, p in enumerate(procs):
        assert p.wait(timeout=300) == 0, (tmp_path / f"launch{i}.log").read_text()
    spec = load_spec("smoke", output_dir=out)
    rows = launcher.wait(spec, timeout=TIMEOUT)
    assert [r.state for r in rows] == ["done"] * 4, [(r.run.run_id, r.state, r.detail) for r in rows]

    # each configuration was submitted once and trained once, although two launches ran
    state = json.loads((out / "sweep.json").read_text())
    assert len(state["launches"]) == 2
    submitted = [rid for la in state["launches"] for rid in la["submitted"]]
    assert sorted(submitted) == sorted(r.run.run_id for r in rows)
    for r in rows:
        assert len(state["runs"][r.run.run_id]["submissions"]) == 1
        assert len(events(out, r.run.run_id, "start")) == 1
        assert_complete_run(out / "runs" / r.run.run_id, 2)
    if cluster == "slurm":  # one job array, one task per run
        jobs = {s["job_id"] for v in state["runs"].values() for s in v["submissions"]}
        assert len(jobs) == 4 and len({j.split("_")[0] for j in jobs}) == 1

    # the analysis code finds every run
    from g2po_bench.analysis.load import load_runs

    loaded = load_runs(out)
    assert len(loaded.runs) == 4 and set(loaded.runs["state"]) == {"done"}
    assert set(loaded.runs["method"]) == {"GRPO", "G2PO"} and set(loaded.runs["seed"]) == {0, 1}

    # a relaunch skips the finished runs
    again = _launch(["smoke", "--cluster", cluster, "--output-dir", str(out)], tmp_path)
    assert again.stdout.count("skip: done") == 4 and "nothing to submit" in again.stderr
    status = run_cli(["status", "smoke", "--output-dir", str(out), "--json"], cwd=tmp_path)
    assert [json.loads(x)["state"] for x in status.stdout.splitlines()] == ["done"] * 4


def _start_single_run(tmp_path, cluster, name, iterations):
    spec_file = toy_spec(tmp_path / f"{name}.yaml", name, iterations=iterations)
    out = tmp_path / "out"
    _launch([str(spec_file), "--cluster", cluster, "--output-dir", str(out)], tmp_path)
    spec = load_spec(spec_file, output_dir=out)
    (run,) = expand(spec)
    run_dir = out / "runs" / run.run_id
    wait_for(lambda: checkpoint_iteration(run_dir) >= 2, TIMEOUT, what="a checkpoint at iteration 2")
    claim = json.loads((out / "claims" / f"{run.run_id}.json").read_text())
    return spec_file, spec, run, run_dir, claim


def _preempt(cluster, claim):
    """Send what Slurm sends before preemption or at the time limit (USR2)."""
    if cluster == "slurm":
        job = claim["job_id"]
        subprocess.run(["scancel", "--signal=USR2", job], check=True)
        # Submitit requeues the job; Slurm holds a requeued job ~2 min (BeginTime): start it now
        wait_for(lambda: "PENDING" in subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                                                     text=True).stdout, 120, what="the requeue")
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)
    else:  # like Slurm: the job's every process (the training process and its workers)
        kill_tree(claim["pid"], signal.SIGUSR2)


def test_preempted_then_killed_run_resumes_each_time(cluster, tmp_path):
    """Preemption: Submitit checkpoints and requeues the job, which resumes by itself. Then a
    SIGKILL (no cleanup at all): the relaunch resumes from the checkpoint. The run ends with
    iterations 1..N exactly once and no torn file."""
    n = 8
    spec_file, spec, run, run_dir, claim = _start_single_run(tmp_path, cluster, "interrupted", n)
    _preempt(cluster, claim)

    def resumed_and_progressed():
        starts = events(spec.output_dir, run.run_id, "start")
        return len(starts) == 2 and checkpoint_iteration(run_dir) > starts[1]["resume_from"] and starts[1]

    second = wait_for(resumed_and_progressed, TIMEOUT, what="the requeued job to resume and checkpoint")
    assert second["resume_from"] >= 2 and len(events(spec.output_dir, run.run_id, "checkpoint-requeue")) == 1
    owner = json.loads((spec.output_dir / "claims" / f"{run.run_id}.json").read_text())
    assert owner["job_id"] == claim["job_id"] and owner["pid"] != claim["pid"]  # same job, new process

    kill_tree(owner["pid"], signal.SIGKILL)  # the training process and its workers, no cleanup
    row = wait_for(lambda: (r := launcher.sweep_status(spec)[0]).state == "failed" and r, 120,
                   what="the killed run to show as failed")
    assert "ended" in row.detail, row.detail
    killed_at = json.loads((run_dir / "status.json").read_text())["iteration"]
    assert second["resume_from"] < killed_at < n

    proc = _launch([str(spec_file), "--cluster", cluster, "--output-dir", str(spec.output_dir), "--wait",
                    "--timeout", str(TIMEOUT)], tmp_path)
    assert "resubmit (stopped at" in proc.stdout
    assert_complete_run(run_dir, n)
    starts = events(spec.output_dir, run.run_id, "start")
    assert len(starts) == 3 and starts[0]["resume_from"] is None
    assert starts[1]["owner"] == starts[0]["owner"]  # the requeued job itself
    assert starts[2]["resume_from"] > second["resume_from"] and "stale claim" in starts[2]["claim"]
    state = json.loads((spec.output_dir / "sweep.json").read_text())
    assert len(state["runs"][run.run_id]["submissions"]) == 2  # the launch and the relaunch
    ref = reference_metrics(spec.output_dir, run.run_id, tmp_path, tmp_path / "reference")
    assert metrics_without_timings(run_dir) == ref


def test_cancel_stops_the_jobs_without_recording_a_crashed_iteration(cluster, tmp_path):
    """``g2po sweep cancel`` of a running job (Slurm: SIGTERM to the trainer and its workers):
    the trainer stops without recording the iteration in flight; the relaunch resumes and ends
    with the metrics of an uninterrupted run."""
    n = 12
    spec_file, spec, run, run_dir, claim = _start_single_run(tmp_path, cluster, "cancelled", n)
    with frozen_until_signalled(claim["pid"]):  # the run cannot finish before the cancel's SIGTERM
        (done,) = launcher.cancel(spec)  # what `g2po sweep cancel` does, without its start-up time
    assert done["ok"], done
    row = wait_for(lambda: (r := launcher.sweep_status(spec)[0]).state == "failed" and r, 120,
                   what="the cancelled run to show as failed")
    assert "cancelled" in row.detail
    status = json.loads((run_dir / "status.json").read_text())
    assert status["iteration"] < n, "the run finished before the cancel: make it longer"
    if cluster == "slurm":  # SIGTERM, then SIGKILL after KillWait: the trainer stopped by itself
        assert status["state"] == "interrupted" and "SIGTERM" in status["error"], status
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert all(m["train/crashed"] == 0 and m["train/steps"] > 0 for m in lines), lines
    again = run_cli(["cancel", str(spec_file), "--output-dir", str(spec.output_dir)], cwd=tmp_path)
    assert "no queued or running job" in again.stderr

    _launch([str(spec_file), "--cluster", cluster, "--output-dir", str(spec.output_dir), "--wait",
             "--timeout", str(TIMEOUT)], tmp_path)
    assert_complete_run(run_dir, n)
    ref = reference_metrics(spec.output_dir, run.run_id, tmp_path, tmp_path / "reference")
    assert metrics_without_timings(run_dir) == ref


def test_credit_shards_run_through_the_launcher_and_pool_into_the_unsharded_study(cluster, tmp_path):
    """A toy credit study of 5 groups (the toy's training tasks) in blocks of 2 as 3 shards (Monte Carlo, K = 4)."""
    args = ["env.name=toy", "env.max_steps=5", "--policy", "toy-scripted", "--continuations", "4",
            "--batch-groups", "2", "--n-boot", "200", "--no-figures"]
    spec_file = tmp_path / "credit_toy.yaml"
    spec_file.write_text(yaml.safe_dump({"kind": "credit", "credit": {"groups": 5, "shards": 3, "args": args},
                                         "resources": {"cpus": 1, "mem_gb": 2, "time": 20}, "max_parallel": 2}))
    out = tmp_path / "out"
    proc = _launch([str(spec_file), "--cluster", cluster, "--output-dir", str(out), "--wait", "--timeout",
                    str(TIMEOUT)], tmp_path)
    assert "every shard is done; pool them with: g2po credit --pool" in proc.stderr, proc.stderr
    spec = load_spec(spec_file, output_dir=out)
    runs = expand(spec)
    for r in runs:
        assert json.loads((out / "runs" / r.run_id / "status.json").read_text())["state"] == "done"
        assert len(events(out, r.run_id, "start")) == 1
    again = _launch([str(spec_file), "--cluster", cluster, "--output-dir", str(out)], tmp_path)
    assert again.stdout.count("skip: done") == 3
    pooled = subprocess.run([sys.executable, "-m", "g2po_bench.cli", "credit", "--pool", str(out / "runs"), "--out",
                             str(out / "pooled"), "--no-figures"], cwd=tmp_path, capture_output=True, text=True)
    assert pooled.returncode == 0, pooled.stderr
    whole = subprocess.run([sys.executable, "-m", "g2po_bench.cli", "credit", "--groups", "5", *args, "--out",
                            str(tmp_path / "whole")], cwd=tmp_path, capture_output=True, text=True)
    assert whole.returncode == 0, whole.stderr
    a = json.loads((out / "pooled" / "credit.json").read_text())
    b = json.loads((tmp_path / "whole" / "credit.json").read_text())
    for key in ("per_group", "scores", "rows", "summary", "tasks", "settings", "variants"):
        assert a[key] == b[key], key


def test_cli_entry_point_has_the_sweep_commands():
    out = subprocess.run([sys.executable, "-m", "g2po_bench.cli", "sweep", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and all(w in out.stdout for w in ("launch", "status", "cancel"))
