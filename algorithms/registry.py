"""The advantage-estimator registry (modelled on verl's ``register_adv_est``).

An advantage estimator is a pure, vectorized function of a :class:`~g2po_bench.core.batch.StepBatch`
that returns one scalar advantage per step row (docs/design-notes.md "Data flow"). Its
registration
carries everything the rest of the suite needs, so adding an estimator is one new file
(``docs/extending.md``):

- its options, their defaults, choices and checks (config validation, ``g2po algorithms``);
- its display ``label`` and which options make a table *variant* (``g2po report``,
  :mod:`g2po_bench.analysis.naming`);
- its state-key rule (``env.state_key=auto``);
- the extra per-row **inputs** it needs beyond the StepBatch, named from the fixed vocabulary
  :data:`INPUTS` (critic ``values``, sampler ``entropies``, ``state_texts``, ``action_texts``,
  ``next_state_key``);
  both trainers and every other tool build them with :func:`rollout_inputs`, with no
  estimator-specific code, and a trainer trains a critic when ``values`` is declared;
- optionally a slow per-row ``oracle`` (tests and ``g2po bench advantages``).

Discovery
---------
Nothing lists the estimators. On first use the registry imports every module of the
subpackage :mod:`g2po_bench.algorithms.estimators` (``pkgutil``; one module per estimator),
then every entry point of the group ``g2po.estimators`` (``importlib.metadata``; how an
installed package adds estimators), and a run config can name one more module with
``algorithm.module=pkg.module`` (:func:`import_estimator_module`, called before validation).
Importing a module is what registers its estimators.

Public API
----------
- :func:`register_estimator` -- decorator that registers ``fn(batch, **options, **inputs)``.
- :func:`available_estimators`, :func:`estimator_spec`, :func:`estimator_options`.
- :func:`estimator_inputs` -- the inputs an estimator needs with given options.
- :func:`rollout_inputs` -- the inputs dict from a RolloutBatch (+ critic values).
- :func:`check_options` -- validate an options dict (unknown name, wrong type, bad choice).
- :func:`estimate` -- run an estimator; returns :class:`AdvantageResult`.
- :func:`oracle_estimate` -- run its per-row oracle (where one is registered).
- :func:`trial_estimate` -- run it once on a small synthetic batch (the config load's check).
- :func:`compute_advantages` -- ``estimate(...).advantages``.
- :func:`describe_estimators` -- a text listing (what ``g2po algorithms`` prints).

Common options
--------------
Every estimator accepts the five options the trainer always passes (the reference values are the
defaults: verl-agent's ``examples/gigpo_trainer/run_alfworld.sh`` and the papers' success reward of
10; docs/design-notes.md "Training-loop facts"): ``mode`` ("mean_std_norm" | "mean_norm"),
``gamma`` (0.95), ``step_weight`` (1.0; G2PO's w, GiGPO's omega), ``invalid_penalty`` (0.1) and
``success_reward`` (10.0). An estimator that does not use one of them simply ignores it (its
function is called only with the options its signature names). Any other option name must be
declared by the estimator, else :func:`check_options` raises.

A minimal estimator (a module of ``algorithms/estimators/``, or of any package)::

    import numpy as np
    from g2po_bench.algorithms.registry import AdvantageResult, register_estimator

    @register_estimator(
        "reinforce",                              # the name used in configs: algorithm.name
        options={"baseline": 0.0},                # extra options and their defaults
        label="REINFORCE",                        # the row name in g2po report
        description="A = R_tau - baseline, broadcast to every step",
    )
    def reinforce(batch, *, baseline, invalid_penalty):
        # common options (mode, gamma, ...) are passed only if the signature names them
        _, tid = np.unique(batch.traj_id, return_inverse=True)
        episode_return = np.bincount(tid, weights=batch.reward)[tid]
        adv = episode_return - baseline - invalid_penalty * (~batch.action_valid)
        return AdvantageResult(advantages=adv.astype(np.float64))

Option values are type-checked against the defaults (a float option accepts ints, a bool
option only bools, a str option only strs; ``types={"name": (int, str)}`` overrides that; an
option whose default is None accepts anything and is checked by the estimator). Pass
``choices={"name": (...)}`` for a closed set of values and ``validators={"name": fn}``
(``fn(value) -> str | None``, the string being the error) for ranges, and ``check=fn``
(``fn(all_options: dict) -> str | None``) for rules that involve several options.
"""

from __future__ import annotations

import importlib
import inspect
import math
import numbers
import pkgutil
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import numpy as np

from g2po_bench.algorithms.synthetic import random_step_batch, synthetic_inputs
from g2po_bench.core.batch import StepBatch

