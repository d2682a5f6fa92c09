"""The benchmark registry: every benchmark the suite knows, found, never listed.

A benchmark is a subpackage of ``g2po_bench.benchmarks`` that exports ``BENCHMARK`` (an instance
of :class:`~g2po_bench.benchmarks.base.Benchmark`), or an object another installed package
publishes under the entry point group ``g2po.benchmarks`` (``name = "pkg.module:BENCHMARK"``).
Its presets are the ``presets/*.yaml`` files of its package folder. The CLI (``g2po data``,
``g2po bench``, ``--preset``), the config checks and the prompting baselines read this registry
only: adding a benchmark is one new subpackage plus its presets.

Discovery runs once per process, on the first query. A built-in subpackage that fails to import
raises (it is the suite's own code). An entry point that fails to load (its package does not
import, ``BENCHMARK`` is not a :class:`~g2po_bench.benchmarks.base.Benchmark`, or its name is
taken) is left out with a :class:`BenchmarkLoadWarning` that names it and its error, and recorded
(:func:`benchmark_load_errors`): ``g2po config --presets`` lists it as "not loaded", and the
"unknown environment" and "unknown preset" errors name it; a broken third-party package must not
stop the suite, and every later query gives the same answer.
"""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from importlib import metadata
from pathlib import Path

from g2po_bench.benchmarks.base import Benchmark

__all__ = ["get_benchmark", "benchmark_names", "all_benchmarks", "register_benchmark", "preset_files",
           "preset_file", "benchmark_load_errors", "BenchmarkLoadWarning", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "g2po.benchmarks"
"""Entry point group through which an installed package adds a benchmark."""


class BenchmarkLoadWarning(RuntimeWarning):
    """An entry point of :data:`ENTRY_POINT_GROUP` failed to load; its benchmark is left out
    (the ``g2po`` command prints it as one ``warning: ...`` line)."""


_FOUND: dict[str, tuple[Benchmark, Path | None]] = {}
_DISCOVERED = False
_LOAD_ERRORS: dict[str, str] = {}  # "entry point NAME = VALUE" -> why it was not loaded


def _subpackages() -> list[str]:
    """Module names of the subpackages of ``g2po_bench.benchmarks`` (sorted)."""
    pkg = importlib.import_module("g2po_bench.benchmarks")
    return sorted(f"{pkg.__name__}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__) if m.ispkg)


def _add(bench: object, origin: str, folder: Path | None) -> None:
    if not isinstance(bench, Benchmark):
        raise TypeError(f"{origin}: BENCHMARK must be an instance of g2po_bench.benchmarks.base.Benchmark, "
                        f"got {type(bench).__name__}")
    if bench.name in _FOUND and _FOUND[bench.name][0] is not bench:
        raise ValueError(f"benchmark {bench.name!r} of {origin} is already registered by another package")
    _FOUND[bench.name] = (bench, folder)


def _load_entry_point(ep: metadata.EntryPoint) -> None:
    """Load one entry point of :data:`ENTRY_POINT_GROUP` and register its benchmark; a failure
    is recorded in ``_LOAD_ERRORS`` and warned about, never raised."""
    label = f"entry point {ep.name} = {ep.value}"
    try:
        bench = ep.load()
        module = importlib.import_module(ep.module)
        _add(bench, f"entry point {ep.name!r} ({ep.value})", Path(module.__file__).parent)
    except Exception as exc:  # a third-party package: report, carry on
        why = f"{type(exc).__name__}: {exc}"
        _LOAD_ERRORS[label] = why
        warnings.warn(f"g2po benchmark {label} failed to load ({why}); its benchmark and presets are not "
                      "available", BenchmarkLoadWarning, stacklevel=4)
        return
    _LOAD_ERRORS.pop(label, None)


def _discover() -> dict[str, tuple[Benchmark, Path | None]]:
    """The registered benchmarks, name -> (benchmark, presets folder); discovers them on the
    first call.

    Raises:
        Exception: a built-in subpackage failed to import (raised again on every call).
    """
    global _DISCOVERED
    if _DISCOVERED:
        return _FOUND
    for name in _subpackages():
        module = importlib.import_module(name)
        bench = getattr(module, "BENCHMARK", None)
        if bench is not None:
            _add(bench, name, Path(module.__file__).parent)
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        _load_entry_point(ep)
    _DISCOVERED = True
    return _FOUND


def _failed_loads() -> str:
    """``"; entry point X = Y failed to load (Error: ...)"`` per recorded failure ("" without one)."""
    return "".join(f"; {label} failed to load ({why})" for label, why in sorted(_LOAD_ERRORS.items()))


def benchmark_load_errors() -> dict[str, str]:
    """The entry points of :data:`ENTRY_POINT_GROUP` that failed to load, ``"entry point NAME =
    VALUE"`` -> ``"ErrorType: message"`` (empty when every one loaded); runs discovery first."""
    _discover()
    return dict(sorted(_LOAD_ERRORS.items()))


def register_benchmark(bench: Benchmark, presets: str | Path | None = None) -> Benchmark:
    """Register ``bench`` in this process (for a benchmark built in code, e.g. a test's; packages
    are found without it). Environment workers forked afterwards inherit it.

    Args:
        bench: the benchmark.
        presets: a folder whose ``presets/*.yaml`` are its presets (optional).

    Returns:
        ``bench``.

    Raises:
        TypeError: ``bench`` is not a :class:`~g2po_bench.benchmarks.base.Benchmark`.
        ValueError: another benchmark of that name is registered.
    """
    _discover()
    _add(bench, f"register_benchmark({type(bench).__name__})", Path(presets) if presets is not None else None)
    return bench


def benchmark_names() -> list[str]:
    """Sorted names of the registered benchmarks (built-in: alfworld, appworld, toy, webshop)."""
    return sorted(_discover())


def all_benchmarks() -> list[Benchmark]:
    """Every registered benchmark, by name."""
    found = _discover()
    return [found[n][0] for n in sorted(found)]


def get_benchmark(name: str) -> Benchmark:
    """The registered benchmark ``name`` (``env.name`` of a run config).

    Raises:
        ValueError: unknown name (the message lists the registered benchmarks and the entry
            points that failed to load).
    """
    found = _discover()
    if name not in found:
        raise ValueError(f"unknown environment {name!r}; known: {', '.join(sorted(found))}{_failed_loads()}")
    return found[name][0]


def preset_files() -> dict[str, Path]:
    """Preset name -> YAML file, over the ``presets/`` folders of every registered benchmark.

    Raises:
        ValueError: two benchmarks ship a preset of the same name.
    """
    out: dict[str, Path] = {}
    for name, (_, folder) in sorted(_discover().items()):
        if folder is None or not (folder / "presets").is_dir():
            continue
        for path in sorted((folder / "presets").glob("*.yaml")):
            if path.stem in out:
                raise ValueError(f"preset {path.stem!r} of benchmark {name!r} clashes with {out[path.stem]}")
            out[path.stem] = path
    return out


def preset_file(preset: str) -> Path:
    """The YAML file of the preset named ``preset`` (e.g. ``alfworld_1.5b``).

    Raises:
        ValueError: unknown preset (the message lists the known ones and the entry points that
            failed to load).
    """
    files = preset_files()
    if preset not in files:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(sorted(files))}{_failed_loads()}")
    return files[preset]
