"""EMPG: entropy-modulated policy gradients on top of GRPO.

Source: EMPG, entropy-modulated policy gradients (arXiv 2509.09265, ICLR 2026; the authors'
pseudocode).

With H_{i,t} the mean token entropy of step t's response under the sampling policy (the
registry input ``entropies``, recorded by the local sampler) and A_i the base trajectory
advantage of the row (GRPO, :mod:`g2po_bench.algorithms.estimators.grpo`: ``mode``,
``invalid_penalty``, ``episode_stat``)::

    H~        = (H - min_B H) / (max_B H - min_B H + 1e-8)      over all steps of the batch
    g(H~)     = exp(-k H~) / (mean_B exp(-k H~) + 1e-8)        self-calibrated confidence
    f(H~)     = exp(-k' H~)                                    future clarity
    A_mod(i,t) = g(H~_{i,t}) * A_i + zeta * f(H~_{i,t+1})       (the bonus only if step t+1
                                                                 of the trajectory exists)
    A(i,t)    = A_mod(i,t) - mean_B A_mod                       (centred, no std)

Defaults k = k' = 1 (``k``, ``k_prime``), zeta = 0.1. Confident steps (low entropy) get their
advantage amplified, uncertain ones damped; a step followed by a confident one gets a bonus.

Because of the bonus and the batch-level centring, a task group whose rollouts are all equal
does not get advantage 0 (registered with ``zero_on_uniform_group=False``); its members still
get equal advantages step for step. Needs ``entropies``: ``backend=openrlhf`` (vLLM sampling)
does not record them and is refused at config validation.

Vectorized: a handful of O(B) numpy expressions.

Diagnostics: ``entropy_mean``, ``entropy_min``, ``entropy_max`` (nats), ``confidence_mean``
(mean g before centring is 1 by construction; reported as a check), ``bonus_mean``. Row terms:
``a_ep`` (A_i), ``confidence`` g, ``clarity_bonus`` zeta f(H~_{t+1}).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from g2po_bench.algorithms import _rowwise as rw
from g2po_bench.algorithms._prep import prepare
from g2po_bench.algorithms.estimators.grpo import EPISODE_STATS, episode_advantage
from g2po_bench.algorithms.normalize import EPS
from g2po_bench.algorithms.registry import AdvantageResult, in_range, register_estimator
from g2po_bench.core.batch import StepBatch

__all__ = ["empg", "oracle_empg"]

STABILITY = 1e-8  # the 1e-8 of the normalisations above


def oracle_empg(batch: StepBatch, **o) -> np.ndarray:
    """Per-row oracle: Python loops over the rows. (B,) float64 advantages."""
    p, mode, eps = o["invalid_penalty"], o["mode"], o["eps"]
    ent = [float(h) for h in o["entropies"]]
    rows = rw.rows_of(batch)
    if not rows:
        return np.zeros(0)
    trajs = rw.trajectories_of(rows)
    base = rw.episode_term(rows, mode, p, o["episode_stat"], eps)
    lo, hi = min(ent), max(ent)
    norm = [(h - lo) / (hi - lo + STABILITY) for h in ent]
    conf = [np.exp(-o["k"] * x) for x in norm]
    scale = rw.mean(conf) + STABILITY
    nxt: dict[int, Any] = defaultdict(lambda: None)
    for tr in trajs.values():
        for k in range(len(tr) - 1):
            nxt[tr[k]["i"]] = tr[k + 1]["i"]
    mod = []
    for row in rows:
        i = row["i"]
        bonus = 0.0 if nxt[i] is None else o["zeta"] * np.exp(-o["k_prime"] * norm[nxt[i]])
        mod.append(conf[i] / scale * base[i] + bonus)
    m = rw.mean(mod)
    return np.array([x - m for x in mod], dtype=np.float64)


@register_estimator(
    "empg",
    options={"k": 1.0, "k_prime": 1.0, "zeta": 0.1, "episode_stat": "steps", "eps": EPS},
    choices={"episode_stat": EPISODE_STATS},
    validators={"eps": in_range(0.0, lo_open=True)},
    inputs=("entropies",),
    label="EMPG",
    oracle=oracle_empg,
    zero_on_uniform_group=False,  # the clarity bonus and the batch centring
    description="EMPG: GRPO advantage scaled by the step's confidence (entropy) plus a bonus for a confident next step",
)
def empg(
    batch: StepBatch,
    *,
    mode: str,
    invalid_penalty: float,
    k: float,
    k_prime: float,
    zeta: float,
    episode_stat: str,
    eps: float,
    entropies: np.ndarray,
) -> AdvantageResult:
    """EMPG advantages (equations: the module docstring).

    Args:
        batch: the StepBatch, B rows.
        mode: "mean_std_norm" | "mean_norm" (the GRPO base advantage).
        invalid_penalty: p (0.1).
        k: confidence scaling (1.0); k_prime: future-clarity scaling (1.0); zeta: bonus (0.1).
        episode_stat: "steps" | "trajectories".
        eps: > 0.
        entropies: (B,) float64 >= 0, the mean token entropy of every step (the input).

    Returns:
        AdvantageResult: advantages (B,) float64 in row order, returns None, diagnostics and
        row terms (module docstring).
    """
    prep = prepare(batch)
    n = prep.n
    base = episode_advantage(prep, mode=mode, invalid_penalty=invalid_penalty,
                             episode_stat=episode_stat, eps=eps)
    if n == 0:
        return AdvantageResult(advantages=np.zeros(0))
    h = prep.from_original(np.asarray(entropies, dtype=np.float64))
    h_norm = (h - h.min()) / (h.max() - h.min() + STABILITY)
    conf = np.exp(-k * h_norm)
    conf = conf / (conf.mean() + STABILITY)
    clarity = np.exp(-k_prime * h_norm)
    bonus = np.zeros(n)
    bonus[:-1] = zeta * clarity[1:]
    bonus[prep.is_last] = 0.0
    mod = conf * base + bonus
    adv = mod - mod.mean()
    diag = {
        "entropy_mean": float(h.mean()),
        "entropy_min": float(h.min()),
        "entropy_max": float(h.max()),
        "confidence_mean": float(conf.mean()),
        "bonus_mean": float(bonus.mean()),
    }
    terms = {"a_ep": base, "confidence": conf, "clarity_bonus": bonus}
    return AdvantageResult(
        advantages=prep.to_original(adv),
        diagnostics=diag,
        row_terms={key: prep.to_original(x) for key, x in terms.items()},
    )