__all__ = [
    "AdvantageResult",
    "EstimatorSpec",
    "EstimatorInput",
    "COMMON_OPTIONS",
    "INPUTS",
    "ENTRY_POINT_GROUP",
    "ESTIMATOR_PACKAGE",
    "register_estimator",
    "discover_estimators",
    "import_estimator_module",
    "available_estimators",
    "estimator_options",
    "estimator_spec",
    "estimator_inputs",
    "rollout_inputs",
    "check_options",
    "check_inputs",
    "estimate",
    "oracle_estimate",
    "trial_estimate",
    "compute_advantages",
    "describe_estimators",
    "in_range",
]

ENTRY_POINT_GROUP = "g2po.estimators"
"""The entry-point group an installed package registers its estimator modules under."""

ESTIMATOR_PACKAGE = "g2po_bench.algorithms.estimators"
"""The subpackage whose every module is imported on first use (the built-in estimators)."""


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


_REGISTRY: dict[str, EstimatorSpec] = {}
_DISCOVERED = False
_LOAD_ERRORS: dict[str, str] = {}  # entry point or module -> why it failed to load


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
    defaults = dict(COMMON_OPTIONS)
    defaults.update(options or {})
    all_choices = dict(_COMMON_CHOICES)
    all_choices.update(choices or {})
    all_validators = dict(_COMMON_VALIDATORS)
    all_validators.update(validators or {})
    for env, env_opts in (env_defaults or {}).items():
        unknown = sorted(set(env_opts) - set(defaults))
        if unknown:
            raise ValueError(f"estimator {name!r}: env_defaults[{env!r}] names unknown options {unknown}")

    def decorator(fn: Callable[..., AdvantageResult]) -> Callable[..., AdvantageResult]:
        old = _REGISTRY.get(name)
        if old is not None and not _same_function(old.fn, fn):
            raise ValueError(f"estimator {name!r} is already registered (by {old.module or 'another module'})")
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
            if not callable(inputs):
                missing = sorted(set(inputs) - accepted)
                if missing:
                    raise TypeError(f"estimator {name!r} declares inputs its function lacks: {missing}")
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


def _same_function(a: Callable, b: Callable) -> bool:
    # a module imported twice (e.g. once by discovery, once by a path-based import) defines a
    # new function object with the same qualified name: the same estimator, not a clash
    def where(f: Callable) -> tuple:
        code = getattr(f, "__code__", None)
        return (getattr(f, "__module__", None), getattr(f, "__qualname__", None),
                getattr(code, "co_filename", None), getattr(code, "co_firstlineno", None))

    return a is b or where(a) == where(b)


# ---------------------------------------------------------------------------- discovery
def discover_estimators(force: bool = False) -> list[str]:
    """Import every estimator module: the modules of :data:`ESTIMATOR_PACKAGE` and the entry
    points of :data:`ENTRY_POINT_GROUP`. Runs once (on the first registry query) unless
    ``force``; a module already imported is not imported again.

    An entry point that fails to load is reported with a warning (and in
    :func:`describe_estimators`), not raised: a broken third-party package must not stop the
    suite. A built-in module that fails to import raises.

    Returns:
        The names of the modules and entry points visited.
    """
    global _DISCOVERED
    if _DISCOVERED and not force:
        return []
    _DISCOVERED = True
    visited = []
    package = importlib.import_module(ESTIMATOR_PACKAGE)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = f"{ESTIMATOR_PACKAGE}.{info.name}"
        importlib.import_module(module)
        visited.append(module)
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        label = f"entry point {ep.name} = {ep.value}"
        try:
            ep.load()
        except Exception as exc:  # a third-party package: report, carry on
            _LOAD_ERRORS[label] = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"g2po estimator {label} failed to load ({type(exc).__name__}: {exc}); "
                          "its estimators are not available", RuntimeWarning, stacklevel=2)
            continue
        _LOAD_ERRORS.pop(label, None)
        visited.append(label)
    return visited


def import_estimator_module(module: str) -> None:
    """Import ``module`` (e.g. ``"mypkg.my_estimator"``) so that its estimators register: what
    ``algorithm.module`` does before the config is validated.

    Raises:
        ValueError: the module cannot be imported (the message names it and the reason).
    """
    discover_estimators()
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
            raise ValueError(
                f"cannot import estimator module {module!r} ({exc}); it must be importable from this "
                "Python (installed, or its folder on PYTHONPATH)") from None
        raise ValueError(f"estimator module {module!r} was found but failed to import: "
                         f"{_where(exc)}{type(exc).__name__}: {exc}") from None
    except Exception as exc:
        raise ValueError(f"estimator module {module!r} was found but failed to import: "
                         f"{_where(exc)}{type(exc).__name__}: {exc}") from None


