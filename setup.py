"""Packaging: the suite installs as ONE top-level package, ``g2po_bench``.

The repository keeps the design's top-level folders (``algorithms/ benchmarks/ baselines/
sweeps/ analysis/``) for readability; they install as subpackages of ``g2po_bench`` (setuptools'
``package_dir`` mapping), so nothing with a generic name (``algorithms``, ``results``, ...) is
claimed in site-packages. ``g2po_bench/`` holds the ground floor (``core``) and the ``g2po``
command; ``results/reference`` (the published tables, data only) installs as the data package
``g2po_bench.published``. Run records under ``results/`` are never packaged.
"""

from setuptools import find_packages, setup

FOLDERS = {
    "g2po_bench": "g2po_bench",
    "g2po_bench.algorithms": "algorithms",
    "g2po_bench.benchmarks": "benchmarks",
    "g2po_bench.baselines": "baselines",
    "g2po_bench.sweeps": "sweeps",
    "g2po_bench.analysis": "analysis",
    "g2po_bench.published": "results/reference",
}


def packages() -> list[str]:
    """Every package of every mapped folder, under its installed name (new subpackages of a
    folder, e.g. a new benchmark, are found without editing this file)."""
    found = []
    for name, folder in FOLDERS.items():
        found.append(name)
        found += [f"{name}.{sub}" for sub in find_packages(folder)]
    return found


setup(
    packages=packages(),
    package_dir=FOLDERS,
    # data files of the packages: presets (benchmarks/*/presets), sweep specs and the Slurm scripts,
    # the published tables; never run records
    package_data={"": ["*.yaml", "*.csv", "*.json", "*.txt", "*.sh", "*.md", "presets/*.yaml", "specs/*.yaml",
                       "slurm/*.sh"]},
)
