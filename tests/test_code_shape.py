"""The shape of the product's code: every function reads on a screen or two.

The product is what setup.py installs (its ``FOLDERS``: ``algorithms/``, ``analysis/``,
``baselines/``, ``benchmarks/``, ``g2po_bench/``, ``sweeps/``, ...) and ``setup.py`` itself; tests
and scripts are not. A function's length counts from its ``def`` line to its last line, docstring
included, decorators not; methods and nested functions count on their own (a nested function's
lines count in its enclosing function too).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
try:
    import check_layers
finally:
    sys.path.remove(str(ROOT / "scripts"))

MAX_FUNCTION_LINES = 99   # "under 100 lines"


def product_files(root: Path = ROOT) -> list[Path]:
    """The ``.py`` files of the product under ``root``, sorted."""
    files = set(root.glob("*.py"))
    for folder in check_layers.package_folders(root).values():
        files.update(f for f in (root / folder).rglob("*.py") if ".venv" not in f.relative_to(root).parts)
    return sorted(files)


def function_lengths(source: str) -> list[tuple[str, int]]:
    """``(qualified name, lines from def to the last line)`` of every function in ``source``, in
    source order (``Class.method``, ``outer.<locals>.inner``)."""
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                out.append((name, child.end_lineno - child.lineno + 1))
                visit(child, name + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def test_function_lengths_count_from_def_to_the_last_line():
    source = (
        "@decorator\n"
        "def f(x):\n"
        '    """Doc."""\n'
        "    def g():\n"
        "        return 1\n"
        "    return g\n"
        "\n"
        "\n"
        "class C:\n"
        "    async def m(self):\n"
        "        pass\n"
    )
    assert function_lengths(source) == [("f", 5), ("f.<locals>.g", 2), ("C.m", 2)]


def test_every_product_function_is_under_100_lines():
    files = product_files()
    assert ROOT / "algorithms" / "estimators" / "g2po.py" in files and ROOT / "g2po_bench" / "cli.py" in files
    assert not any(f.is_relative_to(ROOT / "tests") or f.is_relative_to(ROOT / "scripts") for f in files)
    long = [
        (lines, f"{f.relative_to(ROOT).as_posix()}::{name}")
        for f in files
        for name, lines in function_lengths(f.read_text(encoding="utf-8"))
        if lines > MAX_FUNCTION_LINES
    ]
    assert not long, (
        f"{len(long)} product function(s) of {MAX_FUNCTION_LINES + 1} lines or more (from def to the last "
        "line, docstring included); split them:\n" + "\n".join(f"  {n} lines  {where}" for n, where in sorted(long, reverse=True))
    )
