"""G2PO: group-graph policy optimization (critic-free, step-level credit from a state graph).

Source: the reference-code semantics of the G2PO paper (arXiv 2606.22995) as implemented in its
public code (Nala-YN/G2PO ``g2po/core_g2po.py``: ``compute_group_aggregation_values``,
``compute_step_level_advantage``, ``episode_norm_reward``), and the paper's ablation axes as
options.

Reference semantics (the defaults), per task group g (nothing shared across task groups)::

    nodes      n = {rows i of g with the same state_key}        (visits; repeated visits count)
    v_i        = gamma^(T_tau(i) - t_i) * R_tau(i)               (per-visit discounted return;
                                                                   the last step gets gamma^1)
    V(n)       = mean_{i in n} v_i                               (group-aggregation value)
    succ(i)    = node(i+1) of the same trajectory, or for the last row a terminal node with
                 V = success_reward (10, not discounted) on success and V = 0 on failure
                 (truncation at the step limit included)
    x_i        = V(succ(i)) - p * [invalid_i]
    A_NC(i)    = normalize x over the visits of node(i)          (node-centric; a node with a
                                                                   single visit gives 0)
    delta_i    = V(succ(i)) - V(node(i))                         (one-step TD error, no reward
                                                                   term, no discount)
    A_EC(i)    = normalize delta over all rows of the task group (edge-centric, "global")
    A_EP(i)    = GRPO episode term (cross steps, penalty included; see algorithms/estimators/grpo.py)
    A(i)       = A_EP(i) + w * (A_NC(i) + A_EC(i))               (w = step_weight = 1;
                                                                   w = 0 is GRPO)

"normalize" is ``mode``: (x - mean) / (std + eps) with the unbiased std and eps = 1e-6
("mean_std_norm", ALFWorld) or x - mean ("mean_norm", WebShop). A reference set whose members
are all equal gives exactly 0 (the reference computes in float32 and can leave rounding
noise; we do not reproduce it). R_tau is the sum of the trajectory's rewards and the penalty
p = ``invalid_penalty`` never enters V.

Ablation options (each changes one equation above):

- ``aggregation`` (True): V(n) as above. False ("no aggregation", the per-trajectory return):
  every occurrence of V is replaced by the row's own discounted return, V(node(i)) -> v_i and
  V(succ(i)) -> v_{i+1} (the next row of the same trajectory; terminal value for the last
  row), so x_i = v_{i+1} - p [invalid_i] and delta_i = v_{i+1} - v_i. Nodes still define the
  node-centric reference sets.
- ``graph_scope`` ("group"): nodes are keyed by (task group, state_key). "batch": by
  state_key over the whole batch, so V(n) averages visits from every task group and the
  node-centric reference set spans groups. The episode term stays per task group.
- ``edge_norm_scope`` ("group"): the reference set of A_EC is all rows of the task group.
  "batch": all rows of the batch. "node": the visits of node(i) (singleton node -> 0).
- ``components`` ("full"): the paper's Figure 3 ladder.
  "ep":        A = A_EP (GRPO);
  "ep+nc":     A = A_EP + w A_NC with no aggregation (``aggregation`` is ignored);
  "ep+nc+agg": A = A_EP + w A_NC with the aggregated V (``aggregation=False`` is an error);
  "full":      A = A_EP + w (A_NC + A_EC), aggregated unless ``aggregation=False``.
- ``node_reference_set`` ("visits"): A_NC normalizes x_i with the mean/std of x over the
  visits of node(i). "successors" (the paper's Delta_k set): the reference set of node n is
  the set S(n) of its *distinct* successor nodes (the two terminal nodes, success and
  failure, count as distinct nodes), each counted once with the value
  u(n, s) = V(s) (with aggregation; the mean of v_{i+1} over the visits i of n whose
  successor is s without aggregation). A_NC(i) = (x_i - mean_{s in S(n)} u(n, s)) /
  (std_{s in S(n)} u(n, s) + eps) (resp. x_i - mean); the penalty enters x_i but not the
  reference values; |S(n)| < 2 or all u(n, s) equal gives 0.
- ``episode_stat`` ("steps"): the A_EP statistic, see algorithms/estimators/grpo.py ("trajectories"
  takes one value per trajectory).
- ``step_weight`` (w, 1.0): the paper sweeps w in {0, 0.2, ..., 1.2}.

Interpretations of the paper / the reference code made here:

- The terminal node of a final row is chosen by the trajectory's ``success`` flag (the
  reference tests ``episode_reward == 10``; identical in the reference setting).
- T and t come from the ``step`` field (the reference counts rows in batch order).
- A task group with a single row has a single-member edge reference set: A_EC = 0 (the
  reference's ``torch.std`` of one value is NaN there).
- Computation is float64; "all members equal" is decided with the tolerance of
  algorithms/normalize.py (std <= 1e-12 (1 + |mean|)), so exact-arithmetic ties give exactly 0.
- A task group of identical rollouts does not get advantage 0 when they succeed in more than
  one step (registered with ``zero_on_uniform_group=False``): A_EP and A_NC are 0 there, but the
  TD errors delta_i = V(succ(i)) - V(node(i)) differ from step to step (e.g. 10 (1 - gamma) on
  the last step, gamma^k 10 (1 - gamma) k steps earlier) and A_EC standardizes them over the
  whole group, as the reference code does (8 identical 3-step successes: A_EC = -1.19, -0.02,
  +1.21 per step). Identical members still get identical advantages, step for step.

Diagnostics: ``singleton_frac``, ``node_size_mean``, ``node_size_max``, ``nodes_per_group``,
``edges_per_group`` (terminal edges included), ``node_return_var_mean`` (within-node variance
of v), ``step_nonzero_frac`` (rows with a non-zero active step term A_NC + A_EC, before w),
``nc_nonzero_frac``, ``ec_nonzero_frac``. Row terms (``AdvantageResult.row_terms``, row order):
``node_value`` V(node(i)) (v_i without aggregation), ``succ_value`` V(succ(i)), ``visit_return``
v_i, ``a_ep``, ``a_nc``, ``a_ec`` (0 where ``components`` leaves the term out).

Complexity: O(B log B) (factorizations by sorting), the rest is np.bincount; no Python loop
over rows. The reference builds groups with per-row ``np.where`` (quadratic in B).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from g2po_bench.algorithms import _rowwise as rw
from g2po_bench.algorithms._graph import graph_diagnostics, successor_ids
from g2po_bench.algorithms._prep import Prepared, prepare
from g2po_bench.algorithms.estimators.grpo import EPISODE_STATS, episode_advantage
from g2po_bench.algorithms.normalize import (
    EPS,
    apply_normalization,
    factorize,
    factorize_pairs,
    group_normalize,
    segment_stats,
)
from g2po_bench.algorithms.registry import AdvantageResult, in_range, register_estimator
from g2po_bench.core.batch import StepBatch

__all__ = ["g2po", "oracle_g2po", "COMPONENTS", "GRAPH_SCOPES", "EDGE_NORM_SCOPES", "NODE_REFERENCE_SETS"]

COMPONENTS = ("ep", "ep+nc", "ep+nc+agg", "full")
GRAPH_SCOPES = ("group", "batch")
EDGE_NORM_SCOPES = ("group", "batch", "node")
NODE_REFERENCE_SETS = ("visits", "successors")


def _check(options: dict[str, Any]) -> str | None:
    if options["components"] == "ep+nc+agg" and options["aggregation"] is False:
        return "components='ep+nc+agg' includes aggregation; it contradicts aggregation=False"
    return None


def effective_aggregation(components: str, aggregation: bool) -> bool:
    """Whether node values are aggregated over visits, given the ladder step (see module doc)."""
    if components == "ep+nc":
        return False
    if components == "ep+nc+agg":
        return True
    return bool(aggregation)


def oracle_g2po(batch: StepBatch, **o) -> np.ndarray:
    """Per-row oracle (:mod:`g2po_bench.algorithms._rowwise`), every ablation option: (B,) float64."""
    gamma, p, mode, eps = o["gamma"], o["invalid_penalty"], o["mode"], o["eps"]
    w, success_reward = o["step_weight"], o["success_reward"]
    components = o["components"]
    if components == "ep+nc":
        agg = False
    elif components == "ep+nc+agg":
        agg = True
    else:
        agg = bool(o["aggregation"])
    rows = rw.rows_of(batch)
    trajs = rw.trajectories_of(rows)
    ep = rw.episode_term(rows, mode, p, o["episode_stat"], eps)

    # 1. nodes
    def node_key(row):
        return (row["group"], row["key"]) if o["graph_scope"] == "group" else row["key"]

    ordered = sorted(rows, key=lambda r: (r["group"], r["traj"], r["t"]))
    visits: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in ordered:
        row["node"] = node_key(row)
        visits[row["node"]].append(row)
    # 2. group-aggregation value
    for row in rows:
        row["v"] = gamma ** (row["T"] - row["t"]) * row["R"]
    value: dict[Any, float] = {}
    for node, vis in visits.items():
        value[node] = rw.mean([r["v"] for r in vis])
    value[("TERMINAL", True)] = success_reward
    value[("TERMINAL", False)] = 0.0
    # 3. successors
    for tr in trajs.values():
        for k, row in enumerate(tr):
            if k + 1 < len(tr):
                nxt = tr[k + 1]
                row["succ"] = nxt["node"]
                row["succ_val"] = value[nxt["node"]] if agg else nxt["v"]
            else:
                row["succ"] = ("TERMINAL", row["success"])
                row["succ_val"] = success_reward if row["success"] else 0.0
            row["cur_val"] = value[row["node"]] if agg else row["v"]
            row["x"] = row["succ_val"] - (p if row["invalid"] else 0.0)
            row["delta"] = row["succ_val"] - row["cur_val"]
    # 4. node-centric term
    nc_ref: dict[Any, list[float]] = {}
    for node, vis in visits.items():
        if o["node_reference_set"] == "visits":
            nc_ref[node] = [r["x"] for r in vis]
        else:
            per_succ: dict[Any, list[float]] = {}
            for r in vis:
                per_succ.setdefault(r["succ"], []).append(r["succ_val"])
            if agg:
                nc_ref[node] = [value[s] for s in per_succ]
            else:
                nc_ref[node] = [rw.mean(vals) for vals in per_succ.values()]
    # 5. edge-centric term
    ec_ref: dict[Any, list[float]] = defaultdict(list)

    def ec_scope(row):
        scope = o["edge_norm_scope"]
        if scope == "group":
            return ("group", row["group"])
        if scope == "batch":
            return "batch"
        return ("node", row["node"])

    for row in ordered:
        ec_ref[ec_scope(row)].append(row["delta"])
    # 6-7. combination
    nc_stats = {node: rw.stats(vals) for node, vals in nc_ref.items()}
    ec_stats = {scope: rw.stats(vals) for scope, vals in ec_ref.items()}
    out = np.zeros(len(rows))
    for row in rows:
        a_nc = rw.normalize(row["x"], nc_stats[row["node"]], mode, eps, "zero")
        a_ec = rw.normalize(row["delta"], ec_stats[ec_scope(row)], mode, eps, "zero")
        if components == "ep":
            step = 0.0
        elif components in ("ep+nc", "ep+nc+agg"):
            step = a_nc
        else:
            step = a_nc + a_ec
        out[row["i"]] = ep[row["i"]] + w * step
    return out


@register_estimator(
    "g2po",
    options={
        "aggregation": True,
        "graph_scope": "group",
        "edge_norm_scope": "group",
        "components": "full",
        "node_reference_set": "visits",
        "episode_stat": "steps",
        "eps": EPS,
    },
    choices={
        "graph_scope": GRAPH_SCOPES,
        "edge_norm_scope": EDGE_NORM_SCOPES,
        "components": COMPONENTS,
        "node_reference_set": NODE_REFERENCE_SETS,
        "episode_stat": EPISODE_STATS,
    },
    validators={"eps": in_range(0.0, lo_open=True)},
    check=_check,
    label="G2PO",
    oracle=oracle_g2po,
    zero_on_uniform_group=False,  # the edge-centric TD errors differ by step (module docstring)
    description="G2PO: GRPO episode term + node-centric and edge-centric terms on the group state graph",
)
def g2po(
    batch: StepBatch,
    *,
    mode: str,
    gamma: float,
    step_weight: float,
    invalid_penalty: float,
    success_reward: float,
    aggregation: bool,
    graph_scope: str,
    edge_norm_scope: str,
    components: str,
    node_reference_set: str,
    episode_stat: str,
    eps: float,
) -> AdvantageResult:
    """G2PO advantages (equations and options: see the module docstring).

    Args:
        batch: the StepBatch, B rows.
        mode: "mean_std_norm" | "mean_norm".
        gamma: discount of the per-visit return v (0.95).
        step_weight: w (1.0).
        invalid_penalty: p (0.1).
        success_reward: value of the terminal success node (10.0).
        aggregation, graph_scope, edge_norm_scope, components, node_reference_set,
        episode_stat, eps: the ablation switches (module docstring).

    Returns:
        AdvantageResult: advantages (B,) float64 in row order, returns None, graph diagnostics.

    Raises:
        ValueError: an option outside its choices (normally caught by the registry first).
    """
    prep = prepare(batch)
    n = prep.n
    a_ep = episode_advantage(
        prep, mode=mode, invalid_penalty=invalid_penalty, episode_stat=episode_stat, eps=eps
    )
    agg = effective_aggregation(components, aggregation)

    node, num_nodes = _nodes(prep, graph_scope)

    # per-visit discounted episode return and group-aggregation value
    v = np.power(gamma, (prep.length - prep.step).astype(np.float64)) * prep.episode_return
    visit_stats = segment_stats(v, node, num_nodes)
    value = np.append(visit_stats.mean, [success_reward, 0.0])  # + terminal success / failure
    succ = successor_ids(prep, node, num_nodes)
    terminal = np.where(prep.success, success_reward, 0.0)
    if agg:
        cur_val = value[node]
        succ_val = value[succ]
    else:
        cur_val = v
        succ_val = np.empty(n)
        succ_val[:-1] = v[1:]
        succ_val[prep.is_last] = terminal[prep.is_last]

    # node-centric term
    x = succ_val - invalid_penalty * prep.invalid
    a_nc = _node_centric(x, node, num_nodes, succ, succ_val, value, agg=agg,
                         node_reference_set=node_reference_set, mode=mode, eps=eps)
    # edge-centric term
    delta = succ_val - cur_val
    a_ec = _edge_centric(delta, prep, node, num_nodes, edge_norm_scope=edge_norm_scope, mode=mode, eps=eps)

    step_term = _step_term(components, a_nc, a_ec, n)
    adv = a_ep + step_weight * step_term

    diag = graph_diagnostics(
        prep,
        node,
        num_nodes,
        succ,
        visit_stats,
        step_term,
        nodes_within_groups=graph_scope == "group",
    )
    diag["nc_nonzero_frac"] = float(np.mean(a_nc != 0.0)) if n else 0.0
    diag["ec_nonzero_frac"] = float(np.mean(a_ec != 0.0)) if n else 0.0
    zero = np.zeros(n)
    terms = {
        "node_value": cur_val,
        "succ_value": succ_val,
        "visit_return": v,
        "a_ep": a_ep,
        "a_nc": a_nc if components != "ep" else zero,
        "a_ec": a_ec if components == "full" else zero,
    }
    return AdvantageResult(
        advantages=prep.to_original(adv),
        diagnostics=diag,
        row_terms={k: prep.to_original(x) for k, x in terms.items()},
    )


def _nodes(prep: Prepared, graph_scope: str) -> tuple[np.ndarray, int]:
    """The state-graph node of every row, (B,) int64 dense ids, and the number of nodes: a node is
    a state key within its group (``graph_scope="group"``) or across the batch (``"batch"``).

    Raises:
        ValueError: an unknown ``graph_scope``.
    """
    kid, num_keys = factorize(prep.state_key)
    if graph_scope == "group":
        return factorize_pairs(prep.group, prep.num_groups, kid, num_keys)
    if graph_scope == "batch":
        return kid, num_keys
    raise ValueError(f"unknown graph_scope {graph_scope!r}; choose one of {GRAPH_SCOPES}")


def _node_centric(
    x: np.ndarray,
    node: np.ndarray,
    num_nodes: int,
    succ: np.ndarray,
    succ_val: np.ndarray,
    value: np.ndarray,
    *,
    agg: bool,
    node_reference_set: str,
    mode: str,
    eps: float,
) -> np.ndarray:
    """The node-centric term A^NC, (B,) float64: ``x`` (successor value minus the invalid-action
    penalty) normalized within its node, against the node's visits (``node_reference_set=
    "visits"``) or against one value per distinct successor of the node (``"successors"``: the
    successor node's value ``value[succ]`` with ``agg``, else the mean of its visits' ``succ_val``);
    singleton nodes get 0. ``succ`` indexes ``value`` (nodes, then terminal success and failure).

    Raises:
        ValueError: an unknown ``node_reference_set``.
    """
    if node_reference_set == "visits":
        return group_normalize(x, node, num_nodes, mode, eps=eps, singleton="zero")
    if node_reference_set == "successors":
        pair, num_pairs = factorize_pairs(node, num_nodes, succ, num_nodes + 2)
        pair_node = np.zeros(num_pairs, dtype=np.int64)
        pair_node[pair] = node
        if agg:
            pair_succ = np.zeros(num_pairs, dtype=np.int64)
            pair_succ[pair] = succ
            u = value[pair_succ]
        else:
            u = np.bincount(pair, weights=succ_val, minlength=num_pairs) / np.bincount(
                pair, minlength=num_pairs
            )
        stats = segment_stats(u, pair_node, num_nodes)
        return apply_normalization(x, node, stats, mode, eps=eps, singleton="zero")
    raise ValueError(
        f"unknown node_reference_set {node_reference_set!r}; choose one of {NODE_REFERENCE_SETS}"
    )


def _edge_centric(
    delta: np.ndarray, prep: Prepared, node: np.ndarray, num_nodes: int, *, edge_norm_scope: str, mode: str,
    eps: float,
) -> np.ndarray:
    """The edge-centric term A^EC, (B,) float64: the TD error ``delta`` (successor value minus
    current value) normalized within the row's group, the whole batch or its node
    (``edge_norm_scope``).

    Raises:
        ValueError: an unknown ``edge_norm_scope``.
    """
    if edge_norm_scope == "group":
        return group_normalize(delta, prep.group, prep.num_groups, mode, eps=eps)
    if edge_norm_scope == "batch":
        return group_normalize(delta, np.zeros(prep.n, dtype=np.int64), 1, mode, eps=eps)
    if edge_norm_scope == "node":
        return group_normalize(delta, node, num_nodes, mode, eps=eps)
    raise ValueError(
        f"unknown edge_norm_scope {edge_norm_scope!r}; choose one of {EDGE_NORM_SCOPES}"
    )


def _step_term(components: str, a_nc: np.ndarray, a_ec: np.ndarray, n: int) -> np.ndarray:
    """The step-level term of the ladder step ``components``, (n,) float64: none (``"ep"``),
    A^NC (``"ep+nc"``, ``"ep+nc+agg"``) or A^NC + A^EC (``"full"``).

    Raises:
        ValueError: unknown ``components``.
    """
    if components == "ep":
        return np.zeros(n)
    if components in ("ep+nc", "ep+nc+agg"):
        return a_nc
    if components == "full":
        return a_nc + a_ec
    raise ValueError(f"unknown components {components!r}; choose one of {COMPONENTS}")
