"""g2po_bench.core.rundir.code_version: the git commit that records (sweep launches, benchmarks) name."""

import re
import shutil
import subprocess

import pytest

from g2po_bench.core.rundir import code_version


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_checkout_gives_its_commit_and_dirty_flag(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (repo / "f.py").write_text("one = 1\n")
    (repo / "README.md").write_text("one\n")
    (repo / "eval.json").write_text("{}\n")
    run("add", "f.py", "README.md", "eval.json")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert code_version(repo) == {"commit": head, "dirty": False}
    assert re.fullmatch(r"[0-9a-f]{40}", head)
    (repo / "f.py").write_text("two = 2\n")
    assert code_version(repo) == {"commit": head, "dirty": True}
    run("add", "f.py")  # staged but not committed: still dirty
    assert code_version(repo) == {"commit": head, "dirty": True}
    run("reset", "-q", "f.py")
    run("checkout", "-q", "f.py")
    assert code_version(repo)["dirty"] is False
    (repo / "new_estimator.py").write_text("x")  # a new file is code the commit lacks
    assert code_version(repo)["dirty"] is True
    (repo / ".gitignore").write_text("runs/\nnew_estimator.py\n.gitignore\n")  # ignored files are not
    (repo / "runs").mkdir()
    (repo / "runs" / "config.yaml").write_text("seed: 0\n")
    (repo / "notes.md").write_text("a new record\n")  # nor new documentation and records
    assert code_version(repo)["dirty"] is False
    (repo / "README.md").write_text("two\n")  # documentation and records are not code
    (repo / "eval.json").write_text('{"success": 1}\n')
    assert code_version(repo) == {"commit": head, "dirty": False}


def test_a_folder_outside_git_gives_none(tmp_path):
    assert code_version(tmp_path) is None


def test_a_run_folder_status_names_the_code_that_wrote_it(tmp_path):
    from g2po_bench.core.rundir import RunDir

    run = RunDir(tmp_path / "run").create()
    run.write_status("running", 1, 2)
    status = run.read_status()
    assert status["code"] == code_version()  # this checkout's commit (None outside git)
    if status["code"] is not None:
        assert re.fullmatch(r"[0-9a-f]{40}", status["code"]["commit"])
    # and the machine: the CPU and torch's kernel set change the numbers, not only the speed
    import torch

    machine = status["machine"]
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine["torch"] == torch.__version__ and machine["cpus"] >= 1
    assert machine["cpu"] is None or isinstance(machine["cpu"], str)


def test_this_process_records_the_checkout_it_started_from(monkeypatch):
    """A long process (a sweep job training several runs) keeps the code version it first read:
    commits made while it runs are not code it loaded."""
    from g2po_bench.core import rundir

    reads = []
    monkeypatch.setattr(rundir, "_PROCESS_CODE", [])
    monkeypatch.setattr(rundir, "_read_code_version",
                        lambda root: reads.append(root) or {"commit": f"{len(reads):040d}", "dirty": False})
    first = code_version()
    assert code_version() == first == {"commit": f"{1:040d}", "dirty": False} and len(reads) == 1
    assert code_version(rundir._REPO_ROOT) == {"commit": f"{2:040d}", "dirty": False}  # an explicit root reads again
