"""Advantage estimators, losses and trainer backends (DESIGN.md "algorithms/").

Importing this package registers the built-in estimators (``grpo``, ``rloo``, ``gigpo``,
``g2po``, ``ppo``); it imports nothing heavier than numpy (the torch losses live in
:mod:`algorithms.losses`, imported on demand).

Modules: ``batch`` (the StepBatch), ``registry`` (register / check / estimate),
``normalize`` (grouped statistics), one module per estimator (``grpo``, ``rloo``, ``gigpo``,
``g2po``, ``ppo``; equations in their docstrings, semantics in ALGORITHMS.md), ``oracle``
(per-row reference implementations), ``losses`` (torch), ``synthetic`` (random batches) and
``bench`` (``python -m algorithms.bench``). Quick use::

    from algorithms import estimate
    result = estimate("g2po", batch, mode="mean_norm", step_weight=0.8)
    result.advantages  # (B,) float64, one scalar per step row
"""

from algorithms.batch import StepBatch
from algorithms.registry import (
    AdvantageResult,
    available_estimators,
    check_options,
    compute_advantages,
    estimate,
    estimator_options,
    register_estimator,
)

# built-in estimators: importing the modules registers them
from algorithms import g2po, gigpo, grpo, ppo, rloo  # noqa: E402,F401  isort: skip

__all__ = [
    "StepBatch",
    "AdvantageResult",
    "available_estimators",
    "check_options",
    "compute_advantages",
    "estimate",
    "estimator_options",
    "register_estimator",
]
