"""The advantage-estimator registry (modelled on verl's ``register_adv_est``).

An advantage estimator is a pure, vectorized function of a :class:`~g2po_bench.core.batch.StepBatch`
that returns one scalar advantage per step row (DESIGN.md "algorithms/"). Estimators are
registered by name with their options and defaults; the trainer, the config validation
(``g2po/config.py``) and the benchmark only talk to this module.

Public API
----------
- :func:`register_estimator` -- decorator that registers ``fn(batch, **options) -> AdvantageResult``.
- :func:`available_estimators` -- sorted list of registered names.
- :func:`estimator_options` -- the defaults of an estimator's options (common ones included).
- :func:`check_options` -- validate an options dict (unknown name, wrong type, bad choice).
- :func:`estimate` -- run an estimator; returns :class:`AdvantageResult`.
- :func:`compute_advantages` -- ``estimate(...).advantages``.
- :func:`describe_estimators` -- a text listing of the estimators and their options.

Common options
--------------
Every estimator accepts the five options the trainer always passes (ALGORITHMS.md; the
reference values are the defaults): ``mode`` ("mean_std_norm" | "mean_norm"), ``gamma`` (0.95),
``step_weight`` (1.0; G2PO's w, GiGPO's omega), ``invalid_penalty`` (0.1) and
``success_reward`` (10.0). An estimator that does not use one of them simply ignores it (its
function is called only with the options its signature names). Any other option name must be
declared by the estimator, else :func:`check_options` raises.

How to add an estimator
-----------------------
Write one decorated function in a new module of ``algorithms/`` and import that module in
``algorithms/__init__.py`` (next to the built-ins) so that importing ``algorithms`` registers it::

    import numpy as np
    from g2po_bench.algorithms.registry import AdvantageResult, register_estimator

    @register_estimator(
        "reinforce",                              # the name used in configs: algorithm.name
        options={"baseline": 0.0},                # extra options and their defaults
        description="A = R_tau - baseline, broadcast to every step",
    )
    def reinforce(batch, *, baseline, invalid_penalty):
        # common options (mode, gamma, ...) are passed only if the signature names them
        _, tid = np.unique(batch.traj_id, return_inverse=True)
        episode_return = np.bincount(tid, weights=batch.reward)[tid]
        adv = episode_return - baseline - invalid_penalty * (~batch.action_valid)
        return AdvantageResult(advantages=adv.astype(np.float64))

Option values are type-checked against the defaults (a float option accepts ints, a bool
option only bools, a str option only strs; an option whose default is None accepts anything and
is checked by the estimator). Pass ``choices={"name": (...)}`` for a closed set of strings and
``validators={"name": fn}`` (``fn(value) -> str | None``, the string being the error) for ranges,
and ``check=fn`` (``fn(all_options: dict) -> str | None``) for rules that involve several options.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from g2po_bench.core.batch import StepBatch

__all__ = [
    "AdvantageResult",
    "EstimatorSpec",
    "COMMON_OPTIONS",
    "register_estimator",
    "available_estimators",
    "estimator_options",
    "estimator_spec",
    "check_options",
    "estimate",
    "compute_advantages",
    "describe_estimators",
    "in_range",
]


@dataclass
class AdvantageResult:
    """What an estimator returns.

    - ``advantages``: (B,) float64, one scalar advantage per step row, in the batch's row order
      (it is given to every response token of the step; ALGORITHMS.md G2PO step 8).
    - ``returns``: (B,) float64 value-function targets (critic estimators), or None.
    - ``diagnostics``: scalar floats for logging (``adv_mean``, ``adv_std`` always; graph
      estimators add ``singleton_frac``, ``node_size_mean``, ...).
    - ``row_terms``: optional per-row intermediate quantities, name -> (B,) float64 in the
      batch's row order, for inspection only (the state-graph drawings of ``g2po graph``);
      training never reads them. G2PO gives ``node_value`` (V(node(i))), ``succ_value``
      (V(succ(i))), ``visit_return`` (v_i), ``a_ep``, ``a_nc``, ``a_ec``; GiGPO gives
      ``node_value`` (mean step return of the step group), ``visit_return`` (G_t, penalty
      included), ``a_ep``, ``a_s``. Terms a configuration leaves out are 0.
    """

    advantages: np.ndarray
    returns: np.ndarray | None = None
    diagnostics: dict[str, float] = field(default_factory=dict)
    row_terms: dict[str, np.ndarray] = field(default_factory=dict)


def in_range(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
             hi_open: bool = False) -> Callable[[Any], str | None]:
    """A validator for :func:`register_estimator`: the value must lie in [lo, hi] (or open ends)."""

    def check(value: Any) -> str | None:
        v = float(value)
        if lo is not None and (v < lo or (lo_open and v == lo)):
            return f"must be {'>' if lo_open else '>='} {lo}"
        if hi is not None and (v > hi or (hi_open and v == hi)):
            return f"must be {'<' if hi_open else '<='} {hi}"
        return None

    return check


COMMON_OPTIONS: dict[str, Any] = {
    "mode": "mean_std_norm",
    "gamma": 0.95,
    "step_weight": 1.0,
    "invalid_penalty": 0.1,
    "success_reward": 10.0,
}
"""The options every estimator accepts, with the reference defaults (ALGORITHMS.md)."""

_COMMON_CHOICES: dict[str, tuple] = {"mode": ("mean_std_norm", "mean_norm")}
_COMMON_VALIDATORS: dict[str, Callable[[Any], str | None]] = {
    "gamma": in_range(0.0, 1.0),
    "invalid_penalty": in_range(0.0),
}


@dataclass(frozen=True)
class EstimatorSpec:
    """A registered estimator: its function, option defaults, choices and validators."""

    name: str
    fn: Callable[..., AdvantageResult]
    defaults: dict[str, Any]
    choices: dict[str, tuple]
    validators: dict[str, Callable[[Any], str | None]]
    check: Callable[[dict[str, Any]], str | None] | None
    description: str
    accepted: frozenset[str] | None  # option names the function takes (None: takes **kwargs)
    # the estimator's reference state-key rule (ALGORITHMS.md "State keys"): "reference" (the
    # environment's reference key, G2PO's) or "raw" (the raw observation, GiGPO's); the run
    # config's env.state_key=auto resolves to it
    state_key: str = "reference"


_REGISTRY: dict[str, EstimatorSpec] = {}


def register_estimator(
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    description: str = "",
    choices: Mapping[str, tuple] | None = None,
    validators: Mapping[str, Callable[[Any], str | None]] | None = None,
    check: Callable[[dict[str, Any]], str | None] | None = None,
    state_key: str = "reference",
) -> Callable[[Callable[..., AdvantageResult]], Callable[..., AdvantageResult]]:
    """Decorator registering ``fn(batch: StepBatch, **options) -> AdvantageResult`` as ``name``.

    Args:
        name: the estimator name (``algorithm.name`` in the run config).
        options: the estimator's own options and their defaults; it may also override the
            default of a common option (see :data:`COMMON_OPTIONS`).
        description: one line shown by ``g2po algorithms``.
        choices: allowed values of string options.
        validators: ``option -> fn(value) -> error message or None``.
        check: ``fn(all_options) -> error message or None``, for rules across options
            (called with the defaults updated by the given options).
        state_key: the state-key rule the estimator's reference code groups by,
            ``"reference"`` (default) or ``"raw"``; ``env.state_key=auto`` uses it.

    Returns:
        The decorator; it returns ``fn`` unchanged.

    Raises:
        ValueError: ``name`` is already registered, a default violates its own choices, or
            ``state_key`` is neither "reference" nor "raw".
        TypeError: ``fn`` does not take the batch as first positional parameter.
    """
    if state_key not in ("reference", "raw"):
        raise ValueError(f"estimator {name!r}: state_key must be 'reference' or 'raw', got {state_key!r}")
    defaults = dict(COMMON_OPTIONS)
    defaults.update(options or {})
    all_choices = dict(_COMMON_CHOICES)
    all_choices.update(choices or {})
    all_validators = dict(_COMMON_VALIDATORS)
    all_validators.update(validators or {})

    def decorator(fn: Callable[..., AdvantageResult]) -> Callable[..., AdvantageResult]:
        if name in _REGISTRY and _REGISTRY[name].fn is not fn:
            raise ValueError(f"estimator {name!r} is already registered")
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())
        if not params or params[0].kind not in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            raise TypeError(f"estimator {name!r}: fn must take the StepBatch as first argument")
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            accepted = None
        else:
            accepted = frozenset(p.name for p in params[1:])
            missing = sorted(set(options or {}) - accepted)
            if missing:
                raise TypeError(f"estimator {name!r} declares options its function lacks: {missing}")
        for opt, allowed in all_choices.items():
            if opt in defaults and defaults[opt] is not None and defaults[opt] not in allowed:
                raise ValueError(f"estimator {name!r}: default of {opt!r} not in {allowed}")
        _REGISTRY[name] = EstimatorSpec(
            name=name,
            fn=fn,
            defaults=defaults,
            choices=all_choices,
            validators=all_validators,
            check=check,
            description=description,
            accepted=accepted,
            state_key=state_key,
        )
        return fn

    return decorator


def _ensure_builtins() -> None:
    # Importing the package registers the built-in estimators (algorithms/__init__.py).
    # lazy: the package imports this module, and importing the package registers the built-ins
    import g2po_bench.algorithms  # noqa: F401


def available_estimators() -> list[str]:
    """Sorted names of the registered estimators (built-ins: g2po, gigpo, grpo, ppo, rloo)."""
    _ensure_builtins()
    return sorted(_REGISTRY)


def estimator_spec(name: str) -> EstimatorSpec:
    """The :class:`EstimatorSpec` of ``name``. Raises ValueError for an unknown name."""
    _ensure_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown advantage estimator {name!r}; registered estimators: "
            f"{', '.join(sorted(_REGISTRY))}"
        ) from None


def estimator_options(name: str) -> dict[str, Any]:
    """Default values of every option ``name`` accepts (common options included).

    Raises:
        ValueError: unknown estimator.
    """
    return dict(estimator_spec(name).defaults)


def _type_error(name: str, opt: str, default: Any, value: Any) -> str | None:
    if default is None:
        return None
    if isinstance(default, bool):
        if not isinstance(value, (bool, np.bool_)):
            return f"option {opt!r} of estimator {name!r} must be a bool, got {value!r}"
        return None
    if isinstance(default, numbers.Real):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            return f"option {opt!r} of estimator {name!r} must be a number, got {value!r}"
        if not math.isfinite(float(value)):
            return f"option {opt!r} of estimator {name!r} must be finite, got {value!r}"
        return None
    if isinstance(default, str) and not isinstance(value, str):
        return f"option {opt!r} of estimator {name!r} must be a string, got {value!r}"
    return None


def check_options(name: str, options: Mapping[str, Any]) -> None:
    """Validate options for estimator ``name`` before any work starts.

    Args:
        name: a registered estimator.
        options: option name -> value (a subset of :func:`estimator_options`).

    Raises:
        ValueError: unknown estimator; an unknown option (the message lists the known ones);
            a value of the wrong type, outside its choices (e.g. ``mode`` not in
            {mean_std_norm, mean_norm}) or outside its range.
    """
    spec = estimator_spec(name)
    known = sorted(spec.defaults)
    for opt, value in options.items():
        if opt not in spec.defaults:
            raise ValueError(
                f"unknown option {opt!r} for estimator {name!r}; known options: {', '.join(known)}"
            )
        err = _type_error(name, opt, spec.defaults[opt], value)
        if err:
            raise ValueError(err)
        if value is None:
            continue
        allowed = spec.choices.get(opt)
        if allowed is not None and value not in allowed:
            raise ValueError(
                f"option {opt!r} of estimator {name!r} must be one of "
                f"{', '.join(map(str, allowed))}; got {value!r}"
            )
        validator = spec.validators.get(opt)
        if validator is not None:
            msg = validator(value)
            if msg:
                raise ValueError(f"option {opt!r} of estimator {name!r} {msg}; got {value!r}")
    if spec.check is not None:
        merged = dict(spec.defaults)
        merged.update(options)
        msg = spec.check(merged)
        if msg:
            raise ValueError(f"estimator {name!r}: {msg}")


def estimate(name: str, batch: StepBatch, **options: Any) -> AdvantageResult:
    """Run estimator ``name`` on ``batch``.

    Args:
        name: a registered estimator (:func:`available_estimators`).
        batch: a validated :class:`StepBatch` of B rows.
        **options: estimator options (defaults: :func:`estimator_options`).

    Returns:
        :class:`AdvantageResult`: ``advantages`` (B,) float64 finite, in the batch's row
        order; ``returns`` (B,) float64 or None; ``diagnostics`` with at least ``adv_mean`` and
        ``adv_std`` (population std of the advantages over rows); ``row_terms`` name -> (B,)
        float64 (possibly empty).

    Raises:
        TypeError: ``batch`` is not a StepBatch.
        ValueError: see :func:`check_options`; an estimator-specific input is missing or has
            the wrong shape (e.g. PPO ``values``); the estimator produced a non-finite value
            or a row term of the wrong shape.
    """
    spec = estimator_spec(name)
    if not isinstance(batch, StepBatch):
        raise TypeError(f"estimate() needs a StepBatch, got {type(batch).__name__}")
    check_options(name, options)
    merged = dict(spec.defaults)
    merged.update(options)
    if spec.accepted is not None:
        merged = {k: v for k, v in merged.items() if k in spec.accepted}
    result = spec.fn(batch, **merged)
    if not isinstance(result, AdvantageResult):
        raise TypeError(f"estimator {name!r} must return an AdvantageResult")
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


def compute_advantages(name: str, batch: StepBatch, **options: Any) -> np.ndarray:
    """The advantages alone: ``estimate(name, batch, **options).advantages``, (B,) float64.

    Raises:
        The errors of :func:`estimate`.
    """
    return estimate(name, batch, **options).advantages


def describe_estimators() -> str:
    """A readable listing of every registered estimator: its description and its options
    with defaults and allowed values (what ``g2po algorithms`` prints)."""
    lines: list[str] = []
    for name in available_estimators():
        spec = _REGISTRY[name]
        lines.append(f"{name}: {spec.description}")
        for opt in sorted(spec.defaults):
            default = spec.defaults[opt]
            shown = "None (supplied at run time)" if default is None else repr(default)
            extra = ""
            if opt in spec.choices:
                extra = f"  [{' | '.join(map(str, spec.choices[opt]))}]"
            if opt in COMMON_OPTIONS:
                used = spec.accepted is None or opt in spec.accepted
                extra += "  (common)" if used else "  (common, not used)"
            lines.append(f"    {opt} = {shown}{extra}")
    return "\n".join(lines)
