"""GraphGPO: distance to the goal on the group graph (critic-free, step-level credit).

Source: GraphGPO, distance-to-goal on the group graph (arXiv 2605.26684, ICML 2026; the
semantics of the authors' public recipe code).

Per task group g: a directed multigraph with one edge anchor(i) -> next(i) per row, where
next(i) is the state the step led to (the input ``next_state_key``: the anchor of the next row
of the trajectory, and after the last step of a failed or truncated episode the real
observation it ended on); the final row of a successful episode points to a sentinel node
"success"::

    d(n)     = hop distance from node n to "success" (reverse breadth-first search, unit
               weights; d(success) = 0)
    unreachable nodes: d = (largest finite distance of the group) + 1
    no success in the group: d = 1 for every node
    R_i      = success_reward * gamma_d ^ d(next_i)                      distance = "absolute"
    R_i      = success_reward * gamma_d ^ (d(next_i) - d(anchor_i) + 1)  distance = "relative"
    R_i     <- R_i - p * [invalid_i]
    A_S(i)   = normalize R within the rows of g with the same anchor (GiGPO's step groups;
               unbiased std; a singleton gives 0)
    A(i)     = A_EP(i) + w * A_S(i)                                     (w = step_weight = 1)

A_EP is the GRPO episode term (:mod:`g2po_bench.algorithms.estimators.grpo`). Both terms use
``normalization`` (default "mean_std_norm", the recipe's on ALFWorld and WebShop alike; this
estimator does not read the common ``algorithm.mode``). gamma_d is ``distance_gamma``: 0.10 on
ALFWorld (the default), 0.20 on WebShop (``env_defaults``); the common ``gamma`` is not used.

Anchors are the raw observations (``state_key="raw"``: the recipe code builds on verl-agent's
GiGPO anchor observations; ``env.state_key=auto`` resolves to it).

A failed or truncated episode's last edge ends at its real last observation, as in the
recipe (``next_obs``, ``recipe/GraphGPO/core_graph.py``): when another rollout of the group
was in that state, the edge ends at that node and the step gets that node's distance; a last
observation seen nowhere else is a node without outgoing edges (unreachable: d = largest
finite + 1; or 1 in a group without success). The StepBatch carries no observation after an
episode's last step, hence the input ``next_state_key`` (the rollout engine records it,
:attr:`g2po_bench.benchmarks.rollout.RolloutBatch.next_state_keys`); inside a trajectory it
must equal the next row's ``state_key`` (same state-key rule), else ValueError. With no
success in the group the distance part of R is constant; the invalid-action penalty still
separates invalid rows in their step groups (as in GiGPO).

Vectorized: the distances of every task group come from one multi-source breadth-first search
over the batch's distinct edges (one numpy pass per distance level, at most the longest
trajectory; no loop over rows or groups).

Diagnostics: ``reachable_frac`` (rows whose anchor reaches "success"), ``distance_mean`` (mean
d(anchor) over rows), ``singleton_frac``, ``step_nonzero_frac``. Row terms: ``distance``
d(anchor_i), ``next_distance`` d(next_i), ``step_return`` R_i, ``a_ep``, ``a_s``.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

import numpy as np

from g2po_bench.algorithms import _rowwise as rw
from g2po_bench.algorithms._prep import prepare
from g2po_bench.algorithms.estimators.grpo import EPISODE_STATS, episode_advantage
from g2po_bench.algorithms.normalize import (
    EPS,
    MODES,
    count_distinct,
    factorize,
    factorize_pairs,
    group_normalize,
    pair_key,
)
from g2po_bench.algorithms.registry import AdvantageResult, in_range, register_estimator
from g2po_bench.core.batch import StepBatch

__all__ = ["graphgpo", "oracle_graphgpo", "goal_distances", "DISTANCES"]

DISTANCES = ("absolute", "relative")


def goal_distances(node: np.ndarray, succ: np.ndarray, node_group: np.ndarray, num_groups: int,
                   num_nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hop distance of every node to its group's success sentinel (the module docstring;
    arXiv 2605.26684).

    Args:
        node: (B,) int64 anchor node of every row (nodes of different groups distinct).
        succ: (B,) int64 target of every row's edge: a node id or ``num_nodes + g`` (the
            success sentinel of group g); -1 (no edge) is skipped.
        node_group: (num_nodes,) int64 task group of every node.
        num_groups: number of task groups; num_nodes: number of nodes.

    Returns:
        ``(dist, unreachable, reaches)``: dist (num_nodes + num_groups,) float64, d of every
        node and then of every sentinel (0), with the rules for unreachable nodes and groups
        without success applied; unreachable (num_groups,) float64, the d a node without a
        path gets in each group (largest finite + 1, or 1 without success); reaches
        (num_nodes,) bool, the node has a path to "success".
    """
    total = num_nodes + num_groups
    hops = np.full(total, -1, dtype=np.int64)
    hops[num_nodes:] = 0
    keep = succ >= 0
    edges = np.sort(pair_key(node[keep], total, succ[keep], total))
    if edges.size:
        edges = edges[np.concatenate(([True], edges[1:] != edges[:-1]))]  # distinct edges
    u, v = edges // total, edges % total
    level = 0
    while u.size:  # one pass per distance level
        hit = hops[v] == level
        if not hit.any():
            break
        fresh = u[hit]
        hops[fresh[hops[fresh] < 0]] = level + 1
        pending = hops[u] < 0
        u, v = u[pending], v[pending]
        level += 1
    reaches = hops[:num_nodes] >= 0
    has_goal = np.zeros(num_groups, dtype=bool)
    has_goal[node_group[reaches]] = True
    largest = np.zeros(num_groups, dtype=np.int64)
    np.maximum.at(largest, node_group, np.maximum(hops[:num_nodes], 0))
    unreachable = np.where(has_goal, largest + 1.0, 1.0)
    group_of = np.concatenate((node_group, np.arange(num_groups, dtype=np.int64)))
    dist = np.where(hops >= 0, hops, unreachable[group_of]).astype(np.float64)
    dist[:num_nodes][~has_goal[node_group]] = 1.0
    return dist, unreachable, reaches


