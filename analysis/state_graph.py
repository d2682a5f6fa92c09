"""One task group's state-transition graph, rebuilt from a recorded step table (networkx).

Source: the G2PO graph (arXiv 2606.22995; reference code Nala-YN/G2PO ``g2po/core_g2po.py``; the
nodes and succ(i) of docs/estimators/g2po.md): inside one task group, rows with the same
``state_key`` are one node (visits; repeated visits count again), and every row is an edge from its
node to its successor: the node of the next row of the same trajectory, or for the last row a
terminal node, ``SUCCESS`` (value ``success_reward``) or ``FAILURE`` (value 0; truncation at the
step limit included). This is the graph G2PO's ``edges_per_group`` counts, so the numbers here
equal the estimator's own diagnostics for the group (tests/test_state_graph.py checks it). With the
ablation ``graph_scope="batch"`` a node's recorded value averages visits from every group of the
batch while the drawing counts only this group's visits.

:func:`build_group_graph` returns a :class:`networkx.DiGraph` whose

- state nodes (ids ``"s0"``, ``"s1"``, ... in order of first visit) carry ``kind`` ("start" for
  a state some trajectory starts in, else "state"), ``label`` (the recorded state label),
  ``state_key`` (int), ``visits`` (rows), ``trajectories`` (distinct trajectories), ``value``
  (the mean of the value column over the visits: G2PO's V(n), which is the same for every
  visit; None when the estimator has no node values), ``first_step`` (smallest t), ``layer``
  (breadth-first depth from the start states);
- terminal nodes ``"SUCCESS"`` / ``"FAILURE"`` (present when some trajectory ends there) carry
  ``kind`` "success" / "failure", ``value`` (``success_reward`` / 0), ``visits`` (trajectories
  ending there) and ``layer`` (one past the deepest state);
- edges carry ``rows`` (times taken), ``trajectories`` (distinct trajectories that took it),
  ``invalid`` (rows with an invalid action), ``actions`` (list of ``(action, count)``, most
  frequent first; the actions that led from the node to that successor), ``advantage``
  (mean advantage over the rows), ``advantage_min``/``advantage_max``, and ``self_loop``.

The graph's ``graph`` dict holds ``group``, ``iteration``, ``task_id``, ``task_type``,
``success_rate`` (fraction of the group's trajectories that succeeded), ``num_trajectories``,
``num_rows``, ``estimator``, ``value_name`` and ``value_symbol`` (V for G2PO, G for GiGPO).

:func:`recompute` runs another registered estimator on the recorded rows (the ``--compare``
view); :func:`choose_group` picks a group worth drawing. Dependencies: pandas, networkx and
the estimator registry (numpy).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np
import pandas as pd

from g2po_bench.algorithms.registry import (
    COMMON_OPTIONS,
    INPUTS,
    estimate,
    estimator_inputs,
    estimator_spec,
)
from g2po_bench.core.batch import StepBatch
from g2po_bench.core.steptable import StepTable

__all__ = [
    "SUCCESS",
    "FAILURE",
    "GroupRows",
    "group_rows",
    "choose_group",
    "recompute",
    "compared_rows",
    "build_group_graph",
    "graph_counts",
]

SUCCESS = "SUCCESS"
FAILURE = "FAILURE"


@dataclass
class GroupRows:
    """The rows of one task group under one estimator: ``frame`` (the step-table rows of the
    group sorted by trajectory and step, with ``advantage`` and ``value`` columns of the
    estimator shown), ``estimator`` (its name) and ``value_name`` (what ``value`` holds, or
    None when the estimator has no node values)."""

    frame: pd.DataFrame
    estimator: str
    value_name: str | None


def _value_name(estimator: str) -> str | None:
    return {"g2po": "V(n): G2PO node value", "gigpo": "mean step return of the step group"}.get(
        estimator, "node value")


def group_rows(table: StepTable, group: int) -> GroupRows:
    """The recorded rows of task group ``group`` with the run's own advantages and node values.

    Raises:
        ValueError: the table has no such group (the message lists the recorded groups).
    """
    groups = sorted(int(g) for g in table.frame["group_id"].unique())
    if group not in groups:
        raise ValueError(
            f"iteration {table.iteration} has no task group {group}; recorded groups: "
            f"{', '.join(map(str, groups)) or 'none'}"
        )
    frame = table.frame[table.frame["group_id"] == group].sort_values(["traj_id", "step"])
    frame = frame.reset_index(drop=True).copy()
    has_value = "node_value" in frame.columns
    frame["value"] = frame["node_value"] if has_value else np.nan
    return GroupRows(frame, table.estimator, _value_name(table.estimator) if has_value else None)


def choose_group(table: StepTable) -> int:
    """The group drawn when none is named: the one whose success rate is closest to 50 %
    (mixed outcomes are where step credit differs from the episode term), ties broken by more
    step rows, then the smaller group id.

    Raises:
        ValueError: the table is empty.
    """
    f = table.frame
    if f.empty:
        raise ValueError(f"iteration {table.iteration} recorded no steps")
    traj = f.groupby("traj_id").agg(group_id=("group_id", "first"), success=("success", "first"))
    rate = traj.groupby("group_id")["success"].mean()
    rows = f.groupby("group_id").size()
    keys = sorted(rate.index, key=lambda g: (abs(rate[g] - 0.5), -rows[g], g))
    return int(keys[0])


def _step_batch(frame: pd.DataFrame):

    return StepBatch(
        group_id=frame["group_id"].to_numpy(np.int64), traj_id=frame["traj_id"].to_numpy(np.int64),
        step=frame["step"].to_numpy(np.int64), state_key=frame["state_key"].to_numpy(np.int64),
        reward=frame["reward"].to_numpy(np.float64), success=frame["success"].to_numpy(bool),
        action_valid=frame["valid"].to_numpy(bool),
    )


def recompute(table: StepTable, estimator: str, options: dict[str, Any] | None = None):
    """Run ``estimator`` on the whole recorded iteration (all groups, as in training).

    The common options (mode, gamma, step weight, penalty, success reward) are the run's; the
    run's estimator-specific options are kept only when ``estimator`` is the run's own; then
    ``options`` override. The estimator's declared inputs (:data:`g2po_bench.algorithms.registry.INPUTS`)
    come from their step-table columns (``critic_value``, ``entropy``, ``next_state_key``,
    ``action``: the action texts as recorded, at most 80 characters); an input the table lacks
    is an error.

    Args:
        table: the step table.
        estimator: a registered estimator name.
        options: extra options.

    Returns:
        ``(AdvantageResult, StepBatch)``; the result is in the table's row order.

    Raises:
        ValueError: unknown estimator or option; an input the run did not record (e.g. PPO on a
            run without critic values).
    """

    spec = estimator_spec(estimator)
    run_opts = table.options
    opts = {k: v for k, v in run_opts.items() if k in COMMON_OPTIONS}
    if estimator == table.estimator:
        opts.update(run_opts)
    opts.update(options or {})
    opts = {k: v for k, v in opts.items() if k in spec.defaults}
    inputs = {}
    for key in estimator_inputs(estimator, opts):
        column = INPUTS[key].step_table_column
        if column is None or column not in table.frame.columns:
            raise ValueError(
                f"{estimator} needs the input {key!r} ({INPUTS[key].description}), and this run "
                f"({table.estimator}) did not record it in its step table; compare with an estimator "
                "that needs no such input (g2po, gigpo, grpo, rloo)"
            )
        col = table.frame[column]
        kind = INPUTS[key].kind
        inputs[key] = (col.to_numpy(np.float64) if kind == "float" else col.to_numpy(np.int64) if kind == "key"
                       else col.astype(str).to_numpy())
    batch = _step_batch(table.frame)
    return estimate(estimator, batch, inputs=inputs, **opts), batch


def compared_rows(table: StepTable, group: int, estimator: str) -> GroupRows:
    """:func:`group_rows` of ``group`` with the advantages and node values of ``estimator``
    recomputed on the recorded iteration (:func:`recompute`)."""
    res, _ = recompute(table, estimator)
    frame = table.frame.copy()
    frame["advantage"] = res.advantages
    has_value = "node_value" in res.row_terms
    frame["node_value"] = res.row_terms["node_value"] if has_value else np.nan
    sub = StepTable(frame=frame, meta={**table.meta, "estimator": estimator})
    rows = group_rows(sub, group)
    if not has_value:
        rows.value_name = None
    return rows


def build_group_graph(rows: GroupRows, *, success_reward: float = 10.0,
                      iteration: int | None = None) -> nx.DiGraph:
    """The state graph of one task group (node, edge and graph attributes: module docstring).

    Args:
        rows: :func:`group_rows` (or :func:`compared_rows`) of one group.
        success_reward: value of the terminal success node (the run's ``success_reward``).
        iteration: recorded in ``G.graph["iteration"]``.

    Returns:
        networkx.DiGraph.

    Raises:
        ValueError: ``rows`` is empty or spans several groups.
    """
    f = rows.frame
    if f.empty:
        raise ValueError("no rows: the group recorded no steps")
    if f["group_id"].nunique() != 1:
        raise ValueError("build_group_graph needs the rows of exactly one task group")
    keys = f["state_key"].to_numpy(np.int64)
    traj = f["traj_id"].to_numpy(np.int64)
    step = f["step"].to_numpy(np.int64)
    n = len(f)
    node_of_key: dict[int, str] = {}
    for k in keys.tolist():
        node_of_key.setdefault(k, f"s{len(node_of_key)}")
    node = [node_of_key[k] for k in keys.tolist()]
    last = np.append(traj[1:] != traj[:-1], True)
    success = f["success"].to_numpy(bool)
    succ = [node[i + 1] if not last[i] else (SUCCESS if success[i] else FAILURE) for i in range(n)]

    g = nx.DiGraph()
    traj_success = f.groupby("traj_id")["success"].first()
    g.graph.update({
        "group": int(f["group_id"].iloc[0]), "iteration": iteration,
        "task_id": str(f["task_id"].iloc[0]), "task_type": str(f["task_type"].iloc[0]),
        "success_rate": float(traj_success.mean()), "num_trajectories": int(len(traj_success)),
        "num_rows": n, "estimator": rows.estimator, "value_name": rows.value_name,
        "value_symbol": {"g2po": "V", "gigpo": "G"}.get(rows.estimator, "v"),
    })
    f = f.assign(_node=node, _succ=succ)
    starts = set(f.loc[f["step"] == 0, "_node"])
    for name, grp in f.groupby("_node", sort=False):
        value = float(grp["value"].mean()) if rows.value_name is not None else None
        g.add_node(name, kind="start" if name in starts else "state",
                   label=str(grp["state_label"].iloc[0]), state_key=int(grp["state_key"].iloc[0]),
                   visits=len(grp), trajectories=int(grp["traj_id"].nunique()), value=value,
                   first_step=int(grp["step"].min()))
    ends = f[last]
    for term, kind, value in ((SUCCESS, "success", success_reward), (FAILURE, "failure", 0.0)):
        count = int((ends["_succ"] == term).sum())
        if count:
            g.add_node(term, kind=kind, label="success" if kind == "success" else "failure",
                       state_key=None, visits=count, trajectories=count, value=float(value),
                       first_step=None)
    for (u, v), grp in f.groupby(["_node", "_succ"], sort=False):
        adv = grp["advantage"].to_numpy(np.float64)
        counts = Counter(grp["action"].astype(str)).most_common()
        g.add_edge(u, v, rows=len(grp), trajectories=int(grp["traj_id"].nunique()),
                   invalid=int((~grp["valid"].to_numpy(bool)).sum()), actions=counts,
                   advantage=float(adv.mean()), advantage_min=float(adv.min()),
                   advantage_max=float(adv.max()), self_loop=u == v)
    _assign_layers(g, starts, step)
    return g


def _assign_layers(g: nx.DiGraph, starts: set[str], step: np.ndarray) -> None:
    """``layer`` = breadth-first depth from the start states; terminals one past the deepest."""
    depth = nx.multi_source_dijkstra_path_length(g, starts) if starts else {}  # unit weights
    states = [n for n, d in g.nodes(data=True) if d["kind"] in ("start", "state")]
    deepest = max((depth.get(n, 0) for n in states), default=0)
    for n, d in g.nodes(data=True):
        if d["kind"] in ("success", "failure"):
            d["layer"] = deepest + 1
        else:
            d["layer"] = int(depth.get(n, d["first_step"]))


def graph_counts(g: nx.DiGraph) -> dict[str, float]:
    """The graph's numbers in the estimator's diagnostic terms (:mod:`g2po_bench.algorithms._graph`):
    ``nodes`` (state nodes, terminals excluded), ``edges`` (distinct node -> successor pairs,
    terminal edges included), ``node_size_max`` (most visits of a state node),
    ``singleton_frac`` (fraction of rows whose node has one visit), ``rows``."""
    states = [d for _, d in g.nodes(data=True) if d["kind"] in ("start", "state")]
    rows = sum(d["visits"] for d in states)
    return {
        "nodes": float(len(states)),
        "edges": float(g.number_of_edges()),
        "node_size_max": float(max((d["visits"] for d in states), default=0)),
        "singleton_frac": float(sum(d["visits"] for d in states if d["visits"] == 1) / rows) if rows else 0.0,
        "rows": float(rows),
    }
