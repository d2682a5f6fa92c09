"""PPO with a critic: advantages from a value model V_phi(s_t) (one value per step).

Source: Schulman et al., 2017 (PPO, arXiv 1707.06347) and 2016 (GAE, arXiv 1506.02438); the
verl-agent PPO baseline (verl ``compute_gae_advantage_return``).

The critic values are an input (the registry input ``values``: (B,) float64, V(s_t) of each
step row in the batch's row order; declaring it makes the trainers train a critic); this
module only turns them into advantages and value targets.

Conventions (``convention``):

- ``"reference"`` (default): the verl-agent baseline puts the step's score on the last token
  of every step sample and runs token-level GAE inside the step with gamma = lambda = 1, i.e.
  in effect::

      A(i)       = s_i - V(s_t),      returns(i) = s_i,      s_i = R_tau - p * [invalid_i]

  (the invalid penalty is on the step's token rewards in verl-agent, so it is part of s_i).
  ``gamma`` and ``lam`` are not used.
- ``"turn_gae"``: turn-level GAE across the steps of each trajectory::

      r_t     = reward_t - p * [invalid_t]
      delta_t = r_t + gamma * V(s_{t+1}) - V(s_t),     V after the last step = 0
      A_t     = delta_t + gamma * lam * A_{t+1},        A_T = 0
      returns = A + V

  (a trajectory truncated at the step limit is treated as terminal, V = 0 after it).

``whiten`` (False): whiten the advantages over the batch, (A - mean) / sqrt(var + 1e-8) with
the unbiased variance, as verl's ``masked_whiten`` (verl whitens GAE advantages by default;
set ``whiten=True`` to match). Returns are computed before whitening.

Vectorized: rows sorted into trajectories once; the GAE recursion runs as a parallel scan
(ceil(log2 T_max) rounds of O(B) numpy work), no Python loop over rows.

Diagnostics: ``value_mean``, ``return_mean``, ``explained_var`` (1 - Var(returns - V) /
Var(returns), 0 when Var(returns) = 0).
"""

from __future__ import annotations

import math

import numpy as np

from g2po_bench.algorithms import _rowwise as rw
from g2po_bench.algorithms._prep import prepare, reverse_linear_scan
from g2po_bench.algorithms.registry import AdvantageResult, in_range, register_estimator
from g2po_bench.core.batch import StepBatch

__all__ = ["ppo", "oracle_ppo", "CONVENTIONS"]

CONVENTIONS = ("reference", "turn_gae")


def oracle_ppo(batch: StepBatch, **o) -> tuple[np.ndarray, np.ndarray]:
    """Per-row oracle (:mod:`g2po_bench.algorithms._rowwise`): (advantages, returns), (B,) each."""
    values = [float(v) for v in o["values"]]
    p, gamma, lam = o["invalid_penalty"], o["gamma"], o["lam"]
    rows = rw.rows_of(batch)
    trajs = rw.trajectories_of(rows)
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
        m = rw.mean(adv)
        var = rw.std(adv) ** 2 if len(adv) > 1 else 0.0
        adv = [(a - m) / math.sqrt(var + 1e-8) for a in adv]
    return np.array(adv, dtype=np.float64), np.array(ret, dtype=np.float64)


@register_estimator(
    "ppo",
    options={"convention": "reference", "lam": 0.95, "whiten": False},
    choices={"convention": CONVENTIONS},
    validators={"lam": in_range(0.0, 1.0)},
    inputs=("values",),
    label="PPO (critic)",
    oracle=oracle_ppo,
    zero_on_uniform_group=False,  # a critic baseline, not a group one
    description="PPO: critic baseline, A = R_tau - V(s_t) (reference) or turn-level GAE",
)
def ppo(
    batch: StepBatch,
    *,
    values: np.ndarray,
    convention: str,
    lam: float,
    whiten: bool,
    gamma: float,
    invalid_penalty: float,
) -> AdvantageResult:
    """PPO advantages and value targets (see the module docstring).

    Args:
        batch: the StepBatch, B rows.
        values: (B,) float64 critic values V(s_t), batch row order (the input ``values``,
            validated by the registry).
        convention: "reference" | "turn_gae".
        lam: GAE lambda (0.95), "turn_gae" only.
        whiten: whiten the advantages over the batch.
        gamma: discount (0.95), "turn_gae" only.
        invalid_penalty: p (0.1).

    Returns:
        AdvantageResult: advantages (B,) float64 and returns (B,) float64 in row order.

    Raises:
        ValueError: unknown convention (``values`` missing, of the wrong shape or not finite:
            raised by the registry before this runs).
    """
    n = len(batch)
    vals = np.asarray(values, dtype=np.float64)
    prep = prepare(batch)
    v = prep.from_original(vals)
    if convention == "reference":
        ret = prep.episode_return - invalid_penalty * prep.invalid
        adv = ret - v
    elif convention == "turn_gae":
        r = prep.reward - invalid_penalty * prep.invalid
        v_next = np.zeros(n)
        v_next[:-1] = v[1:]
        v_next[prep.is_last] = 0.0
        delta = r + gamma * v_next - v
        adv = reverse_linear_scan(delta, np.full(n, gamma * lam), prep.is_last)
        ret = adv + v
    else:
        raise ValueError(f"unknown convention {convention!r}; choose one of {CONVENTIONS}")
    if whiten and n > 0:
        var = adv.var(ddof=1) if n > 1 else 0.0
        adv = (adv - adv.mean()) / np.sqrt(var + 1e-8)
    ret_var = float(ret.var()) if n else 0.0
    diag = {
        "value_mean": float(v.mean()) if n else 0.0,
        "return_mean": float(ret.mean()) if n else 0.0,
        "explained_var": float(1.0 - (ret - v).var() / ret_var) if ret_var > 0 else 0.0,
    }
    return AdvantageResult(
        advantages=prep.to_original(adv), returns=prep.to_original(ret), diagnostics=diag
    )
