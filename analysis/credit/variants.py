"""Which estimators the credit instrument scores, and the one place it calls them.

:data:`VARIANTS` is data, a table of (name, estimator, options, state-key rule): the registered
estimators at their reference defaults and the ablation axes of the G2PO paper (arXiv 2606.22995;
docs/estimators/g2po.md: G2PO's aggregation, components ladder, edge standardization scope, node
reference set, graph scope, normalization mode and w in {0, 0.2, ..., 1.2}; GiGPO on both state
keys; GRPO's two episode statistics; RLOO; PPO's two conventions when the policy comes with a
critic), and the axes that change the size of advantages across groups and steps, which the
gradient alignment sees and a within-group rank does not (docs/credit.md): **normalization**
(mean only against mean and std: GRPO, GiGPO, G2PO, HGPO, GraphGPO's ``normalization``), **group
against batch statistics** (G2PO's edge standardization and graph over the batch; GRPO's
per-trajectory episode statistic), **aggregation** (G2PO without it), and **step weight** (episode
against step level: G2PO's w grid and components ladder, GiGPO's w = 0 (its episode term alone,
= GRPO) and 0.5, HGPO with its episode item). :func:`study_variants` adds a default row for every registered
estimator the table does not name, so an estimator registered later is scored without editing this
file.

:func:`variant_advantages` is the only function that calls the estimator registry: it passes
the common options, the variant's options and the inputs an estimator needs beyond the
StepBatch as each declares them (critic ``values``, state texts, entropies, action texts), and says when an
input is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from g2po_bench.algorithms.registry import (
    INPUTS,
    available_estimators,
    estimate,
    estimator_inputs,
    estimator_spec,
)
from g2po_bench.core.batch import StepBatch

__all__ = ["Variant", "VARIANTS", "W_GRID", "study_variants", "variant_advantages", "MissingInput"]

#: G2PO's w sweep (the G2PO paper, arXiv 2606.22995; the ``step_weight`` option of
#: docs/estimators/g2po.md)
W_GRID = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2)


@dataclass(frozen=True)
class Variant:
    """One scored row: an estimator with options on one state-key rule.

    Attributes:
        name: the row's name in tables and ``credit.json`` (unique).
        estimator: a registered estimator name (``g2po algorithms``).
        options: estimator options on top of the study's common options.
        state_key: ``"reference"`` or ``"raw"``: which state keys its StepBatch carries; None
            = the estimator's own rule (the registry's ``state_key``).
        axis: the ablation axis the row belongs to ("" for a main row), for grouping in reports.
    """

    name: str
    estimator: str
    options: Mapping[str, Any] = field(default_factory=dict)
    state_key: str | None = None
    axis: str = ""


def _v(name: str, estimator: str, axis: str = "", state_key: str | None = None, **options: Any) -> Variant:
    return Variant(name, estimator, dict(options), state_key, axis)


#: the scored rows (module docstring); names are stable keys of ``credit.json``
VARIANTS: tuple[Variant, ...] = (
    _v("grpo", "grpo"),
    _v("grpo traj-stat", "grpo", "episode statistic", episode_stat="trajectories"),
    _v("grpo mean_norm", "grpo", "normalization", mode="mean_norm"),
    _v("rloo", "rloo"),
    _v("gigpo", "gigpo", "", "raw"),
    _v("gigpo w/o std", "gigpo", "normalization", "raw", mode="mean_norm"),
    _v("gigpo ref-key", "gigpo", "gigpo state key", "reference"),
    _v("gigpo w/o std ref-key", "gigpo", "gigpo state key", "reference", mode="mean_norm"),
    _v("gigpo w=0.0", "gigpo", "step weight", "raw", step_weight=0.0),
    _v("gigpo w=0.5", "gigpo", "step weight", "raw", step_weight=0.5),
    _v("g2po", "g2po"),
    _v("g2po no-agg", "g2po", "aggregation", aggregation=False),
    _v("g2po ep", "g2po", "components", components="ep"),
    _v("g2po ep+nc", "g2po", "components", components="ep+nc"),
    _v("g2po ep+nc+agg", "g2po", "components", components="ep+nc+agg"),
    _v("g2po edge-scope batch", "g2po", "edge_norm_scope", edge_norm_scope="batch"),
    _v("g2po edge-scope node", "g2po", "edge_norm_scope", edge_norm_scope="node"),
    _v("g2po ref-set successors", "g2po", "node_reference_set", node_reference_set="successors"),
    _v("g2po graph-scope batch", "g2po", "graph_scope", graph_scope="batch"),
    _v("g2po mean_norm", "g2po", "normalization", mode="mean_norm"),
    _v("g2po raw-key", "g2po", "g2po state key", "raw"),
    *(_v(f"g2po w={w:.1f}", "g2po", "w", step_weight=w) for w in W_GRID if w != 1.0),
    _v("hgpo mean_norm", "hgpo", "normalization", mode="mean_norm"),
    _v("hgpo +episode", "hgpo", "step weight", episode_term=True),
    _v("graphgpo mean_norm", "graphgpo", "normalization", normalization="mean_norm"),
    _v("ppo", "ppo"),
    _v("ppo turn_gae", "ppo", "ppo convention", convention="turn_gae"),
)


class MissingInput(ValueError):
    """An estimator needs an input this study does not have (e.g. PPO's critic values)."""


def study_variants(available: Sequence[str] | None = None,
                   table: Sequence[Variant] = VARIANTS) -> list[Variant]:
    """The rows to score: the rows of ``table`` whose estimator is registered, then one default
    row (named like the estimator) for each registered estimator ``table`` does not name.

    Args:
        available: registered estimator names (default :func:`available_estimators`).
        table: the variant table.

    Raises:
        ValueError: two rows share a name.
    """
    if available is None:
        available = available_estimators()
    rows = [v for v in table if v.estimator in available]
    named = {v.estimator for v in rows}
    rows += [Variant(name, name) for name in available if name not in named]
    names = [v.name for v in rows]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"variant names must be unique; repeated: {', '.join(dup)}")
    return rows


