"""The engine caches load fast-downward's library from a copy without debug sections
(:func:`g2po_bench.benchmarks.alfworld.engine.light_downward_lib`): the same code and data, far fewer bytes
to copy for every environment; uninstalling the caches restores the shipped file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from g2po_bench.benchmarks.alfworld import engine

pytest.importorskip("fast_downward")


def _section(lib: str, name: str, out: Path) -> bytes:
    subprocess.run(["objcopy", "-O", "binary", f"--only-section={name}", lib, str(out)], check=True)
    return out.read_bytes()


@pytest.mark.skipif(shutil.which("objcopy") is None, reason="needs binutils' objcopy")
def test_the_light_library_has_the_same_code_and_is_used_by_the_caches(tmp_path):
    import fast_downward.interface as fd_interface

    engine.uninstall_caches()
    shipped = fd_interface.DOWNWARD_LIB_PATH
    light = engine.light_downward_lib(shipped)
    assert light is not None and Path(light).is_file()
    assert Path(light).stat().st_size < Path(shipped).stat().st_size / 10  # 1.3 of 34 MB
    for name in (".text", ".data", ".rodata"):
        assert _section(light, name, tmp_path / "a") == _section(shipped, name, tmp_path / "b"), name
    assert engine.light_downward_lib(shipped) == light  # made once, then reused
    engine.install_caches()
    assert fd_interface.DOWNWARD_LIB_PATH == light
    lib = fd_interface.load_lib()  # what textworld calls for every environment
    assert lib.get_state_size is not None
    engine.uninstall_caches()
    assert fd_interface.DOWNWARD_LIB_PATH == shipped
    engine.install_caches()


def test_a_library_that_cannot_be_stripped_is_kept(tmp_path):
    bogus = tmp_path / "libnot.so"
    bogus.write_bytes(b"not an ELF file")
    assert engine.light_downward_lib(bogus) is None
    assert engine.light_downward_lib(tmp_path / "missing.so") is None
    made = Path.home() / ".cache" / "g2po" / "downward"
    empty = [d for d in made.iterdir() if d.is_dir() and not any(d.iterdir())] if made.is_dir() else []
    assert not empty, f"a failed copy left empty folders behind: {empty}"
