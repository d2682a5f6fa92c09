"""A real training process for signal and kill tests: start it, interrupt it mid-iteration,
relaunch it, and compare its metrics with an uninterrupted run of the same seed.

``start_training`` runs ``python -m g2po_bench.cli train`` (this checkout's code) in a subprocess,
with the signal dispositions of a process started from a terminal (set explicitly: pytest may run
with SIGINT ignored, and its children would inherit that). With ``job_like=True`` the process first installs the signal handlers a Submitit job has (SIGTERM
ignored with a log line, as Submitit's ``bypass`` does), so a SIGTERM behaves as under
``scancel``: the process is not killed by it, and only the trainer's signal policy
(g2po_bench/runtime/shutdown.py) can stop it cleanly. ``signal_job`` sends a signal to the training
process *and every descendant* (its environment workers), as Slurm signals every process of a
job step.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sweep_support import descendants, kill_tree  # shared with the sweep tests

REPO = Path(__file__).resolve().parents[1]

TOY_TRAIN = [
    "env.name=toy", "env.max_steps=6", "env.num_workers=2", "train.iterations=4",
    "train.groups_per_batch=2", "train.group_size=4", "train.sft_epochs=1", "train.sft_batch_size=8",
    "train.max_response_tokens=12", "model.hidden_size=32", "model.intermediate_size=64",
    "model.num_heads=2", "model.vocab_size=300", "model.device=cpu", "eval.num_tasks=2", "eval.every=2",
    "progress=false", "seed=3",
]

#: Metric keys that measure time (they differ between any two runs).
TIMING_KEYS = ("time_s", "iter_s", "rollout_s", "adv_s", "update_s")

_WRAPPER = """
import signal, sys
# the dispositions of a process started from a terminal, whoever started the tests
signal.signal(signal.SIGINT, signal.default_int_handler)
for sig in (signal.SIGTERM, signal.SIGUSR2, signal.SIGHUP):
    signal.signal(sig, signal.SIG_DFL)
if sys.argv[1] == "job":
    # what Submitit's job process does: SIGTERM (and SIGCONT) are bypassed with a log line
    def bypass(signum, frame):
        print(f"bypassing signal {signal.Signals(signum).name}", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, bypass)
    signal.signal(signal.SIGCONT, bypass)
from g2po_bench.cli import main
sys.exit(main(["train", *sys.argv[2:]]))
"""


def train_args(out: Path, *extra: str) -> list[str]:
    """The toy training arguments writing under ``out`` (the runs and the warm start with its tiny model)."""
    return [*TOY_TRAIN, f"output_dir={out / 'runs'}",
            f"train.warm_start_cache={out / 'warm_start'}", *extra]


def start_training(out: Path, *extra: str, job_like: bool = False, log: Path | None = None) -> subprocess.Popen:
    """Start a toy training run in a subprocess (see the module docstring); output to ``log``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    log = log or out / "train.log"
    out.mkdir(parents=True, exist_ok=True)
    fh = open(log, "a")  # noqa: SIM115 - handed to the child
    return subprocess.Popen([sys.executable, "-c", _WRAPPER, "job" if job_like else "plain", *train_args(out, *extra)],
                            cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, text=True)


def run_training(out: Path, *extra: str, timeout: float = 300) -> int:
    """Run a toy training to the end in a subprocess; returns its exit status."""
    proc = start_training(out, *extra)
    return proc.wait(timeout=timeout)


def run_dir(out: Path) -> Path:
    """The one run folder under ``out/runs``."""
    (d,) = [p for p in (out / "runs").iterdir() if p.is_dir()]
    return d


def metrics(out: Path) -> list[dict]:
    """The parsed ``metrics.jsonl`` of the run under ``out`` (raises on a torn line)."""
    path = run_dir(out) / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def without_timings(records: list[dict]) -> list[dict]:
    """``records`` without their timing keys (:func:`sweep_support.is_timing_key`)."""
    from sweep_support import is_timing_key

    return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]


def wait_for_iteration(out: Path, k: int, proc: subprocess.Popen, timeout: float = 240) -> None:
    """Wait until the run under ``out`` has recorded iteration ``k`` (the process must still run)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise AssertionError(f"the training process ended (status {proc.returncode}) before iteration {k}")
        try:
            if len(metrics(out)) >= k:
                return
        except (OSError, ValueError, json.JSONDecodeError):
            pass
        time.sleep(0.005)
    raise TimeoutError(f"iteration {k} not recorded within {timeout:.0f} s")




def signal_job(pid: int, sig: int) -> list[int]:
    """Send ``sig`` to ``pid`` and all its descendants (as Slurm signals a job step); returns
    the descendants signalled (:func:`sweep_support.kill_tree`)."""
    return kill_tree(pid, sig)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live (non-zombie) process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


__all__ = ["REPO", "TOY_TRAIN", "TIMING_KEYS", "train_args", "start_training", "run_training", "run_dir",
           "metrics", "without_timings", "wait_for_iteration", "descendants", "signal_job", "alive",
           "signal"]
