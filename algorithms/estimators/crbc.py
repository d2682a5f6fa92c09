"""CRBC: cross-rollout Bellman closure (critic-free, step-level credit from the group's own MDP).

Source: the CRBC paper (arXiv 2609.35082: the method section and its ablations of the closure
depth K, beta and (w_G, w_S)); no public code was found, so this follows the paper's
definitions.

Per task group g (nothing is shared across task groups). Anchors s are the rows' state keys
(the environment's state, prompt history left out); the action a of a row is its executed
action text (the registry input ``action_texts``); the successor x of a row is the next row's
anchor, and for the final row an absorbing node z+ (success) or z- (failure, truncation at the
step limit included). With N(.) counts over the group's transitions (no smoothing)::

    P(x | s, a) = N(s, a, x) / N(s, a)            mu(a | s) = N(s, a) / N(s)
    M(s, s')    = sum_a mu(a|s) P(s'|s, a)        over non-terminal anchors s'
    b(s)        = beta * sum_a mu(a|s) P(z+|s, a)
    (I - beta M) V = b                            one sparse linear solve (no inverse);
                                                  V(z+) = 1, V(z-) = 0: V(s) is the discounted
                                                  success probability of the empirical process
    Q(s, a)     = beta * sum_x P(x|s, a) V(x)
    A_inf(s, a) = Q(s, a) - V(s)                  (centred under mu at s)
    sigma(s)    = sqrt(sum_a mu(a|s) A_inf(s, a)^2)
    A_S(s, a)   = A_inf(s, a) / max(sigma(s), sigma_min)   if >= 2 distinct actions at s, else 0
    A(i)        = w_G * A_EP(i) + w_S * A_S(s_i, a_i)

A_EP is the GRPO episode term (:mod:`g2po_bench.algorithms.estimators.grpo`; ``mode``,
``invalid_penalty``, ``episode_stat``). Every occurrence of the same (s, a) gets the same step
credit. Defaults (the paper's): beta = 0.98, sigma_min = 0.1, (w_G, w_S) = (1, 5) as
``group_weight`` and ``state_weight``, closure depth K = inf.

Closure depth (``closure_depth``, the paper's family; K = inf is the solve above)::

    G_i,t    = beta^(T_i - t) * R_i               (t 0-based: the last step gets beta^1, as
                                                  Q = beta V(z+) in the closure; R_i = 1 for a
                                                  success, 0 otherwise: the scale of V(z+) = 1)
    Q0(s, a) = mean of G over the occurrences of (s, a);  V0(s) = sum_a mu(a|s) Q0(s, a)
    (T V)(s) = beta * sum_x M'(s, x) V(x)         the empirical Bellman operator (M' over all
                                                  successors, terminal ones included)
    V^(K)    = T^K V0;   Q^(K) = B V^(K-1), (B V)(s, a) = beta * sum_x P(x|s, a) V(x)
    A^(K)    = Q^(K) - V^(K)   (K = 0: Q0 - V0, the GiGPO-like local averaging)

Anchors are the environment's reference state key (``state_key="reference"``, G2PO's: the
observation with the admissible actions, prompt history left out; ``env.state_key=auto``
resolves to it).

Interpretations made here: the depth family's return is the success indicator discounted
like the closure (beta^1 at the last step); ``M`` of the solve is the transition matrix of the
anchors, which equals sum_a mu P (the action only splits the counts). The system is
non-singular for every beta in (0, 1], because every visited anchor reaches a terminal node
along its own trajectory. Equal-credit rows: the sparse solve's rounding (~1e-16) is divided
by at most 1/sigma_min.

Vectorized: the solve is one ``scipy.sparse.linalg.spsolve`` of the batch's block-diagonal
system (one block per task group, no loop over groups); counts, Q and sigma are ``np.bincount``
over the rows; O(B log B) factorizations. Finite K uses K sparse products written as
bincounts (no scipy).

Diagnostics: ``closure_anchors_per_group`` (distinct anchors per task group), ``branching_frac``
(rows at anchors with >= 2 distinct actions), ``a_s_nonzero_frac``, ``value_mean`` (mean V(s_i)
over rows). Row terms: ``node_value`` V(s_i), ``q_value`` Q(s_i, a_i), ``a_ep``, ``a_s``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from g2po_bench.algorithms import _rowwise as rw
from g2po_bench.algorithms._graph import successor_ids
from g2po_bench.algorithms._prep import prepare
from g2po_bench.algorithms.estimators.grpo import EPISODE_STATS, episode_advantage
from g2po_bench.algorithms.normalize import EPS, factorize, factorize_pairs, factorize_texts
from g2po_bench.algorithms.registry import AdvantageResult, in_range, register_estimator
from g2po_bench.core.batch import StepBatch

__all__ = ["crbc", "oracle_crbc", "closure_values"]


def _closure_depth(value: Any) -> str | None:
    if value == "inf" or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return None
    return "must be an integer >= 0 or 'inf'"


def closure_values(node: np.ndarray, succ: np.ndarray, num_nodes: int, beta: float) -> np.ndarray:
    """Solve (I - beta M) V = b for every anchor at once (steps 2-3 above; arXiv 2609.35082).

    Args:
        node: (B,) int64 anchor of every row (dense, anchors of different task groups distinct).
        succ: (B,) int64 successor: an anchor, ``num_nodes`` (z+) or ``num_nodes + 1`` (z-).
        num_nodes: number of anchors S.
        beta: discount in (0, 1].

    Returns:
        (S,) float64 V(s).

    Raises:
        ImportError: scipy is not installed (the closure needs ``scipy.sparse``).
    """
    from scipy.sparse import coo_matrix, identity
    from scipy.sparse.linalg import spsolve

    if num_nodes == 0:
        return np.zeros(0)
    count = np.bincount(node, minlength=num_nodes).astype(np.float64)
    inner = succ < num_nodes
    # beta * M(s, s') = beta * N(s -> s') / N(s): one entry per transition, duplicates summed
    weights = beta / count[node[inner]]
    m = coo_matrix((weights, (node[inner], succ[inner])), shape=(num_nodes, num_nodes)).tocsc()
    b = beta * np.bincount(node, weights=(succ == num_nodes).astype(np.float64),
                           minlength=num_nodes) / count
    system = (identity(num_nodes, format="csc") - m).tocsc()
    return np.asarray(spsolve(system, b), dtype=np.float64).reshape(num_nodes)


_PLUS, _MINUS = ("TERMINAL", True), ("TERMINAL", False)


def _oracle_group_credit(grows: list[dict[str, Any]], o: dict[str, Any]) -> dict[Any, float]:
    """A_S(s, a) of one task group, literally: count dicts, then a dense solve (K = inf) or K
    Bellman backups."""
    beta = o["beta"]
    n_s: dict[Any, int] = defaultdict(int)
    n_sa: dict[Any, int] = defaultdict(int)
    n_sax: dict[Any, int] = defaultdict(int)
    for row in grows:
        n_s[row["key"]] += 1
        n_sa[(row["key"], row["a"])] += 1
        n_sax[(row["key"], row["a"], row["x"])] += 1
    anchors = sorted(n_s)

    def backup(v: dict[Any, float], s: Any, a: Any) -> float:
        # beta * sum_x P(x|s,a) V(x), V(z+) = 1, V(z-) = 0
        total = 0.0
        for (s2, a2, x), c in n_sax.items():
            if s2 == s and a2 == a:
                vx = 1.0 if x == _PLUS else 0.0 if x == _MINUS else v[x]
                total += c / n_sa[(s, a)] * vx
        return beta * total

    def state_value(q: dict[Any, float], s: Any) -> float:
        return sum(c / n_s[s] * q[(s2, a)] for (s2, a), c in n_sa.items() if s2 == s)

    depth = o["closure_depth"]
    if depth == "inf":
        idx = {s: j for j, s in enumerate(anchors)}
        mat = np.eye(len(anchors))
        rhs = np.zeros(len(anchors))
        for (s, _a, x), c in n_sax.items():
            if x == _PLUS:
                rhs[idx[s]] += beta * c / n_s[s]
            elif x != _MINUS:
                mat[idx[s], idx[x]] -= beta * c / n_s[s]
        sol = np.linalg.solve(mat, rhs)  # dense, the whole group at once
        v = {s: float(sol[idx[s]]) for s in anchors}
        q = {sa: backup(v, *sa) for sa in n_sa}
    else:
        q = {sa: rw.mean([r["G"] for r in grows if (r["key"], r["a"]) == sa]) for sa in n_sa}
        v = {s: state_value(q, s) for s in anchors}
        for _ in range(int(depth)):
            q = {sa: backup(v, *sa) for sa in n_sa}
            v = {s: state_value(q, s) for s in anchors}
    adv = {sa: q[sa] - v[sa[0]] for sa in n_sa}
    for s in anchors:
        acts = [sa for sa in n_sa if sa[0] == s]
        sigma = math.sqrt(sum(n_sa[sa] / n_s[s] * adv[sa] ** 2 for sa in acts))
        for sa in acts:
            adv[sa] = adv[sa] / max(sigma, o["sigma_min"]) if len(acts) >= 2 else 0.0
    return adv


def oracle_crbc(batch: StepBatch, **o) -> np.ndarray:
    """Per-row oracle: per task group, dicts of counts and a dense ``numpy.linalg.solve`` (K =
    inf) or K literal Bellman backups (finite K). (B,) float64 advantages."""
    beta, p, mode, eps = o["beta"], o["invalid_penalty"], o["mode"], o["eps"]
    texts = list(o["action_texts"])
    rows = rw.rows_of(batch)
    trajs = rw.trajectories_of(rows)
    ep = rw.episode_term(rows, mode, p, o["episode_stat"], eps)
    for tr in trajs.values():
        for k, row in enumerate(tr):
            row["a"] = texts[row["i"]]
            row["x"] = tr[k + 1]["key"] if k + 1 < len(tr) else (_PLUS if row["success"] else _MINUS)
            row["G"] = beta ** (row["T"] - row["t"]) * (1.0 if row["success"] else 0.0)
    by_group: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_group[row["group"]].append(row)
    out = np.zeros(len(rows))
    for grows in by_group.values():
        credit = _oracle_group_credit(grows, o)
        for row in grows:
            a_s = credit[(row["key"], row["a"])]
            out[row["i"]] = o["group_weight"] * ep[row["i"]] + o["state_weight"] * a_s
    return out


@register_estimator(
    "crbc",
    options={
        "beta": 0.98,
        "sigma_min": 0.1,
        "group_weight": 1.0,
        "state_weight": 5.0,
        "closure_depth": "inf",
        "episode_stat": "steps",
        "eps": EPS,
    },
    types={"closure_depth": (int, str)},
    choices={"episode_stat": EPISODE_STATS},
    validators={
        "beta": in_range(0.0, 1.0, lo_open=True),
        "sigma_min": in_range(0.0, lo_open=True),
        "closure_depth": _closure_depth,
        "eps": in_range(0.0, lo_open=True),
    },
    inputs=("action_texts",),
    label="CRBC",
    oracle=oracle_crbc,
    description="CRBC: GRPO episode term + Q - V of the group's empirical Bellman closure, per (anchor, action)",
)
def crbc(
    batch: StepBatch,
    *,
    mode: str,
    invalid_penalty: float,
    beta: float,
    sigma_min: float,
    group_weight: float,
    state_weight: float,
    closure_depth: int | str,
    episode_stat: str,
    eps: float,
    action_texts: Sequence[str],
) -> AdvantageResult:
    """CRBC advantages A = w_G A_EP + w_S A_S (equations: the module docstring).

    Args:
        batch: the StepBatch, B rows.
        mode: "mean_std_norm" | "mean_norm" (the episode term).
        invalid_penalty: p (0.1), in the episode term.
        beta: discount of the closure, in (0, 1] (0.98).
        sigma_min: floor of the per-anchor scale (0.1).
        group_weight: w_G (1.0); state_weight: w_S (5.0).
        closure_depth: K, an integer >= 0 or "inf" (default).
        episode_stat: "steps" | "trajectories".
        eps: > 0.
        action_texts: (B,) str, the executed action of every row (the registry input).

    Returns:
        AdvantageResult: advantages (B,) float64 in row order, returns None, diagnostics and
        row terms (module docstring).

    Raises:
        ImportError: K = inf without scipy.
    """
    prep = prepare(batch)
    n = prep.n
    a_ep = episode_advantage(
        prep, mode=mode, invalid_penalty=invalid_penalty, episode_stat=episode_stat, eps=eps
    )
    kid, num_keys = factorize(prep.state_key)
    node, num_nodes = factorize_pairs(prep.group, prep.num_groups, kid, num_keys)
    aid, num_actions = factorize_texts(prep.from_original(np.asarray(action_texts)))
    succ = successor_ids(prep, node, num_nodes)
    sa, num_sa = factorize_pairs(node, num_nodes, aid, num_actions)
    n_s = np.bincount(node, minlength=num_nodes).astype(np.float64)
    n_sa = np.bincount(sa, minlength=num_sa).astype(np.float64)
    sa_node = np.zeros(num_sa, dtype=np.int64)
    sa_node[sa] = node

    def backup(v: np.ndarray, seg: np.ndarray, count: np.ndarray, size: int) -> np.ndarray:
        # beta * mean over the segment's rows of V(successor), V(z+) = 1, V(z-) = 0
        ext = np.append(v, [1.0, 0.0])
        return beta * np.bincount(seg, weights=ext[succ], minlength=size) / np.maximum(count, 1.0)

    if closure_depth == "inf":
        value = closure_values(node, succ, num_nodes, beta)
        q = backup(value, sa, n_sa, num_sa)
    else:
        ret = np.power(beta, (prep.length - prep.step).astype(np.float64)) * prep.success
        q = np.bincount(sa, weights=ret, minlength=num_sa) / np.maximum(n_sa, 1.0)
        value = np.bincount(node, weights=ret, minlength=num_nodes) / np.maximum(n_s, 1.0)
        for _ in range(int(closure_depth)):
            q = backup(value, sa, n_sa, num_sa)  # Q^(k) = B V^(k-1)
            # V^(k) = sum_a mu(a|s) Q^(k)(s, a) = T V^(k-1)
            value = np.bincount(sa_node, weights=q * n_sa, minlength=num_nodes) / np.maximum(n_s, 1.0)
    adv_sa = q - value[sa_node]
    sigma = np.sqrt(np.bincount(sa_node, weights=n_sa * adv_sa**2, minlength=num_nodes)
                    / np.maximum(n_s, 1.0))
    distinct = np.bincount(sa_node, minlength=num_nodes)
    branching = distinct[sa_node] >= 2
    a_s_sa = np.where(branching, adv_sa / np.maximum(sigma[sa_node], sigma_min), 0.0)
    a_s = a_s_sa[sa]
    adv = group_weight * a_ep + state_weight * a_s
    diag = {
        "closure_anchors_per_group": num_nodes / max(prep.num_groups, 1),
        "branching_frac": float(np.mean(branching[sa])) if n else 0.0,
        "a_s_nonzero_frac": float(np.mean(a_s != 0.0)) if n else 0.0,
        "value_mean": float(np.mean(value[node])) if n else 0.0,
    }
    terms = {"node_value": value[node], "q_value": q[sa], "a_ep": a_ep, "a_s": a_s}
    return AdvantageResult(
        advantages=prep.to_original(adv),
        diagnostics=diag,
        row_terms={k: prep.to_original(x) for k, x in terms.items()},
    )
