"""Checkpoint folders of a run: written whole, made durable, verified, and kept two deep.

A run's checkpoints live in ``<run>/checkpoints/`` (docs/run-folder.md "Checkpoints"):

- ``latest/``: the newest complete checkpoint; ``previous/``: the one before it, kept until a
  newer one is complete, so a corrupt ``latest`` leaves something to resume from;
- each holds the backend's files (``policy/``, ``optim.pt``, ...), ``trainer_state.json`` and
  ``manifest.json`` (:data:`MANIFEST`): ``{"format": 1, "iteration": K, "files": {relative path:
  {"bytes": size}}}``, every file of the checkpoint but the manifest itself.

A checkpoint is written into a staging folder, every file and folder is fsynced, the manifest is
written (fsynced too), the staging folder is verified (:func:`verify_checkpoint`), and only then
does it become ``latest`` (:func:`install_checkpoint`; the ``latest`` it replaces becomes
``previous`` when it is intact). A kill at any moment leaves ``latest`` or ``previous`` intact.

Verification is cheap (no model is loaded and no file is read whole): every file the manifest
lists exists with the recorded size, and files whose format says how long they must be are
checked against it (:func:`check_file`): a ``.safetensors`` file is exactly its header plus the
tensor bytes the header declares, a torch zip file (``.pt``, ``.bin``) has its central directory
at the end, a ``.json`` file parses. This catches a truncated, torn or missing file (a full disk,
a copy cut short, a kill without fsync); it does not checksum contents (a flipped bit inside a
tensor is not seen). Checkpoints written before the manifest existed get the format checks only.

Ground floor: the standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "MANIFEST",
    "TRAINER_STATE",
    "CheckpointChoice",
    "CorruptCheckpointWarning",
    "check_file",
    "checkpoint_iteration",
    "fsync_tree",
    "install_checkpoint",
    "verify_checkpoint",
    "write_manifest",
]

#: the manifest of a checkpoint folder (file sizes as written)
MANIFEST = "manifest.json"
#: the trainer state of a checkpoint (iteration, evaluations, elapsed seconds, what the backend adds)
TRAINER_STATE = "trainer_state.json"

_ZIP_MAGIC = b"PK\x03\x04"


class CorruptCheckpointWarning(UserWarning):
    """A resume skipped a corrupt checkpoint and continues from an older intact one (the message
    names the file at fault)."""


def fsync_tree(folder: Path) -> None:
    """fsync every file under ``folder``, then every folder (itself included), so that their
    contents and names are on disk before a rename publishes them."""
    folder = Path(folder)
    dirs = [folder]
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            continue
        if path.is_dir():
            dirs.append(path)
        elif path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for d in reversed(dirs):
        _fsync_dir(d)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on a folder
        pass
    finally:
        os.close(fd)


def _files(folder: Path) -> list[str]:
    """Relative posix paths of the regular files under ``folder``, the manifest left out, sorted."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and not p.is_symlink() and p.relative_to(folder).as_posix() != MANIFEST)


def write_manifest(folder: Path, iteration: int) -> dict[str, Any]:
    """Write ``folder/manifest.json`` (:data:`MANIFEST`) listing every file of the checkpoint with its
    size in bytes, fsynced; returns the manifest."""
    folder = Path(folder)
    manifest = {"format": 1, "iteration": int(iteration),
                "files": {rel: {"bytes": (folder / rel).stat().st_size} for rel in _files(folder)}}
    path = folder / MANIFEST
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    _fsync_dir(folder)
    return manifest


