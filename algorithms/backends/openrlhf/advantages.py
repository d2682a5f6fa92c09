"""The advantage path of the OpenRLHF backend: the suite's registry estimator, nothing else.

OpenRLHF's own estimators (``RemoteExperienceMaker.compute_advantages_and_returns``, an
if/elif chain over episode rewards) are not used. Advantages come from the same registry call
with the same options as ``backend=local`` (:mod:`g2po_bench.algorithms.backends.common`, shared by both backends), so one
config gives the same per-step advantages on both backends for the same rollouts; the
experience maker then gives the scalar of step i to every response token of step i.

numpy only (no torch, no OpenRLHF): importable everywhere.
"""

from __future__ import annotations

from g2po_bench.algorithms.backends.common import estimator_options, needs_critic, step_advantages

__all__ = ["estimator_options", "step_advantages", "needs_critic"]
