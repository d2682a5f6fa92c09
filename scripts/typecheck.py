"""Type-check the product with mypy (the configuration is ``[tool.mypy]`` in pyproject.toml).

setup.py maps the design's top-level folders into ``g2po_bench`` (``algorithms/`` is
``g2po_bench.algorithms``, ...). The editable install resolves that mapping with an import hook
that only a running interpreter executes, so a static tool reading the checkout finds
``g2po_bench/`` without its subpackages. This script lays out a *view* of the installed shape in
``.typecheck/`` (ignored by git): ``.typecheck/g2po_bench/`` holds one symbolic link per entry of
``g2po_bench/`` and one per mapped folder under its installed name (``algorithms`` ->
``../../algorithms``), read from setup.py's ``FOLDERS``, so a new module or subpackage is seen
without editing anything. mypy reads the product through the view (``mypy_path`` and ``files`` in
pyproject.toml), and its messages name the checkout's files (``algorithms/losses.py:12: ...``).
Where symbolic links cannot be made (Windows without developer mode), the view is a copy of the
``.py`` files instead, made anew on every run.

    python scripts/typecheck.py              # the whole product (what CI runs)
    python scripts/typecheck.py FILE ...     # only these files (a checkout path is read as its installed module)
    python scripts/typecheck.py --view-only  # only lay out .typecheck/ (for an editor: docs/design.md)

Exit code: mypy's (0 no errors, 1 errors found, 2 bad usage or a crash).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from check_layers import package_folders

ROOT = Path(__file__).resolve().parents[1]
VIEW = ".typecheck"          # the view's folder under the checkout (pyproject.toml's mypy_path names it)
SKIP = {"__pycache__", ".mypy_cache"}


def view_entries(root: Path = ROOT) -> dict[str, Path]:
    """What the view's ``g2po_bench/`` holds: entry name -> file or folder of the checkout ``root``.

    Every entry of ``g2po_bench/`` (but caches) and every other folder of setup.py's ``FOLDERS``
    under the last part of its installed name (``g2po_bench.published`` -> ``results/reference``).
    Raises ``SystemExit`` when a mapped name is not a direct subpackage of ``g2po_bench`` or would
    hide an entry of ``g2po_bench/``."""
    entries = {p.name: p for p in sorted((root / "g2po_bench").iterdir()) if p.name not in SKIP}
    for name, folder in package_folders(root).items():
        if name == "g2po_bench":
            continue
        parent, _, last = name.rpartition(".")
        if parent != "g2po_bench" or last in entries:
            raise SystemExit(f"setup.py FOLDERS: {name!r} -> {folder!r} cannot be laid out in the view "
                             "(a direct subpackage of g2po_bench whose name g2po_bench/ does not use)")
        entries[last] = root / folder
    return entries


def build_view(dest: Path, root: Path = ROOT, *, copy: bool | None = None) -> Path:
    """Lay out the installed shape of ``root`` in ``dest/g2po_bench`` and return ``dest``.

    ``copy=None`` makes relative symbolic links and falls back to copying the ``.py`` files where
    the system refuses links; ``copy=True`` always copies. An existing view is replaced; a file in
    ``dest/g2po_bench`` that is neither a link nor part of a copied view is an error (``SystemExit``),
    so nothing of the checkout is ever deleted through the view."""
    pkg = dest / "g2po_bench"
    if pkg.is_symlink() or (pkg.exists() and not pkg.is_dir()):
        raise SystemExit(f"{pkg} is not a folder: remove it, the type check lays out its view there")
    if pkg.is_dir():
        copied = (pkg / ".copied-view").is_file()
        for entry in list(pkg.iterdir()):
            if entry.is_symlink():
                entry.unlink()
            elif copied:
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            else:
                raise SystemExit(f"{entry} is not a link of the type-check view: remove {pkg} and run again")
    pkg.mkdir(parents=True, exist_ok=True)
    entries = view_entries(root)
    if not copy:
        try:
            for name, target in entries.items():
                (pkg / name).symlink_to(os.path.relpath(target, pkg), target_is_directory=target.is_dir())
            return dest
        except OSError:
            if copy is False:
                raise
            for entry in pkg.iterdir():
                if entry.is_symlink():
                    entry.unlink()
    (pkg / ".copied-view").write_text("made by scripts/typecheck.py\n", encoding="utf-8")
    for name, target in entries.items():
        if target.is_file():
            shutil.copyfile(target, pkg / name)
            continue
        for f in target.rglob("*.py"):
            out = pkg / name / f.relative_to(target)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, out)
    return dest


def to_view(path: str, root: Path = ROOT) -> str:
    """A path given on the command line, as mypy must read it: a file or folder of the product
    (``algorithms/losses.py``) becomes its place in the view, so mypy names it by its installed
    module (``g2po_bench.algorithms.losses``); any other path is returned unchanged."""
    p = Path(path).resolve()
    for name, target in view_entries(root).items():
        target = target.resolve()
        if p == target or target in p.parents:
            return str(Path(VIEW, "g2po_bench", name, p.relative_to(target)))
    return path


def to_checkout(line: str, root: Path = ROOT) -> str:
    """One line of mypy's output with a path in the view rewritten to the checkout's path."""
    prefix = f"{VIEW}/g2po_bench/"
    if not line.startswith(prefix):
        return line
    name, _, rest = line[len(prefix):].partition("/")
    entries = view_entries(root)
    if name.partition(":")[0] in entries and not rest:   # a file directly in g2po_bench/ (cli.py:3: ...)
        return "g2po_bench/" + line[len(prefix):]
    if name not in entries:
        return line
    return f"{entries[name].relative_to(root).as_posix()}/{rest}"


def run_mypy(files: list[str], *, root: Path = ROOT, extra: list[str] | None = None) -> subprocess.CompletedProcess:
    """Run mypy with the checkout's configuration from ``root`` (where the view must already be laid
    out); ``files`` empty means the configured ``files`` (the whole product). Returns the finished
    process with its stdout rewritten to the checkout's paths."""
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(root / "pyproject.toml"), *(extra or []),
           *[to_view(f, root) for f in files]]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    proc.stdout = "".join(to_checkout(line, root) + "\n" for line in proc.stdout.splitlines())
    return proc


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="check only these files (default: the whole product)")
    ap.add_argument("--view-only", action="store_true", help="only lay out the view in .typecheck/")
    ap.add_argument("--copy", action="store_true", help="copy the .py files into the view instead of linking")
    args = ap.parse_args(argv)
    build_view(ROOT / VIEW, copy=True if args.copy else None)
    if args.view_only:
        print(f"view laid out in {ROOT / VIEW / 'g2po_bench'}")
        return 0
    proc = run_mypy(args.files)
    print(proc.stdout, end="")
    print(proc.stderr, end="", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
