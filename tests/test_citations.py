"""No file of the repository cites the project's notes that live outside it.

The method notes, the design brief and the environment notes the suite was built from are not
part of the repository, so a docstring, comment, preset or page that cites one of them by file
name sends the reader to a dead reference. Facts are cited from their primary source (paper
section or equation, reference code) and, where the repository writes them down, from ``docs/``
(e.g. ``docs/design-notes.md`` "State keys").

Scanned: every tracked ``.py``, ``.md``, ``.yaml``, ``.yml`` and ``.toml`` file outside
``results/`` (data), plus the hand-written ``results/*/README.md``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: names of the notes outside the repository, written here without their extension so that this
#: file does not cite them itself
EXTERNAL_NOTES = ("ALGORITHMS", "DESIGN", "ENVIRONMENTS")
CITATION = re.compile(r"\b(?:" + "|".join(EXTERNAL_NOTES) + r")\.md\b")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml"}


def tracked_files(root: Path) -> list[Path]:
    """The files git tracks under ``root`` (a git checkout), as absolute paths."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True,
                         check=True).stdout
    return [root / name for name in out.split("\0") if name]


def scanned(root: Path, path: Path) -> bool:
    """Whether ``path`` is a text file the check reads (see the module docstring)."""
    rel = path.relative_to(root)
    if path.suffix not in SUFFIXES or not path.is_file():
        return False
    if rel.parts[0] == "results":
        return len(rel.parts) == 3 and rel.name == "README.md"
    return True


def dead_citations(root: Path, files: list[Path]) -> list[str]:
    """``"path:line: text"`` for every line of the scanned ``files`` that cites an outside note."""
    hits = []
    for path in files:
        if not scanned(root, path):
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if CITATION.search(line):
                hits.append(f"{path.relative_to(root).as_posix()}:{i}: {line.strip()}")
    return hits


def test_no_citation_of_notes_outside_the_repository():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    hits = dead_citations(REPO, tracked_files(REPO))
    assert not hits, ("these lines cite a file that is not in the repository; cite the primary "
                      "source (paper section or equation, reference code) and the docs/ page that "
                      "states the fact instead:\n" + "\n".join(hits))


def test_a_planted_citation_is_found(tmp_path):
    """The check itself: a tracked file citing an outside note is reported with its line;
    in-repository pages (lower-case ``docs/design.md``), untracked files and result data are not."""
    alg, des, env = EXTERNAL_NOTES
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    files = {
        "pkg/mod.py": f'"""Intro.\n\nSource: {alg}.md "State keys"."""\n',
        "docs/page.md": "See [the layers](design.md) and docs/design-notes.md.\n",
        "presets/x.yaml": f"# settings ({env}.md)\nkey: 1\n",
        "results/run/notes.md": f"as quoted in {alg}.md\n",
        "results/run/README.md": f"the shape ({des}.md)\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    subprocess.run([*git, "add", "."], cwd=tmp_path, check=True)
    (tmp_path / "scratch.md").write_text(f"{des}.md\n")  # untracked
    hits = dead_citations(tmp_path, tracked_files(tmp_path))
    assert hits == [
        f'pkg/mod.py:3: Source: {alg}.md "State keys"."""',
        f"presets/x.yaml:1: # settings ({env}.md)",
        f"results/run/README.md:1: the shape ({des}.md)",
    ]
