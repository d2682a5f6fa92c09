"""Running an estimator: inputs built and checked, options checked, the result checked.

- :func:`estimate` runs an estimator by name on a StepBatch; :func:`compute_advantages` returns
  its advantages alone; :func:`oracle_estimate` runs its slow per-row oracle (where registered).
- :func:`rollout_inputs` builds the per-row inputs an estimator declares from a rollout batch;
  :func:`check_inputs` validates inputs given directly.
- :func:`trial_estimate` runs it once on a small synthetic batch: the check a config load does
  (the only user of :mod:`g2po_bench.algorithms.synthetic` in the registry).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from g2po_bench.algorithms.registry.discovery import (
    error_location,
    estimator_inputs,
    estimator_spec,
)
from g2po_bench.algorithms.registry.spec import INPUTS, AdvantageResult, EstimatorSpec
from g2po_bench.algorithms.synthetic import random_step_batch, synthetic_inputs
from g2po_bench.core.batch import StepBatch

__all__ = [
    "estimate",
    "compute_advantages",
    "oracle_estimate",
    "trial_estimate",
    "rollout_inputs",
    "check_inputs",
]


def rollout_inputs(name: str, options: Mapping[str, Any] | None, rollouts: Any,
                   values: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The inputs of estimator ``name`` (with ``options``) built from a rollout batch: the one
    path every caller uses (both trainers, ``g2po graph``, the credit-assignment tools).

    Args:
        name: a registered estimator.
        options: its options (those that decide its inputs, e.g. GiGPO's ``grouping``).
        rollouts: a :class:`~g2po_bench.benchmarks.rollout.RolloutBatch` (or any object with
            the :attr:`EstimatorInput.rollout_attribute` attributes and ``steps``).
        values: (B,) critic values V(s_t), row order (estimators that declare ``values``).

    Returns:
        input name -> validated array ((B,) float64 or (B,) str object array), only the
        declared inputs.

    Raises:
        ValueError: a declared input is missing (the message names the estimator, the input and
            who supplies it) or malformed.
    """
    wanted = estimator_inputs(name, options)
    n = len(rollouts.steps)
    raw: dict[str, Any] = {}
    for key in wanted:
        spec = INPUTS[key]
        if spec.rollout_attribute is None:
            raw[key] = values
        else:
            got = getattr(rollouts, spec.rollout_attribute, None)
            raw[key] = got if got is not None and len(got) == n else None
    return check_inputs(name, options, raw, n)


def check_inputs(name: str, options: Mapping[str, Any] | None, inputs: Mapping[str, Any] | None,
                 n: int) -> dict[str, np.ndarray]:
    """Validate and convert the inputs of estimator ``name`` for a batch of ``n`` rows.

    Inputs the estimator does not declare are dropped (a tool may supply a superset).

    Returns:
        input name -> (n,) float64 (float inputs), (n,) int64 (key inputs) or (n,) object array
        of str (text inputs).

    Raises:
        ValueError: a name outside :data:`INPUTS`; a declared input missing, of the wrong length,
            not finite, negative where it must not be, (key) not integers, or (text) holding a
            non-string.
    """
    inputs = dict(inputs or {})
    unknown = sorted(set(inputs) - set(INPUTS))
    if unknown:
        raise ValueError(f"unknown estimator inputs {unknown}; the vocabulary: {sorted(INPUTS)}")
    out: dict[str, np.ndarray] = {}
    for key in estimator_inputs(name, options):
        spec = INPUTS[key]
        value = inputs.get(key)
        if value is None:
            raise ValueError(
                f"estimator {name!r} needs input {key!r} ({spec.description}), supplied by "
                f"{spec.source}; none was given: pass inputs={{{key!r}: ...}} to estimate(), or use "
                "a trainer and backend that record it"
            )
        if spec.kind == "float":
            arr = np.asarray(value, dtype=np.float64)
            if arr.shape != (n,):
                raise ValueError(f"estimator {name!r}: input {key!r} must have shape ({n},), got {arr.shape}")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"estimator {name!r}: input {key!r} must be finite (NaN marks a step "
                                 f"whose {key} were not recorded; supplied by {spec.source})")
            if spec.nonnegative and arr.size and arr.min() < 0:
                raise ValueError(f"estimator {name!r}: input {key!r} must be >= 0")
        elif spec.kind == "key":
            arr = np.asarray(value)
            if arr.size and arr.dtype.kind == "u" and arr.dtype.itemsize == 8:
                arr = arr.view(np.int64)
            if arr.size and arr.dtype.kind not in "iu":
                raise ValueError(f"estimator {name!r}: input {key!r} must hold hashed state keys (integers; "
                                 f"g2po_bench.core.batch.hash_state_keys), got dtype {arr.dtype}")
            arr = arr.astype(np.int64)
            if arr.shape != (n,):
                raise ValueError(f"estimator {name!r}: input {key!r} must have shape ({n},), got {arr.shape}")
        else:
            arr = value if isinstance(value, np.ndarray) and value.dtype.kind == "U" else None
            if arr is None:
                arr = np.empty(len(value), dtype=object)
                arr[:] = list(value)
                if not all(isinstance(t, str) for t in arr):
                    raise ValueError(f"estimator {name!r}: input {key!r} must hold one string per row")
            if arr.shape != (n,):
                raise ValueError(f"estimator {name!r}: input {key!r} must hold one string per row "
                                 f"({n}), got shape {arr.shape}")
        out[key] = arr
    return out


