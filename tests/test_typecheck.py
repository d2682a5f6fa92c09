"""The type check (pyproject.toml [tool.mypy]; scripts/typecheck.py; a step of .ci/run).

mypy reads the product through a view of its installed shape (setup.py maps ``algorithms/`` to
``g2po_bench.algorithms``, ...), so an import of the suite is resolved the way the installed
package resolves it. The test plants, in a copy of the checkout, imports that a rename leaves
behind (a module path that does not exist, at module level and in a function body; a name the
module no longer defines) and shows that the check reports each one at the checkout's path, while
the lazy imports of optional stacks (vLLM, OpenRLHF, Ray), installed or not, stay quiet. The
check of the whole product is the CI step itself (``python scripts/typecheck.py``), not repeated here.

Without mypy (``pip install -e ".[test]"``) the test skips outside CI and fails in CI.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
try:
    import typecheck
finally:
    sys.path.remove(str(ROOT / "scripts"))


def _require_mypy() -> None:
    if importlib.util.find_spec("mypy") is None:
        msg = 'mypy is not installed (the test extra pins it: pip install -e ".[test]")'
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


def _copy_checkout(dest: Path) -> Path:
    """The checkout's configuration and the ``.py`` files of setup.py's folders, in the checkout's
    layout (what scripts/typecheck.py reads), under ``dest``."""
    for name in ("setup.py", "pyproject.toml"):
        shutil.copyfile(ROOT / name, dest / name)
    for folder in typecheck.package_folders(ROOT).values():
        (dest / folder).mkdir(parents=True, exist_ok=True)
        for f in (ROOT / folder).rglob("*.py"):
            out = dest / f.relative_to(ROOT)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, out)
    return dest


PLANTED = '''
import g2po_bench.algorithms.no_such_module  # planted: a module renamed away
from g2po_bench.sweeps.scheduler import no_such_function  # planted: a name the module lost


def planted_lazy():
    # lazy: planted, a function-level import of a module renamed away
    from g2po_bench.benchmarks.no_such_benchmark import Benchmark
    return Benchmark


def planted_optional_stacks():
    # lazy: the optional GPU stacks, whether this machine has them or not
    import openrlhf.no_such_module
    import ray
    import vllm
    return vllm, ray, openrlhf
'''


def test_a_planted_unresolvable_import_fails_the_check(tmp_path):
    _require_mypy()
    root = _copy_checkout(tmp_path)
    typecheck.build_view(root / typecheck.VIEW, root)
    claims = root / "sweeps" / "claims.py"   # small import closure: the check of one file stays quick

    clean = typecheck.run_mypy(["sweeps/claims.py"], root=root)
    assert clean.returncode == 0, clean.stdout + clean.stderr   # its imports of g2po_bench.sweeps resolve

    text = claims.read_text(encoding="utf-8")
    claims.write_text(text + PLANTED, encoding="utf-8")
    first = len(text.splitlines()) + 1   # the planted block's first line (a blank one)
    proc = typecheck.run_mypy(["sweeps/claims.py"], root=root)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert (f'sweeps/claims.py:{first + 1}: error: Cannot find implementation or library stub for module '
            'named "g2po_bench.algorithms.no_such_module"  [import-not-found]') in out
    assert (f'sweeps/claims.py:{first + 2}: error: Module "g2po_bench.sweeps.scheduler" has no attribute '
            '"no_such_function"  [attr-defined]') in out
    assert (f'sweeps/claims.py:{first + 7}: error: Cannot find implementation or library stub for module '
            'named "g2po_bench.benchmarks.no_such_benchmark"  [import-not-found]') in out
    assert "Found 3 errors in 1 file" in out
    for optional in ("vllm", "ray", "openrlhf"):
        assert optional not in out
