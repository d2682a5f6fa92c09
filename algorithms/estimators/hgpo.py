"""HGPO: hierarchical history groups (critic-free, step-level credit from shared histories).

Source: HGPO, hierarchical history groups (arXiv 2602.22817, ICLR 2026; the semantics of the
authors' public recipe code).

Per task group g (visits and trajectories pooled inside the group)::

    R_t       = r_t + gamma * R_{t+1}  along the trajectory (gamma = 0.95), then
    R_t      <- R_t - p * [invalid_t]   (the penalty is not propagated backwards; GiGPO's G_t)
    for each row at step t and each window length k = 1 .. min(K + 1, t + 1):
        key_k = (k, the last k anchors of the trajectory, ending at t)   (anchors only, no actions)
    in each cluster C of rows of g with the same key_k and |C| >= 2:
        a_k   = (R - mean_C) / (std_C + eps)   mode = "mean_std_norm" (std_C the POPULATION std)
        a_k   =  R - mean_C                    mode = "mean_norm"
    (a singleton cluster gives no item; a cluster whose returns are all equal gives a_k = 0)
    A(i)      = sum_{k in I_i} w_k a_k,   w_k = u_k / (sum_{k' in I_i} u_k' + 1e-6)

with I_i the row's *non-zero* items (a_k != 0) and A(i) = 0 when there is none. The raw weight
``u_k`` (``weight_index``):

- ``"code"`` (default, the recipe code): u_k = (k + 1)^alpha with k the window length 1..K+1;
- ``"paper"``: the paper indexes the level by the number of shared history steps h = k - 1 in
  0..K, u = (h + 1)^alpha = k^alpha (the code's weights shifted by one level).

``episode_term=True`` adds a GiGPO-style episode item at k = 0: a_0 = A_EP (the GRPO episode
term, :mod:`g2po_bench.algorithms.estimators.grpo`, same ``mode``) with raw weight 1, inside the
same normalisation (off by default, as the recipe). Defaults: K = ``history_depth`` = 2 (the
prompt-history window; the paper also runs K = 4), alpha = 1; mode mean_std_norm on ALFWorld,
mean_norm on WebShop (the presets' ``algorithm.mode``).

Anchors are the raw observations (``state_key="raw"``: the recipe code builds on verl-agent's
GiGPO anchor observations; ``env.state_key=auto`` resolves to it, ``env.state_key=reference``
crosses it with G2PO's key on purpose).

Interpretations made here: "non-zero items" is read literally (an item whose cluster
normalised to exactly 0 neither adds nor counts in the normaliser); "all returns equal" uses
the suite's tolerance (std <= 1e-12 (1 + |mean|), :mod:`g2po_bench.algorithms.normalize`).

Vectorized: the window keys are built level by level (key_k = (key_{k-1} of the previous row,
anchor of this row), one factorization per level); the loop runs over the K + 1 levels only,
never over rows.

Diagnostics: ``items_per_row`` (mean number of non-zero items), ``no_item_frac`` (rows with
A = 0 for want of an item), ``level_<k>_nonzero_frac``. Row terms: ``a_level_<k>`` (a_k, 0 where
no item), ``visit_return`` (R_t).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from g2po_bench.algorithms import _rowwise as rw
from g2po_bench.algorithms._prep import prepare
from g2po_bench.algorithms.estimators.gigpo import step_returns
from g2po_bench.algorithms.estimators.grpo import EPISODE_STATS, episode_advantage
from g2po_bench.algorithms.normalize import DEGENERATE_RTOL, EPS, MODES, factorize, factorize_pairs
from g2po_bench.algorithms.registry import AdvantageResult, in_range, register_estimator
from g2po_bench.core.batch import StepBatch

__all__ = ["hgpo", "oracle_hgpo", "WEIGHT_INDEXES", "level_weight"]

WEIGHT_INDEXES = ("code", "paper")
WEIGHT_EPS = 1e-6  # added to the sum of the raw weights


def level_weight(k: int, alpha: float, weight_index: str) -> float:
    """Raw weight u_k of the window length k >= 1 (module docstring)."""
    if weight_index == "code":
        return float(k + 1) ** alpha
    if weight_index == "paper":
        return float(k) ** alpha
    raise ValueError(f"unknown weight_index {weight_index!r}; choose one of {WEIGHT_INDEXES}")


def _cluster_normalize(x: np.ndarray, seg: np.ndarray, num: int, mode: str, eps: float) -> np.ndarray:
    """(x - mean) / (population std + eps) or x - mean within segments; singletons and
    all-equal segments give 0."""
    count = np.bincount(seg, minlength=num).astype(np.float64)
    mean = np.bincount(seg, weights=x, minlength=num) / np.maximum(count, 1.0)
    dev = x - mean[seg]
    var = np.bincount(seg, weights=dev * dev, minlength=num) / np.maximum(count, 1.0)
    std = np.sqrt(var)
    out = dev / (std[seg] + eps) if mode == "mean_std_norm" else dev.copy()
    flat = (count < 2) | (std <= DEGENERATE_RTOL * (1.0 + np.abs(mean)))
    out[flat[seg]] = 0.0
    return out


def oracle_hgpo(batch: StepBatch, **o) -> np.ndarray:
    """Per-row oracle: tuples of anchors as dict keys. (B,) float64 advantages."""
    gamma, p, mode, eps = o["gamma"], o["invalid_penalty"], o["mode"], o["eps"]
    depth = o["history_depth"]
    rows = rw.rows_of(batch)
    trajs = rw.trajectories_of(rows)
    ep = rw.episode_term(rows, mode, p, o["episode_stat"], eps)
    rw.step_returns(trajs, gamma, p)  # row["G"]: R_t less the penalty of an invalid step
    for tr in trajs.values():
        for t, row in enumerate(tr):
            row["windows"] = {k: tuple(r["key"] for r in tr[t - k + 1:t + 1])
                              for k in range(1, min(depth + 1, t + 1) + 1)}
    clusters: dict[Any, list[float]] = defaultdict(list)
    for row in rows:
        for k, window in row["windows"].items():
            clusters[(row["group"], k, window)].append(row["G"])
    out = np.zeros(len(rows))
    for row in rows:
        items: list[tuple[float, float]] = []  # (raw weight, a)
        if o["episode_term"] and ep[row["i"]] != 0.0:
            items.append((1.0, ep[row["i"]]))
        for k, window in row["windows"].items():
            ref = clusters[(row["group"], k, window)]
            if len(ref) < 2:
                continue
            m, s = rw.mean(ref), rw.std(ref, ddof=0)
            if rw.all_equal(s, m):
                continue
            a = (row["G"] - m) / (s + eps) if mode == "mean_std_norm" else row["G"] - m
            if a != 0.0:
                items.append((level_weight(k, o["alpha"], o["weight_index"]), a))
        total = sum(u for u, _ in items)
        out[row["i"]] = sum(u * a for u, a in items) / (total + WEIGHT_EPS) if items else 0.0
    return out


@register_estimator(
    "hgpo",
    state_key="raw",  # anchors: the raw observation, as the verl-agent recipes (GiGPO's anchor_obs)
    options={
        "history_depth": 2,
        "alpha": 1.0,
        "weight_index": "code",
        "episode_term": False,
        "episode_stat": "steps",
        "eps": EPS,
    },
    choices={"weight_index": WEIGHT_INDEXES, "episode_stat": EPISODE_STATS},
    validators={
        "history_depth": in_range(0),
        "eps": in_range(0.0, lo_open=True),
    },
    types={"history_depth": (int,)},
    label="HGPO",
    oracle=oracle_hgpo,
    description="HGPO: discounted return normalized within clusters of shared anchor histories, weighted by depth",
)
def hgpo(
    batch: StepBatch,
    *,
    mode: str,
    gamma: float,
    invalid_penalty: float,
    history_depth: int,
    alpha: float,
    weight_index: str,
    episode_term: bool,
    episode_stat: str,
    eps: float,
) -> AdvantageResult:
    """HGPO advantages (equations: the module docstring).

    Args:
        batch: the StepBatch, B rows.
        mode: "mean_std_norm" | "mean_norm".
        gamma: discount of the step return (0.95).
        invalid_penalty: p (0.1).
        history_depth: K >= 0 (2): windows of 1 .. K + 1 anchors.
        alpha: exponent of the level weights (1.0).
        weight_index: "code" (default) | "paper".
        episode_term: add the episode item at k = 0 (False).
        episode_stat: the episode item's statistic, "steps" | "trajectories".
        eps: > 0.

    Returns:
        AdvantageResult: advantages (B,) float64 in row order, returns None, diagnostics and
        row terms (module docstring).
    """
    if mode not in MODES:
        raise ValueError(f"unknown normalization mode {mode!r}; choose one of {MODES}")
    prep = prepare(batch)
    n = prep.n
    ret = step_returns(prep, gamma, invalid_penalty)
    kid, num_keys = factorize(prep.state_key)
    num = np.zeros(n)
    den = np.zeros(n)
    items = np.zeros(n)
    terms: dict[str, np.ndarray] = {"visit_return": ret}
    diag: dict[str, float] = {}
    if episode_term:
        a_ep = episode_advantage(prep, mode=mode, invalid_penalty=invalid_penalty,
                                 episode_stat=episode_stat, eps=eps)
        on = a_ep != 0.0
        num += np.where(on, a_ep, 0.0)
        den += on
        items += on
        terms["a_ep"] = a_ep
    # windows are built from the anchors of the task group (group, key), so a window id is
    # already a cluster id of one group
    node, num_nodes = factorize_pairs(prep.group, prep.num_groups, kid, num_keys)
    window, num_windows = node, num_nodes  # id of the window of length k ending at each row
    for k in range(1, history_depth + 2):
        idx = np.flatnonzero(prep.step >= k - 1)
        if k > 1:
            ids, num_windows = factorize_pairs(window[idx - 1], num_windows, node[idx], num_nodes)
            window = np.full(n, -1, dtype=np.int64)
            window[idx] = ids
        cluster, num_clusters = window[idx], num_windows
        a_k = np.zeros(n)
        a_k[idx] = _cluster_normalize(ret[idx], cluster, num_clusters, mode, eps)
        on = a_k != 0.0
        u = level_weight(k, alpha, weight_index)
        num += u * a_k
        den += u * on
        items += on
        terms[f"a_level_{k}"] = a_k
        diag[f"level_{k}_nonzero_frac"] = float(np.mean(on)) if n else 0.0
    adv = np.divide(num, den + WEIGHT_EPS, out=np.zeros(n), where=items > 0)
    diag["items_per_row"] = float(items.mean()) if n else 0.0
    diag["no_item_frac"] = float(np.mean(items == 0)) if n else 0.0
    return AdvantageResult(
        advantages=prep.to_original(adv),
        diagnostics=diag,
        row_terms={key: prep.to_original(x) for key, x in terms.items()},
    )
