"""The advantage path of the OpenRLHF backend: the suite's registry estimator, nothing else.

OpenRLHF's own estimators (``RemoteExperienceMaker.compute_advantages_and_returns``, an
if/elif chain over episode rewards) are not used. Advantages come from the same registry call
with the same options as ``backend=local`` (:meth:`LocalTrainer._estimator_options`), so one
config gives the same per-step advantages on both backends for the same rollouts; the
experience maker then gives the scalar of step i to every response token of step i.

numpy only (no torch, no OpenRLHF): importable everywhere.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from algorithms.registry import AdvantageResult, estimate, estimator_spec

__all__ = ["estimator_options", "step_advantages", "needs_critic"]


def needs_critic(cfg) -> bool:
    """Whether the configured estimator takes critic values (``ppo``)."""
    return "values" in estimator_spec(cfg.algorithm.name).defaults


def estimator_options(cfg, rollouts, values: np.ndarray | None = None) -> dict[str, Any]:
    """The options passed to the estimator, exactly as the local backend builds them.

    Args:
        cfg: the RunConfig.
        rollouts: the RolloutBatch (its ``state_texts`` feed similarity grouping).
        values: (B,) critic values V(s_t) in row order (critic estimators only).
    """
    a = cfg.algorithm
    opts: dict[str, Any] = {"mode": a.mode, "gamma": a.gamma, "step_weight": a.step_weight,
                            "invalid_penalty": a.invalid_penalty, "success_reward": a.success_reward}
    opts.update(dict(a.options))
    spec = estimator_spec(a.name)
    if "values" in spec.defaults:
        opts["values"] = values
    if "state_text" in spec.defaults and opts.get("grouping", "exact") != "exact":
        opts["state_text"] = rollouts.state_texts
    return opts


def step_advantages(cfg, rollouts, values: np.ndarray | None = None) -> AdvantageResult:
    """Per-step advantages (and returns for critic estimators) of ``rollouts.steps``.

    Returns:
        the registry's AdvantageResult: ``advantages`` (B,) float64 in row order, ``returns``
        (B,) or None, ``diagnostics``.
    """
    return estimate(cfg.algorithm.name, rollouts.steps, **estimator_options(cfg, rollouts, values))
