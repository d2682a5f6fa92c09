"""What an advantage estimator is, and the checks of its options: the registration.

- :class:`AdvantageResult`: what every estimator returns.
- :data:`COMMON_OPTIONS`: the five options every estimator accepts; :func:`in_range`: a validator.
- :data:`INPUTS`: the fixed vocabulary of per-row inputs beyond the StepBatch (:class:`EstimatorInput`).
- :class:`EstimatorSpec`: a registered estimator, with the checks of its options
  (:meth:`EstimatorSpec.check_options`) and the inputs it needs (:meth:`EstimatorSpec.input_names`).
- :func:`register_estimator`: the decorator that fills the table of registered estimators.

Nothing here looks an estimator up by name or imports estimator modules (that is
:mod:`~g2po_bench.algorithms.registry.discovery`) or runs one (that is
:mod:`~g2po_bench.algorithms.registry.estimation`). numpy only.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "AdvantageResult",
    "EstimatorSpec",
    "EstimatorInput",
    "COMMON_OPTIONS",
    "INPUTS",
    "register_estimator",
    "in_range",
]


@dataclass
class AdvantageResult:
    """What an estimator returns.

    - ``advantages``: (B,) float64, one scalar advantage per step row, in the batch's row order
      (it is given to every response token of the step, as
      verl-agent's ``gigpo/core_gigpo.py`` tiles it; docs/design-notes.md "The StepBatch").
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
"""The options every estimator accepts, with the reference defaults (verl-agent's
``examples/gigpo_trainer/run_alfworld.sh``; docs/design-notes.md "Training-loop facts")."""

_COMMON_CHOICES: dict[str, tuple] = {"mode": ("mean_std_norm", "mean_norm")}
_COMMON_VALIDATORS: dict[str, Callable[[Any], str | None]] = {
    "gamma": in_range(0.0, 1.0),
    "invalid_penalty": in_range(0.0),
}


# ---------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class EstimatorInput:
    """One entry of the input vocabulary: a per-row quantity beyond the StepBatch's fields.

    Attributes:
        name: the input's name (the keyword the estimator function receives).
        kind: ``"float"`` ((B,) float64, finite), ``"text"`` ((B,) str) or ``"key"`` ((B,)
            int64 hashed state keys, :func:`g2po_bench.core.batch.hash_state_key`).
        description: what it is, with its units.
        source: who supplies it in training (for error messages and ``g2po algorithms``).
        rollout_attribute: the :class:`~g2po_bench.benchmarks.rollout.RolloutBatch` attribute
            that holds it, or None (``values``: the trainer's critic supplies it).
        step_table_column: the step-table column (:mod:`g2po_bench.core.steptable`) a run
            records it in, or None when it is not recorded.
        nonnegative: a float input must be >= 0.
    """

    name: str
    kind: str
    description: str
    source: str
    rollout_attribute: str | None
    step_table_column: str | None
    nonnegative: bool = False


INPUTS: dict[str, EstimatorInput] = {
    "values": EstimatorInput(
        "values", "float",
        "critic values V(s_t) of the step rows, (B,) float64, in return units",
        "the trainer's critic (trained automatically for an estimator that declares this input)",
        None, "critic_value"),
    "entropies": EstimatorInput(
        "entropies", "float",
        "mean token entropy (nats) of the step's response under the sampling policy, (B,) float64",
        "the local sampler (backend=local; LocalPolicy records it while sampling)",
        "entropies", "entropy", nonnegative=True),
    "state_texts": EstimatorInput(
        "state_texts", "text", "the state-key text of each step row (before hashing), (B,) str",
        "the rollout engine (RolloutBatch.state_texts)", "state_texts", None),
    "action_texts": EstimatorInput(
        "action_texts", "text",
        "the executed action text of each step row (the parser's choice, or its fallback text "
        "for an invalid output), (B,) str",
        "the rollout engine (RolloutBatch.actions)", "actions", "action"),
    "next_state_key": EstimatorInput(
        "next_state_key", "key",
        "the hashed state key (same rule as state_key) of the observation each step led to, (B,) int64: "
        "the next row's state_key inside a trajectory, and after the last step the observation the "
        "episode ended on (a failed or truncated episode's real last state)",
        "the rollout engine (RolloutBatch.next_state_keys)", "next_state_keys", "next_state_key"),
}
"""The fixed input vocabulary. An estimator declares the names it needs (``inputs=``); trainers
and tools supply them by these definitions alone (:func:`rollout_inputs`)."""


# ---------------------------------------------------------------------------- specs
@dataclass(frozen=True)
class EstimatorSpec:
    """A registered estimator: its function and everything the suite needs to know about it.

    Attributes:
        name: ``algorithm.name``.
        fn: ``fn(batch, **options, **inputs) -> AdvantageResult``.
        defaults: option -> default (common options included).
        choices, validators, types, check: option checks (see :func:`register_estimator`).
        description: one line for ``g2po algorithms``.
        accepted: option and input names ``fn`` takes (None: it takes ``**kwargs``).
        state_key: "reference" or "raw" (``env.state_key=auto`` resolves to it).
        label: the table row name, a str or ``fn(options) -> str`` (options: the run's common
            and own options merged over the defaults).
        variant_options: the common options that make a table variant when they differ from
            their reference value (``mode``: the environment's reference mode; the others: the
            default); every explicitly set own option always makes one.
        inputs: input names (from :data:`INPUTS`), or ``fn(options) -> tuple`` when they depend
            on the options.
        oracle: a slow per-row reference implementation with the same signature as ``fn``,
            returning advantages (B,) or ``(advantages, returns)``; or None.
        env_defaults: environment name -> {option: default} for options whose published default
            depends on the environment (applied where the option is not set explicitly).
        zero_on_uniform_group: a task group whose rollouts are all equal gets advantage 0
            (group-relative estimators); False for estimators with a batch-level or critic
            baseline (the contract tests check it where True).
        module: the module that registered it.
    """

    name: str
    fn: Callable[..., AdvantageResult]
    defaults: dict[str, Any]
    choices: dict[str, tuple]
    validators: dict[str, Callable[[Any], str | None]]
    check: Callable[[dict[str, Any]], str | None] | None
    description: str
    accepted: frozenset[str] | None  # option and input names the function takes (None: **kwargs)
    # the estimator's reference state-key rule (docs/design-notes.md "State keys"): "reference"
    # (the environment's reference key, G2PO's) or "raw" (the raw observation, GiGPO's); the run
    # config's env.state_key=auto resolves to it
    state_key: str = "reference"
    label: str | Callable[[Mapping[str, Any]], str] = ""
    variant_options: tuple[str, ...] = ()
    inputs: tuple[str, ...] | Callable[[Mapping[str, Any]], Sequence[str]] = ()
    oracle: Callable[..., Any] | None = None
    env_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)
    types: dict[str, tuple[type, ...]] = field(default_factory=dict)
    zero_on_uniform_group: bool = True
    module: str = ""

    def display_label(self, options: Mapping[str, Any] | None = None) -> str:
        """The row name for a run with these options (merged over the defaults)."""
        if callable(self.label):
            merged = dict(self.defaults)
            merged.update(options or {})
            return str(self.label(merged))
        return self.label or self.name

    def defaults_for(self, env: str | None = None) -> dict[str, Any]:
        """Default values of every option (common options included), with those of environment
        ``env`` where the estimator declares some (``env_defaults``)."""
        out = dict(self.defaults)
        if env is not None:
            out.update(self.env_defaults.get(env, {}))
        return out

    def input_names(self, options: Mapping[str, Any] | None = None) -> tuple[str, ...]:
        """The input names (:data:`INPUTS`) it needs with ``options`` (merged over its defaults),
        in vocabulary order.

        Raises:
            ValueError: the estimator named an input outside the vocabulary.
        """
        names = self.inputs
        if callable(names):
            merged = dict(self.defaults)
            merged.update(options or {})
            names = tuple(names(merged))
        unknown = sorted(set(names) - set(INPUTS))
        if unknown:
            raise ValueError(f"estimator {self.name!r} needs unknown inputs {unknown}; the vocabulary: "
                             f"{sorted(INPUTS)}")
        return tuple(k for k in INPUTS if k in set(names))

    def check_options(self, options: Mapping[str, Any]) -> None:
        """Validate ``options`` (option name -> value, a subset of :attr:`defaults`) before any
        work starts: each given value, then the rule across options (``check``) on the defaults
        updated by ``options``.

        Raises:
            ValueError: an unknown option (the message lists the known ones); an input passed as
                an option; a value of the wrong type, outside its choices (e.g. ``mode`` not in
                {mean_std_norm, mean_norm}) or outside its range; the rule across options fails.
        """
        name = self.name
        known = sorted(self.defaults)
        for opt, value in options.items():
            if opt not in self.defaults:
                if opt in INPUTS:
                    raise ValueError(f"{opt!r} is an input of the vocabulary, not an option of estimator "
                                     f"{name!r}: pass it with inputs={{{opt!r}: ...}}")
                raise ValueError(
                    f"unknown option {opt!r} for estimator {name!r}; known options: {', '.join(known)}"
                )
            err = _type_error(name, opt, self.defaults[opt], value, self.types.get(opt))
            if err:
                raise ValueError(err)
            if value is None:
                continue
            allowed = self.choices.get(opt)
            if allowed is not None and value not in allowed:
                raise ValueError(
                    f"option {opt!r} of estimator {name!r} must be one of "
                    f"{', '.join(map(str, allowed))}; got {value!r}"
                )
            validator = self.validators.get(opt)
            if validator is not None:
                msg = validator(value)
                if msg:
                    raise ValueError(f"option {opt!r} of estimator {name!r} {msg}; got {value!r}")
        if self.check is not None:
            merged = dict(self.defaults)
            merged.update(options)
            msg = self.check(merged)
            if msg:
                raise ValueError(f"estimator {name!r}: {msg}")


