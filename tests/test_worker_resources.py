"""Environment workers and the machine: the CPUs they may use, one BLAS/OpenMP thread each, and
bounded memory by recycling (issue 15 items 11 and 12)."""

from __future__ import annotations

import os

import pytest

from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.core.protocol import Task
from g2po_bench.runtime import cpus
from g2po_bench.runtime.workers import EnvPool


def corridor(n: int) -> Task:
    return Task(task_id=f"c{n}", task_type="corridor", env="toy", payload={"length": n})


# ---------------------------------------------------------------------------- CPUs (item 12)
@pytest.fixture
def no_limits(monkeypatch, tmp_path):
    """No SLURM/G2PO variable, no cgroup quota, 8 CPUs in the affinity mask."""
    for var in ("SLURM_CPUS_PER_TASK", "G2PO_CPUS_PER_TASK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(cpus, "cgroup_cpu_limit", lambda: None)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    return monkeypatch


def test_usable_cpus_follows_affinity_slurm_and_cgroup(no_limits):
    assert cpus.usable_cpus() == 8
    no_limits.setattr(os, "sched_getaffinity", lambda pid: {0})  # taskset -c 0
    assert cpus.usable_cpus() == 1
    no_limits.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    no_limits.setenv("SLURM_CPUS_PER_TASK", "3")
    assert cpus.usable_cpus() == 3
    no_limits.setenv("G2PO_CPUS_PER_TASK", "2")
    assert cpus.usable_cpus() == 2
    no_limits.delenv("SLURM_CPUS_PER_TASK")
    no_limits.delenv("G2PO_CPUS_PER_TASK")
    no_limits.setattr(cpus, "cgroup_cpu_limit", lambda: 1.5)  # a container limited to 1.5 CPUs
    assert cpus.usable_cpus() == 2


def test_default_worker_count_is_the_usable_cpus(no_limits):
    no_limits.setenv("SLURM_CPUS_PER_TASK", "1")
    with EnvPool(get_benchmark("toy"), None) as pool:
        assert pool.num_workers == 1 and len(pool.worker_pids()) == 1
    no_limits.delenv("SLURM_CPUS_PER_TASK")
    no_limits.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    with EnvPool(get_benchmark("toy"), None) as pool:
        assert pool.num_workers == 3


def test_cgroup_quota_v2_and_v1(tmp_path):
    v2 = tmp_path / "v2"
    (v2 / "job" / "step").mkdir(parents=True)
    (v2 / "cpu.max").write_text("max 100000\n")
    (v2 / "job" / "cpu.max").write_text("250000 100000\n")
    (v2 / "job" / "step" / "cpu.max").write_text("max 100000\n")
    (tmp_path / "cg2").write_text("0::/job/step\n")
    assert cpus.cgroup_cpu_limit(tmp_path / "cg2", v2) == pytest.approx(2.5)
    v1 = tmp_path / "v1"
    (v1 / "cpu" / "docker" / "abc").mkdir(parents=True)
    (v1 / "cpu" / "docker" / "abc" / "cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu" / "docker" / "abc" / "cpu.cfs_period_us").write_text("100000\n")
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "cg1").write_text("4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n")
    assert cpus.cgroup_cpu_limit(tmp_path / "cg1", v1) == pytest.approx(0.5)
    (tmp_path / "none").write_text("0::/\n")
    assert cpus.cgroup_cpu_limit(tmp_path / "none", tmp_path / "empty") is None


def test_every_thread_pool_in_a_worker_runs_one_thread():
    import numpy as np  # noqa: F401 - loads numpy's BLAS in the parent before the fork
    from threadpoolctl import threadpool_info

    assert any(p["user_api"] == "blas" for p in threadpool_info())
    with EnvPool(get_benchmark("toy"), None, 2) as pool:
        probes = pool.probe()
    assert len(probes) == 2
    for probe in probes:
        pools = probe["thread_pools"]
        assert pools, "threadpoolctl found no BLAS/OpenMP pool in the worker"
        assert {p["num_threads"] for p in pools} == {1}, pools


