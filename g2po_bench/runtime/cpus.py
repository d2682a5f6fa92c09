"""How many CPUs this process may use, and one thread per BLAS/OpenMP pool in a worker.

``os.cpu_count()`` counts the machine's cores, not the ones a job was given: under
``taskset``, a SLURM allocation (``--cpus-per-task``) or a container's CPU quota it overcounts,
and a pool of that many single-threaded workers oversubscribes the CPUs. :func:`usable_cpus`
takes the smallest of

- the CPU affinity mask (``os.sched_getaffinity``; ``taskset``, SLURM's task binding, cpusets),
- ``SLURM_CPUS_PER_TASK`` and ``G2PO_CPUS_PER_TASK`` (exported by ``g2po_bench.sweeps.job`` from the
  spec's ``resources.cpus``), when set,
- the cgroup CPU quota, rounded up: cgroup v2 ``cpu.max`` (``"QUOTA PERIOD"`` or ``"max
  PERIOD"``), cgroup v1 ``cpu.cfs_quota_us / cpu.cfs_period_us``, over this process's cgroup and
  its ancestors.

:func:`limit_thread_pools` sets every BLAS/OpenMP pool loaded in the process to one thread with
threadpoolctl (OpenBLAS, MKL, BLIS, OpenMP), plus the thread variables for libraries loaded
later and torch's intra-op pool.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["usable_cpus", "cgroup_cpu_limit", "limit_thread_pools", "THREAD_VARS"]

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def _quota_v2(path: Path) -> float | None:
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None


def _quota_v1(folder: Path) -> float | None:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text().strip())
        period = int((folder / "cpu.cfs_period_us").read_text().strip())
    except (OSError, ValueError):
        return None
    if quota <= 0 or period <= 0:
        return None
    return quota / period


def _ancestors(rel: str) -> list[str]:
    parts = [p for p in rel.strip("/").split("/") if p]
    return ["/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def cgroup_cpu_limit(proc_cgroup: str | os.PathLike = "/proc/self/cgroup",
                     root: str | os.PathLike = "/sys/fs/cgroup") -> float | None:
    """The CPU quota of this process's cgroup (smallest over it and its ancestors), in CPUs
    (e.g. 1.5), or None when there is none or it cannot be read.

    Args:
        proc_cgroup: the ``/proc/<pid>/cgroup`` file to read.
        root: where the cgroup file systems are mounted (v2 unified at ``root``, v1 controller
            ``cpu`` at ``root/cpu`` or ``root/cpu,cpuacct``).
    """
    root = Path(root)
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    limits: list[float] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "":  # cgroup v2
            for anc in _ancestors(rel):
                q = _quota_v2(root / anc / "cpu.max")
                if q is not None:
                    limits.append(q)
        elif "cpu" in controllers.split(","):  # cgroup v1
            for mount in (root / "cpu", root / controllers):
                if mount.is_dir():
                    for anc in _ancestors(rel):
                        q = _quota_v1(mount / anc)
                        if q is not None:
                            limits.append(q)
                    break
    return min(limits) if limits else None


def _env_int(name: str) -> int | None:
    v = os.environ.get(name, "").strip()
    if not v:
        return None
    try:
        n = int(v.split("(")[0])  # SLURM may write e.g. "2(x3)" in some variables
    except ValueError:
        return None
    return n if n > 0 else None


def usable_cpus() -> int:
    """The number of CPUs this process may use (at least 1; see the module docstring).

    Examples: ``taskset -c 0 ...`` -> 1; ``SLURM_CPUS_PER_TASK=4`` on a 64-core node -> 4; a
    container limited to 1.5 CPUs -> 2.
    """
    counts: list[int] = []
    try:
        counts.append(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        counts.append(os.cpu_count() or 1)
    for var in ("SLURM_CPUS_PER_TASK", "G2PO_CPUS_PER_TASK"):
        n = _env_int(var)
        if n is not None:
            counts.append(n)
    q = cgroup_cpu_limit()
    if q is not None:
        counts.append(math.ceil(q - 1e-9))
    return max(1, min(counts))


def limit_thread_pools(threads: int = 1) -> None:
    """Set every BLAS/OpenMP pool of this process to ``threads`` threads (threadpoolctl), the
    thread variables (:data:`THREAD_VARS`) for pools loaded later, and torch's intra-op pool
    when torch is already imported. Used at the start of each environment worker."""
    for var in THREAD_VARS:
        os.environ[var] = str(threads)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=threads)
    import sys

    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            torch.set_num_threads(threads)
        except Exception:  # pragma: no cover
            pass
