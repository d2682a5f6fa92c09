"""Advantage estimators, losses and trainer backends (DESIGN.md "algorithms/").

Importing this package registers the built-in estimators (``grpo``, ``rloo``, ``gigpo``,
``g2po``, ``ppo``); it imports nothing heavier than numpy (the torch losses live in
:mod:`g2po_bench.algorithms.losses`, imported on demand).

Modules: ``batch`` (the StepBatch), ``registry`` (register / check / estimate),
``normalize`` (grouped statistics), one module per estimator (``grpo``, ``rloo``, ``gigpo``,
``g2po``, ``ppo``; equations in their docstrings, semantics in ALGORITHMS.md), ``oracle``
(per-row reference implementations), ``losses`` (torch), ``synthetic`` (random batches) and
``bench`` (``python -m g2po_bench.algorithms.bench``). Quick use::

    from g2po_bench.algorithms import estimate
    result = estimate("g2po", batch, mode="mean_norm", step_weight=0.8)
    result.advantages  # (B,) float64, one scalar per step row
"""

from g2po_bench.algorithms.registry import (
    AdvantageResult,
    available_estimators,
    check_options,
    compute_advantages,
    estimate,
    estimator_options,
    register_estimator,
)
from g2po_bench.core.batch import StepBatch

# built-in estimators: importing the modules registers them
from g2po_bench.algorithms import g2po, gigpo, grpo, ppo, rloo  # noqa: E402,F401  isort: skip

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
