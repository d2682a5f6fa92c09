"""GiGPO: group-in-group policy optimization with anchor-state step groups (critic-free).

Source: GiGPO paper (Feng et al., 2025, arXiv 2505.10978, Eqs. 3 and 5-8) and its reference code
(langfengQ/verl-agent ``gigpo/core_gigpo.py``: ``compute_step_discounted_returns``,
``build_step_group``, ``step_norm_reward``, ``episode_norm_reward``).

Equations::

    G_t      = r_t + gamma * G_{t+1}   (G_T = 0; along the trajectory, from the per-step env
                                        rewards: a success's final step gets 10 * gamma^0)
    G_t     <- G_t - p * [invalid_t]   (penalty on invalid rows only, not propagated backwards)
    step group of row i = rows of the same task group with the same anchor state key
    A_S(i)   = normalize G within the step group of i   (a singleton step group gives 0)
    A(i)     = A_EP(i) + omega * A_S(i)                  (omega = step_weight = 1)

A_EP is the GRPO episode term (algorithms/estimators/grpo.py; cross-steps statistic by default,
``episode_stat="trajectories"`` for the per-trajectory one). "normalize" is ``mode``
("mean_std_norm": (x - mean) / (std + eps), unbiased std, eps = 1e-6; "mean_norm": x - mean).
A step group whose returns are all equal gives exactly 0.

State key: GiGPO's reference code groups by the raw observation (``anchor_obs``), so the
estimator is registered with ``state_key="raw"``: a run with ``env.state_key=auto`` (the
default) builds its rows' ``state_key`` from the raw observation; an explicit
``env.state_key=reference`` crosses G2PO's key with GiGPO on purpose (an ablation).

Step grouping (``grouping``):

- ``"exact"`` (default): identical ``state_key`` inside the task group.
- ``"similarity"``: the reference's similarity-based grouping over the state *texts*
  (the registry input ``state_texts``, B strings in the batch's row order, declared only for
  this grouping): inside each task
  group rows are visited in canonical order (trajectory id, then step) and each text joins
  the first existing cluster whose representative (its first text) has similarity
  >= ``similarity_threshold``, else it opens a new cluster (greedy leader clustering, as
  ``build_step_group(enable_similarity=True)``). Similarity is rapidfuzz's normalized
  ``fuzz.ratio`` / 100 (InDel distance), not difflib's ``SequenceMatcher.ratio`` used by the
  reference: the two agree on identical strings and are close otherwise. Identical texts are
  always in the same cluster. This path loops in Python over the distinct texts of each group
  (string similarity has no vectorized form); rapidfuzz is imported only here.

Diagnostics: as G2PO's (``singleton_frac``, ``node_size_mean``, ``node_size_max``,
``nodes_per_group``, ``edges_per_group``, ``node_return_var_mean`` over the step groups, with
G_t as the per-visit return, ``step_nonzero_frac`` = rows with A_S != 0). Row terms
(``AdvantageResult.row_terms``, row order): ``node_value`` (mean G of the step group),
``visit_return`` (G_t, penalty included), ``a_ep``, ``a_s``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from g2po_bench.algorithms import _rowwise as rw
from g2po_bench.algorithms._graph import graph_diagnostics, successor_ids
from g2po_bench.algorithms._prep import Prepared, prepare, reverse_linear_scan
from g2po_bench.algorithms.estimators.grpo import EPISODE_STATS, episode_advantage
from g2po_bench.algorithms.normalize import (
    EPS,
    apply_normalization,
    factorize,
    factorize_pairs,
    segment_stats,
)
from g2po_bench.algorithms.registry import AdvantageResult, in_range, register_estimator
from g2po_bench.core.batch import StepBatch

__all__ = ["gigpo", "oracle_gigpo", "step_returns", "similarity_step_groups", "GROUPINGS", "gigpo_label"]

GROUPINGS = ("exact", "similarity")


def step_returns(prep: Prepared, gamma: float, invalid_penalty: float) -> np.ndarray:
    """GiGPO step returns G_t (penalty on invalid rows), canonical order, (B,) float64."""
    g = reverse_linear_scan(prep.reward, np.full(prep.n, gamma), prep.is_last)
    return g - invalid_penalty * prep.invalid


def similarity_step_groups(
    prep: Prepared, state_texts: Sequence[str], threshold: float
) -> tuple[np.ndarray, int]:
    """Similarity-based step groups (see the module docstring).

    Args:
        prep: prepared batch.
        state_texts: B strings in the batch's row order.
        threshold: in (0, 1]; a text joins a cluster when ratio / 100 >= threshold.

    Returns:
        (ids (B,) int64 in canonical order, number of step groups).

    Raises:
        ValueError: wrong length or a non-string entry.
        ImportError: rapidfuzz is not installed.
    """
    from rapidfuzz import fuzz, process  # optional dependency, only for this path

    texts = np.empty(len(state_texts), dtype=object)
    texts[:] = list(state_texts)
    if texts.shape != (prep.n,):
        raise ValueError(f"state_texts must hold one string per row ({prep.n}), got {texts.shape}")
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("state_texts entries must be strings")
    texts = prep.from_original(texts)
    ids = np.empty(prep.n, dtype=np.int64)
    if prep.n == 0:
        return ids, 0
    cutoff = 100.0 * threshold
    bounds = np.flatnonzero(np.diff(prep.group)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [prep.n]))
    next_id = 0
    for lo, hi in zip(starts.tolist(), ends.tolist()):
        uniq, first, inv = np.unique(texts[lo:hi], return_index=True, return_inverse=True)
        cluster_of_uniq = np.empty(len(uniq), dtype=np.int64)
        reps: list[str] = []
        rep_ids: list[int] = []
        for u in np.argsort(first, kind="stable").tolist():  # first-appearance order
            text = uniq[u]
            cid = -1
            if reps:
                scores = process.cdist([text], reps, scorer=fuzz.ratio, score_cutoff=cutoff)[0]
                hit = np.flatnonzero(scores >= cutoff)
                if hit.size:
                    cid = rep_ids[int(hit[0])]
            if cid < 0:
                cid = next_id
                next_id += 1
                reps.append(text)
                rep_ids.append(cid)
            cluster_of_uniq[u] = cid
        ids[lo:hi] = cluster_of_uniq[inv.reshape(-1)]
    return ids, next_id


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


def oracle_gigpo(batch: StepBatch, **o) -> np.ndarray:
    """Per-row oracle (:mod:`g2po_bench.algorithms._rowwise`): (B,) float64 advantages."""
    gamma, p, mode, eps = o["gamma"], o["invalid_penalty"], o["mode"], o["eps"]
    rows = rw.rows_of(batch)
    trajs = rw.trajectories_of(rows)
    ep = rw.episode_term(rows, mode, p, o["episode_stat"], eps)
    # 1. step returns, backwards along each trajectory; penalty on invalid rows only
    rw.step_returns(trajs, gamma, p)
    # 2. step groups
    if o["grouping"] == "exact":
        node_of = {row["i"]: (row["group"], row["key"]) for row in rows}
    elif o["grouping"] == "similarity":
        node_of = _similarity_clusters(rows, list(o["state_texts"]), o["similarity_threshold"])
    else:
        raise ValueError(f"oracle gigpo: unknown grouping {o['grouping']!r}")
    # 3-4. step advantage and combination
    a_s = rw.node_term(rows, lambda row: node_of[row["i"]], "G", mode, eps)
    out = np.zeros(len(rows))
    for row in rows:
        out[row["i"]] = ep[row["i"]] + o["step_weight"] * a_s[row["i"]]
    return out


def _inputs(options: Mapping[str, Any]) -> tuple[str, ...]:
    return ("state_texts",) if options["grouping"] == "similarity" else ()


def gigpo_label(options: Mapping[str, Any]) -> str:
    """The row name: "GiGPO w/ std" (``mean_std_norm``) or "GiGPO w/o std" (``mean_norm``), the
    two variants of the GiGPO and G2PO papers' tables."""
    mode = options.get("mode", "mean_std_norm")
    return {"mean_std_norm": "GiGPO w/ std", "mean_norm": "GiGPO w/o std"}.get(mode, f"GiGPO ({mode})")


