"""Helpers of the per-row oracles: slow, literal reference implementations of the estimators.

Each estimator module may register an ``oracle`` beside its vectorized function (the test
oracle of ``tests/test_advantage_properties.py`` and the baseline of ``g2po bench
advantages``). The oracles are written as literally as possible from the equations of each
estimator's module docstring (its paper and reference code) with Python loops, lists and dicts, and
independently of the vectorized code: they share nothing with
:mod:`g2po_bench.algorithms.normalize` or :mod:`g2po_bench.algorithms._prep`, only these helpers.
They are slow (O(B) Python work per reference set, dict look-ups everywhere): correctness, not
training.

Conventions shared with the fast path by *specification* (not by code):

- "normalize" a value x against a reference list L: n = len(L); if n < 2 the result is 0
  ("zero" singleton rule: node, step and edge terms) or (x - 0) / (1 + eps), resp. x - 0
  ("unit" rule: the GRPO episode term of a one-member task group, mean 0 std 1). If the
  unbiased std of L is <= 1e-12 * (1 + |mean|) ("all members equal": docs/design-notes.md
  "The StepBatch", degenerate reference sets) the result is exactly 0. Else
  (x - mean) / (std + eps) or x - mean.
- A trajectory's rows are visited in step order; "canonical order" inside a task group is by
  (traj_id, step).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from g2po_bench.core.batch import StepBatch

__all__ = ["ALL_EQUAL_RTOL", "rows_of", "trajectories_of", "step_returns", "mean", "std", "stats",
           "normalize", "all_equal", "episode_term", "node_term"]

ALL_EQUAL_RTOL = 1e-12


def rows_of(batch: StepBatch) -> list[dict[str, Any]]:
    """One dict per row: ``i`` (row index), ``group``, ``traj``, ``t``, ``key``, ``r``,
    ``success``, ``invalid``."""
    out = []
    for i in range(len(batch)):
        out.append(
            {
                "i": i,
                "group": int(batch.group_id[i]),
                "traj": int(batch.traj_id[i]),
                "t": int(batch.step[i]),
                "key": int(batch.state_key[i]),
                "r": float(batch.reward[i]),
                "success": bool(batch.success[i]),
                "invalid": not bool(batch.action_valid[i]),
            }
        )
    return out


def trajectories_of(rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """traj id -> its rows in step order; also sets row["T"] and row["R"] (episode return)."""
    trajs: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        trajs[row["traj"]].append(row)
    for tr in trajs.values():
        tr.sort(key=lambda r: r["t"])
        ret = 0.0
        for row in tr:
            ret += row["r"]
        for row in tr:
            row["T"] = len(tr)
            row["R"] = ret
    return trajs


def step_returns(trajs: dict[int, list[dict[str, Any]]], gamma: float, p: float) -> None:
    """Set ``row["G"]`` on every row of :func:`trajectories_of`: the discounted step return
    G_t = r_t + gamma G_{t+1} (0 after the last step), computed backwards along the trajectory,
    less the invalid-action penalty ``p`` on invalid rows only (the penalty does not propagate
    to earlier steps): GiGPO Eq. 5 (arXiv 2505.10978; verl-agent
    ``compute_step_discounted_returns``) and HGPO (arXiv 2602.22817)."""
    for tr in trajs.values():
        running = 0.0
        for row in reversed(tr):
            running = row["r"] + gamma * running
            row["G"] = running - p if row["invalid"] else running


def mean(values: list[float]) -> float:
    """Arithmetic mean of a non-empty list."""
    total = 0.0
    for v in values:
        total += v
    return total / len(values)


def std(values: list[float], ddof: int = 1) -> float:
    """Standard deviation (unbiased with ``ddof=1``, population with ``ddof=0``)."""
    m = mean(values)
    ss = 0.0
    for v in values:
        ss += (v - m) * (v - m)
    return math.sqrt(ss / (len(values) - ddof))


def stats(ref: list[float]) -> tuple[int, float, float]:
    """(n, mean, unbiased std) of a reference list (mean/std 0 when undefined)."""
    if len(ref) == 0:
        return 0, 0.0, 0.0
    if len(ref) == 1:
        return 1, ref[0], 0.0
    return len(ref), mean(ref), std(ref)


def all_equal(s: float, m: float) -> bool:
    """The "all members equal" rule: std <= 1e-12 (1 + |mean|)."""
    return s <= ALL_EQUAL_RTOL * (1.0 + abs(m))


def normalize(x: float, st: tuple[int, float, float], mode: str, eps: float,
              singleton: str) -> float:
    """Normalize x against a reference set given by its :func:`stats`."""
    n, m, s = st
    if n < 2:
        if singleton == "zero":
            return 0.0
        return x / (1.0 + eps) if mode == "mean_std_norm" else x
    if all_equal(s, m):
        return 0.0
    if mode == "mean_std_norm":
        return (x - m) / (s + eps)
    return x - m


def episode_term(rows, mode, p, episode_stat, eps) -> dict[int, float]:
    """The GRPO episode term A_EP(i) per row index (GiGPO Eq. 3, arXiv 2505.10978; rows need
    ``R`` from :func:`trajectories_of`)."""
    ref: dict[int, list[float]] = defaultdict(list)
    for row in rows:
        row["s"] = row["R"] - (p if row["invalid"] else 0.0)
    for row in sorted(rows, key=lambda r: (r["traj"], r["t"])):
        if episode_stat == "steps" or row["t"] == 0:
            ref[row["group"]].append(row["s"])
    st = {g: stats(vals) for g, vals in ref.items()}
    return {row["i"]: normalize(row["s"], st[row["group"]], mode, eps, "unit") for row in rows}


def node_term(rows, node, value: str, mode: str, eps: float) -> dict[int, float]:
    """Per row index: ``row[value]`` normalized (``"zero"`` singleton rule) against the values of
    the rows of the same node ``node(row)``, the members taken in canonical order (the step
    term of GiGPO's step groups and GraphGPO's anchor states)."""
    members: dict[Any, list[float]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: (r["group"], r["traj"], r["t"])):
        members[node(row)].append(row[value])
    st = {key: stats(vals) for key, vals in members.items()}
    return {row["i"]: normalize(row[value], st[node(row)], mode, eps, "zero") for row in rows}
