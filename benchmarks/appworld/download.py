"""``g2po data download appworld``: the appworld package's own data download, run by the
AppWorld interpreter.

It calls ``appworld.download.download_data`` (what ``appworld download data --root DEST``
does: fetch the encrypted bundle, unpack it into ``DEST/data``; needs internet; the data's
licence forbids re-hosting it in plain text, so it is never copied into this repository) in a
world server whose root is ``DEST``, then checks that ``DEST/data/tasks`` exists (the package
itself only prints a message when the download fails).
"""

from __future__ import annotations

import os
from pathlib import Path

from g2po_bench.benchmarks.appworld.runtime import (
    AppWorldUnavailable,
    WorldCrashed,
    WorldServer,
    WorldServerError,
    WorldTimeout,
    find_python,
)
from g2po_bench.core.errors import DataDownloadError

__all__ = ["DataDownloadError", "download_appworld", "default_dest"]




def default_dest() -> Path:
    """``~/.cache/g2po/appworld``: the default AppWorld root (it will hold ``data/``)."""
    return Path(os.path.expanduser("~")) / ".cache" / "g2po" / "appworld"


def download_appworld(dest: str | os.PathLike[str], python: str | None = None, timeout: float = 3600.0) -> Path:
    """Download the AppWorld data into ``dest/data``; returns ``dest`` (the root to pass as
    ``env.data_dir`` or ``$APPWORLD_ROOT``).

    Raises:
        DataDownloadError: naming the cause (no AppWorld interpreter and how to install it,
            or the package's download error).
    """
    dest = Path(dest).expanduser().resolve()
    dest.mkdir(parents=True, exist_ok=True)
    try:
        server = WorldServer(find_python(python), dest)
    except AppWorldUnavailable as exc:
        raise DataDownloadError(str(exc)) from None
    try:
        reply = server.request("download", timeout)
    except (WorldServerError, WorldTimeout, WorldCrashed) as exc:
        reason = str(exc).split("\nTraceback")[0].strip()  # the error, without the server's traceback
        raise DataDownloadError(f"`appworld download data` into {dest} failed (it needs internet): {reason}") from None
    finally:
        server.close()
    print(f"AppWorld data: {reply['num_tasks']} tasks in {reply['data']}")
    return dest
