"""The suite's import layering (pyproject.toml [tool.importlinter]; scripts/check_layers.py).

Dependencies point one way, from the CLI down to the ground floor ``g2po_bench.core``; the checks run
import-linter on an installed-shape copy of the checkout, once as it is and once with an import
planted that climbs back up, which must break the contract.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
try:
    import check_layers
finally:
    sys.path.remove(str(ROOT / "scripts"))


def test_the_import_contracts_hold(tmp_path):
    tree = check_layers.copy_tree(tmp_path / "tree")
    proc = check_layers.lint(tree)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in proc.stdout


def test_the_runtime_looks_no_benchmark_up(tmp_path):
    """The runtime sits below the benchmarks (their harness imports the worker pool and the policy
    protocol from it): the pool is given the benchmark, and an import of the benchmark registry
    from the runtime, as the pool made when it lived in benchmarks/, breaks the layers and makes a
    cycle between the packages."""
    tree = check_layers.copy_tree(tmp_path / "tree")
    workers = tree / "g2po_bench" / "runtime" / "workers.py"
    workers.write_text(workers.read_text(encoding="utf-8")
                       + "\nfrom g2po_bench.benchmarks.registry import get_benchmark  # planted\n")
    proc = check_layers.lint(tree)
    assert proc.returncode != 0
    assert "g2po_bench.runtime.workers -> g2po_bench.benchmarks.registry" in proc.stdout
    assert "no import cycles between the suite's packages BROKEN" in proc.stdout


def test_a_planted_back_import_breaks_the_contract(tmp_path):
    tree = check_layers.copy_tree(tmp_path / "tree")
    stats = tree / "g2po_bench" / "core" / "stats.py"
    stats.write_text(stats.read_text(encoding="utf-8") + "\nimport g2po_bench.cli  # planted: the ground floor climbs up\n")
    proc = check_layers.lint(tree)
    assert proc.returncode != 0
    assert "BROKEN" in proc.stdout and "g2po_bench.core.stats -> g2po_bench.cli" in proc.stdout


@pytest.mark.parametrize("with_init", [True, False], ids=["package", "folder-without-init"])
def test_a_planted_back_import_in_a_new_folder_is_caught(tmp_path, with_init):
    """A new folder of the ground floor whose module climbs up to the CLI: with an ``__init__.py``
    the contract breaks on that import; without one (import-linter would skip the folder, and
    setup.py would not install it) the check refuses the folder, naming it."""
    tree = check_layers.copy_tree(tmp_path / "tree")
    extra = tree / "g2po_bench" / "core" / "extra"
    extra.mkdir()
    (extra / "helper.py").write_text("import g2po_bench.cli  # planted: the ground floor climbs up\n", encoding="utf-8")
    if with_init:
        (extra / "__init__.py").write_text("", encoding="utf-8")
    proc = check_layers.lint(tree)
    assert proc.returncode != 0, proc.stdout[-4000:]
    if with_init:
        assert "BROKEN" in proc.stdout and "g2po_bench.core.extra.helper -> g2po_bench.cli" in proc.stdout
    else:
        assert check_layers.folders_without_init(tree) == ["g2po_bench/core/extra"]
        assert proc.stdout.startswith("REFUSED: g2po_bench/core/extra holds .py files but no __init__.py")


def test_the_command_line_refuses_a_folder_without_init(tmp_path):
    tree = tmp_path / "tree"
    assert check_layers.main(["--copy-to", str(tree)]) == 0
    deep = tree / "g2po_bench" / "benchmarks" / "extra" / "inner"
    deep.mkdir(parents=True)
    (deep / "__init__.py").write_text("", encoding="utf-8")  # its parent lacks one: still unseen
    (deep / "helper.py").write_text("X = 1\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_layers.py"), "--tree", str(tree)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "REFUSED: g2po_bench/benchmarks/extra holds .py files but no __init__.py" in proc.stdout


def test_a_planted_cycle_between_packages_breaks_the_contract(tmp_path):
    # analysis and sweeps are independent; an import each way is a cycle between sibling packages
    tree = check_layers.copy_tree(tmp_path / "tree")
    for a, b in (("analysis/aggregate.py", "g2po_bench.sweeps.spec"), ("sweeps/claims.py", "g2po_bench.analysis.aggregate")):
        f = tree / "g2po_bench" / a
        f.write_text(f.read_text(encoding="utf-8") + f"\nimport {b}  # planted\n")
    proc = check_layers.lint(tree)
    assert proc.returncode != 0 and "BROKEN" in proc.stdout


def _product_files() -> list[Path]:
    folders = check_layers.package_folders(ROOT).values()
    return sorted(f for d in folders for f in (ROOT / d).rglob("*.py") if ".venv" not in f.parts)


def test_imports_of_the_suite_are_at_module_top_unless_they_say_why():
    """A function-level import of the suite's own code is allowed only with a ``# lazy:`` comment
    (an optional GPU dependency, or torch/matplotlib kept off the CLI's start-up path)."""
    unexplained = []
    for f in _product_files():
        lines = f.read_text(encoding="utf-8").split("\n")
        tree = ast.parse("\n".join(lines))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                         [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                if not any(n.startswith("g2po_bench") for n in names):
                    continue
                before = "\n".join(lines[max(0, node.lineno - 4):node.end_lineno])
                if "lazy:" not in before:
                    unexplained.append(f"{f.relative_to(ROOT)}:{node.lineno}")
    assert not unexplained, "function-level imports without a '# lazy: <why>' comment: " + ", ".join(unexplained)


def test_the_checker_runs_from_the_command_line():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_layers.py")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
