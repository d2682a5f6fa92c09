"""Fetching the official ALFWorld text games with the alfworld package's own downloader.

The alfworld wheel installs the script ``alfworld-download`` (a Python file in the
interpreter's scripts folder, not an importable module). It downloads GitHub release assets
(``JSON_FILES_URL`` = ``json_2.1.1_json.zip``: the ``traj_data.json`` files;
``TW_PDDL_FILES_URL`` = ``json_2.1.2_tw-pddl.zip``: the ``game.tw-pddl`` files; plus PDDL
states and a Mask R-CNN checkpoint that text-only play does not need) with its ``download``
function and extracts them with its ``unzip`` function. :func:`download_alfworld` loads that
script as a module and calls those two functions for the two text-game archives only, then
copies the wheel's ``logic/alfred.{pddl,twl2}`` next to them (as the script does) and verifies
the result with :func:`g2po_bench.benchmarks.alfworld.games.find_games`.

Nothing here runs at import or at environment construction (docs/design-notes.md "Rules of the
house"); the CLI command ``g2po data download alfworld`` calls :func:`download_alfworld`.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from g2po_bench.benchmarks.alfworld.engine import ensure_alfworld_data_env, wheel_logic_paths
from g2po_bench.benchmarks.alfworld.games import (
    DATA_FOLDER,
    AlfworldDataError,
    find_games,
    resolve_split_dirs,
)
from g2po_bench.core.errors import DataDownloadError

__all__ = ["DataDownloadError", "download_alfworld", "load_downloader", "EXPECTED_SPLITS"]

#: splits of the official text games and their game counts (AlfredTWEnv's "solvable" games).
EXPECTED_SPLITS = {"train": 3553, "valid_seen": 140, "valid_unseen": 134}
MARKER = "g2po_download.json"
#: seconds before a silent connection or read is given up (the script itself sets none).
TIMEOUT_S = 60.0

_MANUAL = (
    "Manual alternative: download json_2.1.1_json.zip and json_2.1.2_tw-pddl.zip from "
    "https://github.com/alfworld/alfworld/releases (or run `alfworld-download` on a machine with "
    "internet access), unzip both into one folder so that it holds json_2.1.1/<split>/<task>/"
    "<trial>/{game.tw-pddl,traj_data.json}, and set env.data_dir to that folder."
)




def load_downloader() -> ModuleType:
    """Load the ``alfworld-download`` script of the installed alfworld as a module.

    Raises:
        DataDownloadError: the script is not found (alfworld not installed in this interpreter).
    """
    ensure_alfworld_data_env()
    # this interpreter's scripts folder, then its base interpreter's (a venv made with
    # --system-site-packages imports alfworld from there), then PATH
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    found = shutil.which("alfworld-download")
    candidates = list(dict.fromkeys([
        Path(sysconfig.get_path("scripts")) / "alfworld-download",
        Path(sys.executable).parent / "alfworld-download",
        Path(sysconfig.get_path("scripts", vars=base)) / "alfworld-download",
        *([Path(found)] if found else []),
    ]))
    for path in candidates:
        if path.is_file():
            loader = importlib.machinery.SourceFileLoader("_alfworld_download_script", str(path))
            spec = importlib.util.spec_from_loader(loader.name, loader)
            assert spec is not None
            module = importlib.util.module_from_spec(spec)
            try:
                loader.exec_module(module)
            except Exception as exc:  # noqa: BLE001 - report any import problem of the script
                raise DataDownloadError(f"cannot load {path} ({exc!r}). {_MANUAL}") from exc
            return module
    raise DataDownloadError(
        "the `alfworld-download` script of alfworld==0.4.2 was not found in "
        f"{', '.join(str(c.parent) for c in candidates)}; install alfworld in this interpreter. {_MANUAL}"
    )


class _RequestsWithTimeout:
    """Stand-in for the ``requests`` module inside the loaded script: adds a timeout."""

    def __init__(self, requests_module: Any, timeout: float) -> None:
        self._requests = requests_module
        self._timeout = timeout

    def get(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", self._timeout)
        return self._requests.get(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._requests, name)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _verify(root: Path) -> dict[str, int]:
    """Game counts per expected split; raises DataDownloadError when a split is empty."""
    counts: dict[str, int] = {}
    try:
        splits = resolve_split_dirs(root)
    except AlfworldDataError as exc:
        raise DataDownloadError(f"verification failed: {exc}. {_MANUAL}") from exc
    for split in EXPECTED_SPLITS:
        if split not in splits:
            raise DataDownloadError(
                f"verification failed: split {split!r} missing under {root / DATA_FOLDER} "
                f"(found: {', '.join(splits) or 'none'}). {_MANUAL}"
            )
        try:
            counts[split] = len(find_games(root, split))
        except AlfworldDataError as exc:
            raise DataDownloadError(f"verification failed: {exc}. {_MANUAL}") from exc
    return counts


def download_alfworld(
    cache_dir: str | Path,
    *,
    force: bool = False,
    urls: Sequence[str] | None = None,
    timeout: float = TIMEOUT_S,
) -> Path:
    """Download and verify the official ALFWorld text games into ``cache_dir``.

    Args:
        cache_dir: destination; afterwards it holds ``json_2.1.1/{train,valid_seen,
            valid_unseen}/...``, ``logic/`` and ``g2po_download.json`` (archive URLs, SHA-256
            of the downloaded archives, game counts). Use it as ``env.data_dir``.
        force: download again even if a verified copy is present.
        urls: archive URLs to fetch instead of the script's ``JSON_FILES_URL`` and
            ``TW_PDDL_FILES_URL`` (a mirror; also used by the tests).
        timeout: seconds for connecting and for each read.

    Returns:
        ``Path(cache_dir)``.

    Raises:
        DataDownloadError: offline, an HTTP error, a bad archive, or verification failed; the
            message names the failing URL or check and the manual alternative.
    """
    root = Path(cache_dir).expanduser()
    marker = root / MARKER
    if marker.is_file() and not force:
        try:
            _verify(root)
            return root
        except DataDownloadError:
            pass  # incomplete copy: fetch again
    script = load_downloader()
    try:
        import requests
    except ImportError as exc:  # pragma: no cover - requests comes with alfworld
        raise DataDownloadError(
            f"the alfworld downloader needs `requests` ({exc}). {_MANUAL}"
        ) from exc
    script.requests = _RequestsWithTimeout(requests, timeout)  # type: ignore[attr-defined]  # the loaded script's global
    archives = list(urls) if urls is not None else [script.JSON_FILES_URL, script.TW_PDDL_FILES_URL]
    root.mkdir(parents=True, exist_ok=True)
    fetched: list[dict[str, str]] = []
    for url in archives:
        try:
            zipped = Path(script.download(url, dst=str(root), force=force))
        except Exception as exc:  # noqa: BLE001 - any network/HTTP failure
            raise DataDownloadError(f"downloading {url} failed: {exc!r}. {_MANUAL}") from exc
        try:
            digest = _sha256(zipped)
            script.unzip(str(zipped), dst=str(root), force=force)
        except Exception as exc:  # noqa: BLE001 - corrupt archive, disk full, ...
            raise DataDownloadError(
                f"extracting {zipped} (from {url}) failed: {exc!r}. {_MANUAL}"
            ) from exc
        finally:
            if zipped.exists():
                os.remove(zipped)
        fetched.append({"url": url, "sha256": digest})
    logic = root / "logic"
    logic.mkdir(exist_ok=True)
    for src in wheel_logic_paths():
        dst = logic / src.name
        if force or not dst.exists():
            shutil.copy(src, dst)
    counts = _verify(root)
    marker.write_text(
        json.dumps({"archives": fetched, "games": counts}, indent=1), encoding="utf-8"
    )
    return root
