"""Check the suite's import layering with import-linter (the contracts in pyproject.toml).

import-linter reads a package from the file system, and the suite's packages live in several
top-level folders that setup.py maps into ``g2po_bench``; this script copies the ``.py`` files into
that installed shape in a temporary folder and runs ``lint-imports`` there. Exit code: 0 when
every contract is kept, 1 when one is broken (the output names the import), 2 on bad usage.

import-linter sees a module only where every folder above it, up to ``g2po_bench``, has an
``__init__.py`` (and setup.py's ``find_packages`` installs only such folders): a folder of ``.py``
files without one would be skipped silently, imports and all. The check refuses such a folder
(exit code 1, naming it) before linting.

    python scripts/check_layers.py            # the checkout's own code
    python scripts/check_layers.py --tree DIR # a copy made with --copy-to (tests plant imports in it)
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_folders(root: Path = ROOT) -> dict[str, str]:
    """``FOLDERS`` of setup.py: installed package name -> folder in the checkout."""
    tree = ast.parse((root / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "FOLDERS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit("setup.py has no FOLDERS mapping")


def copy_tree(dest: Path, root: Path = ROOT) -> Path:
    """Copy every ``.py`` file of the mapped folders into ``dest`` in the installed layout."""
    for name, folder in package_folders(root).items():
        src = root / folder
        for f in src.rglob("*.py"):
            rel = f.relative_to(src)
            if ".venv" in rel.parts:
                continue
            out = dest.joinpath(*name.split("."), rel)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, out)
    return dest


def folders_without_init(tree: Path) -> list[str]:
    """Folders of the installed-shape copy ``tree`` that hold ``.py`` files (directly or below) but
    no ``__init__.py``: import-linter does not see their modules. Returns their paths relative to
    ``tree`` (``g2po_bench/core/extra``), sorted; only the topmost of a chain is named."""
    missing: set[Path] = set()
    for f in (tree / "g2po_bench").rglob("*.py"):
        rel = f.relative_to(tree)
        for depth in range(1, len(rel.parts)):
            folder = Path(*rel.parts[:depth])
            if not (tree / folder / "__init__.py").is_file():
                missing.add(folder)
                break
    return sorted(str(m) for m in missing)


def lint(tree: Path, config: Path = ROOT / "pyproject.toml") -> subprocess.CompletedProcess:
    """Run ``lint-imports`` on the installed-shape copy ``tree``; returns the finished process.

    A folder with ``.py`` files and no ``__init__.py`` (:func:`folders_without_init`) is refused
    before linting: the returned process has return code 1 and a stdout naming each folder."""
    missing = folders_without_init(tree)
    if missing:
        lines = [f"REFUSED: {m} holds .py files but no __init__.py, so import-linter cannot see its imports "
                 "(and setup.py does not install it); add an empty __init__.py to it" for m in missing]
        return subprocess.CompletedProcess(["check_layers"], 1, stdout="\n".join(lines) + "\n", stderr="")
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    env = {"PYTHONPATH": str(tree), "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    return subprocess.run([exe, str(config), "--no-cache"], cwd=tree, env=env,
                          capture_output=True, text=True)


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, help="lint this installed-shape copy instead of the checkout")
    ap.add_argument("--copy-to", type=Path, help="only copy the checkout into this folder (installed shape)")
    args = ap.parse_args(argv)
    if args.copy_to:
        copy_tree(args.copy_to)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        tree = args.tree or copy_tree(Path(tmp))
        proc = lint(tree)
    print(proc.stdout[-6000:], proc.stderr[-2000:], sep="")
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