@register_estimator(
    "gigpo",
    state_key="raw",  # GiGPO groups steps by the raw observation (its paper and code)
    options={
        "grouping": "exact",
        "similarity_threshold": 0.95,
        "episode_stat": "steps",
        "eps": EPS,
    },
    inputs=_inputs,
    label=gigpo_label,
    # the mode is in the label; the other common options it uses make a variant
    variant_options=("gamma", "step_weight", "invalid_penalty"),
    oracle=oracle_gigpo,
    choices={"grouping": GROUPINGS, "episode_stat": EPISODE_STATS},
    validators={
        "similarity_threshold": in_range(0.0, 1.0, lo_open=True),
        "eps": in_range(0.0, lo_open=True),
    },
    description="GiGPO: GRPO episode term + discounted return normalized within anchor-state step groups",
)
def gigpo(
    batch: StepBatch,
    *,
    mode: str,
    gamma: float,
    step_weight: float,
    invalid_penalty: float,
    grouping: str,
    similarity_threshold: float,
    episode_stat: str,
    eps: float,
    state_texts: Sequence[str] | None = None,
) -> AdvantageResult:
    """GiGPO advantages A = A_EP + omega * A_S (see the module docstring).

    Args:
        batch: the StepBatch, B rows.
        mode: "mean_std_norm" | "mean_norm".
        gamma: discount of the step return (0.95).
        step_weight: omega (1.0).
        invalid_penalty: p (0.1).
        grouping: "exact" (state_key) | "similarity" (needs the input ``state_texts``).
        similarity_threshold: in (0, 1] (0.95).
        episode_stat: "steps" | "trajectories".
        eps: > 0.
        state_texts: B strings (row order), the input of ``grouping="similarity"``.

    Returns:
        AdvantageResult: advantages (B,) float64 in row order, returns None, diagnostics.

    Raises:
        ValueError: ``grouping="similarity"`` without valid ``state_texts`` (the registry
            checks it first).
    """
    prep = prepare(batch)
    a_ep = episode_advantage(
        prep, mode=mode, invalid_penalty=invalid_penalty, episode_stat=episode_stat, eps=eps
    )
    g = step_returns(prep, gamma, invalid_penalty)
    if grouping == "exact":
        kid, num_keys = factorize(prep.state_key)
        node, num_nodes = factorize_pairs(prep.group, prep.num_groups, kid, num_keys)
    elif grouping == "similarity":
        if state_texts is None:
            raise ValueError(
                "gigpo grouping='similarity' needs the state texts: pass inputs={'state_texts': [...]} "
                "(one string per row)"
            )
        node, num_nodes = similarity_step_groups(prep, state_texts, similarity_threshold)
    else:
        raise ValueError(f"unknown grouping {grouping!r}; choose one of {GROUPINGS}")
    stats = segment_stats(g, node, num_nodes)
    a_s = apply_normalization(g, node, stats, mode, eps=eps, singleton="zero")
    adv = a_ep + step_weight * a_s
    diag = graph_diagnostics(
        prep,
        node,
        num_nodes,
        successor_ids(prep, node, num_nodes),
        stats,
        a_s,
        nodes_within_groups=True,
    )
    terms = {"node_value": stats.mean[node], "visit_return": g, "a_ep": a_ep, "a_s": a_s}
    return AdvantageResult(
        advantages=prep.to_original(adv),
        diagnostics=diag,
        row_terms={k: prep.to_original(x) for k, x in terms.items()},
    )
