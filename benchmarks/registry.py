"""The benchmark registry: every benchmark the suite knows, found, never listed.

A benchmark is a subpackage of ``g2po_bench.benchmarks`` that exports ``BENCHMARK`` (an instance
of :class:`~g2po_bench.benchmarks.base.Benchmark`), or an object another installed package
publishes under the entry point group ``g2po.benchmarks`` (``name = "pkg.module:BENCHMARK"``).
Its presets are the ``presets/*.yaml`` files of its package folder. The CLI (``g2po data``,
``g2po bench``, ``--preset``), the config checks and the prompting baselines read this registry
only: adding a benchmark is one new subpackage plus its presets.
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib import metadata
from pathlib import Path

from g2po_bench.benchmarks.base import Benchmark

__all__ = ["get_benchmark", "benchmark_names", "all_benchmarks", "register_benchmark", "preset_files",
           "preset_file", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "g2po.benchmarks"
"""Entry point group through which an installed package adds a benchmark."""

_FOUND: dict[str, tuple[Benchmark, Path | None]] = {}


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


def _discover() -> dict[str, tuple[Benchmark, Path | None]]:
    if _FOUND:
        return _FOUND
    for name in _subpackages():
        module = importlib.import_module(name)
        bench = getattr(module, "BENCHMARK", None)
        if bench is not None:
            _add(bench, name, Path(module.__file__).parent)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        bench = ep.load()
        module = importlib.import_module(ep.module)
        _add(bench, f"entry point {ep.name!r} ({ep.value})", Path(module.__file__).parent)
    return _FOUND


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
        ValueError: unknown name (the message lists the registered benchmarks).
    """
    found = _discover()
    if name not in found:
        raise ValueError(f"unknown environment {name!r}; known: {', '.join(sorted(found))}")
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
        ValueError: unknown preset (the message lists the known ones).
    """
    files = preset_files()
    if preset not in files:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(sorted(files))}")
    return files[preset]
