"""Helpers shared by the graph estimators (G2PO, GiGPO): successors and diagnostics.

Rows are in canonical order (see :mod:`g2po_bench.algorithms._prep`). A *node* is a dense id in
``0..num_nodes-1``; the two terminal nodes get the ids ``num_nodes`` (terminal success) and
``num_nodes + 1`` (terminal failure, truncation at the step limit included), as in
the G2PO reference code (Nala-YN/G2PO ``g2po/core_g2po.py``; succ(i) of docs/estimators/g2po.md).
"""

from __future__ import annotations

import numpy as np

from g2po_bench.algorithms._prep import Prepared
from g2po_bench.algorithms.normalize import SegmentStats, count_distinct, factorize, pair_key

__all__ = ["successor_ids", "graph_diagnostics"]


def successor_ids(prep: Prepared, node: np.ndarray, num_nodes: int) -> np.ndarray:
    """Successor node of every row: the node of the next row of the same trajectory, or a
    terminal node (``num_nodes`` success, ``num_nodes + 1`` failure) for the last row.

    Args:
        prep: prepared batch; node: (B,) int64 dense node ids (canonical order).

    Returns:
        (B,) int64.
    """
    n = prep.n
    succ = np.empty(n, dtype=np.int64)
    if n == 0:
        return succ
    succ[:-1] = node[1:]
    last = prep.is_last
    succ[last] = np.where(prep.success[last], num_nodes, num_nodes + 1)
    return succ


def graph_diagnostics(
    prep: Prepared,
    node: np.ndarray,
    num_nodes: int,
    succ: np.ndarray,
    visit_stats: SegmentStats,
    step_term: np.ndarray,
    *,
    nodes_within_groups: bool,
) -> dict[str, float]:
    """Graph statistics for logging (all floats; 0 for an empty batch).

    Keys:
        ``singleton_frac``: fraction of step rows whose node has a single visit.
        ``node_size_mean`` / ``node_size_max``: visits per node (over nodes).
        ``nodes_per_group``: distinct (non-terminal) nodes touched per task group, mean.
        ``edges_per_group``: distinct edges (node -> successor, terminal edges included) per
            task group, mean.
        ``node_return_var_mean``: mean over nodes with >= 2 visits of the unbiased variance of
            the per-visit returns (``visit_stats``; 0 when there is no such node).
        ``step_nonzero_frac``: fraction of rows whose step-level term is non-zero.

    Args:
        prep: prepared batch; node (B,) int64 dense node ids; succ (B,) successor ids
            (:func:`successor_ids`); visit_stats: statistics of the per-visit returns per node;
            step_term (B,) float64 the step-level term (before the weight w / omega).
        nodes_within_groups: True when every node belongs to one task group (graph per group).
    """
    if prep.n == 0:
        keys = ("singleton_frac", "node_size_mean", "node_size_max", "nodes_per_group",
                "edges_per_group", "node_return_var_mean", "step_nonzero_frac")
        return dict.fromkeys(keys, 0.0)
    count = visit_stats.count
    multi = count >= 2
    g = max(prep.num_groups, 1)
    edge = pair_key(node, num_nodes, succ, num_nodes + 2)
    if nodes_within_groups:
        nodes_total = num_nodes
        edges_total = count_distinct(edge)
    else:
        nodes_total = count_distinct(pair_key(prep.group, prep.num_groups, node, num_nodes))
        edge_ids, num_edges = factorize(edge)
        edges_total = count_distinct(pair_key(prep.group, prep.num_groups, edge_ids, num_edges))
    return {
        "singleton_frac": float(np.mean(count[node] == 1)),
        "node_size_mean": float(count.mean()) if num_nodes else 0.0,
        "node_size_max": float(count.max()) if num_nodes else 0.0,
        "nodes_per_group": nodes_total / g,
        "edges_per_group": edges_total / g,
        "node_return_var_mean": float(np.mean(visit_stats.std[multi] ** 2)) if multi.any() else 0.0,
        "step_nonzero_frac": float(np.mean(step_term != 0.0)),
    }