def _split_inputs(inputs: Mapping[str, Any] | None, options: dict[str, Any]) -> dict[str, Any]:
    """Inputs given as keyword arguments (``estimate("ppo", b, values=v)``) join ``inputs``."""
    merged = dict(inputs or {})
    for key in list(options):
        if key in INPUTS:
            if key in merged:
                raise ValueError(f"input {key!r} given twice (as a keyword and in inputs=)")
            merged[key] = options.pop(key)
    return merged


def _call_arguments(spec: EstimatorSpec, batch: StepBatch, inputs: Mapping[str, Any] | None,
                    options: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(batch, StepBatch):
        raise TypeError(f"estimate() needs a StepBatch, got {type(batch).__name__}")
    given = _split_inputs(inputs, options)
    spec.check_options(options)
    checked = check_inputs(spec.name, options, given, len(batch))
    merged = dict(spec.defaults)
    merged.update(options)
    if spec.accepted is not None:
        merged = {k: v for k, v in merged.items() if k in spec.accepted}
        lacking = sorted(set(checked) - spec.accepted)
        if lacking:
            raise TypeError(f"estimator {spec.name!r} needs inputs {lacking} its function does not take")
    merged.update(checked)
    return merged


def estimate(name: str, batch: StepBatch, *, inputs: Mapping[str, Any] | None = None,
             **options: Any) -> AdvantageResult:
    """Run estimator ``name`` on ``batch``.

    Args:
        name: a registered estimator (:func:`available_estimators`).
        batch: a validated :class:`StepBatch` of B rows.
        inputs: the per-row inputs it declares (:func:`estimator_inputs`; build them from
            rollouts with :func:`rollout_inputs`); a keyword named like an input
            (``values=...``) is taken as one too. Undeclared inputs are ignored.
        **options: estimator options (defaults: :func:`estimator_options`).

    Returns:
        :class:`AdvantageResult`: ``advantages`` (B,) float64 finite, in the batch's row
        order; ``returns`` (B,) float64 or None; ``diagnostics`` with at least ``adv_mean`` and
        ``adv_std`` (population std of the advantages over rows); ``row_terms`` name -> (B,)
        float64 (possibly empty).

    Raises:
        TypeError: ``batch`` is not a StepBatch, or the estimator returned something other than an AdvantageResult.
        ValueError: see :func:`check_options` and :func:`check_inputs` (a declared input
            missing or malformed); the estimator produced a non-finite value, or advantages,
            returns or a row term of the wrong shape.
    """
    spec = estimator_spec(name)
    args = _call_arguments(spec, batch, inputs, dict(options))
    result = spec.fn(batch, **args)
    if not isinstance(result, AdvantageResult):
        raise TypeError(f"estimator {name!r} ({spec.module}) returned a {type(result).__name__}; it must "
                        f"return AdvantageResult(advantages=<({len(batch)},) array>, ...)")
    adv = np.asarray(result.advantages, dtype=np.float64)
    if adv.shape != (len(batch),):
        raise ValueError(
            f"estimator {name!r} returned advantages of shape {adv.shape}, expected ({len(batch)},)"
        )
    if not np.all(np.isfinite(adv)):
        raise ValueError(f"estimator {name!r} produced non-finite advantages")
    result.advantages = adv
    if result.returns is not None:
        result.returns = np.asarray(result.returns, dtype=np.float64)
        if result.returns.shape != (len(batch),):
            raise ValueError(f"estimator {name!r} returned returns of shape {result.returns.shape}, "
                             f"expected ({len(batch)},) (one value target per row) or None")
        if not np.all(np.isfinite(result.returns)):
            raise ValueError(f"estimator {name!r} produced non-finite returns")
    terms = {}
    for key, value in result.row_terms.items():
        arr = np.asarray(value, dtype=np.float64)
        if arr.shape != (len(batch),):
            raise ValueError(
                f"estimator {name!r} returned row term {key!r} of shape {arr.shape}, "
                f"expected ({len(batch)},)"
            )
        terms[key] = arr
    result.row_terms = terms
    diag = {k: float(v) for k, v in result.diagnostics.items()}
    diag["adv_mean"] = float(adv.mean()) if adv.size else 0.0
    diag["adv_std"] = float(adv.std()) if adv.size else 0.0
    result.diagnostics = diag
    return result


def trial_estimate(name: str, options: Mapping[str, Any] | None = None) -> AdvantageResult:
    """Run estimator ``name`` once on a small synthetic batch (2 task groups of 3 trajectories,
    at most 4 steps each, with every input it declares): the check a config load does so that an
    estimator that crashes or returns the wrong shape fails before any work starts, not after the
    warm start (docs/design-notes.md "Rules of the house").

    Args:
        name: a registered estimator.
        options: its options (defaults filled in).

    Returns:
        The :class:`AdvantageResult` of :func:`estimate` on the synthetic batch.

    Raises:
        ValueError, TypeError: what :func:`estimate` raises; any other exception of the
            estimator's own code is re-raised as ValueError naming the file and line.
    """
    rng = np.random.default_rng(0)
    batch = random_step_batch(rng, num_groups=2, group_size=3, max_steps=4, num_states=3)
    inputs = synthetic_inputs(batch, estimator_inputs(name, options), rng)
    try:
        return estimate(name, batch, inputs=inputs, **dict(options or {}))
    except (TypeError, ValueError):
        raise
    except Exception as exc:
        raise ValueError(f"estimator {name!r} failed on a small synthetic batch: "
                         f"{error_location(exc)}{type(exc).__name__}: {exc}") from None


def oracle_estimate(name: str, batch: StepBatch, *, inputs: Mapping[str, Any] | None = None,
                    **options: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """Run the per-row oracle of ``name`` (same options and inputs as :func:`estimate`).

    Returns:
        ``(advantages (B,) float64, returns (B,) float64 or None)``.

    Raises:
        LookupError: ``name`` has no oracle.
        ValueError, TypeError: as :func:`estimate`.
    """
    spec = estimator_spec(name)
    if spec.oracle is None:
        raise LookupError(f"estimator {name!r} has no oracle")
    args = _call_arguments(spec, batch, inputs, dict(options))
    out = spec.oracle(batch, **args)
    if isinstance(out, tuple):
        adv, ret = out
        return np.asarray(adv, dtype=np.float64), None if ret is None else np.asarray(ret, dtype=np.float64)
    return np.asarray(out, dtype=np.float64), None


def compute_advantages(name: str, batch: StepBatch, *, inputs: Mapping[str, Any] | None = None,
                       **options: Any) -> np.ndarray:
    """The advantages alone: ``estimate(name, batch, ...).advantages``, (B,) float64.

    Raises:
        The errors of :func:`estimate`.
    """
    return estimate(name, batch, inputs=inputs, **options).advantages
