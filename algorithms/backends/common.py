"""What every trainer backend shares, so that the choice of backend changes no result semantics.

- :func:`estimator_options` / :func:`step_advantages`: the registry estimator called with the
  same options on every backend (one config gives the same per-step advantages for the same
  rollouts, whether trained locally or on OpenRLHF).
- :func:`eval_summary`: the ``eval.json`` record of ``results/rundir.py`` from the evaluation
  history.

numpy only: importable without torch or OpenRLHF.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from algorithms.registry import AdvantageResult, estimate, estimator_spec

__all__ = ["needs_critic", "estimator_options", "step_advantages", "eval_summary"]


def needs_critic(cfg) -> bool:
    """Whether the configured estimator takes critic values V(s_t) (``ppo``)."""
    return "values" in estimator_spec(cfg.algorithm.name).defaults


def estimator_options(cfg, rollouts, values: np.ndarray | None = None) -> dict[str, Any]:
    """The options passed to the estimator: the five common ones from ``cfg.algorithm``, its
    ``options`` (ablation switches), critic values for critic estimators, and the state texts
    for GiGPO's similarity grouping.

    Args:
        cfg: the RunConfig.
        rollouts: the RolloutBatch (``state_texts`` (B,) str).
        values: (B,) float64 critic values in row order (critic estimators only).
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
    """Per-step advantages of ``rollouts.steps``: the registry's AdvantageResult
    (``advantages`` (B,) float64 in row order, ``returns`` (B,) or None, ``diagnostics``)."""
    return estimate(cfg.algorithm.name, rollouts.steps, **estimator_options(cfg, rollouts, values))


def eval_summary(cfg, history: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``eval.json`` content for an evaluation ``history`` (EVAL records, oldest first):
    ``before`` is the iteration-0 evaluation, ``final`` the last, ``best`` the highest success
    (ties: higher score, then earlier iteration)."""
    best = max(history, key=lambda e: (e["success_rate"], -np.inf if e.get("score") is None else e["score"],
                                       -e["iteration"]))
    return {
        "env": cfg.env.name,
        "panel": {"split": cfg.env.eval_split, "num_tasks": cfg.eval.num_tasks,
                  "episodes_per_task": cfg.eval.episodes_per_task, "temperature": cfg.eval.temperature},
        "history": history,
        "before": next((e for e in history if e["iteration"] == 0), None),
        "final": history[-1],
        "best": best,
    }
