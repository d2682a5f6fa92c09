"""``g2po sweep cancel`` of local jobs, whatever signal dispositions the jobs inherited.

A launch from a non-interactive background shell (``nohup g2po sweep launch ... &``, ``cmd &`` in a
script) starts the launcher, Submitit's job controllers and the jobs with SIGINT ignored. The local
cancel used to send SIGINT to the controller, which then ignored it: the cancel printed
"cancelled" and the job trained its runs to the end. Now

- the cancel sends SIGTERM to the controller (Submitit sets its SIGTERM handler itself and passes
  the signal on to the job), sends it again while the job runs on (a job submitted a moment ago
  may not have set its handlers yet), and says "cancelled" only once it has seen every process of
  the job end, or names the processes still running;
- the job takes SIGTERM and SIGINT whatever it inherited (:func:`g2po_bench.sweeps.job.job_guard`),
  also between its runs and while a run is starting.

Every process started here gets the dispositions the test is about set explicitly (a shell's
``&`` ignores SIGINT; a terminal's foreground process has Python's default handler), so the
tests do not depend on how pytest itself was started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sweep_support import (
    REPO,
    assert_complete_run,
    checkpoint_iteration,
    events,
    frozen_until_signalled,
    run_cli,
    toy_spec,
    wait_for,
)

from g2po_bench.runtime.shutdown import (
    GracefulShutdown,
    Interrupted,
    ShutdownRequested,
    check_stop,
)
from g2po_bench.sweeps import launcher
from g2po_bench.sweeps.job import job_guard
from g2po_bench.sweeps.scheduler import ProcessTree, process_start
from g2po_bench.sweeps.spec import expand, load_spec

TIMEOUT = 600

# ---------------------------------------------------------------------------- the job's guard, on real processes
JOB = """
import signal, sys, time
from g2po_bench.sweeps.job import job_guard
with job_guard(sys.argv[1]) as guard:
    print("ready", flush=True)
    t0 = time.time()
    while guard.requested is None and time.time() - t0 < float(sys.argv[2]):
        time.sleep(0.01)
    if guard.requested is not None:
        print(f"stopping on {signal.Signals(guard.requested).name}", flush=True)
        guard.exit()
