"""The signal policy (g2po_bench/runtime/shutdown.py) on real processes, and crashed-heavy iterations.

- environment workers survive the job's signals (SIGUSR2, SIGTERM, SIGINT, SIGHUP) and keep
  answering; they end with their parent;
- SIGTERM (as under ``scancel``, with Submitit's SIGTERM bypass in place) and SIGUSR2 sent to a
  training process and its workers mid-iteration: the process exits with 128 + signal, the
  iteration in flight is not recorded, the run says ``interrupted``; a relaunch with
  ``resume=true`` finishes with metrics equal to an uninterrupted run of the same seed (timings
  aside). Before the policy, SIGTERM killed the workers and the trainer recorded an iteration
  with every episode crashed and went on;
- ``kill -9`` mid-iteration, then resume: the same comparison (no cleanup code runs at all);
- an iteration where most episodes crashed is rolled out again after restarting the workers
  (the run's metrics then equal a run without crashes), and a run fails with the reason when
  it stays crashed-heavy; ``g2po_bench.analysis.load`` (``g2po report``) flags crashed-heavy iterations.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import training_process as tp

from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.core.protocol import Task
from g2po_bench.runtime.shutdown import (
    JOB_SIGNALS,
    GracefulShutdown,
    Interrupted,
    ShutdownRequested,
    check_stop,
)
from g2po_bench.runtime.workers import EnvPool

TIMEOUT = 900  # seconds; a run takes ~10 s on 2 idle cores, much longer on a loaded machine
TASK = Task(task_id="c4", task_type="corridor", env="toy", payload={"length": 4})


# ---------------------------------------------------------------------------- workers
def test_workers_survive_the_jobs_signals_and_keep_answering():
    with EnvPool(get_benchmark("toy"), None, 2) as pool:
        pool.reset([(0, TASK), (1, TASK)])
        pids = pool.worker_pids()
        for sig in (signal.SIGUSR2, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            for pid in pids:
                os.kill(pid, sig)
        time.sleep(0.3)
        assert all(tp.alive(p) for p in pids)
        obs = pool.step([(0, "go east"), (1, "go east")])
        assert obs[0].text == "You are in room 1 of 4." and not obs[0].info.get("crashed")
        assert obs[1].text == "You are in room 1 of 4."
        assert pool.restarts == 0 and pool.worker_pids() == pids
    time.sleep(0.2)
    assert not any(tp.alive(p) for p in pids)  # closed with the pool


def test_an_unclosed_pool_does_not_hang_the_interpreter_at_exit():
    """Workers ignore SIGTERM, which multiprocessing's exit handler relies on for daemonic
    children: the pool's own exit hook closes them first."""
    import subprocess
    import sys

    code = ("from g2po_bench.runtime.workers import EnvPool\n"
            "from g2po_bench.benchmarks.registry import get_benchmark\n"
            "pool = EnvPool(get_benchmark('toy'), None, 2)\n"
            "print(*pool.worker_pids())\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=tp.REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    pids = [int(x) for x in res.stdout.split()]
    assert len(pids) == 2
    time.sleep(0.2)
    assert not any(tp.alive(p) for p in pids)


def test_other_forked_children_keep_default_sigterm_and_ignore_the_preemption_signal(dispositions):
    """The fork hook: a child forked while the trainer's guard is active does not inherit its
    stop-request handler (multiprocessing's terminate() must still end it) and ignores SIGUSR2
    (an inherited Submitit handler would requeue the job from the child)."""
    import multiprocessing as mp

    dispositions(signal.SIGTERM, signal.SIG_DFL)

    def child(q):
        q.put((signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
               signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN))
        time.sleep(60)

    with GracefulShutdown(log=lambda m: None):
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        proc = ctx.Process(target=child, args=(q,))
        proc.start()
        assert q.get(timeout=30) == (True, True)
        os.kill(proc.pid, signal.SIGUSR2)
        time.sleep(0.2)
        assert proc.is_alive()
        proc.terminate()
        proc.join(timeout=10)
        assert proc.exitcode == -signal.SIGTERM


def test_job_signals_cover_the_schedulers_signals():
    assert {signal.SIGTERM, signal.SIGINT, signal.SIGUSR2, signal.SIGUSR1} <= set(JOB_SIGNALS)


# ---------------------------------------------------------------------------- the guard
def test_guard_turns_sigterm_into_a_stop_request_and_exit_status_143(dispositions):
    dispositions(signal.SIGTERM, signal.SIG_DFL)
    prev = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as info, GracefulShutdown(log=lambda m: None) as guard:
        check_stop()  # nothing requested: no-op
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert guard.requested == signal.SIGTERM
        with pytest.raises(ShutdownRequested):
            check_stop()
        guard.exit("stopped")
    assert info.value.code == 143 and str(info.value) == "stopped"
    assert signal.getsignal(signal.SIGTERM) is prev
    check_stop()  # no guard active: no-op


def test_guard_calls_the_previous_preemption_handler_at_the_safe_point():
    calls = []

    def requeue(signum, frame):  # what Submitit's checkpoint-and-requeue does: it exits
        calls.append(signum)
        raise SystemExit(-1)

    old = signal.signal(signal.SIGUSR2, requeue)
    try:
        with pytest.raises(SystemExit) as info, GracefulShutdown(log=lambda m: None) as guard:
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(0.05)
            assert calls == []  # deferred: not called inside the iteration
            guard.exit()
        assert calls == [signal.SIGUSR2] and info.value.code == -1
        assert signal.getsignal(signal.SIGUSR2) is requeue
    finally:
        signal.signal(signal.SIGUSR2, old)


def test_guard_keeps_ignored_signals_ignored(dispositions):
    dispositions(signal.SIGINT, signal.SIG_IGN)
    with GracefulShutdown(log=lambda m: None) as guard:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        assert guard.requested is None
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_a_guard_told_to_take_ignored_signals_takes_them_and_restores_them(dispositions):
    """A sweep job's guard: the launcher's shell, not the job, chose to ignore SIGINT."""
    dispositions(signal.SIGINT, signal.SIG_IGN)
    with GracefulShutdown(log=lambda m: None, signals=(signal.SIGINT,), take_ignored=True) as guard:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        assert guard.requested == signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


# ---------------------------------------------------------------------------- real runs
@pytest.fixture
def processes():
    """Training processes started by a test; SIGKILLed with their workers if still running at
    the end (a failed assertion must not leave them behind)."""
    started = []
    yield started
    for proc in started:
        if proc.poll() is None:
            tp.signal_job(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Metrics of an uninterrupted toy run (seed 3, 4 iterations), timings removed."""
    out = tmp_path_factory.mktemp("uninterrupted")
    assert tp.run_training(out, timeout=TIMEOUT) == 0, (out / "train.log").read_text()
    return tp.without_timings(tp.metrics(out))


@pytest.mark.parametrize("sig,every", [(signal.SIGTERM, 1), (signal.SIGUSR2, 1), (signal.SIGTERM, 3)],
                         ids=["SIGTERM", "SIGUSR2", "SIGTERM-checkpoint_every=3"])
def test_signal_mid_iteration_then_relaunch_matches_an_uninterrupted_run(tmp_path, uninterrupted, sig, every,
                                                                        processes):
    """With ``checkpoint_every=3`` no checkpoint exists yet when the signal comes (after
    iteration 2): the trainer writes the one of the last complete iteration itself."""
    extra = [f"train.checkpoint_every={every}"]
    proc = tp.start_training(tmp_path, *extra, job_like=True)
    processes.append(proc)
    tp.wait_for_iteration(tmp_path, 2, proc, timeout=TIMEOUT)
    workers = tp.signal_job(proc.pid, sig)  # the trainer and its workers, as Slurm does
    assert len(workers) >= 2
    assert proc.wait(timeout=TIMEOUT) == 128 + sig
    log = (tmp_path / "train.log").read_text()
    run = tp.run_dir(tmp_path)
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "interrupted" and f"interrupted by {sig.name}" in status["error"], status
    recorded = tp.metrics(tmp_path)
    assert [m["iteration"] for m in recorded] == list(range(1, status["iteration"] + 1))
    assert status["iteration"] >= 2
    assert all(m["train/crashed"] == 0 and m["train/steps"] > 0 for m in recorded), recorded
    ckpt = json.loads((run / "checkpoints" / "latest" / "trainer_state.json").read_text())
    assert ckpt["iteration"] == status["iteration"]
    assert not any(tp.alive(p) for p in workers), log

    assert tp.start_training(tmp_path, *extra, "resume=true").wait(timeout=TIMEOUT) == 0, \
        (tmp_path / "train.log").read_text()
    assert json.loads((run / "status.json").read_text())["state"] == "done"
    assert tp.without_timings(tp.metrics(tmp_path)) == uninterrupted


def test_kill_9_mid_iteration_then_resume_matches_an_uninterrupted_run(tmp_path, uninterrupted, processes):
    """A real kill: SIGKILL to the trainer and its workers (no handler, no cleanup runs)."""
    proc = tp.start_training(tmp_path)
    processes.append(proc)
    tp.wait_for_iteration(tmp_path, 2, proc, timeout=TIMEOUT)
    tp.signal_job(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=TIMEOUT) == -signal.SIGKILL
    run = tp.run_dir(tmp_path)
    assert json.loads((run / "status.json").read_text())["state"] == "running"  # died, not stopped
    killed_at = json.loads((run / "checkpoints" / "latest" / "trainer_state.json").read_text())["iteration"]
    assert 1 <= killed_at < 4  # iteration 2 was recorded; its checkpoint may not have been written yet
    assert tp.start_training(tmp_path, "resume=true").wait(timeout=TIMEOUT) == 0, (tmp_path / "train.log").read_text()
    assert f"resumed from the checkpoint of iteration {killed_at}" in (tmp_path / "train.log").read_text()
    assert tp.without_timings(tp.metrics(tmp_path)) == uninterrupted


# ---------------------------------------------------------------------------- crashed-heavy iterations
def _crashing_rollouts(monkeypatch, iteration: int, times: int) -> list[int]:
    """Make iteration ``iteration``'s rollouts crash ``times`` times: every worker process is
    SIGKILLed just before its rollout starts (all its episodes crash)."""
    import g2po_bench.algorithms.backends.local.trainer as trainer

    real = trainer.training_rollouts
    calls: list[int] = []

    def flaky(cfg, policy, pool, bench, tasks, it, **kwargs):
        calls.append(it)
        if it == iteration and calls.count(it) <= times:
            for w in pool._workers:
                w.process.kill()
                w.process.join(timeout=5)
        return real(cfg, policy, pool, bench, tasks, it, **kwargs)

    monkeypatch.setattr(trainer, "training_rollouts", flaky)
    return calls


def _cfg(out, *extra):
    from g2po_bench.runconfig import load_config

    return load_config(None, tp.train_args(out, "train.iterations=3", *extra))


def test_crashed_heavy_iteration_is_retried_and_the_run_matches_one_without_crashes(tmp_path, monkeypatch):
    from g2po_bench.core.rundir import read_jsonl
    from g2po_bench.train import run_train

    clean = read_jsonl(run_train(_cfg(tmp_path / "a")).metrics_path)
    calls = _crashing_rollouts(monkeypatch, iteration=2, times=2)
    run = run_train(_cfg(tmp_path / "b", "train.crash_retries=2"))
    assert calls == [1, 2, 2, 2, 3]  # iteration 2 rolled out three times
    got = read_jsonl(run.metrics_path)
    assert [m["train/crashed"] for m in got] == [0, 0, 0]
    assert tp.without_timings(got) == tp.without_timings(clean)


def test_run_fails_with_the_reason_when_the_iteration_stays_crashed_heavy(tmp_path, monkeypatch):
    from g2po_bench.core.rundir import read_jsonl
    from g2po_bench.train import run_train

    calls = _crashing_rollouts(monkeypatch, iteration=2, times=10)
    with pytest.raises(RuntimeError, match=r"iteration 2: more than 50% of the episodes crashed in each of 2 "
                                           r"attempts \(8/8, 8/8 crashed"):
        run_train(_cfg(tmp_path, "train.crash_retries=1"))
    assert calls == [1, 2, 2]
    (run,) = (tmp_path / "runs").iterdir()
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "failed" and "crashed" in status["error"]
    assert [m["iteration"] for m in read_jsonl(run / "metrics.jsonl")] == [1]


def test_report_flags_a_run_with_a_crashed_heavy_iteration(tmp_path):
    from synthetic_runs import make_eval, write_synthetic_run

    from g2po_bench.analysis.load import load_runs
    from g2po_bench.analysis.report import build_report
    from g2po_bench.core.crashes import crashed_heavy_iterations

    ev = make_eval(3, 0.5, {"pick_and_place_simple": 0.5})
    metrics = [{"iteration": i, "train/crashed": c, "train/episodes": 8, "train/steps": s}
               for i, c, s in ((1, 0, 40), (2, 1, 38), (3, 8, 0))]
    write_synthetic_run(tmp_path / "runs" / "bad", seed=0, iterations=3, final=ev, metrics=metrics)
    write_synthetic_run(tmp_path / "runs" / "good", seed=1, iterations=3, final=ev, metrics=metrics[:2] + [
        {"iteration": 3, "train/crashed": 4, "train/episodes": 8, "train/steps": 20}])
    # older metrics without train/episodes: the config's groups_per_batch x group_size
    write_synthetic_run(tmp_path / "runs" / "old", seed=2, iterations=2, final=ev,
                        metrics=[{"iteration": 1, "train/crashed": 7}, {"iteration": 2, "train/crashed": 2}],
                        extra_config={"train": {"iterations": 2, "groups_per_batch": 2, "group_size": 4}})
    assert crashed_heavy_iterations(metrics) == [3]
    loaded = load_runs(tmp_path / "runs")
    flagged = {p.run_id: p.reason for p in loaded.warnings if "crashed-heavy" in p.reason}
    assert set(flagged) == {"bad", "old"}
    assert "iteration(s) 3 " in flagged["bad"] and "iteration(s) 1 " in flagged["old"]
    counts = dict(zip(loaded.runs["run_id"], loaded.runs["metrics.crashed_heavy"]))
    assert counts == {"bad": 1, "good": 0, "old": 1}
    report = build_report(tmp_path / "runs", tmp_path / "report", figures=False)
    text = report.report_path.read_text()
    assert "`bad`: crashed-heavy iteration(s) 3" in text and "`good`: crashed" not in text
