"""The OpenRLHF backend's parts that need no OpenRLHF: imports, settings, Slurm/Ray contract,
and that its advantage path is the one both backends share."""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from g2po_bench.algorithms.backends.common import needs_critic
from g2po_bench.algorithms.backends.openrlhf.cluster import (
    Allocation,
    expand_nodelist,
    ray_start_commands,
    read_allocation,
)
from g2po_bench.algorithms.backends.openrlhf.settings import OpenRLHFSettings, load_settings
from g2po_bench.runconfig import load_config

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- imports
def test_package_cli_and_backend_import_without_the_gpu_stack():
    """With openrlhf, ray, deepspeed, vllm and flash_attn unimportable, the package, the CLI and
    the backend's light modules import, and train() fails with the install hint."""
    code = r"""
import importlib.abc, sys
BLOCK = {"openrlhf", "vllm", "flash_attn", "ray", "deepspeed"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCK:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)")
        return None
sys.meta_path.insert(0, Block())
import importlib.util
_orig = importlib.util.find_spec
importlib.util.find_spec = lambda n, *a: None if n.split(".")[0] in BLOCK else _orig(n, *a)
import g2po_bench.algorithms.backends.openrlhf as b
import g2po_bench.algorithms.backends.openrlhf.settings, g2po_bench.algorithms.backends.openrlhf.cluster
import g2po_bench.algorithms.backends.common, g2po_bench.algorithms.backends.openrlhf.engine_policy
import g2po_bench.cli, g2po_bench.train
from g2po_bench.runconfig import load_config
assert set(b.missing_requirements()) == BLOCK, b.missing_requirements()
try:
    g2po_bench.train.run_train(load_config(overrides=["backend=openrlhf", "env.name=toy"]))
except ImportError as exc:
    assert "pip install -e '.[openrlhf]'" in str(exc), exc
    print("OK", exc)
else:
    raise SystemExit("run_train did not fail")
assert not any(m.split(".")[0] in BLOCK for m in sys.modules), [m for m in sys.modules if m.split(".")[0] in BLOCK]
"""
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "OK" in res.stdout


