"""RLOO: REINFORCE with a leave-one-out baseline (critic-free).

Source: Ahmadian et al., 2024 (arXiv 2402.14740); Kool et al., 2019 ("Buy 4 REINFORCE samples, get
a baseline for free!"). Multi-turn use as in verl-agent.

Equations (task group g with trajectories tau_1..tau_N)::

    b(tau)   = 1/(N-1) * sum_{tau' in g, tau' != tau} R_tau'     (leave-one-out baseline)
    A(i)     = s_i - b(tau(i)),   s_i = R_tau(i) - p * [invalid_i]

broadcast to every step row i of tau (``episode_stat="trajectories"``, the default: the
leave-one-out baseline over the N trajectories). R_tau is the sum of the trajectory's rewards.

Penalty choice: the score of the row itself carries the invalid-action penalty, exactly as
in verl-agent, whose RLOO (``compute_rloo_outcome_advantage``) reads the token-level rewards
after ``apply_invalid_action_penalty`` has subtracted p at the last token of every invalid
step. The baseline uses the other trajectories' episode returns R_tau' without penalty (a
trajectory's penalty differs between its rows, so it has no single penalized return).

Variant ``episode_stat="steps"``: what verl-agent's code computes with its default
``compute_mean_std_cross_steps=True``: leave-one-*row*-out over the n step rows of the task
group, A(i) = s_i - 1/(n-1) * sum_{j != i} s_j = n/(n-1) * (s_i - mean_g s).

Degenerate cases: a task group with a single trajectory (resp. a single row for "steps")
gives 0. When all returns of the group are equal (within the tolerance of
algorithms/normalize.py) the baseline is exactly that return, so A = -p [invalid_i]
("trajectories") resp. 0 ("steps"), without float rounding noise.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from g2po_bench.algorithms import _rowwise as rw
from g2po_bench.algorithms._prep import prepare
from g2po_bench.algorithms.estimators.grpo import EPISODE_STATS
from g2po_bench.algorithms.normalize import segment_stats
from g2po_bench.algorithms.registry import AdvantageResult, register_estimator
from g2po_bench.core.batch import StepBatch

__all__ = ["rloo", "oracle_rloo"]


def oracle_rloo(batch: StepBatch, **o) -> np.ndarray:
    """Per-row oracle (:mod:`g2po_bench.algorithms._rowwise`): (B,) float64 advantages."""
    p = o["invalid_penalty"]
    rows = rw.rows_of(batch)
    trajs = rw.trajectories_of(rows)
    adv = np.zeros(len(rows))
    if o["episode_stat"] == "trajectories":
        by_group: dict[int, list[int]] = defaultdict(list)
        for tid in sorted(trajs):
            by_group[trajs[tid][0]["group"]].append(tid)
        for tids in by_group.values():
            returns = [trajs[t][0]["R"] for t in tids]
            if len(tids) < 2:
                continue  # a group of one trajectory gives 0
            all_equal = rw.all_equal(rw.std(returns), rw.mean(returns))
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
            if len(grows) < 2 or rw.all_equal(rw.std(scores), rw.mean(scores)):
                continue
            total = 0.0
            for row in grows:
                total += row["s"]
            for row in grows:
                adv[row["i"]] = row["s"] - (total - row["s"]) / (len(grows) - 1)
    else:
        raise ValueError(f"oracle rloo: unknown episode_stat {o['episode_stat']!r}")
    return adv


@register_estimator(
    "rloo",
    options={"episode_stat": "trajectories"},
    choices={"episode_stat": EPISODE_STATS},
    label="RLOO",
    oracle=oracle_rloo,
    description="RLOO: episode return minus the mean return of the other rollouts of the task",
)
def rloo(batch: StepBatch, *, invalid_penalty: float, episode_stat: str) -> AdvantageResult:
    """RLOO advantages (see the module docstring).

    Args:
        batch: the StepBatch, B rows.
        invalid_penalty: p (0.1).
        episode_stat: "trajectories" (default, leave-one-trajectory-out) | "steps".

    Returns:
        AdvantageResult: advantages (B,) float64 in row order; returns None.

    Raises:
        ValueError: unknown ``episode_stat``.
    """
    prep = prepare(batch)
    s = prep.episode_return - invalid_penalty * prep.invalid
    if episode_stat == "trajectories":
        first = prep.is_first
        ret = prep.episode_return[first]  # one per trajectory, canonical trajectory order
        tg = prep.traj_group
        stats = segment_stats(ret, tg, prep.num_groups)
        cnt = stats.count
        total = np.bincount(tg, weights=ret, minlength=prep.num_groups).astype(np.float64)
        loo = np.divide(
            total[tg] - ret, cnt[tg] - 1, out=ret.copy(), where=cnt[tg] > 1
        )
        loo = np.where(stats.degenerate[tg], ret, loo)  # all equal: baseline = that return
        adv = s - loo[prep.traj]
        adv[cnt[prep.group] < 2] = 0.0
    elif episode_stat == "steps":
        stats = segment_stats(s, prep.group, prep.num_groups)
        cnt = stats.count[prep.group]
        total = np.bincount(prep.group, weights=s, minlength=prep.num_groups).astype(np.float64)
        total = total[prep.group]
        loo = np.divide(total - s, cnt - 1, out=s.copy(), where=cnt > 1)
        adv = s - loo
        adv[(cnt < 2) | stats.degenerate[prep.group]] = 0.0
    else:
        raise ValueError(f"unknown episode_stat {episode_stat!r}; choose one of {EPISODE_STATS}")
    return AdvantageResult(advantages=prep.to_original(adv))
