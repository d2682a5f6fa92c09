"""Starting Ray for the OpenRLHF backend: one node, or a Slurm allocation of several.

Contract with the sweeps launcher (:mod:`g2po_bench.sweeps.job`), which exports on every node of a job
before calling :func:`g2po_bench.train.run_train` on rank 0 only:

=========================  =====================================================================
``G2PO_NUM_NODES``         nodes of the allocation (> 1 = multi-node)
``G2PO_NODE_RANK``         this node's rank; 0 is the Ray head and the driver
``G2PO_NODELIST``          comma-separated host names, head first
``G2PO_HEAD_NODE``         host name of rank 0
``G2PO_GPUS_PER_NODE``     GPUs per node (the ``resources.gpus`` of the sweep)
``G2PO_CPUS_PER_TASK``     CPUs of the task on each node
``G2PO_RAY_ADDRESS``       ``<head>:<port>`` where rank 0 starts the Ray head (port from
                           ``G2PO_RAY_PORT``, default 6379)
=========================  =====================================================================

Rank 0 (this module): ``ray start --head --port=<port>`` on the head, connect the driver, wait
until ``G2PO_NUM_NODES`` nodes have joined (``openrlhf.node_wait_s``, 15 minutes by default),
train, and ``ray stop`` at the end. Ranks > 0 (the launcher's ``_worker_node``): wait for the
head's port, ``ray start --address=$G2PO_RAY_ADDRESS --block``, return when the head stops.

Without the launcher, inside a plain ``sbatch`` script, start one task per node
(``srun --ntasks-per-node=1 g2po train backend=openrlhf ...``): the same roles are taken from
Slurm's own variables (``SLURM_JOB_NODELIST``, ``SLURM_JOB_NUM_NODES``, ``SLURM_NODEID``,
``SLURM_GPUS_ON_NODE``, ``SLURM_CPUS_PER_TASK``), and ranks > 0 join the head themselves
(:func:`join_as_worker`). The run folder and the checkpoints must be on a file system every
node sees (DeepSpeed rank 0 may live on another node than the driver).

``RAY_ADDRESS`` or ``openrlhf.ray_address`` set: join that existing cluster and manage nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from g2po_bench.runtime.shutdown import preempt_signal

__all__ = ["Allocation", "read_allocation", "expand_nodelist", "RayCluster", "join_as_worker",
           "worker_runtime_env", "ray_start_commands"]

DEFAULT_RAY_PORT = 6379


@dataclass
class Allocation:
    """The nodes this run may use, as the launcher or Slurm describes them."""

    num_nodes: int = 1
    node_rank: int = 0
    hosts: list[str] = field(default_factory=list)
    gpus_per_node: int = 0
    cpus_per_task: int = 0
    port: int = DEFAULT_RAY_PORT
    source: str = "local"  # "g2po" (sweeps launcher) | "slurm" | "local"

    @property
    def head(self) -> str:
        return self.hosts[0] if self.hosts else socket.gethostname()

    @property
    def address(self) -> str:
        return f"{self.head}:{self.port}"

    @property
    def multi_node(self) -> bool:
        return self.num_nodes > 1

    @property
    def is_head(self) -> bool:
        return self.node_rank == 0


def expand_nodelist(text: str) -> list[str]:
    """Expand a Slurm host list: ``"gpu[01-03,07],cpu5"`` -> ``["gpu01", "gpu02", "gpu03",
    "gpu07", "cpu5"]`` (zero padding kept; also ``a[1-2]-ib[3-4]``)."""
    hosts: list[str] = []
    for item in _split_top(text.strip()):
        if not item:
            continue
        hosts.extend(_expand_one(item))
    return hosts


def _split_top(text: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def _expand_one(item: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", item)
    if m is None:
        return [item]
    prefix, suffix = item[: m.start()], item[m.end():]
    out = []
    for part in m.group(1).split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            width = len(lo)
            out.extend(f"{prefix}{str(i).zfill(width)}" for i in range(int(lo), int(hi) + 1))
        else:
            out.append(prefix + part)
    return [h for o in out for h in _expand_one(o + suffix)]


def read_allocation(environ: Mapping[str, str] | None = None) -> Allocation:
    """Read the allocation: the launcher's ``G2PO_*`` variables, else Slurm's, else one node."""
    env = os.environ if environ is None else environ

    def num(key: str, default: int = 0) -> int:
        v = env.get(key, "").strip()
        m = re.match(r"\d+", v)
        return int(m.group(0)) if m else default

    port = num("G2PO_RAY_PORT", DEFAULT_RAY_PORT)
    if env.get("G2PO_RAY_ADDRESS", "").rpartition(":")[2].isdigit():
        port = int(env["G2PO_RAY_ADDRESS"].rpartition(":")[2])
    if env.get("G2PO_NUM_NODES"):
        hosts = [h for h in env.get("G2PO_NODELIST", "").split(",") if h]
        head = env.get("G2PO_HEAD_NODE") or (hosts[0] if hosts else socket.gethostname())
        if not hosts or hosts[0] != head:
            hosts = [head] + [h for h in hosts if h != head]
        return Allocation(num_nodes=max(1, num("G2PO_NUM_NODES", 1)), node_rank=num("G2PO_NODE_RANK"),
                          hosts=hosts, gpus_per_node=num("G2PO_GPUS_PER_NODE"),
                          cpus_per_task=num("G2PO_CPUS_PER_TASK"), port=port, source="g2po")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if env.get("SLURM_JOB_ID") and nodelist:
        hosts = expand_nodelist(nodelist)
        return Allocation(num_nodes=max(1, num("SLURM_JOB_NUM_NODES", num("SLURM_NNODES", len(hosts)))),
                          node_rank=num("SLURM_NODEID"), hosts=hosts,
                          gpus_per_node=num("SLURM_GPUS_ON_NODE"),
                          cpus_per_task=num("SLURM_CPUS_PER_TASK", num("SLURM_CPUS_ON_NODE")),
                          port=port, source="slurm")
    return Allocation(hosts=[socket.gethostname()], port=port, source="local")


def worker_runtime_env(extra_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The Ray ``runtime_env`` of every worker: this process's PYTHONPATH (the suite itself is
    installed, ``g2po_bench``), offline hub, and the environment variables OpenRLHF's own
    launcher sets."""
    env = {
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "true"),
        "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN"),
        "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": os.environ.get("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1"),
        "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
    }
    env.update(extra_env or {})
    return {"env_vars": env}


