"""``credit.json`` and ``gradients.npz``: the record of one credit-accuracy study (write, read, find).

``credit.json`` is one JSON object (NaN written as null), version 2:

- ``kind`` = ``"credit"``, ``version``, ``created`` (UTC), ``command`` (the argv that made it),
  ``code`` (:func:`g2po_bench.core.rundir.code_version`), ``machine``
  (:func:`g2po_bench.core.rundir.machine_info`);
- ``policy`` (``kind``: warm_start | run | model | scripted, ``path``, ...), ``env``, ``config``
  (the resolved run config), ``settings`` (:class:`~g2po_bench.analysis.credit.study.CreditSettings`),
  ``mode`` (``monte_carlo`` | ``exact``), ``groups`` ([first, stop): the global groups the record
  holds; [0, G) for a whole study), ``tasks`` (task ids of those groups, in order);
- ``summary``: rows, trajectories, success rate, prefixes, continuation episodes (and how many
  joined an earlier one), rows without ground truth, crashed continuations, decisive rows, the
  fraction of rows with A* = 0;
- ``timing``: seconds per phase;
- ``variants`` (name, estimator, options, state_key, axis), ``skipped`` (name -> why),
  ``gradient`` (``note``: how the loss gradients were taken or why not; ``file``:
  ``gradients.npz`` or null);
- ``per_group``: ``groups`` (global indices) and ``stats``: target -> row set -> the per-group
  figures (:data:`g2po_bench.analysis.credit.pool.STATS_FIELDS`), everything the figures are
  computed from (with ``gradients.npz``), so records of shards pool exactly;
- ``scores``: target (``a_star``, ``a_star_pool``, ``a_star_disc``) -> the figures of
  :func:`g2po_bench.analysis.credit.pool.score_groups` (shared groups, rows, ceiling, paired
  differences with Holm and the groups needed, gradient alignment);
- ``agreement``: exact mode with continuations (Monte Carlo vs exact), else null;
- ``rows``: one column per field, one entry per sampled step (in group order): ``group``,
  ``task``, ``trajectory``, ``step``, ``state_key`` (``{"reference": [...], "raw": [...]}`` hashed
  keys), ``state`` (a short label), ``action``, ``valid``, ``v``, ``v_next``, ``a_star``,
  ``a_star_se``, ``a_star_pool``, ``a_star_disc`` (the ground truth scored against; in exact
  mode also ``a_star_mc`` and ``a_star_mc_se``), ``advantages`` (name -> column; 7 significant
  digits);
- ``parts`` (a pooled record): where each part came from (its groups, commit, machine, command,
  timing).

``gradients.npz`` (a study with gradient alignment): the block-by-block inner products of the
group gradients (:meth:`g2po_bench.analysis.credit.alignment.GroupGradients.save`).

Version 1 records (rows as one object per step, no per-group numbers) are still read by the
report; they cannot be pooled.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from g2po_bench.analysis.credit.alignment import GroupGradients
from g2po_bench.analysis.credit.pool import GroupData
from g2po_bench.benchmarks.rollout import state_label
from g2po_bench.core.config import config_to_dict
from g2po_bench.core.rundir import atomic_write_text, code_version, machine_info

__all__ = ["CREDIT_FILE", "GRADIENTS_FILE", "study_record", "write_record", "read_record", "read_gradients",
           "find_records", "row_dicts", "CREDIT_VERSION"]

CREDIT_FILE = "credit.json"
GRADIENTS_FILE = "gradients.npz"
CREDIT_VERSION = 2
#: significant digits of the advantage columns (the figures come from the per-group numbers)
ADVANTAGE_DIGITS = 7


def _clean(obj: Any) -> Any:
    """JSON-safe copy: numpy scalars and arrays to Python, NaN and infinities to None."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _clean(obj.tolist())
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        return x if math.isfinite(x) else None
    return obj


def _rounded(values: np.ndarray) -> list[float | None]:
    return [float(f"{x:.{ADVANTAGE_DIGITS}g}") if math.isfinite(x) else None for x in np.asarray(values, dtype=float)]


def _rows(study) -> dict[str, Any]:
    """The ``rows`` columns of a study part (global group ids)."""
    rb, rows, truth = study.rollouts, study.rows, study.truth
    st = rb.steps
    task_ids = [t.task_id for t in study.tasks]
    out: dict[str, Any] = {
        "group": (st.group_id + study.first_group).tolist(), "task": [task_ids[int(i)] for i in rows.task_index],
        # trajectory j of group g is g N + j (collect_rollouts): global ids as the groups'
        "trajectory": (st.traj_id + study.first_group * study.settings.group_size).tolist(), "step": st.step.tolist(),
        "state_key": {rule: rb.state_keys_by_rule(rule).tolist() for rule in rb.state_texts_by_rule},
        "state": [state_label(x) for x in rb.state_texts], "action": list(rb.actions),
        "valid": st.action_valid.tolist(),
    }
    for col in ("v", "v_next", "a_star", "a_star_se", "a_star_pool", "a_star_disc"):
        out[col] = getattr(truth, col)
    if study.settings.exact and study.monte_carlo is not None:
        out["a_star_mc"] = study.monte_carlo.a_star
        out["a_star_mc_se"] = study.monte_carlo.a_star_se
    out["advantages"] = {name: _rounded(adv) for name, adv in study.advantages.items()}
    return out


