"""The built wheel: one top-level package (``g2po_bench``), its data files, no run records; and the
installed wheel finds its presets, sweep specs and published tables without the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GENERIC = ("algorithms", "benchmarks", "results", "analysis", "baselines", "sweeps", "tests", "g2po")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (whl,) = out.glob("g2po_bench-*.whl")
    return whl


def test_the_wheel_installs_one_top_level_package_and_no_run_records(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"g2po_bench"}
    assert not top & set(GENERIC)
    assert not [n for n in names if "/runs/" in n or "/proxy/" in n or n.endswith((".parquet", ".safetensors"))]
    for needed in ("g2po_bench/cli.py", "g2po_bench/core/config.py", "g2po_bench/algorithms/registry/__init__.py",
                   "g2po_bench/algorithms/registry/estimation.py",
                   "g2po_bench/benchmarks/alfworld/presets/alfworld_cpu.yaml",
                   "g2po_bench/benchmarks/webshop/presets/webshop_1.5b.yaml",
                   "g2po_bench/sweeps/specs/cpu_proxy.yaml", "g2po_bench/sweeps/slurm/start_cluster.sh",
                   "g2po_bench/published/table1_alfworld_webshop.csv"):
        assert needed in names, needed
    meta = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "g2po = g2po_bench.cli:main" in zipfile.ZipFile(wheel).read(meta).decode()


def test_the_installed_wheel_finds_its_data_without_the_checkout(wheel, tmp_path):
    target = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                           str(wheel)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    code = (
        "import g2po_bench, pathlib\n"
        f"assert pathlib.Path(g2po_bench.__file__).is_relative_to({str(target)!r}), g2po_bench.__file__\n"
        "from g2po_bench.benchmarks.registry import preset_files\n"
        "from g2po_bench.analysis.reference import load_reference\n"
        "from g2po_bench.sweeps.spec import load_spec\n"
        "from g2po_bench.runconfig import load_config\n"
        "assert 'alfworld_cpu' in preset_files()\n"
        "assert len(load_reference()) > 100\n"
        "load_spec('cpu_proxy')\n"
        "print(load_config(preset='alfworld_cpu').train.iterations)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "54"
