"""Per-row reference implementations of every estimator: the test oracle and benchmark baseline.

Written as literally as possible from ALGORITHMS.md with Python loops, lists and dicts, and
independently of the vectorized code (it shares no helper with algorithms/normalize.py or
algorithms/_prep.py and keeps its own defaults, copied from ALGORITHMS.md). It is slow
(O(B) Python work per row set, dict look-ups everywhere) and is meant for correctness, not
for training.

Conventions shared with the fast path by *specification* (not by code):

- "normalize" a value x against a reference list L: n = len(L); if n < 2 the result is 0
  ("zero" singleton rule: node, step and edge terms) or (x - 0) / (1 + eps), resp. x - 0
  ("unit" rule: the GRPO episode term of a one-member task group, mean 0 std 1). If the
  unbiased std of L is <= 1e-12 * (1 + |mean|) ("all members equal", ALGORITHMS.md
  "Degenerate cases") the result is exactly 0. Else (x - mean) / (std + eps) or x - mean.
- A trajectory's rows are visited in step order; "canonical order" inside a task group is by
  (traj_id, step) (similarity grouping of GiGPO).

Public entry points: :func:`oracle_estimate` (advantages and returns) and
:func:`oracle_advantages`, plus one function per estimator.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from g2po_bench.core.batch import StepBatch

__all__ = [
    "oracle_estimate",
    "oracle_advantages",
    "oracle_grpo",
    "oracle_rloo",
    "oracle_gigpo",
    "oracle_g2po",
    "oracle_ppo",
    "ORACLE_DEFAULTS",
]

_ALL_EQUAL_RTOL = 1e-12

_COMMON = {
    "mode": "mean_std_norm",
    "gamma": 0.95,
    "step_weight": 1.0,
    "invalid_penalty": 0.1,
    "success_reward": 10.0,
}

ORACLE_DEFAULTS: dict[str, dict[str, Any]] = {
    "grpo": {**_COMMON, "episode_stat": "steps", "eps": 1e-6},
    "rloo": {**_COMMON, "episode_stat": "trajectories"},
    "gigpo": {
        **_COMMON,
        "grouping": "exact",
        "similarity_threshold": 0.95,
        "state_text": None,
        "episode_stat": "steps",
        "eps": 1e-6,
    },
    "g2po": {
        **_COMMON,
        "aggregation": True,
        "graph_scope": "group",
        "edge_norm_scope": "group",
        "components": "full",
        "node_reference_set": "visits",
        "episode_stat": "steps",
        "eps": 1e-6,
    },
    "ppo": {**_COMMON, "values": None, "convention": "reference", "lam": 0.95, "whiten": False},
}
"""Option defaults of each estimator, as ALGORITHMS.md gives them."""


# ----------------------------------------------------------------------------- helpers
def _rows(batch: StepBatch) -> list[dict[str, Any]]:
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


def _trajectories(rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
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


def _mean(values: list[float]) -> float:
    total = 0.0
    for v in values:
        total += v
    return total / len(values)


def _std(values: list[float]) -> float:
    m = _mean(values)
    ss = 0.0
    for v in values:
        ss += (v - m) * (v - m)
    return math.sqrt(ss / (len(values) - 1))


def _stats(ref: list[float]) -> tuple[int, float, float]:
    """(n, mean, unbiased std) of a reference list (mean/std 0 when undefined)."""
    if len(ref) == 0:
        return 0, 0.0, 0.0
    if len(ref) == 1:
        return 1, ref[0], 0.0
    return len(ref), _mean(ref), _std(ref)


def _normalize(x: float, stats: tuple[int, float, float], mode: str, eps: float,
               singleton: str) -> float:
    """Normalize x against a reference set given by its ``_stats``."""
    n, m, s = stats
    if n < 2:
        if singleton == "zero":
            return 0.0
        return x / (1.0 + eps) if mode == "mean_std_norm" else x
    if s <= _ALL_EQUAL_RTOL * (1.0 + abs(m)):
        return 0.0
    if mode == "mean_std_norm":
        return (x - m) / (s + eps)
    return x - m


def _episode_term(rows, mode, p, episode_stat, eps) -> dict[int, float]:
    """ALGORITHMS.md "GRPO": A_EP(i) per row index."""
    ref: dict[int, list[float]] = defaultdict(list)
    for row in rows:
        row["s"] = row["R"] - (p if row["invalid"] else 0.0)
    for row in sorted(rows, key=lambda r: (r["traj"], r["t"])):
        if episode_stat == "steps" or row["t"] == 0:
            ref[row["group"]].append(row["s"])
    stats = {g: _stats(vals) for g, vals in ref.items()}
    return {row["i"]: _normalize(row["s"], stats[row["group"]], mode, eps, "unit") for row in rows}


def _fill(name: str, options: dict[str, Any]) -> dict[str, Any]:
    opts = dict(ORACLE_DEFAULTS[name])
    for k, v in options.items():
        if k not in opts:
            raise ValueError(f"oracle {name}: unknown option {k!r}")
        opts[k] = v
    return opts


# ----------------------------------------------------------------------------- estimators
def oracle_grpo(batch: StepBatch, **options: Any) -> np.ndarray:
    """GRPO, ALGORITHMS.md "GRPO": (B,) float64 advantages in row order."""
    o = _fill("grpo", options)
    rows = _rows(batch)
    _trajectories(rows)
    ep = _episode_term(rows, o["mode"], o["invalid_penalty"], o["episode_stat"], o["eps"])
    return np.array([ep[row["i"]] for row in rows], dtype=np.float64)


def oracle_rloo(batch: StepBatch, **options: Any) -> np.ndarray:
    """RLOO, ALGORITHMS.md "RLOO" (penalty on the row's own score; see algorithms/rloo.py)."""
    o = _fill("rloo", options)
    p = o["invalid_penalty"]
    rows = _rows(batch)
    trajs = _trajectories(rows)
    adv = np.zeros(len(rows))
    if o["episode_stat"] == "trajectories":
        by_group: dict[int, list[int]] = defaultdict(list)
        for tid in sorted(trajs):
            by_group[trajs[tid][0]["group"]].append(tid)
        for tids in by_group.values():
            returns = [trajs[t][0]["R"] for t in tids]
            if len(tids) < 2:
                continue  # a group of one trajectory gives 0
            all_equal = _std(returns) <= _ALL_EQUAL_RTOL * (1.0 + abs(_mean(returns)))
            for tid in tids:
                own = trajs[tid][0]["R"]
                if all_equal:
                    baseline = own
                else:
                    others = 0.0
                    for other in tids:
                        if other != tid:
                            others += trajs[other][0]["R"]
                    baseline = others / (len(tids) - 1)
                for row in trajs[tid]:
                    s = row["R"] - (p if row["invalid"] else 0.0)
                    adv[row["i"]] = s - baseline
    elif o["episode_stat"] == "steps":
        by_group_rows: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            row["s"] = row["R"] - (p if row["invalid"] else 0.0)
            by_group_rows[row["group"]].append(row)
        for grows in by_group_rows.values():
            scores = [r["s"] for r in grows]
            if len(grows) < 2 or _std(scores) <= _ALL_EQUAL_RTOL * (1.0 + abs(_mean(scores))):
                continue
            total = 0.0
            for row in grows:
                total += row["s"]
            for row in grows:
                adv[row["i"]] = row["s"] - (total - row["s"]) / (len(grows) - 1)
    else:
        raise ValueError(f"oracle rloo: unknown episode_stat {o['episode_stat']!r}")
    return adv


def _similarity_clusters(rows, texts, threshold) -> dict[int, Any]:
    from rapidfuzz import fuzz

    node_of: dict[int, Any] = {}
    by_group: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_group[row["group"]].append(row)
    for g, grows in by_group.items():
        clusters: list[tuple[str, int]] = []  # (representative text, cluster number)
        for row in sorted(grows, key=lambda r: (r["traj"], r["t"])):
            text = texts[row["i"]]
            placed = None
            for rep, num in clusters:
                if fuzz.ratio(text, rep) >= 100.0 * threshold:
                    placed = num
                    break
            if placed is None:
                placed = len(clusters)
                clusters.append((text, placed))
            node_of[row["i"]] = (g, placed)
    return node_of


def oracle_gigpo(batch: StepBatch, **options: Any) -> np.ndarray:
    """GiGPO, ALGORITHMS.md "GiGPO": (B,) float64 advantages in row order."""
    o = _fill("gigpo", options)
    gamma, p, mode, eps = o["gamma"], o["invalid_penalty"], o["mode"], o["eps"]
    rows = _rows(batch)
    trajs = _trajectories(rows)
    ep = _episode_term(rows, mode, p, o["episode_stat"], eps)
    # 1. step returns, backwards along each trajectory; penalty on invalid rows only
    for tr in trajs.values():
        running = 0.0
        for row in reversed(tr):
            running = row["r"] + gamma * running
            row["G"] = running
        for row in tr:
            if row["invalid"]:
                row["G"] = row["G"] - p
    # 2. step groups
    if o["grouping"] == "exact":
        node_of = {row["i"]: (row["group"], row["key"]) for row in rows}
    elif o["grouping"] == "similarity":
        if o["state_text"] is None:
            raise ValueError("oracle gigpo: similarity grouping needs state_text")
        node_of = _similarity_clusters(rows, list(o["state_text"]), o["similarity_threshold"])
    else:
        raise ValueError(f"oracle gigpo: unknown grouping {o['grouping']!r}")
    members: dict[Any, list[float]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: (r["group"], r["traj"], r["t"])):
        members[node_of[row["i"]]].append(row["G"])
    # 3-4. step advantage and combination
    member_stats = {node: _stats(vals) for node, vals in members.items()}
    out = np.zeros(len(rows))
    for row in rows:
        a_s = _normalize(row["G"], member_stats[node_of[row["i"]]], mode, eps, "zero")
        out[row["i"]] = ep[row["i"]] + o["step_weight"] * a_s
    return out


def oracle_g2po(batch: StepBatch, **options: Any) -> np.ndarray:
    """G2PO, ALGORITHMS.md "G2PO" with every ablation option (see algorithms/g2po.py)."""
    o = _fill("g2po", options)
    gamma, p, mode, eps = o["gamma"], o["invalid_penalty"], o["mode"], o["eps"]
    w, success_reward = o["step_weight"], o["success_reward"]
    components = o["components"]
    if components == "ep+nc":
        agg = False
    elif components == "ep+nc+agg":
        if o["aggregation"] is False:
            raise ValueError("oracle g2po: ep+nc+agg contradicts aggregation=False")
        agg = True
    else:
        agg = bool(o["aggregation"])
    rows = _rows(batch)
    trajs = _trajectories(rows)
    ep = _episode_term(rows, mode, p, o["episode_stat"], eps)

    # 1. nodes
    def node_key(row):
        return (row["group"], row["key"]) if o["graph_scope"] == "group" else row["key"]

    if o["graph_scope"] not in ("group", "batch"):
        raise ValueError(f"oracle g2po: unknown graph_scope {o['graph_scope']!r}")
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
        value[node] = _mean([r["v"] for r in vis])
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
        elif o["node_reference_set"] == "successors":
            per_succ: dict[Any, list[float]] = {}
            for r in vis:
                per_succ.setdefault(r["succ"], []).append(r["succ_val"])
            if agg:
                nc_ref[node] = [value[s] for s in per_succ]
            else:
                nc_ref[node] = [_mean(vals) for vals in per_succ.values()]
        else:
            raise ValueError(f"oracle g2po: unknown node_reference_set {o['node_reference_set']!r}")
    # 5. edge-centric term
    ec_ref: dict[Any, list[float]] = defaultdict(list)

    def ec_scope(row):
        scope = o["edge_norm_scope"]
        if scope == "group":
            return ("group", row["group"])
        if scope == "batch":
            return "batch"
        if scope == "node":
            return ("node", row["node"])
        raise ValueError(f"oracle g2po: unknown edge_norm_scope {scope!r}")

    for row in ordered:
        ec_ref[ec_scope(row)].append(row["delta"])
    # 6-7. combination
    nc_stats = {node: _stats(vals) for node, vals in nc_ref.items()}
    ec_stats = {scope: _stats(vals) for scope, vals in ec_ref.items()}
    out = np.zeros(len(rows))
    for row in rows:
        a_nc = _normalize(row["x"], nc_stats[row["node"]], mode, eps, "zero")
        a_ec = _normalize(row["delta"], ec_stats[ec_scope(row)], mode, eps, "zero")
        if components == "ep":
            step = 0.0
        elif components in ("ep+nc", "ep+nc+agg"):
            step = a_nc
        elif components == "full":
            step = a_nc + a_ec
        else:
            raise ValueError(f"oracle g2po: unknown components {components!r}")
        out[row["i"]] = ep[row["i"]] + w * step
    return out


def oracle_ppo(batch: StepBatch, **options: Any) -> tuple[np.ndarray, np.ndarray]:
    """PPO, ALGORITHMS.md "PPO (critic)": (advantages, returns), each (B,) float64."""
    o = _fill("ppo", options)
    if o["values"] is None:
        raise ValueError("oracle ppo: needs values")
    values = [float(v) for v in o["values"]]
    p, gamma, lam = o["invalid_penalty"], o["gamma"], o["lam"]
    rows = _rows(batch)
    trajs = _trajectories(rows)
    adv = [0.0] * len(rows)
    ret = [0.0] * len(rows)
    if o["convention"] == "reference":
        for row in rows:
            s = row["R"] - (p if row["invalid"] else 0.0)
            adv[row["i"]] = s - values[row["i"]]
            ret[row["i"]] = s
    elif o["convention"] == "turn_gae":
        for tr in trajs.values():
            running = 0.0
            for k in range(len(tr) - 1, -1, -1):
                row = tr[k]
                v_next = values[tr[k + 1]["i"]] if k + 1 < len(tr) else 0.0
                r = row["r"] - (p if row["invalid"] else 0.0)
                delta = r + gamma * v_next - values[row["i"]]
                running = delta + gamma * lam * running
                adv[row["i"]] = running
                ret[row["i"]] = running + values[row["i"]]
    else:
        raise ValueError(f"oracle ppo: unknown convention {o['convention']!r}")
    if o["whiten"] and adv:
        m = _mean(adv)
        var = _std(adv) ** 2 if len(adv) > 1 else 0.0
        adv = [(a - m) / math.sqrt(var + 1e-8) for a in adv]
    return np.array(adv, dtype=np.float64), np.array(ret, dtype=np.float64)


_ORACLES = {
    "grpo": oracle_grpo,
    "rloo": oracle_rloo,
    "gigpo": oracle_gigpo,
    "g2po": oracle_g2po,
}


def oracle_estimate(name: str, batch: StepBatch, **options: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """(advantages (B,) float64, returns (B,) float64 or None) of estimator ``name``.

    Raises:
        ValueError: unknown estimator or option.
    """
    if name == "ppo":
        return oracle_ppo(batch, **options)
    if name not in _ORACLES:
        raise ValueError(f"no oracle for estimator {name!r}; known: {sorted([*_ORACLES, 'ppo'])}")
    return _ORACLES[name](batch, **options), None


def oracle_advantages(name: str, batch: StepBatch, **options: Any) -> np.ndarray:
    """The oracle's advantages (B,) float64 for estimator ``name``."""
    return oracle_estimate(name, batch, **options)[0]