print("ran to the end", flush=True)
"""


def _ignore(*sigs: int):
    """A ``preexec_fn``: the child starts with ``sigs`` ignored (as after a shell's ``&``, or a
    launcher whose SIGTERM was ignored)."""
    def pre():
        for s in sigs:
            signal.signal(s, signal.SIG_IGN)
    return pre


def _job(cluster: str, seconds: float, *ignored: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", JOB, cluster, str(seconds)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_ignore(*ignored))


def _signal_when_ready(proc: subprocess.Popen, sig: int) -> tuple[str, str, int]:
    first = proc.stdout.readline().strip()
    proc.send_signal(sig)
    rest, _ = proc.communicate(timeout=60)
    return first, rest.strip(), proc.returncode


@pytest.mark.parametrize("cluster", ["local", "slurm"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_job_started_with_its_stop_signals_ignored_stops_on_them(cluster, sig):
    got = _signal_when_ready(_job(cluster, 60, signal.SIGINT, signal.SIGTERM), sig)
    assert got == ("ready", f"stopping on {sig.name}", 128 + sig)


def test_the_debug_executor_keeps_what_the_launching_process_ignores():
    """The debug executor runs the job in the launching process (the user's terminal or script):
    a signal that process ignores stays ignored (the job runs to the end of its 2 s)."""
    assert _signal_when_ready(_job("debug", 2, signal.SIGINT), signal.SIGINT) == ("ready", "ran to the end", 0)


def test_the_job_guard_restores_the_handlers_the_job_had(dispositions):
    def mine(signum, frame):  # a handler of the process's own
        raise AssertionError("not called")

    dispositions(signal.SIGINT, mine)
    dispositions(signal.SIGTERM, signal.SIG_IGN)
    with job_guard("local"):
        assert signal.getsignal(signal.SIGINT) is not mine
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is mine and signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


def test_a_request_between_runs_reaches_the_trainers_guard_and_outlives_it(dispositions):
    """A SIGTERM that comes while a run is starting (the trainer's guard not yet entered) is kept:
    the trainer's guard stops at its first check point, and after it the job's guard still holds
    the request (no further run starts)."""
    dispositions(signal.SIGTERM, signal.SIG_DFL)
    with pytest.raises(Interrupted) as info, job_guard("local") as job:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert job.requested == signal.SIGTERM
        with GracefulShutdown(log=lambda m: None) as trainer:
            assert trainer.requested == signal.SIGTERM
            with pytest.raises(ShutdownRequested):
                check_stop()
        assert job.requested == signal.SIGTERM
        job.exit()
    assert info.value.code == 143
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    check_stop()  # no guard active, no request left


# ---------------------------------------------------------------------------- the cancel's wait, on stand-in jobs
STANDIN = """
import signal, sys, time
n = int(sys.argv[1])  # SIGTERMs to take before exiting (0: never)
seen = []
def on_term(signum, frame):
    seen.append(signum)
    if n and len(seen) >= n:
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def _standin_sweep(tmp_path: Path, term_to_exit: int):
    """A sweep whose one run's last submission is a local job played by a stand-in process that
    exits after ``term_to_exit`` SIGTERMs (the first ones lost, like a job still starting; 0: never)."""
    spec_file = toy_spec(tmp_path / "standin.yaml", "standin")
    spec = load_spec(spec_file, output_dir=tmp_path / "out")
    (run,) = expand(spec)
    proc = subprocess.Popen([sys.executable, "-c", STANDIN, str(term_to_exit)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    state = launcher.SweepState(spec.output_dir)
    state.run(run.run_id)["submissions"].append(
        {"cluster": "local", "job_id": str(proc.pid), "host": launcher.HOST, "start": process_start(proc.pid),
         "runs_in_job": [run.run_id]})
    state.save()
    return spec, proc


def test_cancel_sends_sigterm_again_until_the_job_stops(tmp_path):
    spec, proc = _standin_sweep(tmp_path, term_to_exit=2)
    try:
        (done,) = launcher.cancel(spec, timeout=30)
        assert proc.wait(timeout=10) == 0
        assert done["ok"] and done["stopped"] and done["seconds"] >= launcher.CANCEL_RESEND_S, done
    finally:
        proc.kill()
        proc.wait()


def test_cancel_names_the_processes_of_a_job_that_runs_on(tmp_path):
    spec, proc = _standin_sweep(tmp_path, term_to_exit=0)
    try:
        (done,) = launcher.cancel(spec, timeout=3)
        assert proc.poll() is None
        assert done["ok"] and not done["stopped"] and done["still_running"] == f"pid {proc.pid} (job)", done
        cli = run_cli(["cancel", str(spec.path), "--output-dir", str(spec.output_dir), "--timeout", "1"],
                      cwd=tmp_path)
        assert cli.returncode == 1
        assert f"is still running after 1 s: pid {proc.pid}" in cli.stdout + cli.stderr, cli.stdout + cli.stderr
    finally:
        proc.kill()
        proc.wait()
    cli = run_cli(["cancel", str(spec.path), "--output-dir", str(spec.output_dir)], cwd=tmp_path)
    assert cli.returncode == 0 and "no queued or running job" in cli.stderr


# ---------------------------------------------------------------------------- real sweeps launched from a background shell
def _launch_from_background_shell(args: list[str], cwd: Path, log: Path) -> int:
    """``g2po sweep launch ARGS &`` in a non-interactive bash script, which starts the launch (and
    through it the controllers and jobs) with SIGINT ignored; returns the launch's exit status."""
    cmd = " ".join(map(_quote, [sys.executable, "-m", "g2po_bench.cli", "sweep", "launch", *args]))
    script = f"{cmd} > {_quote(str(log))} 2>&1 &\nwait $!\n"
    env = dict(os.environ, PYTHONPATH=str(REPO) + (os.pathsep + os.environ["PYTHONPATH"]
                                                   if os.environ.get("PYTHONPATH") else ""))
    proc = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return proc.returncode


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def _job_tree(spec) -> ProcessTree:
    sub = launcher.SweepState(spec.output_dir).last_submission(expand(spec)[0].run_id)
    return ProcessTree(int(sub["job_id"]), sub.get("start"))


def _sigint_ignored(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(x for x in status.splitlines() if x.startswith("SigIgn:")).split()[1], 16)
    return bool(mask & (1 << (signal.SIGINT - 1)))


@pytest.mark.slow
def test_cancel_stops_a_job_launched_from_a_background_shell_and_the_run_resumes(tmp_path):
    n = 12
    spec_file = toy_spec(tmp_path / "bg.yaml", "bg", iterations=n)
    out = tmp_path / "out"
    assert _launch_from_background_shell([str(spec_file), "--cluster", "local", "--output-dir", str(out)],
                                         tmp_path, tmp_path / "launch.log") == 0, (tmp_path / "launch.log").read_text()
    spec = load_spec(spec_file, output_dir=out)
    (run,) = expand(spec)
    run_dir = out / "runs" / run.run_id
    tree = _job_tree(spec)
    assert _sigint_ignored(tree.root), "the shell's & did not pass SIGINT on ignored"
    wait_for(lambda: checkpoint_iteration(run_dir) >= 2, TIMEOUT, what="a checkpoint at iteration 2")

    trainer = json.loads((out / "claims" / f"{run.run_id}.json").read_text())["pid"]
    with frozen_until_signalled(trainer):  # the run cannot finish before the cancel's SIGTERM
        (done,) = launcher.cancel(spec, timeout=300)  # what `g2po sweep cancel` does, without its start-up time
    assert done["ok"] and done["stopped"], done
    assert tree.alive() == []  # every process of the job ended before the cancel said so
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "interrupted" and "SIGTERM" in status["error"], status
    assert 2 <= status["iteration"] < n
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [m["iteration"] for m in lines] == list(range(1, status["iteration"] + 1))
    assert all(m["train/crashed"] == 0 and m["train/steps"] > 0 for m in lines), lines
    row = launcher.sweep_status(spec)[0]
    assert row.state == "failed" and "cancelled" in row.detail, row.detail

    assert _launch_from_background_shell([str(spec_file), "--cluster", "local", "--output-dir", str(out), "--wait",
                                          "--timeout", str(TIMEOUT)], tmp_path, tmp_path / "relaunch.log") == 0, \
        (tmp_path / "relaunch.log").read_text()
    assert_complete_run(run_dir, n)
    starts = events(out, run.run_id, "start")
    assert len(starts) == 2 and starts[1]["resume_from"] == status["iteration"]


@pytest.mark.slow
def test_cancel_stops_a_job_submitted_a_moment_ago(tmp_path):
    """The case that printed "cancelled" while the job went on and trained both of its runs: a
    local job with two runs, launched from a background shell, cancelled as soon as the launch
    returns (its processes are still starting)."""
    spec_file = toy_spec(tmp_path / "now.yaml", "now", seeds=(0, 1), iterations=30, max_parallel=1)
    out = tmp_path / "out"
    assert _launch_from_background_shell([str(spec_file), "--cluster", "local", "--output-dir", str(out)],
                                         tmp_path, tmp_path / "launch.log") == 0, (tmp_path / "launch.log").read_text()
    spec = load_spec(spec_file, output_dir=out)
    tree = _job_tree(spec)
    assert _sigint_ignored(tree.root), "the shell's & did not pass SIGINT on ignored"
    cli = run_cli(["cancel", str(spec_file), "--output-dir", str(out), "--timeout", "300"], cwd=tmp_path)
    assert cli.returncode == 0 and "cancelled: local job" in cli.stderr and "it stopped" in cli.stderr, \
        cli.stdout + cli.stderr
    assert tree.alive() == []  # every process of the job ended before the cancel said so
    time.sleep(1.0)
    for r in expand(spec):
        st = json.loads((out / "runs" / r.run_id / "status.json").read_text()) \
            if (out / "runs" / r.run_id / "status.json").exists() else {}
        assert st.get("state") != "done", (r.run_id, st)
    assert len(events(out, kind="start")) <= 1  # the second run never started
    assert all(r.state == "failed" and "cancelled" in r.detail for r in launcher.sweep_status(spec))