def check_file(path: Path) -> str | None:
    """What is wrong with ``path`` judged by its format alone, or None when nothing is seen.

    ``.safetensors``: an 8-byte little-endian header length, the JSON header, then exactly the
    tensor bytes the header's ``data_offsets`` end at. ``.pt`` / ``.bin`` in torch's zip format
    (they start with ``PK``): the zip central directory opens (it sits at the end, so a cut file
    fails). ``.json``: parses. Other files: nothing to check.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        size = path.stat().st_size
        if suffix == ".safetensors":
            return _check_safetensors(path, size)
        if suffix in (".pt", ".bin"):
            with open(path, "rb") as fh:
                head = fh.read(4)
            if head != _ZIP_MAGIC:
                return None  # not torch's zip format (a legacy pickle): no structure to check
            try:
                with zipfile.ZipFile(path) as zf:
                    zf.infolist()
            except (zipfile.BadZipFile, EOFError, ValueError) as exc:
                return f"not a complete torch file ({exc}; {size:,} bytes)"
            return None
        if suffix == ".json":
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                return f"not valid JSON ({str(exc).splitlines()[0]}; {size:,} bytes)"
            return None
    except OSError as exc:
        return f"not readable ({exc.strerror or exc})"
    return None


def _check_safetensors(path: Path, size: int) -> str | None:
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) < 8:
            return f"{size:,} bytes, shorter than the safetensors header length field"
        (n,) = struct.unpack("<Q", raw)
        if 8 + n > size:
            return f"{size:,} bytes, shorter than its {n:,}-byte safetensors header"
        try:
            header = json.loads(fh.read(n))
        except (ValueError, UnicodeDecodeError):
            return f"the safetensors header is not valid JSON ({size:,} bytes)"
    try:
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (TypeError, KeyError, IndexError, ValueError, AttributeError):
        return "the safetensors header lists no valid data_offsets"
    expected = 8 + n + end
    if size != expected:
        return f"{size:,} bytes, its safetensors header declares {expected:,}"
    return None


def verify_checkpoint(folder: Path) -> str | None:
    """The first problem of the checkpoint in ``folder`` as ``"<file>: <what>"`` (``<file>`` the
    full path), or None when it is intact (module docstring: sizes against the manifest, formats).

    A folder without ``trainer_state.json`` is not a checkpoint (that is the problem reported). A
    folder without a manifest (written before manifests existed) gets the format checks only.
    """
    folder = Path(folder)
    state = folder / TRAINER_STATE
    if not state.is_file():
        return f"{state}: missing"
    manifest_path = folder / MANIFEST
    listed: dict[str, Any] = {}
    if manifest_path.exists():
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            listed = dict(manifest["files"])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, OSError) as exc:
            return f"{manifest_path}: not a readable manifest ({type(exc).__name__})"
        for rel, entry in sorted(listed.items()):
            path = folder / rel
            if not path.is_file():
                return f"{path}: missing (the checkpoint's manifest lists it)"
            size = path.stat().st_size
            want = int(entry.get("bytes", -1))
            if size != want:
                return f"{path}: {size:,} bytes, the checkpoint's manifest records {want:,}"
    for rel in _files(folder):
        problem = check_file(folder / rel)
        if problem is not None:
            return f"{folder / rel}: {problem}"
    return None


def checkpoint_iteration(folder: Path) -> int | None:
    """The iteration in ``folder/trainer_state.json``, or None when it is missing or unreadable."""
    try:
        return int(json.loads((Path(folder) / TRAINER_STATE).read_text(encoding="utf-8"))["iteration"])
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


@dataclass
class CheckpointChoice:
    """Which checkpoint of a run a resume loads (:meth:`g2po_bench.core.rundir.RunDir.find_checkpoint`).

    Attributes:
        path: the newest intact checkpoint folder, or None when there is none.
        iteration: its iteration (None with ``path``).
        rejected: ``(folder, problem)`` of every newer checkpoint that failed verification
            (``problem`` names the file, :func:`verify_checkpoint`).
    """

    path: Path | None = None
    iteration: int | None = None
    rejected: list[tuple[Path, str]] = field(default_factory=list)

    def describe_rejected(self, root: Path) -> str:
        """One clause per rejected checkpoint, e.g. ``"checkpoints/latest is corrupt (FILE: ...)"``."""
        return "; ".join(f"{_rel(folder, root)} is corrupt ({problem})" for folder, problem in self.rejected)


def _rel(path: Path, root: Path) -> str:
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return str(path)


def install_checkpoint(staging: Path, latest: Path, previous: Path) -> None:
    """Make the verified, fsynced folder ``staging`` the checkpoint ``latest``: the current
    ``latest`` becomes ``previous`` when it is intact (the older ``previous`` is removed), and is
    removed when it is not (an intact ``previous`` is then kept). Every step is a rename or the
    removal of a folder that is not needed any more, so a kill leaves ``latest`` or ``previous``
    intact."""
    parent = latest.parent
    parent.mkdir(parents=True, exist_ok=True)
    if latest.exists():
        if verify_checkpoint(latest) is None:
            if previous.exists():
                shutil.rmtree(previous)
            os.replace(latest, previous)
        else:
            shutil.rmtree(latest)
    os.replace(staging, latest)
    _fsync_dir(parent)