def test_train_without_the_gpu_stack_prints_the_install_hint_alone(tmp_path):
    """Issue 48, item 8: ``g2po train backend=openrlhf`` without OpenRLHF's packages printed a
    traceback around the right message; it prints that message as one line (exit 2) and writes
    nothing."""
    code = r"""
import importlib.abc, importlib.util, sys
BLOCK = {"openrlhf", "vllm", "flash_attn", "ray", "deepspeed"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCK:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)")
        return None
sys.meta_path.insert(0, Block())
_orig = importlib.util.find_spec
importlib.util.find_spec = lambda n, *a: None if n.split(".")[0] in BLOCK else _orig(n, *a)
from g2po_bench.cli import main
sys.exit(main(sys.argv[1:]))
"""
    out = tmp_path / "runs"
    res = subprocess.run([sys.executable, "-c", code, "train", "backend=openrlhf", "env.name=toy", f"output_dir={out}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    err = res.stderr.strip()
    assert res.returncode == 2, res.stderr[-3000:]
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("setup error: backend=openrlhf needs OpenRLHF") and "pip install -e '.[openrlhf]'" in err
    assert "missing: openrlhf, ray, deepspeed, vllm, flash_attn" in err
    assert not out.exists()


def test_the_openrlhf_wheels_tests_package_does_not_shadow_this_folder():
    """The openrlhf wheel installs a top-level ``tests`` package into site-packages. This folder
    has no ``__init__.py`` and pytest (default import mode) imports its files by base name, so
    ``conftest`` and the test modules must come from here, not from site-packages."""
    import conftest

    assert Path(conftest.__file__).resolve().parent == ROOT / "tests"
    assert Path(__file__).resolve().parent == ROOT / "tests"
    assert __name__ == "test_openrlhf_unit"  # not tests.test_openrlhf_unit (the wheel's package)


# ---------------------------------------------------------------------------- settings
def test_settings_defaults_env_overrides_and_layouts():
    env = {"G2PO_OPENRLHF_ZERO_STAGE": "3", "G2PO_OPENRLHF_VLLM_ENABLE_SLEEP": "false",
           "G2PO_OPENRLHF_COLOCATE": "actor_ref", "G2PO_OPENRLHF_VLLM_NUM_ENGINES": "2",
           "G2PO_NUM_NODES": "2", "G2PO_GPUS_PER_NODE": "8"}
    s = load_settings(None, env)
    assert s.zero_stage == 3 and s.vllm_enable_sleep is False and s.colocate == "actor_ref"
    old = dict(os.environ)
    try:
        os.environ.update(env)
        r = s.resolved(needs_ref=True, needs_critic=True)
    finally:
        os.environ.clear()
        os.environ.update(old)
    # 16 GPUs: 2 for vLLM, actor+ref share 7, the critic gets 7
    assert (r.num_nodes, r.gpus_per_node, r.vllm_num_engines, r.actor_gpus) == (2, 8, 2, 7)
    assert r.group_shape() == (1, 7) and r.vllm_enable_sleep is False and r.ds_enable_sleep is False
    one = OpenRLHFSettings(num_nodes=1, gpus_per_node=1).resolved()
    assert (one.colocate, one.vllm_num_engines, one.actor_gpus, one.vllm_enable_sleep) == ("all", 1, 1, True)
    eight = OpenRLHFSettings(num_nodes=2, gpus_per_node=8, vllm_tensor_parallel_size=2).resolved()
    assert eight.vllm_num_engines == 8 and eight.group_shape() == (2, 8)
    with pytest.raises(ValueError, match="colocate=all needs"):
        OpenRLHFSettings(num_nodes=1, gpus_per_node=4, vllm_num_engines=3).resolved()
    with pytest.raises(ValueError, match="does not fit"):
        OpenRLHFSettings(num_nodes=1, gpus_per_node=2, colocate="none", vllm_num_engines=2).resolved()
    with pytest.raises(ValueError, match="not a valid"):
        load_settings(None, {"G2PO_OPENRLHF_ZERO_STAGE": "two"})
    # a config section (when the RunConfig has one) is read; unknown keys fail
    assert load_settings(SimpleNamespace(openrlhf={"zero_stage": 1}), {}).zero_stage == 1
    with pytest.raises(ValueError, match="unknown openrlhf setting"):
        load_settings(SimpleNamespace(openrlhf={"zero": 1}), {})


# ---------------------------------------------------------------------------- cluster contract
def test_slurm_nodelist_expansion():
    assert expand_nodelist("gpu[01-03,07],cpu5") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]
    assert expand_nodelist("n[8-10]") == ["n8", "n9", "n10"]
    assert expand_nodelist("a[1-2]-ib[3-4]") == ["a1-ib3", "a1-ib4", "a2-ib3", "a2-ib4"]
    assert expand_nodelist("single") == ["single"]


def test_allocation_from_the_sweeps_launcher_then_slurm_then_local():
    g2po = {"G2PO_NUM_NODES": "2", "G2PO_NODE_RANK": "1", "G2PO_NODELIST": "nodeA,nodeB",
            "G2PO_HEAD_NODE": "nodeA", "G2PO_GPUS_PER_NODE": "8", "G2PO_CPUS_PER_TASK": "32",
            "G2PO_RAY_ADDRESS": "nodeA:6400", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "x[1-3]"}
    a = read_allocation(g2po)
    assert (a.source, a.num_nodes, a.node_rank, a.head, a.port, a.gpus_per_node) == ("g2po", 2, 1, "nodeA", 6400, 8)
    assert a.multi_node and not a.is_head and a.address == "nodeA:6400"
    s = read_allocation({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu[3-4]", "SLURM_JOB_NUM_NODES": "2",
                         "SLURM_NODEID": "0", "SLURM_GPUS_ON_NODE": "4", "SLURM_CPUS_PER_TASK": "16"})
    assert (s.source, s.hosts, s.head, s.is_head, s.gpus_per_node, s.cpus_per_task) == (
        "slurm", ["gpu3", "gpu4"], "gpu3", True, 4, 16)
    loc = read_allocation({})
    assert loc.source == "local" and not loc.multi_node
    cmds = ray_start_commands(Allocation(num_nodes=2, hosts=["localhost", "b"], gpus_per_node=8, cpus_per_task=32,
                                         port=6400))
    assert cmds["head"][:4] == ["ray", "start", "--head", "--port=6400"] and "--num-gpus=8" in cmds["head"]
    assert cmds["worker"][:3] == ["ray", "start", "--address=localhost:6400"] and cmds["worker"][-1] == "--block"


def test_ray_cluster_roles_on_a_multi_node_allocation(monkeypatch):
    """Rank 0 starts the Ray head on the allocation's port, connects, waits for every node and
    stops the head at the end; a single node starts a local instance; an existing address is joined."""
    from g2po_bench.algorithms.backends.openrlhf import cluster

    calls, alive = [], iter([1, 1, 2])
    fake_ray = SimpleNamespace(
        is_initialized=lambda: False,
        init=lambda **k: calls.append(("init", k)),
        nodes=lambda: [{"Alive": True}] * next(alive),
        shutdown=lambda: calls.append(("shutdown",)),
    )
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    monkeypatch.setattr(cluster.subprocess, "run",
                        lambda cmd, check=False: calls.append(("run", cmd)) or SimpleNamespace(returncode=0))
    monkeypatch.setattr(cluster.shutil, "which", lambda name: "/usr/bin/ray")
    monkeypatch.setattr(cluster.time, "sleep", lambda s: None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    alloc = Allocation(num_nodes=2, hosts=["localhost", "w1"], gpus_per_node=8, port=6400, source="g2po")
    with cluster.RayCluster(alloc, runtime_env={"env_vars": {}}, log=lambda m: None):
        pass
    assert calls[0][0] == "run" and calls[0][1][:4] == ["ray", "start", "--head", "--port=6400"]
    assert calls[1] == ("init", {"address": "localhost:6400", "runtime_env": {"env_vars": {}}, "log_to_driver": True})
    assert calls[-2:] == [("shutdown",), ("run", ["ray", "stop"])]
    calls.clear()
    with cluster.RayCluster(Allocation(hosts=["localhost"]), runtime_env={}, log=lambda m: None):
        pass
    assert calls[0][0] == "init" and calls[0][1]["include_dashboard"] is False and "address" not in calls[0][1]
    assert calls[-1] == ("shutdown",)  # nothing to stop: ray.init's own instance
    calls.clear()
    with cluster.RayCluster(Allocation(hosts=["x"]), address="10.0.0.1:6379", runtime_env={}, log=lambda m: None):
        pass
    assert calls[0][1]["address"] == "10.0.0.1:6379"
    with pytest.raises(RuntimeError, match="only node rank 0"):
        cluster.RayCluster(Allocation(num_nodes=2, node_rank=1, hosts=["a", "b"]), log=lambda m: None).__enter__()
    alive = iter([1] * 10)
    with pytest.raises(RuntimeError, match="only 1 of 2 nodes joined"):
        cluster.RayCluster(alloc, node_wait_s=0.0, runtime_env={}, log=lambda m: None).__enter__()


# ---------------------------------------------------------------------------- advantages
def test_advantage_path_is_the_shared_one_not_a_copy():
    """Both trainers compute advantages with the run's bound estimator
    (:func:`g2po_bench.algorithms.registry.bind_run_estimator`), not with a copy that could drift:
    each trainer module imports it and nothing else of the registry. (The OpenRLHF trainer's module is read,
    not imported: importing it needs OpenRLHF.) What can differ between the backends, the
    conversion of step rows into OpenRLHF experiences and back with the per-step advantages on the
    action tokens, is tested against the real OpenRLHF package in tests/test_openrlhf_stack.py
    (test_step_rows_become_openrlhf_experiences_and_back,
    test_experience_maker_writes_the_registry_advantages_on_action_tokens)."""
    import ast

    for path in ("algorithms/backends/local/trainer.py", "algorithms/backends/openrlhf/trainer.py"):
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        imported = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        from_registry = {a for m, a in imported if m and m.startswith("g2po_bench.algorithms.registry")}
        assert from_registry == {"bind_run_estimator"}, path
    cfg = load_config(overrides=["algorithm.name=ppo", "env.name=toy", "backend=openrlhf"])
    assert needs_critic(cfg) and not needs_critic(load_config(overrides=["backend=openrlhf"]))
