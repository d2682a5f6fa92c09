"""Running an estimator: options checked once, then inputs and result checked on every call.

- :func:`bind_estimator` looks an estimator up and checks its options once, giving a
  :class:`BoundEstimator`: the callable a trainer calls every iteration
  (``estimator(rollouts, values) -> AdvantageResult``). A call checks only what changes from call
  to call: the per-row inputs (shapes, finiteness) and the result.
- :func:`run_estimator_options` is what a run config passes to its estimator, and
  :func:`bind_run_estimator` binds a run's estimator to them: the config load and both trainers
  bind it so (the trainers once, when they start).
- :func:`estimate` runs an estimator by name on a StepBatch (bind, then call);
  :func:`compute_advantages` returns its advantages alone; :func:`oracle_estimate` runs its slow
  per-row oracle (where registered).
- :func:`rollout_inputs` builds the per-row inputs an estimator declares from a rollout batch;
  :func:`check_inputs` validates inputs given directly.
- :func:`trial_estimate` (:meth:`BoundEstimator.trial`) runs it once on a small synthetic batch:
  the check a config load does (the only user of :mod:`g2po_bench.algorithms.synthetic` in the
  registry).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
    "BoundEstimator",
    "bind_estimator",
    "run_estimator_options",
    "bind_run_estimator",
    "estimate",
    "compute_advantages",
    "oracle_estimate",
    "trial_estimate",
    "rollout_inputs",
    "check_inputs",
]


# ---------------------------------------------------------------------------- the bound estimator
@dataclass(frozen=True)
class BoundEstimator:
    """An estimator bound to one set of options, checked once (:func:`bind_estimator`).

    Calling it validates only what differs between calls: the per-row inputs (missing, shape,
    finiteness, kind; they come from the rollouts) and the result (shapes, finiteness), exactly as
    :func:`estimate` does. The options are not checked again.

    Attributes:
        spec: the registered estimator.
        options: the options it was bound with, as given (a checked subset of ``spec.defaults``;
            what a run records in its step tables).
        arguments: the keyword arguments its function receives besides the inputs: the options
            merged over the defaults, restricted to the names the function takes.
        inputs: the input names (:data:`~g2po_bench.algorithms.registry.spec.INPUTS`) it needs
            with these options, in vocabulary order.
    """

    spec: EstimatorSpec
    options: Mapping[str, Any]
    arguments: Mapping[str, Any]
    inputs: tuple[str, ...]

    @property
    def name(self) -> str:
        """``algorithm.name`` of the estimator."""
        return self.spec.name

    @property
    def needs_critic(self) -> bool:
        """Whether it declares the input ``values`` (critic V(s_t)): the trainer then trains a critic."""
        return "values" in self.inputs

    def __call__(self, rollouts: Any, values: np.ndarray | None = None) -> AdvantageResult:
        """Per-step advantages of ``rollouts.steps``, with the inputs built from ``rollouts``
        (:meth:`rollout_inputs`).

        Args:
            rollouts: a :class:`~g2po_bench.benchmarks.rollout.RolloutBatch` of B step rows (or
                any object with ``steps`` and the inputs' ``rollout_attribute`` attributes).
            values: (B,) critic values V(s_t) in row order (estimators that declare ``values``).

        Returns:
            The :class:`AdvantageResult` (``advantages`` (B,) float64 in row order, ``returns``
            (B,) or None, ``diagnostics``, ``row_terms``), as :func:`estimate` returns it.

        Raises:
            ValueError, TypeError: an input missing or malformed, or a malformed result (the
                errors of :func:`estimate` other than those of the options).
        """
        batch = rollouts.steps
        return self._run(batch, _gathered_inputs(self.inputs, rollouts, values))

    def rollout_inputs(self, rollouts: Any, values: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The validated inputs it declares, built from ``rollouts`` (and the critic ``values``):
        input name -> (B,) array (see :func:`check_inputs`).

        Raises:
            ValueError: a declared input is missing (named, with who supplies it) or malformed.
        """
        n = len(rollouts.steps)
        return _checked_inputs(self.name, self.inputs, _gathered_inputs(self.inputs, rollouts, values), n)

    def on_batch(self, batch: StepBatch, inputs: Mapping[str, Any] | None = None) -> AdvantageResult:
        """Run it on ``batch`` with ``inputs`` given directly (name -> (B,) values; undeclared
        ones are ignored). Returns and raises as :meth:`__call__`; TypeError when ``batch`` is
        not a StepBatch."""
        _require_step_batch(batch)
        return self._run(batch, inputs)

    def oracle(self, batch: StepBatch, inputs: Mapping[str, Any] | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """Its per-row oracle on ``batch``: ``(advantages (B,) float64, returns (B,) float64 or None)``.

        Raises:
            LookupError: the estimator has no oracle.
            ValueError, TypeError: as :meth:`on_batch`.
        """
        if self.spec.oracle is None:
            raise LookupError(f"estimator {self.name!r} has no oracle")
        _require_step_batch(batch)
        out = self.spec.oracle(batch, **self.arguments, **_checked_inputs(self.name, self.inputs, inputs, len(batch)))
        if isinstance(out, tuple):
            adv, ret = out
            return np.asarray(adv, dtype=np.float64), None if ret is None else np.asarray(ret, dtype=np.float64)
        return np.asarray(out, dtype=np.float64), None

    def trial(self) -> AdvantageResult:
        """Run it once on a small synthetic batch (2 task groups of 3 trajectories, at most 4 steps
        each, with every input it declares): the check a config load does so that an estimator
        that crashes or returns the wrong shape fails before any work starts, not after the warm
        start (docs/design-notes.md "Rules of the house").

        Raises:
            ValueError, TypeError: what :meth:`on_batch` raises; any other exception of the
                estimator's own code is re-raised as ValueError naming the file and line.
        """
        rng = np.random.default_rng(0)
        batch = random_step_batch(rng, num_groups=2, group_size=3, max_steps=4, num_states=3)
        inputs = synthetic_inputs(batch, self.inputs, rng)
        try:
            return self.on_batch(batch, inputs)
        except (TypeError, ValueError):
            raise
        except Exception as exc:
            raise ValueError(f"estimator {self.name!r} failed on a small synthetic batch: "
                             f"{error_location(exc)}{type(exc).__name__}: {exc}") from None

    def _run(self, batch: StepBatch, inputs: Mapping[str, Any] | None) -> AdvantageResult:
        checked = _checked_inputs(self.name, self.inputs, inputs, len(batch))
        result = self.spec.fn(batch, **self.arguments, **checked)
        return _checked_result(self.spec, result, len(batch))


def bind_estimator(name: str, options: Mapping[str, Any] | None = None) -> BoundEstimator:
    """Look estimator ``name`` up and check ``options`` once: the :class:`BoundEstimator` to call.

    Args:
        name: a registered estimator (:func:`~g2po_bench.algorithms.registry.discovery.available_estimators`).
        options: option name -> value (a subset of its defaults, common options included);
            the others keep their defaults.

    Raises:
        ValueError: unknown estimator, or an option that
            :meth:`~g2po_bench.algorithms.registry.spec.EstimatorSpec.check_options` refuses.
        TypeError: the estimator needs an input its function does not take.
    """
    return _bind(estimator_spec(name), dict(options or {}))


def _bind(spec: EstimatorSpec, options: dict[str, Any]) -> BoundEstimator:
    spec.check_options(options)
    arguments = dict(spec.defaults)
    arguments.update(options)
    inputs = spec.input_names(options)
    if spec.accepted is not None:
        arguments = {k: v for k, v in arguments.items() if k in spec.accepted}
        lacking = sorted(set(inputs) - spec.accepted)
        if lacking:
            raise TypeError(f"estimator {spec.name!r} needs inputs {lacking} its function does not take")
    return BoundEstimator(spec=spec, options=options, arguments=arguments, inputs=inputs)


# ---------------------------------------------------------------------------- a run's estimator
def run_estimator_options(cfg: Any) -> dict[str, Any]:
    """The options a run passes to its estimator (``cfg``: a :class:`~g2po_bench.core.config.RunConfig`,
    read for ``cfg.algorithm`` and ``cfg.env.name``): the five common ones from ``cfg.algorithm``, the
    estimator's defaults for ``cfg.env.name`` where it declares environment-specific ones
    (``env_defaults``, e.g. GraphGPO's ``distance_gamma`` on WebShop), then ``cfg.algorithm.options``
    (ablation switches), each layer over the one before. Per-row inputs are not options.

    Raises:
        ValueError: ``cfg.algorithm.name`` is not a registered estimator.
    """
    a = cfg.algorithm
    opts: dict[str, Any] = {"mode": a.mode, "gamma": a.gamma, "step_weight": a.step_weight,
                            "invalid_penalty": a.invalid_penalty, "success_reward": a.success_reward}
    opts.update(estimator_spec(a.name).env_defaults.get(cfg.env.name, {}))
    opts.update(dict(a.options))
    return opts


def bind_run_estimator(cfg: Any) -> BoundEstimator:
    """The run's estimator bound to :func:`run_estimator_options` (checked once): what the trainers
    call every iteration, ``estimator(rollouts, values) -> AdvantageResult``. The config load
    (:func:`g2po_bench.runconfig.load_config`) binds it to check the config; a trainer binds the
    config it is given once, when it starts.

    Raises:
        ValueError: unknown estimator or a bad option; TypeError: the estimator needs an input its
            function does not take.
    """
    return bind_estimator(cfg.algorithm.name, run_estimator_options(cfg))


# ---------------------------------------------------------------------------- checks
def _require_step_batch(batch: Any) -> None:
    if not isinstance(batch, StepBatch):
        raise TypeError(f"estimate() needs a StepBatch, got {type(batch).__name__}")


def _gathered_inputs(names: Sequence[str], rollouts: Any, values: np.ndarray | None) -> dict[str, Any]:
    """The raw inputs ``names`` from a rollout batch (None where it does not hold one row per step)."""
    n = len(rollouts.steps)
    raw: dict[str, Any] = {}
    for key in names:
        spec = INPUTS[key]
        if spec.rollout_attribute is None:
            raw[key] = values
        else:
            got = getattr(rollouts, spec.rollout_attribute, None)
            raw[key] = got if got is not None and len(got) == n else None
    return raw


def _checked_inputs(name: str, names: Sequence[str], inputs: Mapping[str, Any] | None,
                    n: int) -> dict[str, np.ndarray]:
    """The inputs ``names`` of estimator ``name`` validated and converted for ``n`` rows (see
    :func:`check_inputs`)."""
    inputs = dict(inputs or {})
    unknown = sorted(set(inputs) - set(INPUTS))
    if unknown:
        raise ValueError(f"unknown estimator inputs {unknown}; the vocabulary: {sorted(INPUTS)}")
    out: dict[str, np.ndarray] = {}
    for key in names:
        value = inputs.get(key)
        if value is None:
            spec = INPUTS[key]
            raise ValueError(
                f"estimator {name!r} needs input {key!r} ({spec.description}), supplied by "
                f"{spec.source}; none was given: pass inputs={{{key!r}: ...}} to estimate(), or use "
                "a trainer and backend that record it"
            )
        out[key] = _input_array(name, key, value, n)
    return out


def _input_array(name: str, key: str, value: Any, n: int) -> np.ndarray:
    """One input converted by its kind: (n,) float64 finite, (n,) int64 or (n,) str."""
    spec = INPUTS[key]
    if spec.kind == "float":
        arr = np.asarray(value, dtype=np.float64)
        if arr.shape != (n,):
            raise ValueError(f"estimator {name!r}: input {key!r} must have shape ({n},), got {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"estimator {name!r}: input {key!r} must be finite (NaN marks a step "
                             f"whose {key} were not recorded; supplied by {spec.source})")
        if spec.nonnegative and arr.size and arr.min() < 0:
            raise ValueError(f"estimator {name!r}: input {key!r} must be >= 0")
        return arr
    if spec.kind == "key":
        arr = np.asarray(value)
        if arr.size and arr.dtype.kind == "u" and arr.dtype.itemsize == 8:
            arr = arr.view(np.int64)
        if arr.size and arr.dtype.kind not in "iu":
            raise ValueError(f"estimator {name!r}: input {key!r} must hold hashed state keys (integers; "
                             f"g2po_bench.core.batch.hash_state_keys), got dtype {arr.dtype}")
        arr = arr.astype(np.int64)
        if arr.shape != (n,):
            raise ValueError(f"estimator {name!r}: input {key!r} must have shape ({n},), got {arr.shape}")
        return arr
    arr = value if isinstance(value, np.ndarray) and value.dtype.kind == "U" else None
    if arr is None:
        arr = np.empty(len(value), dtype=object)
        arr[:] = list(value)
        if not all(isinstance(t, str) for t in arr):
            raise ValueError(f"estimator {name!r}: input {key!r} must hold one string per row")
    if arr.shape != (n,):
        raise ValueError(f"estimator {name!r}: input {key!r} must hold one string per row "
                         f"({n}), got shape {arr.shape}")
    return arr


def _checked_result(spec: EstimatorSpec, result: Any, n: int) -> AdvantageResult:
    """``result`` of estimator ``spec`` on ``n`` rows, checked and converted to float64, with
    ``adv_mean`` and ``adv_std`` added to its diagnostics (see :func:`estimate`)."""
    name = spec.name
    if not isinstance(result, AdvantageResult):
        raise TypeError(f"estimator {name!r} ({spec.module}) returned a {type(result).__name__}; it must "
                        f"return AdvantageResult(advantages=<({n},) array>, ...)")
    adv = np.asarray(result.advantages, dtype=np.float64)
    if adv.shape != (n,):
        raise ValueError(f"estimator {name!r} returned advantages of shape {adv.shape}, expected ({n},)")
    if not np.all(np.isfinite(adv)):
        raise ValueError(f"estimator {name!r} produced non-finite advantages")
    result.advantages = adv
    if result.returns is not None:
        result.returns = np.asarray(result.returns, dtype=np.float64)
        if result.returns.shape != (n,):
            raise ValueError(f"estimator {name!r} returned returns of shape {result.returns.shape}, "
                             f"expected ({n},) (one value target per row) or None")
        if not np.all(np.isfinite(result.returns)):
            raise ValueError(f"estimator {name!r} produced non-finite returns")
    terms = {}
    for key, value in result.row_terms.items():
        arr = np.asarray(value, dtype=np.float64)
        if arr.shape != (n,):
            raise ValueError(f"estimator {name!r} returned row term {key!r} of shape {arr.shape}, expected ({n},)")
        terms[key] = arr
    result.row_terms = terms
    diag = {k: float(v) for k, v in result.diagnostics.items()}
    diag["adv_mean"] = float(adv.mean()) if adv.size else 0.0
    diag["adv_std"] = float(adv.std()) if adv.size else 0.0
    result.diagnostics = diag
    return result


def _split_inputs(inputs: Mapping[str, Any] | None, options: dict[str, Any]) -> dict[str, Any]:
    """Inputs given as keyword arguments (``estimate("ppo", b, values=v)``) join ``inputs``."""
    merged = dict(inputs or {})
    for key in list(options):
        if key in INPUTS:
            if key in merged:
                raise ValueError(f"input {key!r} given twice (as a keyword and in inputs=)")
            merged[key] = options.pop(key)
    return merged


# ---------------------------------------------------------------------------- by name
def rollout_inputs(name: str, options: Mapping[str, Any] | None, rollouts: Any,
                   values: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The inputs of estimator ``name`` (with ``options``) built from a rollout batch: the one
    path every caller uses (both trainers through :meth:`BoundEstimator.__call__`, ``g2po graph``,
    the credit-assignment tools).

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
    names = estimator_inputs(name, options)
    return _checked_inputs(name, names, _gathered_inputs(names, rollouts, values), len(rollouts.steps))


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
    return _checked_inputs(name, estimator_inputs(name, options), inputs, n)


def estimate(name: str, batch: StepBatch, *, inputs: Mapping[str, Any] | None = None,
             **options: Any) -> AdvantageResult:
    """Run estimator ``name`` on ``batch``: :func:`bind_estimator` then
    :meth:`BoundEstimator.on_batch`.

    Args:
        name: a registered estimator (:func:`available_estimators`).
        batch: a validated :class:`StepBatch` of B rows.
        inputs: the per-row inputs it declares (:func:`estimator_inputs`; build them from
            rollouts with :func:`rollout_inputs`); a keyword named like an input
            (``values=...``) is taken as one too. Undeclared inputs are ignored.
        **options: estimator options (defaults: :func:`estimator_defaults`).

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
    _require_step_batch(batch)
    options = dict(options)
    given = _split_inputs(inputs, options)
    return _bind(spec, options).on_batch(batch, given)


def trial_estimate(name: str, options: Mapping[str, Any] | None = None) -> AdvantageResult:
    """Bind estimator ``name`` with ``options`` and run it once on a small synthetic batch
    (:meth:`BoundEstimator.trial`).

    Raises:
        ValueError, TypeError: what :func:`bind_estimator` and :meth:`BoundEstimator.trial` raise.
    """
    return bind_estimator(name, options).trial()


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
    _require_step_batch(batch)
    options = dict(options)
    given = _split_inputs(inputs, options)
    return _bind(spec, options).oracle(batch, given)


def compute_advantages(name: str, batch: StepBatch, *, inputs: Mapping[str, Any] | None = None,
                       **options: Any) -> np.ndarray:
    """The advantages alone: ``estimate(name, batch, ...).advantages``, (B,) float64.

    Raises:
        The errors of :func:`estimate`.
    """
    return estimate(name, batch, inputs=inputs, **options).advantages
