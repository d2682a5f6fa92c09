"""``credit.json``: the record of one credit-accuracy study (write, read, find).

One JSON object (NaN written as null):

- ``kind`` = ``"credit"``, ``version``, ``created`` (UTC), ``command`` (the argv that made it),
  ``code`` (:func:`g2po_bench.core.rundir.code_version`), ``machine``
  (:func:`g2po_bench.core.rundir.machine_info`);
- ``policy`` (``kind``: warm_start | run | model | scripted, ``path``, ...), ``env``, ``config``
  (the resolved run config), ``settings`` (:class:`~g2po_bench.analysis.credit.study.CreditSettings`),
  ``mode`` (``monte_carlo`` | ``exact``), ``tasks`` (task ids, one per group);
- ``summary``: rows, trajectories, success rate, prefixes, continuation episodes (and how many
  joined an earlier one), rows without ground truth, crashed continuations, decisive rows, the
  fraction of rows with A* = 0;
- ``timing``: seconds per phase;
- ``variants`` (name, estimator, options, state_key, axis), ``skipped`` (name -> why);
- ``scores``: per target (``a_star``, ``a_star_pool``, ``a_star_disc``): ``rows`` (name ->
  figures with CIs), ``ceiling``, ``differences``, ``per_group`` (name -> per-group Spearman);
- ``agreement``: exact mode with continuations (Monte Carlo vs exact), else null;
  ``monte_carlo_ceiling``: exact mode with continuations, target -> the continuations' ceiling;
- ``rows``: one entry per sampled step: ``group``, ``task``, ``trajectory``, ``step``,
  ``state_key`` (``{"reference": int, "raw": int}`` hashed keys), ``state`` (a short label),
  ``action``, ``valid``, ``v``, ``v_next``, ``a_star``, ``a_star_se``, ``a_star_pool``,
  ``a_star_disc`` (the ground truth scored against; in exact mode also ``a_star_mc`` and
  ``a_star_mc_se``), ``advantages`` (name -> value).
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

from g2po_bench.benchmarks.rollout import state_label
from g2po_bench.core.config import config_to_dict
from g2po_bench.core.rundir import atomic_write_text, code_version, machine_info

__all__ = ["CREDIT_FILE", "study_record", "write_record", "read_record", "find_records", "CREDIT_VERSION"]

CREDIT_FILE = "credit.json"
CREDIT_VERSION = 1


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


def study_record(study, cfg, *, policy: dict[str, Any], command: list[str],
                 code: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``credit.json`` object of a :class:`~g2po_bench.analysis.credit.study.CreditStudy`.

    ``code`` is the :func:`~g2po_bench.core.rundir.code_version` taken when the study started
    (a long study may end after the checkout moved on); by default it is read now.
    """
    rb, rows, truth = study.rollouts, study.rows, study.truth
    st = rb.steps
    keys = {rule: rb.state_keys_by_rule(rule) for rule in rb.state_texts_by_rule}
    task_ids = [t.task_id for t in study.tasks]
    exact = study.settings.exact
    mc = study.monte_carlo
    out_rows = []
    for i in range(len(st)):
        rec = {
            "group": int(st.group_id[i]), "task": task_ids[int(rows.task_index[i])], "trajectory": int(st.traj_id[i]),
            "step": int(st.step[i]), "state_key": {rule: int(k[i]) for rule, k in keys.items()},
            "state": state_label(rb.state_texts[i]), "action": rb.actions[i], "valid": bool(st.action_valid[i]),
            "v": truth.v[i], "v_next": truth.v_next[i], "a_star": truth.a_star[i], "a_star_se": truth.a_star_se[i],
            "a_star_pool": truth.a_star_pool[i], "a_star_disc": truth.a_star_disc[i],
            "advantages": {name: adv[i] for name, adv in study.advantages.items()},
        }
        if exact and mc is not None:
            rec["a_star_mc"] = mc.a_star[i]
            rec["a_star_mc_se"] = mc.a_star_se[i]
        out_rows.append(rec)
    scores = {}
    for target, sc in study.scores.items():
        scores[target] = {"rows": sc["rows"], "ceiling": sc["ceiling"], "differences": sc["differences"],
                          "per_group": {name: {"groups": gs.groups, "spearman": gs.spearman, "pearson": gs.pearson}
                                        for name, gs in sc["group_stats"].items()}}
    a = truth.a_star[np.isfinite(truth.a_star)]
    summary = {
        "rows": len(st), "trajectories": len(rb.trajectories), "success_rate": rb.success_rate,
        "prefixes": len(rows.prefixes), "continuation_episodes": len(rows.prefixes) * study.settings.continuations,
        "rows_without_truth": study.crashed_rows, "crashed_continuations": mc.crashed if mc is not None else 0,
        "merged_continuations": study.merged,
        "decisive_rows": int((np.abs(a) >= study.settings.decisive).sum()),
        "zero_a_star_frac": float((np.abs(a) <= 1e-12).mean()) if a.size else math.nan,
    }
    return _clean({
        "kind": "credit", "version": CREDIT_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": list(command),
        "code": code if code is not None else code_version(), "machine": machine_info(), "policy": policy, "env": cfg.env.name,
        "config": config_to_dict(cfg), "settings": asdict(study.settings),
        "mode": "exact" if exact else "monte_carlo", "tasks": task_ids, "summary": summary,
        "timing": study.timing,
        "variants": [asdict(v) for v in study.variants], "skipped": study.skipped, "scores": scores,
        "agreement": study.agreement, "monte_carlo_ceiling": study.mc_ceiling, "rows": out_rows,
    })


def write_record(folder: str | os.PathLike, record: dict[str, Any]) -> Path:
    """Write ``record`` as ``folder/credit.json`` (atomically); returns the path."""
    path = Path(folder) / CREDIT_FILE
    atomic_write_text(path, json.dumps(_clean(record), indent=1, allow_nan=False))
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


def find_records(root: str | os.PathLike) -> list[Path]:
    """Every ``credit.json`` under ``root`` (itself included; hidden folders skipped), sorted."""
    found = []
    for dirpath, dirnames, filenames in os.walk(Path(root)):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if CREDIT_FILE in filenames:
            found.append(Path(dirpath) / CREDIT_FILE)
    return sorted(found)