_REGISTRY: dict[str, EstimatorSpec] = {}
"""name -> spec of every registered estimator (filled by :func:`register_estimator`; read through
:mod:`~g2po_bench.algorithms.registry.discovery`, which imports the estimator modules first)."""


def register_estimator(
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    description: str = "",
    label: str | Callable[[Mapping[str, Any]], str] | None = None,
    variant_options: Sequence[str] | None = None,
    inputs: Sequence[str] | Callable[[Mapping[str, Any]], Sequence[str]] = (),
    oracle: Callable[..., Any] | None = None,
    env_defaults: Mapping[str, Mapping[str, Any]] | None = None,
    zero_on_uniform_group: bool = True,
    choices: Mapping[str, tuple] | None = None,
    validators: Mapping[str, Callable[[Any], str | None]] | None = None,
    types: Mapping[str, tuple[type, ...]] | None = None,
    check: Callable[[dict[str, Any]], str | None] | None = None,
    state_key: str = "reference",
) -> Callable[[Callable[..., AdvantageResult]], Callable[..., AdvantageResult]]:
    """Decorator registering ``fn(batch: StepBatch, **options, **inputs) -> AdvantageResult``.

    Args:
        name: the estimator name (``algorithm.name`` in the run config).
        options: the estimator's own options and their defaults; it may also override the
            default of a common option (see :data:`COMMON_OPTIONS`). Names of the input
            vocabulary (:data:`INPUTS`) are not options.
        description: one line shown by ``g2po algorithms``.
        label: the row name in tables (default: ``name``); a str, or ``fn(options) -> str``
            for a name that depends on an option (GiGPO's "w/ std" and "w/o std").
        variant_options: the common options that make a table variant when they differ from
            their reference value (default: every common option ``fn`` takes). Leave out an
            option the label already carries.
        inputs: the per-row inputs ``fn`` needs, names from :data:`INPUTS`, or
            ``fn(options) -> names`` when they depend on the options. ``fn`` receives each as
            a keyword argument of that name, validated ((B,) float64 or (B,) str).
        oracle: optional slow per-row reference implementation (same signature as ``fn``;
            returns advantages (B,) or ``(advantages, returns)``).
        env_defaults: environment name -> {option: default}: published defaults that depend on
            the environment (e.g. GraphGPO's gamma on WebShop).
        zero_on_uniform_group: False when a task group of identical rollouts does not get
            advantage 0 (critic or batch-level baselines).
        choices: allowed values of options.
        validators: ``option -> fn(value) -> error message or None``.
        types: ``option -> allowed types`` instead of the type of the default.
        check: ``fn(all_options) -> error message or None``, for rules across options
            (called with the defaults updated by the given options).
        state_key: the state-key rule the estimator's reference code groups by,
            ``"reference"`` (default) or ``"raw"``; ``env.state_key=auto`` uses it.

    Returns:
        The decorator; it returns ``fn`` unchanged.

    Raises:
        ValueError: ``name`` is already registered by another function, a default violates
            its own choices, ``state_key`` is neither "reference" nor "raw", an option is named
            like an input, an input or variant option is unknown.
        TypeError: ``fn`` does not take the batch as first positional parameter, or lacks a
            declared option or input.
    """
    _check_declaration(name, options, inputs, variant_options, env_defaults, state_key)
    # the common options' defaults, choices and validators, under the estimator's own
    defaults = {**COMMON_OPTIONS, **(options or {})}
    all_choices = {**_COMMON_CHOICES, **(choices or {})}
    all_validators = {**_COMMON_VALIDATORS, **(validators or {})}

    def decorator(fn: Callable[..., AdvantageResult]) -> Callable[..., AdvantageResult]:
        old = _REGISTRY.get(name)
        if old is not None and not _same_function(old.fn, fn):
            raise ValueError(f"estimator {name!r} is already registered (by {old.module or 'another module'})")
        accepted = _accepted_names(name, fn, options, inputs)
        for opt, allowed in all_choices.items():
            if opt in defaults and defaults[opt] is not None and defaults[opt] not in allowed:
                raise ValueError(f"estimator {name!r}: default of {opt!r} not in {allowed}")
        if variant_options is None:
            variants = tuple(o for o in COMMON_OPTIONS if accepted is None or o in accepted)
        else:
            variants = tuple(variant_options)
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
            label=label if label is not None else name,
            variant_options=variants,
            inputs=inputs if callable(inputs) else tuple(inputs),
            oracle=oracle,
            env_defaults={e: dict(o) for e, o in (env_defaults or {}).items()},
            types={k: tuple(v) for k, v in (types or {}).items()},
            zero_on_uniform_group=zero_on_uniform_group,
            module=getattr(fn, "__module__", "") or "",
        )
        return fn

    return decorator