# ---------------------------------------------------------------------------- memory (item 11)
_MEMORY_PROBE = """
import json, sys
import g2po_bench.benchmarks.toy as toy
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.core.protocol import Task
from g2po_bench.runtime.workers import EnvPool

kept = []
real = toy.CorridorEnv.reset

def reset(self, task):  # every reset keeps 4 MiB alive in its worker, as textworld/alfworld keep a game
    kept.append(bytearray(b"\\x01") * (4 << 20))
    return real(self, task)

toy.CorridorEnv.reset = reset

def corridor(n):
    return Task(task_id=f"t/corridor-{n}", task_type="corridor", env="toy", payload={"length": n})

def rss(pool):
    return pool.probe()[0]["rss_bytes"] / 2**20

out = {}
with EnvPool(get_benchmark("toy"), None, 1, max_episodes=0) as pool:
    start = rss(pool)
    for i in range(24):
        pool.reset([(0, corridor(3 + i % 5))])
    out["grown"], out["recycled_off"] = rss(pool) - start, pool.recycled
with EnvPool(get_benchmark("toy"), None, 1, max_episodes=6) as pool:
    start, peak = rss(pool), 0.0
    for i in range(24):
        pool.reset([(0, corridor(3 + i % 5))])
        peak = max(peak, rss(pool) - start)
    out["peak"], out["recycled_on"] = peak, pool.recycled
print(json.dumps(out))
"""


def test_worker_memory_grows_without_recycling_and_stays_bounded_with_it():
    """Measured in a fresh interpreter, so that what earlier tests loaded into this process (and so
    into forked workers) does not blur the resident-memory figures."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", _MEMORY_PROBE], cwd=root, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["grown"] >= 90, out  # 24 x 4 MiB kept
    assert out["recycled_off"] == 0
    assert out["recycled_on"] == 3  # before the 7th, 13th and 19th reset
    assert out["peak"] <= 6 * 4 + 8, out  # at most one recycling period's growth


def test_recycling_waits_for_running_episodes_and_loses_none():
    with EnvPool(get_benchmark("toy"), None, 1, max_episodes=2) as pool:
        first = pool.worker_pids()
        pool.reset([(0, corridor(3)), (1, corridor(4))])  # 2 episodes: due for recycling
        assert pool.step([(1, "go east")])[1].text == "You are in room 1 of 4."
        obs = pool.reset([(0, corridor(3))])  # slot 1 is mid-episode: not recycled
        assert pool.worker_pids() == first and pool.recycled == 0 and not obs[0].done
        # slot 1's episode goes on where it was, on the same process
        assert pool.step([(1, "go east")])[1].text == "You are in room 2 of 4."
        assert pool.step([(1, "go east")])[1].won
        assert pool.step([(0, "go east")])[0].text == "You are in room 1 of 3."
        assert pool.step([(0, "go east")])[0].won
        pool.reset([(0, corridor(5)), (1, corridor(5))])  # everything between episodes: recycled
        assert pool.recycled == 1 and pool.worker_pids() != first
        assert pool.step([(0, "go east"), (1, "look")])[0].text == "You are in room 1 of 5."


def test_pool_rejects_negative_settings():
    # the pool is given the benchmark itself, not its name (the runtime looks no benchmark up)
    with pytest.raises(TypeError, match=r"EnvPool needs the benchmark itself, got 'toy'.*get_benchmark\(name\)"):
        EnvPool("toy", None, 1)
    with pytest.raises(ValueError, match="max_episodes=-1"):
        EnvPool(get_benchmark("toy"), None, 1, max_episodes=-1)
    with pytest.raises(ValueError, match="num_workers=-2"):
        EnvPool(get_benchmark("toy"), None, -2)


# ---------------------------------------------------------------------------- start-up
def test_alfworld_workers_are_forked_with_the_engine_already_imported():
    """EnvPool imports textworld/alfworld (``preload_worker_modules``) before it forks the workers,
    so a new or recycled worker does not import them again (measured: ~1.3 s per worker start)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from g2po_bench.runconfig import load_config\n"
            "from g2po_bench.runtime.workers import EnvPool\n"
            "from g2po_bench.benchmarks.registry import get_benchmark\n"
            "assert 'textworld' not in sys.modules\n"
            "pool = EnvPool(get_benchmark('alfworld'), load_config().env, num_workers=1)\n"
            "print('textworld' in sys.modules, 'alfworld.agents.environment.alfred_tw_env' in sys.modules)\n"
            "pool.close()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "True"]
