"""The run folder: what one training or evaluation run writes, and how (atomically).

Layout of ``results/runs/<run_id>/`` (docs/run-folder.md):

- ``config.yaml``: the resolved run config; enough to rerun the run.
- ``metrics.jsonl``: one JSON object per training iteration, appended as the run goes
  (keys: ``iteration`` (1-based), ``time_s`` (seconds since start), ``train/...``,
  ``loss/...``, ``adv/...`` estimator diagnostics, ``eval/...`` on evaluation iterations).
- ``eval.json``: evaluations: ``{"env", "panel" ({"split", "num_tasks", "size" (tasks in the
  panel played), "episodes_per_task", "temperature"}), "history": [EVAL...], "before": EVAL,
  "final": EVAL, "best": EVAL}`` where EVAL = ``{"iteration", "success_rate" (fraction in
  [0, 1]), "per_task_type": {type: success_rate}, "num_episodes", "score" (WebShop: mean
  reward x 100 over every episode, 0 for one that never buys; else null), "episode_scores"
  (WebShop: one score per episode), "score_ci" (WebShop: 95 % bootstrap interval of "score"), "panel_size", "mean_steps", "invalid_frac", "truncated_prompts" (steps whose
  prompt was cut to ``train.max_prompt_tokens``), "truncated_responses" (fraction of steps
  whose response was cut at ``train.max_response_tokens``)}``. ``before`` is the evaluation at
  iteration 0 (after any warm start, before RL). With ``eval.at_train_temperature`` (both
  backends) also ``"at_train_temperature": {"temperature", "before": EVAL, "final": EVAL}``: the
  same panel sampled at ``train.temperature``.
- ``status.json``: ``{"state": "running"|"done"|"failed"|"interrupted", "iteration",
  "total_iterations", "error", "updated", "code"}`` (``code``: :func:`code_version` of the
  process that wrote it, ``{"commit", "dirty"}`` or null outside a git checkout); ``interrupted``: stopped by a signal
  (:mod:`g2po_bench.runtime.shutdown`), ``iteration`` is that of the checkpoint a resume continues from
  and ``error`` says which signal. ``warnings`` (only when there is one): what the run warned
  about once, e.g. ``stale_sampler`` = ``{"iteration", "gap", "threshold", "compute_dtype"}``
  (:class:`g2po_bench.algorithms.backends.common.SamplerGapMonitor`).
- ``checkpoints/``: ``latest/`` (model, optimizer, trainer state, ``manifest.json``) and
  ``previous/`` (the checkpoint before it, kept until a newer one is complete): written to a
  staging folder, fsynced, verified and renamed into place (:mod:`g2po_bench.core.checkpoints`);
  a resume loads the newest intact one (:meth:`RunDir.find_checkpoint`).
- ``evals/<UTC time or name>/``: evaluations of the run's checkpoint by ``g2po eval --run``
  (``config.yaml`` as used, ``eval.json`` with ``"kind": "evaluation"``, ``run``,
  ``checkpoint_iteration``, the ``overrides`` and ``code``); never counted as training seeds.

Every file is written whole to a temporary name and renamed into place, so a kill at any
moment leaves either the old or the new file, never a torn one. ``metrics.jsonl`` is
append-only; a reader skips a torn last line.

One process at a time writes a run folder: a training run holds ``.lock``
(:mod:`g2po_bench.core.runlock`), and every writer of :class:`RunDir` first checks that the
folder is still the one this process locked (:meth:`RunDir.ensure_owned`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from g2po_bench.core.checkpoints import (
    TRAINER_STATE,
    CheckpointChoice,
    checkpoint_iteration,
    fsync_tree,
    install_checkpoint,
    verify_checkpoint,
    write_manifest,
)
from g2po_bench.core.errors import CheckpointError
from g2po_bench.core.runlock import check_owned, held_lock

__all__ = [
    "RunDir",
    "atomic_write_text",
    "atomic_write_json",
    "append_jsonl",
    "read_jsonl",
    "code_version",
    "machine_info",
    "RECORD_SUFFIXES",
]

_REPO_ROOT = Path(__file__).resolve().parents[2]


RECORD_SUFFIXES = frozenset({".md", ".csv", ".png", ".svg", ".html", ".json", ".jsonl", ".log", ".txt",
                             ".parquet"})
"""Suffixes of documentation and result records: changes to them do not make a checkout dirty."""


_PROCESS_CODE: list[dict[str, Any] | None] = []  # this process's code version, once known


def code_version(root: str | os.PathLike | None = None) -> dict[str, Any] | None:
    """The git commit of the code that runs, for records that must say what produced them.

    Args:
        root: the checkout (default: the folder holding this package). For the default, the
            answer is read from git once per process and then kept: a long run (a sweep job
            training several runs) records the checkout it started from, not commits made
            while it ran (the code it had already loaded).

    Returns:
        ``{"commit": <40 hex>, "dirty": bool}`` (dirty: files that can change what runs differ
        from the commit, tracked ones changed or new ones that git does not ignore; documentation and records, the suffixes in
        :data:`RECORD_SUFFIXES`, do not count, so committing results while runs go on does not
        mark them dirty), or None when ``root`` is not a git checkout or git is missing (an
        installed wheel).
    """
    if root is None:
        if not _PROCESS_CODE:
            _PROCESS_CODE.append(_read_code_version(_REPO_ROOT))
        return _PROCESS_CODE[0]
    return _read_code_version(Path(root))


_MACHINE: list[dict[str, Any]] = []


def machine_info() -> dict[str, Any]:
    """What ran the code, for records whose numbers depend on it (looked up once per process).

    The CPU matters beyond speed: torch picks its CPU kernels by the instruction set
    (``cpu_capability``: ``"AVX512"``, ``"AVX2"``, ...), and kernels of another width sum in
    another order, so the same commit, config and seed give another warm start and other
    episodes on another CPU (measured: 30.0 and 25.0 % held-out success for the same warm-start
    key on two AMD EPYC VMs, the second with AVX-512 kernels; the first's were not recorded).

    Returns:
        ``{"cpu": model name or None, "cpu_capability": torch's or None, "cpus": CPUs in this
        process's affinity mask, "torch": version or None, "python": version, "platform": str}``.
    """
    if not _MACHINE:
        import platform

        cpu = None
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as fh:
                cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), None)
        except OSError:
            pass
        cpu = cpu or platform.processor() or None
        try:
            import torch

            capability, torch_version = torch.backends.cpu.get_cpu_capability(), torch.__version__
        except Exception:  # noqa: BLE001 - torch missing or too old: the record says so
            capability = torch_version = None
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        _MACHINE.append({"cpu": cpu, "cpu_capability": capability, "cpus": cpus,
                         "torch": torch_version, "python": platform.python_version(),
                         "platform": platform.platform()})
    return dict(_MACHINE[0])


def machine_label(machine: Mapping[str, Any] | None) -> str | None:
    """One line for a :func:`machine_info` record, e.g. ``"AMD EPYC (2 CPUs, torch 2.13.0+cpu AVX512 kernels)"``.

    Args:
        machine: a ``status.json`` ``machine`` mapping (any of its keys may be missing), or None.

    Returns:
        The line, or None for a run that recorded no machine (written before the field existed).
    """
    if not machine:
        return None
    return (f"{machine.get('cpu')} ({machine.get('cpus')} CPUs, torch {machine.get('torch')} "
            f"{machine.get('cpu_capability')} kernels)")


def _read_code_version(root: Path) -> dict[str, Any] | None:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        changed = git("diff", "--name-only", "HEAD", "--").splitlines()
        # new files count too (an estimator added as one new file is code the commit lacks);
        # ignored ones (run folders, caches, virtual environments) do not
        changed += git("ls-files", "--others", "--exclude-standard").splitlines()
        dirty = any(Path(f).suffix.lower() not in RECORD_SUFFIXES for f in changed if f.strip())
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": dirty}


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file in the same folder, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def append_jsonl(path: str | os.PathLike, record: dict[str, Any]) -> None:
    """Append one JSON line to ``path`` and fsync it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=True, default=_json_default) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a JSONL file; a torn (unparseable) line is skipped. Missing file -> []."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _json_default(obj: Any) -> Any:
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__} to JSON")


