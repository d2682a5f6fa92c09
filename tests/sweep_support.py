"""Test support for the sweep tests (``tests/test_sweep_*.py``, ``tests/training_process.py``).

- :func:`toy_spec`: write a small spec on the toy environment (seconds per run on a CPU).
- :func:`slurm_cluster`: start the single-node Slurm cluster of ``sweeps/slurm`` (or reuse a
  running one) and return the environment to talk to it.
- :func:`wait_for`, :func:`kill_tree`: poll a condition; signal a process and its descendants.
- :func:`frozen_until_signalled`: hold a training process still (SIGSTOP) until a signal under
  test is pending for it, so a toy run cannot finish before the signal arrives on a slow machine.
- :func:`reference_metrics`, :func:`metrics_without_timings`: the metrics of an uninterrupted
  run of a sweep run's config, to compare an interrupted and resumed run with.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import yaml

from g2po_bench.sweeps.scheduler import descendants

__all__ = ["REPO", "toy_spec", "run_cli", "start_cli", "slurm_cluster", "stop_slurm_cluster",
           "wait_for", "kill_tree", "frozen_until_signalled", "descendants", "slurm_wanted", "checkpoint_iteration", "events",
           "assert_complete_run", "metrics_without_timings", "reference_metrics", "TIMING_KEYS"]

REPO = Path(__file__).resolve().parent.parent
SLURM_DIR = REPO / "sweeps" / "slurm"

TOY_CONFIG: dict[str, Any] = {
    "env": {"name": "toy", "max_steps": 4, "num_workers": 1},
    "train": {"iterations": 2, "groups_per_batch": 2, "group_size": 2, "sft_epochs": 1,
              "max_response_tokens": 12},
    "model": {"hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "vocab_size": 300,
              "device": "cpu"},
    "eval": {"num_tasks": 2, "every": 0},
}


def toy_spec(path: str | os.PathLike, name: str, *, algorithms=("g2po",), seeds=(0,), iterations: int = 2,
             max_parallel: int = 2, extra: dict[str, Any] | None = None) -> Path:
    """Write a toy-environment spec to ``path`` and return it."""
    cfg = yaml.safe_load(yaml.safe_dump(TOY_CONFIG))
    cfg["train"]["iterations"] = iterations
    spec = {
        "name": name,
        "base": {"config": cfg},
        "grid": {"algorithm.name": list(algorithms)},
        "seeds": list(seeds),
        "resources": {"gpus": 0, "cpus": 1, "mem_gb": 2, "time": 20},
        "max_parallel": max_parallel,
    }
    spec.update(extra or {})
    path = Path(path)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


def run_cli(args: list[str], cwd: str | os.PathLike, env: dict[str, str] | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """``g2po sweep ARGS`` in a subprocess (output captured)."""
    return subprocess.run([sys.executable, "-m", "g2po_bench.cli", "sweep", *args], cwd=cwd, env=_env(env),
                          capture_output=True, text=True, timeout=timeout)


def start_cli(args: list[str], cwd: str | os.PathLike, log: str | os.PathLike,
              env: dict[str, str] | None = None) -> subprocess.Popen:
    """``g2po sweep ARGS`` in the background, output to ``log``."""
    fh = open(log, "w")  # noqa: SIM115 - handed to the child
    return subprocess.Popen([sys.executable, "-m", "g2po_bench.cli", "sweep", *args], cwd=cwd, env=_env(env),
                            stdout=fh, stderr=subprocess.STDOUT, text=True)


def wait_for(cond, timeout: float, poll: float = 0.1, what: str = "condition"):
    """Poll ``cond()`` until it returns a truthy value (returned); TimeoutError after ``timeout`` s."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = cond()
        if v:
            return v
        time.sleep(poll)
    raise TimeoutError(f"{what} not reached within {timeout:.0f} s")


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` to ``pid`` and to its descendants (like a node failure, or Slurm signalling a
    job step, would); returns the descendants signalled."""
    kids = descendants(pid)
    for p in [pid, *kids]:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass
    return kids


def _proc_status(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
            return dict(line.rstrip("\n").split(":\t", 1) for line in fh if ":\t" in line)
    except OSError:
        return {}


def _stopped(pid: int) -> bool:
    return _proc_status(pid).get("State", "").startswith(("T", "t"))


def _pending(pid: int, sig: int) -> bool:
    """Whether ``sig`` is pending for process ``pid`` (``/proc/<pid>/status`` ShdPnd/SigPnd)."""
    st = _proc_status(pid)
    bit = 1 << (int(sig) - 1)
    return any(int(st.get(k, "0"), 16) & bit for k in ("ShdPnd", "SigPnd"))


@contextmanager
def frozen_until_signalled(pid: int, sig: int = signal.SIGTERM, timeout: float = 120.0) -> Iterator[None]:
    """Hold process ``pid`` still (SIGSTOP) from now until ``sig`` is pending for it, then let it
    go on (SIGCONT), while the ``with`` block runs (e.g. a cancel that sends ``sig`` and waits
    for the job to stop). A toy run's iterations take tens of milliseconds: without this, a
    cancel that takes a few seconds on a loaded machine arrives after the run finished. The
    process is also let go when it is no longer stopped (Slurm sends SIGCONT with its SIGTERM),
    when it is gone, after ``timeout`` seconds, and when the block ends or raises."""
    os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: _stopped(pid) or not _proc_status(pid), 30, poll=0.01, what=f"process {pid} to stop")
    released = threading.Event()

    def release_when_signalled() -> None:
        t0 = time.time()
        while not released.is_set() and time.time() - t0 < timeout:
            if _pending(pid, sig) or not _stopped(pid):
                break
            time.sleep(0.01)
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)

    watcher = threading.Thread(target=release_when_signalled, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        released.set()
        watcher.join()


# ---------------------------------------------------------------------------- slurm
def slurm_wanted() -> bool:
    """Whether the Slurm tests must run: ``G2PO_TEST_SLURM=1`` or ``CI`` set."""
    v = os.environ.get("G2PO_TEST_SLURM", "")
    if v == "0":
        return False
    return v not in ("",) or bool(os.environ.get("CI"))


def slurm_cluster(state_dir: str | os.PathLike) -> tuple[dict[str, str], bool]:
    """A running single-node cluster: ``(env, started_here)``.

    Reuses the cluster of ``$SLURM_CONF`` when ``scontrol ping`` answers; otherwise runs
    ``sweeps/slurm/start_cluster.sh STATE_DIR`` (root; installs the Debian packages if needed).
    ``env`` has ``SLURM_CONF`` and ``PATH`` with the ``sacct`` stand-in first.
    """
    conf = os.environ.get("SLURM_CONF")
    if conf and shutil.which("scontrol"):
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True)
        if ping.returncode == 0 and "UP" in ping.stdout:
            bin_dir = Path(conf).parent / "bin"
            path = (str(bin_dir) + os.pathsep if bin_dir.is_dir() else "") + os.environ.get("PATH", "")
            return {"SLURM_CONF": conf, "PATH": path}, False
    env = dict(os.environ)
    env.pop("SLURM_CONF", None)
    ports = _free_ports(2)  # do not collide with a cluster that may already run on this machine
    env.update(G2PO_SLURMCTLD_PORT=str(ports[0]), G2PO_SLURMD_PORT=str(ports[1]))
    proc = subprocess.run(["bash", str(SLURM_DIR / "start_cluster.sh"), str(state_dir)],
                          capture_output=True, text=True, timeout=900, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"start_cluster.sh failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    conf = proc.stdout.strip().splitlines()[-1]
    bin_dir = Path(state_dir).resolve() / "bin"
    return {"SLURM_CONF": conf, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}, True


def _free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    try:
        for so in socks:
            so.bind(("127.0.0.1", 0))
        return [so.getsockname()[1] for so in socks]
    finally:
        for so in socks:
            so.close()


def stop_slurm_cluster(state_dir: str | os.PathLike) -> None:
    """Stop a test Slurm cluster started by :func:`start_slurm_cluster`."""
    subprocess.run(["bash", str(SLURM_DIR / "stop_cluster.sh"), str(state_dir)], capture_output=True,
                   timeout=120)


# ---------------------------------------------------------------------------- checks
def checkpoint_iteration(run_dir: str | os.PathLike) -> int:
    """Iteration of ``checkpoints/latest`` (0 if none or unreadable)."""
    import json

    try:
        return int(json.loads((Path(run_dir) / "checkpoints" / "latest" / "trainer_state.json").read_text())["iteration"])
    except (OSError, ValueError, KeyError):
        return 0


def events(sweep_dir: str | os.PathLike, run_id: str | None = None, kind: str | None = None) -> list[dict]:
    """Read the events a test sweep job recorded (for assertions)."""
    import json

    path = Path(sweep_dir) / "events.jsonl"
    out = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    return [e for e in out if (run_id is None or e.get("run_id") == run_id) and (kind is None or e.get("event") == kind)]


def assert_complete_run(run_dir: str | os.PathLike, iterations: int) -> None:
    """A finished run folder with no torn or duplicated record: status done, every metrics line
    parses and iterations 1..N appear exactly once, eval.json parses with its final evaluation
    at N, the checkpoint is at N."""
    import json

    run_dir = Path(run_dir)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "done" and status["iteration"] == iterations, status
    lines = [x for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    its = [json.loads(x)["iteration"] for x in lines]  # raises on a torn line
    assert its == list(range(1, iterations + 1)), its
    ev = json.loads((run_dir / "eval.json").read_text())
    assert ev["final"]["iteration"] == iterations and ev["before"]["iteration"] == 0
    assert 0.0 <= ev["final"]["success_rate"] <= 1.0
    assert checkpoint_iteration(run_dir) == iterations
    yaml.safe_load((run_dir / "config.yaml").read_text())


#: Metric keys that measure time (they differ between any two runs of the same config).
TIMING_KEYS = ("time_s", "iter_s", "rollout_s", "adv_s", "update_s")


def is_timing_key(key: str) -> bool:
    """Whether a metrics key is a measurement of time, speed or memory, which differs between two
    runs of the same config and seed: :data:`TIMING_KEYS`, ``*_s`` (``logprob_s``, ``record_s``,
    ``rollout/generate_s``, ``rollout/*_per_s``), ``*_seconds`` and ``memory/*``."""
    return key in TIMING_KEYS or key.endswith(("_s", "_seconds")) or key.startswith("memory/")


def metrics_without_timings(run_dir: str | os.PathLike) -> list[dict]:
    """The records of ``run_dir/metrics.jsonl`` without timing keys (:func:`is_timing_key`;
    raises on a torn line)."""
    import json

    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if not is_timing_key(k)} for x in lines if x.strip()]


def reference_metrics(sweep_dir: str | os.PathLike, run_id: str, cwd: str | os.PathLike,
                      out: str | os.PathLike, timeout: float = 600, cpus: int = 1) -> list[dict]:
    """Train ``<sweep>/configs/<run_id>.yaml`` uninterrupted into ``out`` (``g2po train
    --config``, from ``cwd``, the launch directory) and return its metrics without timings.

    The reference gets the CPUs of the sweep's job (``cpus``, its ``resources.cpus``; exported as
    ``G2PO_CPUS_PER_TASK`` like :mod:`g2po_bench.sweeps.job` does): with ``model.num_threads=0`` the model
    uses that many threads, and another thread count sums in another order (other metrics)."""
    proc = subprocess.run([sys.executable, "-m", "g2po_bench.cli", "train", "--config",
                           str(Path(sweep_dir) / "configs" / f"{run_id}.yaml"), f"output_dir={out}",
                           f"run_id={run_id}", "progress=false"],
                          cwd=cwd, env=_env({"G2PO_CPUS_PER_TASK": str(cpus), "OMP_NUM_THREADS": str(cpus)}),
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"reference run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return metrics_without_timings(Path(out) / run_id)
