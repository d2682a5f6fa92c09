"""Finding the estimators: discovery, and every look-up by name.

Nothing lists the estimators. On first use the registry imports every module of the
subpackage :mod:`g2po_bench.algorithms.estimators` (``pkgutil``; one module per estimator),
then every entry point of the group ``g2po.estimators`` (``importlib.metadata``; how an
installed package adds estimators), and a run config can name one more module with
``algorithm.module=pkg.module`` (:func:`import_estimator_module`, called before validation).
Importing a module is what registers its estimators (:func:`~g2po_bench.algorithms.registry.spec.register_estimator`).

Every function here that takes an estimator's name discovers first: :func:`available_estimators`,
:func:`estimator_spec`, :func:`estimator_defaults`, :func:`estimator_inputs`,
:func:`check_options` and :func:`describe_estimators`.
"""

from __future__ import annotations

import importlib
import pkgutil
import traceback
import warnings
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from g2po_bench.algorithms.registry.spec import _REGISTRY, COMMON_OPTIONS, EstimatorSpec

__all__ = [
    "ENTRY_POINT_GROUP",
    "ESTIMATOR_PACKAGE",
    "discover_estimators",
    "import_estimator_module",
    "error_location",
    "available_estimators",
    "estimator_spec",
    "estimator_defaults",
    "estimator_inputs",
    "check_options",
    "describe_estimators",
]

ENTRY_POINT_GROUP = "g2po.estimators"
"""The entry-point group an installed package registers its estimator modules under."""

ESTIMATOR_PACKAGE = "g2po_bench.algorithms.estimators"
"""The subpackage whose every module is imported on first use (the built-in estimators)."""

_DISCOVERED = False
_LOAD_ERRORS: dict[str, str] = {}  # entry point or module -> why it failed to load


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
                         f"{error_location(exc)}{type(exc).__name__}: {exc}") from None
    except Exception as exc:
        raise ValueError(f"estimator module {module!r} was found but failed to import: "
                         f"{error_location(exc)}{type(exc).__name__}: {exc}") from None


def error_location(exc: BaseException) -> str:
    """``file:line: `` of the innermost frame of ``exc`` outside importlib ("" without one): where
    an estimator's own code failed, for one-line errors."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "importlib" not in f.filename]
    return f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else ""


def available_estimators() -> list[str]:
    """Sorted names of the registered estimators (built-ins: crbc, empg, g2po, gigpo, graphgpo,
    grpo, hgpo, ppo, rloo; plus those of installed packages)."""
    discover_estimators()
    return sorted(_REGISTRY)


def estimator_spec(name: str) -> EstimatorSpec:
    """The :class:`~g2po_bench.algorithms.registry.spec.EstimatorSpec` of ``name``.

    Raises:
        ValueError: unknown name (the message lists the registered estimators and any entry
            point that failed to load).
    """
    discover_estimators()
    try:
        return _REGISTRY[name]
    except KeyError:
        failed = "".join(f"; {label} failed to load ({err})" for label, err in sorted(_LOAD_ERRORS.items()))
        raise ValueError(
            f"unknown advantage estimator {name!r}; registered estimators: "
            f"{', '.join(sorted(_REGISTRY))}{failed}"
        ) from None


def estimator_defaults(name: str, env: str | None = None) -> dict[str, Any]:
    """Default values of every option ``name`` accepts (common options included), with the
    defaults of environment ``env`` where the estimator declares some (``env_defaults``).

    Raises:
        ValueError: unknown estimator.
    """
    return estimator_spec(name).defaults_for(env)


def estimator_inputs(name: str, options: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """The input names (:data:`~g2po_bench.algorithms.registry.spec.INPUTS`) estimator ``name``
    needs with ``options`` (merged over its defaults), in vocabulary order.

    Raises:
        ValueError: unknown estimator, or the estimator named an input outside the vocabulary.
    """
    return estimator_spec(name).input_names(options)


def check_options(name: str, options: Mapping[str, Any]) -> None:
    """Validate options for estimator ``name`` before any work starts
    (:meth:`~g2po_bench.algorithms.registry.spec.EstimatorSpec.check_options`).

    Args:
        name: a registered estimator.
        options: option name -> value (a subset of :func:`estimator_defaults`).

    Raises:
        ValueError: unknown estimator; an unknown option (the message lists the known ones);
            an input passed as an option; a value of the wrong type, outside its choices (e.g.
            ``mode`` not in {mean_std_norm, mean_norm}) or outside its range.
    """
    estimator_spec(name).check_options(options)


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