def ray_start_commands(alloc: Allocation) -> dict[str, list[str]]:
    """The ``ray start`` command lines of the head and of a worker node for ``alloc``."""
    res = []
    if alloc.gpus_per_node:
        res.append(f"--num-gpus={alloc.gpus_per_node}")
    if alloc.cpus_per_task:
        res.append(f"--num-cpus={alloc.cpus_per_task}")
    head = ["ray", "start", "--head", f"--port={alloc.port}", f"--node-ip-address={_ip_of(alloc.head)}",
            "--disable-usage-stats", "--include-dashboard=false", *res]
    worker = ["ray", "start", f"--address={alloc.address}", "--disable-usage-stats", *res, "--block"]
    return {"head": head, "worker": worker}


def _ip_of(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


def join_as_worker(alloc: Allocation, *, wait_s: float = 900.0) -> int:
    """Rank > 0 without the sweeps launcher: wait for the head, join it, block until it stops.

    Returns:
        the exit code of ``ray start --block``.
    """
    deadline = time.time() + wait_s
    while time.time() < deadline:
        try:
            socket.create_connection((alloc.head, alloc.port), timeout=5).close()
            break
        except OSError:
            time.sleep(5)
    else:
        raise RuntimeError(f"the Ray head {alloc.address} did not come up within {wait_s:.0f} s")
    return subprocess.run(ray_start_commands(alloc)["worker"], check=False).returncode


@contextlib.contextmanager
def _keeping_signal_handlers() -> Iterator[None]:
    """Around ``ray.init``: put back the handlers of SIGTERM, SIGINT and the preemption signal
    that were installed before. ``ray.init`` replaces SIGTERM's with its own (``sys.exit``) and
    Ray's core worker adds a C++ failure handler that aborts the process (exit -6), so without this
    the run lifecycle's stop policy (checkpoint, ``interrupted``, exit 143) never runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = {signal.SIGTERM, signal.SIGINT, preempt_signal()}
    saved = {sig: signal.getsignal(sig) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


class RayCluster:
    """Context manager: Ray connected for the driver (see the module docstring).

    Args:
        alloc: the allocation (:func:`read_allocation`).
        address: an existing cluster to join (``openrlhf.ray_address`` or ``RAY_ADDRESS``).
        num_cpus, num_gpus: resources of a local single-node instance (None = detect).
        node_wait_s: how long the head waits for the other nodes.
        runtime_env: the workers' runtime env (default :func:`worker_runtime_env`).
        log: callable for progress lines.
    """

    def __init__(self, alloc: Allocation, *, address: str = "", num_cpus: int | None = None,
                 num_gpus: int | None = None, node_wait_s: float = 900.0,
                 runtime_env: dict[str, Any] | None = None, log=print):
        self.alloc = alloc
        self.address = address or os.environ.get("RAY_ADDRESS", "")
        self.num_cpus, self.num_gpus = num_cpus, num_gpus
        self.node_wait_s = node_wait_s
        self.runtime_env = runtime_env if runtime_env is not None else worker_runtime_env()
        self.log = log
        self.started_head = False
        self.owns_ray = False

    def __enter__(self) -> RayCluster:
        import ray

        if ray.is_initialized():
            return self
        with _keeping_signal_handlers():
            self._init(ray)
        self.owns_ray = True
        return self

    def _init(self, ray) -> None:
        common = dict(runtime_env=self.runtime_env, log_to_driver=True)
        if self.address:
            self.log(f"joining the Ray cluster at {self.address}")
            ray.init(address=self.address, **common)
        elif self.alloc.multi_node:
            if not self.alloc.is_head:
                raise RuntimeError("only node rank 0 drives training; other ranks join as workers")
            if shutil.which("ray") is None:
                raise RuntimeError("the `ray` command is not on PATH (pip install 'ray[default]')")
            cmd = ray_start_commands(self.alloc)["head"]
            self.log("starting the Ray head: " + " ".join(cmd))
            subprocess.run(cmd, check=True)
            self.started_head = True
            ray.init(address=self.alloc.address, **common)
            self._wait_for_nodes(ray)
        else:
            ray.init(num_cpus=self.num_cpus, num_gpus=self.num_gpus, include_dashboard=False, **common)

    def _wait_for_nodes(self, ray) -> None:
        deadline = time.time() + self.node_wait_s
        want = self.alloc.num_nodes
        while True:
            alive = sum(1 for n in ray.nodes() if n.get("Alive"))
            if alive >= want:
                self.log(f"Ray cluster ready: {alive} nodes")
                return
            if time.time() > deadline:
                raise RuntimeError(
                    f"only {alive} of {want} nodes joined the Ray head {self.alloc.address} within "
                    f"{self.node_wait_s:.0f} s (are the other ranks running `ray start --address=...`?)"
                )
            time.sleep(5)

    def __exit__(self, *exc) -> None:
        import ray

        if self.owns_ray:
            ray.shutdown()
        if self.started_head:
            subprocess.run(["ray", "stop"], check=False)
