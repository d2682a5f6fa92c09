"""Advantage estimators, losses and trainer backends (docs/design.md).

The estimators live one per module in :mod:`g2po_bench.algorithms.estimators` (``grpo``,
``rloo``, ``gigpo``, ``g2po``, ``ppo``, ``crbc``, ``hgpo``, ``graphgpo``, ``empg``); the registry
imports every module of that subpackage, and those of installed packages (entry points
``g2po.estimators``), on first use, so nothing lists them (``docs/extending.md``). Importing
this package imports nothing heavier than numpy (the torch losses live in
:mod:`g2po_bench.algorithms.losses`, imported on demand).

Modules: ``registry`` (a package by role: ``spec`` registers and checks, ``discovery`` finds and
looks up by name, ``estimation`` runs), ``estimators`` (one module per
estimator, equations and sources in its docstring, shown on docs/estimators/), the shared
numerics ``normalize`` (grouped statistics), ``_prep`` (canonical row order), ``_graph``
(successors, graph diagnostics) and ``_rowwise`` (helpers of the per-row oracles), ``losses``
(torch), ``synthetic`` (random batches and inputs) and ``speed`` (``g2po bench advantages``).
Quick use::

    from g2po_bench.algorithms import estimate
    result = estimate("g2po", batch, mode="mean_norm", step_weight=0.8)
    result.advantages  # (B,) float64, one scalar per step row
"""

from g2po_bench.algorithms.registry import (
    AdvantageResult,
    BoundEstimator,
    available_estimators,
    bind_estimator,
    check_options,
    compute_advantages,
    estimate,
    estimator_defaults,
    estimator_inputs,
    register_estimator,
    rollout_inputs,
)
from g2po_bench.core.batch import StepBatch

__all__ = [
    "StepBatch",
    "AdvantageResult",
    "BoundEstimator",
    "available_estimators",
    "bind_estimator",
    "check_options",
    "compute_advantages",
    "estimate",
    "estimator_inputs",
    "estimator_defaults",
    "register_estimator",
    "rollout_inputs",
]