def study_record(study, cfg, *, policy: dict[str, Any], command: list[str],
                 code: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``credit.json`` object of a :class:`~g2po_bench.analysis.credit.study.CreditStudy`.

    ``code`` is the :func:`~g2po_bench.core.rundir.code_version` taken when the study started
    (a long study may end after the checkout moved on); by default it is read now.
    """
    rb, rows, truth = study.rollouts, study.rows, study.truth
    mc = study.monte_carlo
    a = truth.a_star[np.isfinite(truth.a_star)]
    summary = {
        "rows": len(rb.steps), "trajectories": len(rb.trajectories), "success_rate": rb.success_rate,
        "prefixes": len(rows.prefixes), "continuation_episodes": len(rows.prefixes) * study.settings.continuations,
        "rows_without_truth": study.crashed_rows, "crashed_continuations": mc.crashed if mc is not None else 0,
        "merged_continuations": study.merged,
        "decisive_rows": int((np.abs(a) >= study.settings.decisive).sum()),
        "zero_a_star_frac": float((np.abs(a) <= 1e-12).mean()) if a.size else math.nan,
    }
    first = study.first_group
    data = GroupData(groups=np.arange(first, first + len(study.tasks)), stats=study.group_stats)
    return _clean({
        "kind": "credit", "version": CREDIT_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": list(command),
        "code": code if code is not None else code_version(), "machine": machine_info(), "policy": policy,
        "env": cfg.env.name, "config": config_to_dict(cfg), "settings": asdict(study.settings),
        "mode": "exact" if study.settings.exact else "monte_carlo", "groups": [first, first + len(study.tasks)],
        "tasks": [t.task_id for t in study.tasks], "summary": summary, "timing": study.timing,
        "variants": [asdict(v) for v in study.variants], "skipped": study.skipped,
        "gradient": {"note": study.gradient_note, "file": GRADIENTS_FILE if study.gradients is not None else None},
        "per_group": data.to_record(), "scores": study.scores, "agreement": study.agreement,
        "rows": _rows(study),
    })


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_record(folder: str | os.PathLike, record: dict[str, Any], gradients: GroupGradients | None = None) -> Path:
    """Write ``record`` as ``folder/credit.json`` (atomically, readable as any file the user
    creates: mode 0666 less the umask) and ``gradients`` as ``folder/gradients.npz``; returns the
    path of ``credit.json``."""
    folder = Path(folder)
    if gradients is not None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{GRADIENTS_FILE}.tmp.npz"
        gradients.save(tmp)
        os.replace(tmp, folder / GRADIENTS_FILE)
    path = folder / CREDIT_FILE
    atomic_write_text(path, json.dumps(_clean(record), indent=1, allow_nan=False))
    os.chmod(path, 0o666 & ~_umask())  # the temporary file of an atomic write is created 0600
    return path


def read_record(path: str | os.PathLike) -> dict[str, Any]:
    """Read a ``credit.json`` (or the one in a folder).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a credit record (its ``kind`` is not ``"credit"``) or not JSON.
    """
    p = Path(path)
    if p.is_dir():
        p = p / CREDIT_FILE
    try:
        rec = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p} is not readable JSON ({exc})") from None
    if not isinstance(rec, dict) or rec.get("kind") != "credit":
        raise ValueError(f"{p} is not a credit record (kind != 'credit')")
    return rec


def read_gradients(folder: str | os.PathLike, record: dict[str, Any]) -> GroupGradients | None:
    """The ``gradients.npz`` a record names (None when it has none).

    Raises:
        FileNotFoundError: the record names a file that is not there.
        ValueError: the file is not a gradient file.
    """
    name = (record.get("gradient") or {}).get("file")
    if not name:
        return None
    folder = Path(folder)
    if folder.is_file():
        folder = folder.parent
    path = folder / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: its credit.json has gradient alignment whose numbers are in it")
    return GroupGradients.load(path)


def find_records(root: str | os.PathLike) -> list[Path]:
    """Every ``credit.json`` under ``root`` (itself included; hidden folders skipped), sorted; a
    ``credit.json`` file given as ``root`` is itself."""
    if Path(root).is_file() and Path(root).name == CREDIT_FILE:
        return [Path(root)]
    found = []
    for dirpath, dirnames, filenames in os.walk(Path(root)):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if CREDIT_FILE in filenames:
            found.append(Path(dirpath) / CREDIT_FILE)
    return sorted(found)


def row_dicts(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's rows as one dict per step (version 2 keeps columns; version 1 dicts as they are)."""
    rows = record.get("rows") or []
    if isinstance(rows, list):
        return rows
    n = len(rows.get("step", []))

    def pick(col, i):
        return {k: pick(v, i) for k, v in col.items()} if isinstance(col, dict) else col[i]

    return [{k: pick(v, i) for k, v in rows.items()} for i in range(n)]