def _check_declaration(name: str, options: Mapping[str, Any] | None, inputs: Any,
                       variant_options: Sequence[str] | None,
                       env_defaults: Mapping[str, Mapping[str, Any]] | None, state_key: str) -> None:
    """The checks of :func:`register_estimator` that need no function (raises ValueError)."""
    if state_key not in ("reference", "raw"):
        raise ValueError(f"estimator {name!r}: state_key must be 'reference' or 'raw', got {state_key!r}")
    clash = sorted(set(options or {}) & set(INPUTS))
    if clash:
        raise ValueError(f"estimator {name!r}: {clash} are inputs, not options; declare them with inputs=")
    if not callable(inputs):
        unknown = sorted(set(inputs) - set(INPUTS))
        if unknown:
            raise ValueError(f"estimator {name!r}: unknown inputs {unknown}; the vocabulary: {sorted(INPUTS)}")
    if variant_options is not None:
        unknown = sorted(set(variant_options) - set(COMMON_OPTIONS))
        if unknown:
            raise ValueError(f"estimator {name!r}: variant_options must be common options, got {unknown} "
                             "(own options set explicitly always make a variant)")
    known = set(COMMON_OPTIONS) | set(options or {})
    for env, env_opts in (env_defaults or {}).items():
        unknown = sorted(set(env_opts) - known)
        if unknown:
            raise ValueError(f"estimator {name!r}: env_defaults[{env!r}] names unknown options {unknown}")