def _oracle_group_distances(grows: list[dict[str, Any]], goal: Any):
    """d(x) of one task group: a deque breadth-first search from "success" on reversed edges."""
    parents: dict[Any, set] = defaultdict(set)
    for row in grows:
        parents[row["next"]].add(row["key"])
    dist: dict[Any, int] = {goal: 0}
    queue = deque([goal])
    while queue:
        cur = queue.popleft()
        for prev in parents.get(cur, ()):
            if prev not in dist:
                dist[prev] = dist[cur] + 1
                queue.append(prev)
    has_goal = any(row["success"] for row in grows)
    largest = max(dist.values())

    def d(x: Any) -> float:
        if not has_goal:
            return 1.0
        return float(dist[x]) if x in dist else float(largest + 1)

    return d


def oracle_graphgpo(batch: StepBatch, **o) -> np.ndarray:
    """Per-row oracle: one adjacency dict and a deque breadth-first search per task group, the
    edge of row i ending at ``next_state_key[i]`` ("success" after a success's last step).
    (B,) float64 advantages."""
    p, norm, eps = o["invalid_penalty"], o["normalization"], o["eps"]
    gamma_d, big_r = o["distance_gamma"], o["success_reward"]
    next_key = np.asarray(o["next_state_key"], dtype=np.int64)
    rows = rw.rows_of(batch)
    trajs = rw.trajectories_of(rows)
    ep = rw.episode_term(rows, norm, p, o["episode_stat"], eps)
    goal = "SUCCESS"
    for tr in trajs.values():
        for k, row in enumerate(tr):
            last = k + 1 == len(tr)
            row["next"] = goal if last and row["success"] else int(next_key[row["i"]])
    by_group: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_group[row["group"]].append(row)
    for grows in by_group.values():
        d = _oracle_group_distances(grows, goal)
        for row in grows:
            d_next, d_here = d(row["next"]), d(row["key"])
            exponent = d_next if o["distance"] == "absolute" else d_next - d_here + 1
            row["R_step"] = big_r * gamma_d ** exponent - (p if row["invalid"] else 0.0)
    a_s = rw.node_term(rows, lambda row: (row["group"], row["key"]), "R_step", norm, eps)
    out = np.zeros(len(rows))
    for row in rows:
        out[row["i"]] = ep[row["i"]] + o["step_weight"] * a_s[row["i"]]
    return out


