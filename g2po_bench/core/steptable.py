"""Per-iteration step tables: enough of every training step to rebuild any task group's state graph.

A run with ``record_graphs=true`` (the CPU default) writes, for every training iteration K,
``<run>/steps/iter_<K:05d>.parquet``: one row per agent step of that iteration's rollouts
(B rows; Parquet via pyarrow, zstd-compressed, strings dictionary-encoded). Columns:

==================  =========  ==============================================================
column              dtype      meaning
==================  =========  ==============================================================
``group_id``        int64      task group (the N rollouts of one task instance)
``traj_id``         int64      trajectory (unique in the iteration)
``step``            int64      0-based step index t in the trajectory
``state_key``       int64      hashed state key of the state the action was taken from
                               (:func:`g2po_bench.core.batch.hash_state_key`)
``state_label``     string     short readable label of that state
                               (:func:`g2po_bench.benchmarks.rollout.state_label`)
``action``          string     the action text sent to the environment (at most 80 chars)
``valid``           bool       the model output parsed to a valid action
``reward``          float64    environment reward after the step (10 on a success's last step)
``success``         bool       the trajectory succeeded
``task_id``         string     the task of the group
``task_type``       string     its reporting category (ALFWorld task type, ...)
``advantage``       float64    the advantage the trainer used for the step
(row terms)         float64    the estimator's per-row quantities (``AdvantageResult.row_terms``:
                               G2PO ``node_value``, ``succ_value``, ``visit_return``, ``a_ep``,
                               ``a_nc``, ``a_ec``; GiGPO ``node_value``, ``visit_return``,
                               ``a_ep``, ``a_s``); names listed in the metadata
``critic_value``    float64    V(s_t) of the critic (critic estimators only)
``entropy``         float64    mean token entropy of the step's response under the sampling
                               policy (estimators that declare the input ``entropies`` only)
``next_state_key``  int64      hashed key of the observation the step led to (estimators that
                               declare the input ``next_state_key``: GraphGPO)
``return``          float64    the estimator's value targets (critic estimators only)
==================  =========  ==============================================================

The file's metadata (Parquet key ``g2po``, JSON) holds ``schema_version``, ``iteration``,
``env``, ``estimator`` (the registry name), ``options`` (the estimator options the trainer
passed, JSON-serialisable ones) and ``row_terms`` (the names of the row-term columns).

Files are written whole to a temporary name and renamed into place (a kill leaves the old file
or none, never a torn one). pandas and pyarrow only; nothing here imports the estimators.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

__all__ = [
    "SCHEMA_VERSION",
    "STEPS_DIRNAME",
    "BASE_COLUMNS",
    "TYPED_COLUMNS",
    "StepTable",
    "step_table_path",
    "recorded_iterations",
    "write_step_table",
    "read_step_table",
]

SCHEMA_VERSION = 1
STEPS_DIRNAME = "steps"
_META_KEY = b"g2po"
_FILE_RE = re.compile(r"^iter_(\d+)\.parquet$")

#: columns every step table has, with their pandas dtypes.
BASE_COLUMNS: dict[str, str] = {
    "group_id": "int64",
    "traj_id": "int64",
    "step": "int64",
    "state_key": "int64",
    "state_label": "string",
    "action": "string",
    "valid": "bool",
    "reward": "float64",
    "success": "bool",
    "task_id": "string",
    "task_type": "string",
    "advantage": "float64",
}

#: optional columns that are not float64 (every other optional column is a float64 quantity).
TYPED_COLUMNS: dict[str, str] = {"next_state_key": "int64"}


@dataclass
class StepTable:
    """One iteration's step table: ``frame`` (B rows, the columns of the module docstring)
    and ``meta`` (the file's metadata dict)."""

    frame: pd.DataFrame
    meta: dict[str, Any]

    @property
    def iteration(self) -> int:
        """The training iteration the table records (1-based)."""
        return int(self.meta["iteration"])

    @property
    def estimator(self) -> str:
        """The registry name of the estimator the run trained with."""
        return str(self.meta["estimator"])

    @property
    def options(self) -> dict[str, Any]:
        """The estimator options the trainer passed (JSON-serialisable ones)."""
        return dict(self.meta.get("options", {}))

    @property
    def row_terms(self) -> list[str]:
        """Names of the row-term columns (the estimator's per-row quantities)."""
        return list(self.meta.get("row_terms", []))


def step_table_path(run_root: str | os.PathLike, iteration: int) -> Path:
    """``<run_root>/steps/iter_<iteration:05d>.parquet``."""
    return Path(run_root) / STEPS_DIRNAME / f"iter_{int(iteration):05d}.parquet"


def recorded_iterations(run_root: str | os.PathLike) -> list[int]:
    """Sorted iterations with a step table in ``run_root`` ([] when none was recorded)."""
    folder = Path(run_root) / STEPS_DIRNAME
    if not folder.is_dir():
        return []
    out = []
    for p in folder.iterdir():
        m = _FILE_RE.match(p.name)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def write_step_table(
    run_root: str | os.PathLike,
    iteration: int,
    columns: Mapping[str, Sequence[Any]],
    meta: Mapping[str, Any],
) -> Path:
    """Write one iteration's step table atomically; returns its path.

    Args:
        run_root: the run folder.
        iteration: the training iteration (>= 0).
        columns: column name -> B values; must hold every :data:`BASE_COLUMNS` key, all of the
            same length B; extra columns must be numeric (row terms, critic values).
        meta: JSON-serialisable metadata (``env``, ``estimator``, ``options``, ``row_terms``);
            ``schema_version`` and ``iteration`` are added.

    Returns:
        The written path (:func:`step_table_path`).

    Raises:
        ValueError: a base column is missing, the lengths differ, or the metadata is not
            JSON-serialisable.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    missing = [c for c in BASE_COLUMNS if c not in columns]
    if missing:
        raise ValueError(f"step table lacks column(s) {', '.join(missing)}")
    lengths = {k: len(v) for k, v in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"step table columns differ in length: {lengths}")
    frame = pd.DataFrame({k: columns[k] for k in columns})
    for col, dtype in BASE_COLUMNS.items():
        frame[col] = frame[col].astype(dtype)
    for col in frame.columns:
        if col not in BASE_COLUMNS:
            frame[col] = frame[col].astype(TYPED_COLUMNS.get(col, "float64"))
    try:
        blob = json.dumps({**meta, "schema_version": SCHEMA_VERSION, "iteration": int(iteration)},
                          sort_keys=True)
    except TypeError as exc:
        raise ValueError(f"step table metadata is not JSON-serialisable: {exc}") from None
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), _META_KEY: blob.encode()})
    path = step_table_path(run_root, iteration)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp, compression="zstd", use_dictionary=True)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def read_step_table(run_root: str | os.PathLike, iteration: int) -> StepTable:
    """Read one iteration's step table.

    Args:
        run_root: the run folder.
        iteration: the training iteration; -1 means the last recorded one.

    Returns:
        :class:`StepTable`.

    Raises:
        FileNotFoundError: the run folder does not exist, it has no step tables (the run was
            trained with ``record_graphs=false``), or not for ``iteration`` (the message lists
            the recorded iterations).
        ValueError: the file is not a step table of a known schema version.
    """
    import pyarrow.parquet as pq

    root = Path(run_root)
    if not root.is_dir():
        raise FileNotFoundError(f"run folder {str(root)!r} does not exist")
    have = recorded_iterations(root)
    if not have:
        raise FileNotFoundError(f"run {str(root)!r} has no step tables under {STEPS_DIRNAME}/: {_why_no_steps(root)}")
    if iteration == -1:
        iteration = have[-1]
    if iteration not in have:
        raise FileNotFoundError(
            f"run {str(root)!r} has no step table for iteration {iteration}; recorded iterations: "
            f"{_ranges(have)}"
        )
    table = pq.read_table(step_table_path(root, iteration))
    raw = (table.schema.metadata or {}).get(_META_KEY)
    if raw is None:
        raise ValueError(f"{step_table_path(root, iteration)} is not a g2po step table (no metadata)")
    meta = json.loads(raw.decode())
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"{step_table_path(root, iteration)} has step-table schema version "
            f"{meta.get('schema_version')!r}; this version reads {SCHEMA_VERSION}"
        )
    frame = table.to_pandas()
    for col, dtype in BASE_COLUMNS.items():
        frame[col] = frame[col].astype(dtype)
    return StepTable(frame=frame, meta=meta)


def _why_no_steps(root: Path) -> str:
    """Why a run folder holds no step table, from its ``config.yaml`` ``record_graphs``."""
    try:
        recorded = (yaml.safe_load((root / "config.yaml").read_text(encoding="utf-8")) or {}).get("record_graphs")
    except (OSError, yaml.YAMLError, UnicodeDecodeError, AttributeError):
        recorded = None
    if recorded is False:
        return "it was trained with record_graphs=false; train with record_graphs=true to record them"
    if recorded is True:
        return ("its config.yaml says record_graphs=true, so the run wrote them, but this copy of its record has none "
                f"(a committed or copied record may leave {STEPS_DIRNAME}/ out: results/proxy/README.md says which "
                "committed runs keep their last step table); draw from the folder the run trained in, or train the "
                "config again")
    return (f"it was trained with record_graphs=false, or its record was copied without {STEPS_DIRNAME}/ (no "
            f"config.yaml says which); a run trained with record_graphs=true writes {STEPS_DIRNAME}/iter_<K>.parquet")


def _ranges(xs: list[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``"1-3, 5"``."""
    parts, start = [], None
    for i, x in enumerate(xs):
        if start is None:
            start = x
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            parts.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ", ".join(parts)