def _accepted_names(name: str, fn: Callable, options: Mapping[str, Any] | None, inputs: Any) -> frozenset[str] | None:
    """The option and input names ``fn`` takes after the batch (None: it takes ``**kwargs``).

    Raises:
        TypeError: ``fn`` does not take the batch as first positional parameter, or lacks a
            declared option or input.
    """
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise TypeError(f"estimator {name!r}: fn must take the StepBatch as first argument")
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    accepted = frozenset(p.name for p in params[1:])
    missing = sorted(set(options or {}) - accepted)
    if missing:
        raise TypeError(f"estimator {name!r} declares options its function lacks: {missing}")
    if not callable(inputs):
        missing = sorted(set(inputs) - accepted)
        if missing:
            raise TypeError(f"estimator {name!r} declares inputs its function lacks: {missing}")
    return accepted


def _same_function(a: Callable, b: Callable) -> bool:
    # a module imported twice (e.g. once by discovery, once by a path-based import) defines a
    # new function object with the same qualified name: the same estimator, not a clash
    def where(f: Callable) -> tuple:
        code = getattr(f, "__code__", None)
        return (getattr(f, "__module__", None), getattr(f, "__qualname__", None),
                getattr(code, "co_filename", None), getattr(code, "co_firstlineno", None))

    return a is b or where(a) == where(b)


def _type_error(name: str, opt: str, default: Any, value: Any,
                types: tuple[type, ...] | None = None) -> str | None:
    if types is not None:
        if isinstance(value, (bool, np.bool_)) and bool not in types:
            return f"option {opt!r} of estimator {name!r} must be one of the types " \
                   f"{', '.join(t.__name__ for t in types)}, got {value!r}"
        if not isinstance(value, types):
            return f"option {opt!r} of estimator {name!r} must be one of the types " \
                   f"{', '.join(t.__name__ for t in types)}, got {value!r}"
        return None
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
        if isinstance(default, numbers.Integral) and not isinstance(value, numbers.Integral):
            return (f"option {opt!r} of estimator {name!r} must be a whole number (its default is "
                    f"{default!r}), got {value!r}")
        return None
    if isinstance(default, str) and not isinstance(value, str):
        return f"option {opt!r} of estimator {name!r} must be a string, got {value!r}"
    return None