class RunDir:
    """Paths and writers of one run folder (see the module docstring for the layout)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self._code: dict[str, Any] | None | bool = False  # False: not looked up yet
        #: what ``status.json`` ``warnings`` records (e.g. ``stale_sampler``); written with every status
        self.warnings: dict[str, Any] = {}

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def metrics_path(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def eval_path(self) -> Path:
        return self.root / "eval.json"

    @property
    def status_path(self) -> Path:
        return self.root / "status.json"

    @property
    def checkpoint_dir(self) -> Path:
        """``checkpoints/latest``: the newest checkpoint."""
        return self.root / "checkpoints" / "latest"

    @property
    def previous_checkpoint_dir(self) -> Path:
        """``checkpoints/previous``: the checkpoint before ``latest``, kept until a newer one is complete."""
        return self.root / "checkpoints" / "previous"

    def checkpoint_candidates(self) -> list[Path]:
        """The checkpoint folders that hold a ``trainer_state.json``, newest first: ``latest``,
        ``latest.old`` (a run of an earlier version killed between the two renames of its
        checkpoint swap) and ``previous``; intact or not."""
        latest = self.checkpoint_dir
        dirs = (latest, latest.with_name(latest.name + ".old"), self.previous_checkpoint_dir)
        return [d for d in dirs if (d / TRAINER_STATE).is_file()]

    def has_checkpoint(self) -> bool:
        """Whether the run holds any checkpoint, intact or not (:meth:`checkpoint_candidates`)."""
        return bool(self.checkpoint_candidates())

    def find_checkpoint(self) -> CheckpointChoice:
        """The checkpoint a resume loads: the newest of :meth:`checkpoint_candidates` that passes
        :func:`g2po_bench.core.checkpoints.verify_checkpoint`, with the newer ones that failed
        (``rejected``, each with the file at fault). ``path`` is None when none is intact."""
        choice = CheckpointChoice()
        for d in self.checkpoint_candidates():
            problem = verify_checkpoint(d)
            if problem is None:
                choice.path, choice.iteration = d, checkpoint_iteration(d)
                return choice
            choice.rejected.append((d, problem))
        return choice

    def resume_checkpoint(self) -> Path | None:
        """The folder of :meth:`find_checkpoint` (None when the run holds no intact checkpoint)."""
        return self.find_checkpoint().path

    def commit_checkpoint(self, staging: Path, iteration: int) -> None:
        """Make the fully written folder ``staging`` the checkpoint ``latest`` of ``iteration``:
        fsync it, write its manifest, verify it, then rename it into place, the replaced ``latest``
        becoming ``previous`` (:func:`g2po_bench.core.checkpoints.install_checkpoint`).

        Raises:
            CheckpointError: the written folder fails verification (the message names the file);
                ``staging`` is removed and the checkpoints in place are untouched.
            g2po_bench.core.errors.RunFolderLost: the folder this process locked was replaced.
        """
        self.ensure_owned()
        fsync_tree(staging)
        write_manifest(staging, iteration)
        problem = verify_checkpoint(staging)
        if problem is not None:
            shutil.rmtree(staging, ignore_errors=True)
            raise CheckpointError(f"the checkpoint of iteration {iteration} was written incomplete ({problem}); "
                                  f"the checkpoints in {self.root / 'checkpoints'} are unchanged")
        self.ensure_owned()  # again: saving a model takes a while
        install_checkpoint(staging, self.checkpoint_dir, self.previous_checkpoint_dir)

    def create(self) -> RunDir:
        self.root.mkdir(parents=True, exist_ok=True)
        return self

    def ensure_owned(self) -> None:
        """Before a write: nothing when this process holds no lock on the folder or still holds it
        (:func:`g2po_bench.core.runlock.check_owned`).

        Raises:
            g2po_bench.core.errors.RunFolderLost: the folder this process locked was replaced.
        """
        check_owned(self.root)

    def owned(self) -> bool:
        """False when this process locked the folder and it was replaced since (then nothing may be
        written into it); True otherwise."""
        lock = held_lock(self.root)
        return lock is None or lock.owned()

    def write_json(self, name: str, obj: Any) -> Path:
        """Write ``obj`` as ``<run>/<name>`` atomically (:func:`atomic_write_json`), the folder's
        owner checked first (:meth:`ensure_owned`); returns the path."""
        self.ensure_owned()
        atomic_write_json(self.root / name, obj)
        return self.root / name

    def write_text(self, name: str, text: str) -> Path:
        """Write ``text`` as ``<run>/<name>`` atomically, the folder's owner checked first; returns the path."""
        self.ensure_owned()
        atomic_write_text(self.root / name, text)
        return self.root / name

    def write_status(self, state: str, iteration: int, total_iterations: int, error: str | None = None) -> None:
        self.ensure_owned()
        atomic_write_json(
            self.status_path,
            {
                "state": state,
                "iteration": iteration,
                "total_iterations": total_iterations,
                "error": error,
                "updated": time.time(),
                "code": self.code,
                "machine": machine_info(),
                **({"warnings": self.warnings} if self.warnings else {}),
            },
        )

    @property
    def code(self) -> dict[str, Any] | None:
        """:func:`code_version` of this process's code (looked up once per RunDir)."""
        if self._code is False:
            self._code = code_version()
        return self._code

    def read_status(self) -> dict[str, Any] | None:
        if not self.status_path.exists():
            return None
        try:
            return json.loads(self.status_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return None

    def log_metrics(self, record: dict[str, Any]) -> None:
        self.ensure_owned()
        append_jsonl(self.metrics_path, record)

    def read_metrics(self) -> list[dict[str, Any]]:
        return read_jsonl(self.metrics_path)

    def truncate_metrics(self, last_iteration: int) -> None:
        """Drop metric lines after ``last_iteration`` (used on resume from a checkpoint)."""
        self.ensure_owned()
        kept = [r for r in self.read_metrics() if int(r.get("iteration", 0)) <= last_iteration]
        atomic_write_text(
            self.metrics_path,
            "".join(json.dumps(r, sort_keys=True, default=_json_default) + "\n" for r in kept),
        )

    def replace_dir(self, staging: Path, target: Path) -> None:
        """Move a fully written folder ``staging`` to ``target`` atomically (fsynced first; the old
        one removed after)."""
        self.ensure_owned()
        fsync_tree(staging)
        target.parent.mkdir(parents=True, exist_ok=True)
        old = target.with_name(target.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        if target.exists():
            os.replace(target, old)
        os.replace(staging, target)
        if old.exists():
            shutil.rmtree(old)
