"""``g2po sweep cancel`` of a local job started from a background shell.

The local executor cancels with SIGINT. A launch from a non-interactive background shell
(``nohup g2po sweep launch ... &``) starts its jobs with SIGINT ignored, and the cancel did
nothing (the runs went on to the end). :func:`g2po_bench.sweeps.job.accept_local_cancel`, called first in
every job, restores Python's SIGINT handler on the local executor only. Checked on real processes
started with SIGINT ignored.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from g2po_bench.sweeps.job import accept_local_cancel

ROOT = Path(__file__).resolve().parents[1]
JOB = """
import sys, time
from g2po_bench.sweeps.job import accept_local_cancel
restored = accept_local_cancel(sys.argv[1])
try:  # the line is printed inside the try: the parent's SIGINT may follow it at once
    print("restored" if restored else "kept", flush=True)
    time.sleep(float(sys.argv[2]))
except KeyboardInterrupt:
    print("cancelled", flush=True)
    sys.exit(130)
print("ran to the end", flush=True)
"""


def _job_with_sigint_ignored(cluster: str, seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", JOB, cluster, str(seconds)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))


def _cancel(proc: subprocess.Popen) -> tuple[str, str, int]:
    first = proc.stdout.readline().strip()
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    return first, rest.strip(), proc.returncode


def test_a_local_job_started_with_sigint_ignored_is_cancelled_by_sigint():
    first, rest, rc = _cancel(_job_with_sigint_ignored("local", 60))
    assert (first, rest, rc) == ("restored", "cancelled", 130)


def test_other_executors_keep_the_disposition_they_were_given():
    """Slurm cancels with SIGTERM; its jobs' SIGINT is left as the scheduler set it (here: ignored,
    so the job runs to the end of its 2 s)."""
    first, rest, rc = _cancel(_job_with_sigint_ignored("slurm", 2))
    assert (first, rest, rc) == ("kept", "ran to the end", 0)


def test_a_handler_already_installed_is_left_alone():
    before = signal.getsignal(signal.SIGINT)
    assert before is not signal.SIG_IGN  # pytest's main thread: Python's default handler
    assert accept_local_cancel("local") is False
    assert signal.getsignal(signal.SIGINT) is before