def _where(exc: BaseException) -> str:
    """``file:line: `` of the innermost frame of ``exc`` outside importlib ("" without one)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "importlib" not in f.filename]
    return f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else ""


def available_estimators() -> list[str]:
    """Sorted names of the registered estimators (built-ins: crbc, empg, g2po, gigpo, graphgpo,
    grpo, hgpo, ppo, rloo; plus those of installed packages)."""
    discover_estimators()
    return sorted(_REGISTRY)


def estimator_spec(name: str) -> EstimatorSpec:
    """The :class:`EstimatorSpec` of ``name``. Raises ValueError for an unknown name."""
    discover_estimators()
    try:
        return _REGISTRY[name]
    except KeyError:
        failed = "".join(f"; {label} failed to load ({err})" for label, err in sorted(_LOAD_ERRORS.items()))
        raise ValueError(
            f"unknown advantage estimator {name!r}; registered estimators: "
            f"{', '.join(sorted(_REGISTRY))}{failed}"
        ) from None


def estimator_options(name: str, env: str | None = None) -> dict[str, Any]:
    """Default values of every option ``name`` accepts (common options included), with the
    defaults of environment ``env`` where the estimator declares some (``env_defaults``).

    Raises:
        ValueError: unknown estimator.
    """
    spec = estimator_spec(name)
    out = dict(spec.defaults)
    if env is not None:
        out.update(spec.env_defaults.get(env, {}))
    return out


def estimator_inputs(name: str, options: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """The input names (:data:`INPUTS`) estimator ``name`` needs with ``options`` (merged over
    its defaults), in vocabulary order.

    Raises:
        ValueError: unknown estimator, or the estimator named an input outside the vocabulary.
    """
    spec = estimator_spec(name)
    names = spec.inputs
    if callable(names):
        merged = dict(spec.defaults)
        merged.update(options or {})
        names = tuple(names(merged))
    unknown = sorted(set(names) - set(INPUTS))
    if unknown:
        raise ValueError(f"estimator {name!r} needs unknown inputs {unknown}; the vocabulary: {sorted(INPUTS)}")
    return tuple(k for k in INPUTS if k in set(names))


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


# ---------------------------------------------------------------------------- options
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


def check_options(name: str, options: Mapping[str, Any]) -> None:
    """Validate options for estimator ``name`` before any work starts.

    Args:
        name: a registered estimator.
        options: option name -> value (a subset of :func:`estimator_options`).

    Raises:
        ValueError: unknown estimator; an unknown option (the message lists the known ones);
            an input passed as an option; a value of the wrong type, outside its choices (e.g.
            ``mode`` not in {mean_std_norm, mean_norm}) or outside its range.
    """
    spec = estimator_spec(name)
    known = sorted(spec.defaults)
    for opt, value in options.items():
        if opt not in spec.defaults:
            if opt in INPUTS:
                raise ValueError(f"{opt!r} is an input of the vocabulary, not an option of estimator "
                                 f"{name!r}: pass it with inputs={{{opt!r}: ...}}")
            raise ValueError(
                f"unknown option {opt!r} for estimator {name!r}; known options: {', '.join(known)}"
            )
        err = _type_error(name, opt, spec.defaults[opt], value, spec.types.get(opt))
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
    check_options(spec.name, options)
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
                         f"{_where(exc)}{type(exc).__name__}: {exc}") from None


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


def describe_estimators() -> str:
    """A readable listing of every registered estimator: its label, description, state-key rule,
    inputs, the module that registered it, and its options with defaults and allowed values (what
    ``g2po algorithms`` prints)."""
    lines: list[str] = []
    for name in available_estimators():
        spec = _REGISTRY[name]
        label = spec.label if isinstance(spec.label, str) else spec.display_label()
        lines.append(f"{name}: {spec.description}")
        extra = [f"label {label!r}", f"state key {spec.state_key}", f"module {spec.module}"]
        if not callable(spec.inputs):
            if spec.inputs:
                extra.append("inputs: " + ", ".join(spec.inputs))
        else:
            extra.append("inputs depend on the options (default: "
                         + (", ".join(estimator_inputs(name)) or "none") + ")")
        lines.append("    (" + "; ".join(extra) + ")")
        for opt in sorted(spec.defaults):
            default = spec.defaults[opt]
            shown = "None (supplied at run time)" if default is None else repr(default)
            extra_s = ""
            if opt in spec.choices:
                extra_s = f"  [{' | '.join(map(str, spec.choices[opt]))}]"
            if opt in COMMON_OPTIONS:
                used = spec.accepted is None or opt in spec.accepted
                extra_s += "  (common)" if used else "  (common, not used)"
            for env, env_opts in sorted(spec.env_defaults.items()):
                if opt in env_opts:
                    extra_s += f"  ({env}: {env_opts[opt]!r})"
            lines.append(f"    {opt} = {shown}{extra_s}")
    for label, why in sorted(_LOAD_ERRORS.items()):
        lines.append(f"not loaded: {label} ({why})")
    return "\n".join(lines)