@register_estimator(
    "graphgpo",
    state_key="raw",  # anchors: the raw observation, as the verl-agent recipes (GiGPO's anchor_obs)
    options={
        "distance_gamma": 0.10,
        "distance": "absolute",
        "normalization": "mean_std_norm",
        "episode_stat": "steps",
        "eps": EPS,
    },
    env_defaults={"webshop": {"distance_gamma": 0.20}},
    choices={"distance": DISTANCES, "normalization": MODES, "episode_stat": EPISODE_STATS},
    validators={"distance_gamma": in_range(0.0, 1.0), "eps": in_range(0.0, lo_open=True)},
    label="GraphGPO",
    inputs=("next_state_key",),
    oracle=oracle_graphgpo,
    description="GraphGPO: GRPO episode term + return discounted by the distance to the goal on the group graph",
)
def graphgpo(
    batch: StepBatch,
    *,
    step_weight: float,
    invalid_penalty: float,
    success_reward: float,
    distance_gamma: float,
    distance: str,
    normalization: str,
    episode_stat: str,
    eps: float,
    next_state_key: np.ndarray,
) -> AdvantageResult:
    """GraphGPO advantages A = A_EP + w A_S (equations: the module docstring).

    Args:
        batch: the StepBatch, B rows.
        next_state_key: (B,) int64, the input of that name: the hashed key (the rule of
            ``batch.state_key``) of the observation each step led to.
        step_weight: w (1.0).
        invalid_penalty: p (0.1).
        success_reward: the reward of reaching "success" (10.0).
        distance_gamma: gamma_d in [0, 1] (0.10; 0.20 on WebShop).
        distance: "absolute" (default) | "relative".
        normalization: "mean_std_norm" (default) | "mean_norm", both terms.
        episode_stat: "steps" | "trajectories".
        eps: > 0.

    Returns:
        AdvantageResult: advantages (B,) float64 in row order, returns None, diagnostics and
        row terms (module docstring).

    Raises:
        ValueError: ``next_state_key`` of a step inside a trajectory differs from the next
            row's ``state_key`` (keys of another state-key rule, or of other rollouts).
    """
    prep = prepare(batch)
    n = prep.n
    a_ep = episode_advantage(prep, mode=normalization, invalid_penalty=invalid_penalty,
                             episode_stat=episode_stat, eps=eps)
    nxt = prep.from_original(np.asarray(next_state_key, dtype=np.int64))
    _check_next_keys(batch, prep, nxt)
    # nodes: the anchors and the last observations of the episodes, per task group
    last = prep.is_last
    kid, num_keys = factorize(np.concatenate((prep.state_key, nxt[last])))
    node_all, num_nodes = factorize_pairs(np.concatenate((prep.group, prep.group[last])), prep.num_groups,
                                          kid, num_keys)
    node = node_all[:n]
    node_group = np.zeros(num_nodes, dtype=np.int64)
    node_group[node_all] = np.concatenate((prep.group, prep.group[last]))
    succ = np.empty(n, dtype=np.int64)
    if n:
        succ[:-1] = node[1:]
        succ[last] = np.where(prep.success[last], num_nodes + prep.group[last], node_all[n:])
    dist, _, reaches = goal_distances(node, succ, node_group, prep.num_groups, num_nodes)
    d_here = dist[node]
    d_next = dist[succ]
    exponent = d_next if distance == "absolute" else d_next - d_here + 1.0
    ret = success_reward * np.power(distance_gamma, exponent) - invalid_penalty * prep.invalid
    a_s = group_normalize(ret, node, num_nodes, normalization, eps=eps, singleton="zero")
    adv = a_ep + step_weight * a_s
    count = np.bincount(node, minlength=num_nodes)
    diag = {
        "reachable_frac": float(np.mean(reaches[node])) if n else 0.0,
        "distance_mean": float(d_here.mean()) if n else 0.0,
        "singleton_frac": float(np.mean(count[node] == 1)) if n else 0.0,
        "step_nonzero_frac": float(np.mean(a_s != 0.0)) if n else 0.0,
        "nodes_per_group": count_distinct(node) / max(prep.num_groups, 1),
    }
    terms = {"distance": d_here, "next_distance": d_next, "step_return": ret, "a_ep": a_ep, "a_s": a_s}
    return AdvantageResult(
        advantages=prep.to_original(adv),
        diagnostics=diag,
        row_terms={k: prep.to_original(x) for k, x in terms.items()},
    )


def _check_next_keys(batch: StepBatch, prep, nxt: np.ndarray) -> None:
    """Raise ValueError when a step's ``next_state_key`` inside a trajectory is not the next
    row's ``state_key`` (in canonical order the row after a non-final row is its next step)."""
    bad = np.flatnonzero(~prep.is_last[:-1] & (nxt[:-1] != prep.state_key[1:]))
    if bad.size:
        row = int(bad[0]) if prep.order is None else int(prep.order[bad[0]])
        raise ValueError(
            f"graphgpo: next_state_key of step {int(batch.step[row])} of trajectory {int(batch.traj_id[row])} "
            f"differs from the state_key of its step {int(batch.step[row]) + 1}; next_state_key must be hashed with "
            "the same state-key rule as state_key (RolloutBatch.next_state_keys, or next_state_keys_by_rule(rule) "
            "for the rule of the batch's keys)")