def variant_advantages(variant: Variant, batches: Mapping[str, StepBatch], common: Mapping[str, Any],
                       inputs: Mapping[str, Any]) -> np.ndarray:
    """Advantages of ``variant`` on the study's StepBatch (the only call into the registry).

    Args:
        variant: the row.
        batches: state-key rule -> the StepBatch with that rule's keys (same rows, same order).
        common: the common options (``mode``, ``gamma``, ``step_weight``, ``invalid_penalty``,
            ``success_reward``) of the study's config.
        inputs: the inputs an estimator may declare (:data:`g2po_bench.algorithms.registry.INPUTS`):
            ``"values"`` (B,) float64 critic values V(s_t) or None; ``"state_texts"`` rule -> B
            state-key texts; ``"next_state_key"`` rule -> (B,) int64 keys of the observation each
            step led to; ``"entropies"`` (B,) float64 mean token entropies (NaN where the
            policy reports none); ``"action_texts"`` B action texts.

    Returns:
        (B,) float64 advantages in row order.

    Raises:
        MissingInput: the estimator needs an input ``inputs`` lacks (the message says which).
        KeyError: ``batches`` has no batch for the variant's rule.
        ValueError: the registry's errors (bad options).
    """
    spec = estimator_spec(variant.estimator)
    rule = variant.state_key or spec.state_key
    options: dict[str, Any] = {k: v for k, v in common.items() if k in spec.defaults}
    options.update(variant.options)
    given: dict[str, Any] = {}
    for key in estimator_inputs(variant.estimator, options):
        value = inputs.get(key)
        if key in ("state_texts", "next_state_key") and value is not None:
            value = value[rule]  # recorded per state-key rule
        if value is None or (INPUTS[key].kind == "float" and not np.all(np.isfinite(np.asarray(value, dtype=float)))):
            raise MissingInput(f"{variant.name}: needs {key} ({INPUTS[key].description}), which this study's "
                               f"policy does not supply (source in training: {INPUTS[key].source})")
        kind = INPUTS[key].kind
        given[key] = (np.asarray(value, dtype=np.float64) if kind == "float" else np.asarray(value, dtype=np.int64)
                      if kind == "key" else list(value))
    return estimate(variant.estimator, batches[rule], inputs=given, **options).advantages
