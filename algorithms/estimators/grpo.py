"""GRPO: the episode-level group baseline (critic-free).

Source: GRPO (Shao et al., 2024, arXiv 2402.03300) as used for multi-turn agents in verl-agent
(``compute_grpo_outcome_advantage`` and GiGPO's ``episode_norm_reward`` with
``compute_mean_std_cross_steps=True``) and as the episode term A_EP of GiGPO
(arXiv 2505.10978, Eq. 3) and G2PO (arXiv 2606.22995).

Equations (per task group g, i.e. the N rollouts of one task instance)::

    s_i      = R_tau(i) - p * [invalid_i]                      (score of step row i)
    A_EP(i)  = (s_i - mean_g) / (std_g + eps)                  mode = "mean_std_norm"
    A_EP(i)  =  s_i - mean_g                                   mode = "mean_norm"

with R_tau = sum of the trajectory's rewards (10 for a success, 0 otherwise in the reference
setting), p = ``invalid_penalty`` (0.1), eps = 1e-6, std the unbiased (n-1) one.

Reference statistic (``episode_stat``):

- ``"steps"`` (default, the reference "cross steps" convention): mean_g and std_g are taken
  over **all step rows** of the task group (their s_i, penalty included), so longer
  trajectories weigh more.
- ``"trajectories"``: one value per trajectory, the score of its first step row,
  s = R_tau - p * [invalid at t = 0]. This is what the reference code computes with
  ``compute_mean_std_cross_steps=False`` (it keeps the first row it meets of each trajectory,
  and rows arrive in step order). Every row is then normalized with these statistics using
  its own s_i.

Degenerate cases: a task group whose reference set has a single value uses mean 0 and std 1
(A = s / (1 + eps), resp. s), as the reference code; a reference set whose values are all
equal gives exactly 0 for every row of the group (with ``"trajectories"`` this also zeroes the
penalty of an invalid later step; the reference code would divide it by eps).
"""

from __future__ import annotations

import numpy as np

from g2po_bench.algorithms import _rowwise as rw
from g2po_bench.algorithms._prep import Prepared, prepare
from g2po_bench.algorithms.normalize import EPS, apply_normalization, segment_stats
from g2po_bench.algorithms.registry import AdvantageResult, in_range, register_estimator
from g2po_bench.core.batch import StepBatch

__all__ = ["grpo", "oracle_grpo", "episode_advantage", "EPISODE_STATS"]

EPISODE_STATS = ("steps", "trajectories")


def episode_advantage(
    prep: Prepared,
    *,
    mode: str,
    invalid_penalty: float,
    episode_stat: str = "steps",
    eps: float = EPS,
) -> np.ndarray:
    """The episode term A_EP of every row, in canonical order (the module docstring; GiGPO
    Eq. 3, arXiv 2505.10978).

    Args:
        prep: the prepared batch (:func:`g2po_bench.algorithms._prep.prepare`).
        mode: "mean_std_norm" or "mean_norm".
        invalid_penalty: p, subtracted from the score of invalid rows.
        episode_stat: "steps" (reference) or "trajectories" (see the module docstring).
        eps: added to the std.

    Returns:
        (B,) float64 in canonical order.

    Raises:
        ValueError: unknown ``episode_stat`` or ``mode``.
    """
    s = prep.episode_return - invalid_penalty * prep.invalid
    if episode_stat == "steps":
        stats = segment_stats(s, prep.group, prep.num_groups)
    elif episode_stat == "trajectories":
        first = prep.is_first
        stats = segment_stats(s[first], prep.group[first], prep.num_groups)
    else:
        raise ValueError(f"unknown episode_stat {episode_stat!r}; choose one of {EPISODE_STATS}")
    return apply_normalization(s, prep.group, stats, mode, eps=eps, singleton="unit")


def oracle_grpo(batch: StepBatch, **o) -> np.ndarray:
    """Per-row oracle (:mod:`g2po_bench.algorithms._rowwise`): (B,) float64 advantages."""
    rows = rw.rows_of(batch)
    rw.trajectories_of(rows)
    ep = rw.episode_term(rows, o["mode"], o["invalid_penalty"], o["episode_stat"], o["eps"])
    return np.array([ep[row["i"]] for row in rows], dtype=np.float64)


@register_estimator(
    "grpo",
    options={"episode_stat": "steps", "eps": EPS},
    choices={"episode_stat": EPISODE_STATS},
    validators={"eps": in_range(0.0, lo_open=True)},
    label="GRPO",
    oracle=oracle_grpo,
    description="GRPO: episode return normalized over the task group (cross-steps statistic)",
)
def grpo(
    batch: StepBatch,
    *,
    mode: str,
    invalid_penalty: float,
    episode_stat: str,
    eps: float,
) -> AdvantageResult:
    """GRPO advantages A(i) = A_EP(i) (see the module docstring for the equations).

    Args:
        batch: the StepBatch, B rows.
        mode: "mean_std_norm" | "mean_norm".
        invalid_penalty: p (>= 0).
        episode_stat: "steps" | "trajectories".
        eps: > 0.

    Returns:
        AdvantageResult with advantages (B,) float64 in row order; returns None.
    """
    prep = prepare(batch)
    adv = episode_advantage(
        prep, mode=mode, invalid_penalty=invalid_penalty, episode_stat=episode_stat, eps=eps
    )
    return AdvantageResult(advantages=prep.to_original(adv))
