"""Download the original WebShop data files (for users with internet access).

The files are the ones the original ``setup.sh`` fetches from Google Drive (MIT licence,
Princeton NLP): ``items_shuffle_1000.json`` and ``items_ins_v2_1000.json`` (the 1,000-product
"small" setting that verl-agent/G2PO use), ``items_human_ins.json`` (human goals), and with
``full=True`` also ``items_shuffle.json`` and ``items_ins_v2.json`` (all 1.18 M products,
several GB). Nothing here runs at import or environment construction.

Each file is fetched with :mod:`urllib` (short connect timeout), written atomically,
checked to be JSON of the expected shape, and its SHA-256 recorded in ``SHA256SUMS`` in the
cache folder; a later call verifies existing files against that record instead of
downloading again. Offline, or when Google Drive refuses, :class:`DataDownloadError` says
which file failed, why, and how to get it by hand.

Command line: ``python -m g2po_bench.benchmarks.webshop.download [DEST] [--full]`` (also ``g2po data
download webshop``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from g2po_bench.core.errors import DataDownloadError

__all__ = ["DataDownloadError", "download_webshop", "WEBSHOP_FILES", "drive_url"]

#: file name -> (Google Drive id, expected JSON container type, part of the small setting)
WEBSHOP_FILES: dict[str, tuple[str, type, bool]] = {
    "items_shuffle_1000.json": ("1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib", list, True),
    "items_ins_v2_1000.json": ("1IduG0xl544V_A_jv3tHXC0kyFi7PnyBu", dict, True),
    "items_human_ins.json": ("14Kb5SPBk_jfdLZ_CDBNitW98QLDlKR5O", dict, True),
    "items_shuffle.json": ("1A2whVgOO0euk5O13n2iYDM0bQRkkRduB", list, False),
    "items_ins_v2.json": ("1s2j6NgHljiZzQNL3veZaAiyW_qDEgBNi", dict, False),
}
DRIVE_BASE = "https://drive.usercontent.google.com/download"
_CHUNK = 1 << 20




def drive_url(file_id: str, base: str = DRIVE_BASE) -> str:
    """The direct-download URL of a Google Drive file (large files skip the virus-scan page
    with ``confirm=t``)."""
    return f"{base}?{urllib.parse.urlencode({'id': file_id, 'export': 'download', 'confirm': 't'})}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_sums(folder: Path) -> dict[str, str]:
    sums = {}
    f = folder / "SHA256SUMS"
    if f.is_file():
        for line in f.read_text().splitlines():
            m = re.match(r"([0-9a-f]{64})\s+\*?(\S+)$", line.strip())
            if m:
                sums[m.group(2)] = m.group(1)
    return sums


def _write_sums(folder: Path, sums: dict[str, str]) -> None:
    (folder / "SHA256SUMS").write_text("".join(f"{h}  {n}\n" for n, h in sorted(sums.items())))


def _manual_hint(name: str, file_id: str, dest: Path) -> str:
    return (f"Manual alternative: on a machine with internet, open "
            f"https://drive.google.com/uc?id={file_id} (or run `gdown {file_id}`), save it as "
            f"{dest / name}, then set env.data_dir={dest}.")


def _fetch(url: str, target: Path, timeout: float) -> None:
    req = urllib.request.Request(url, headers={"User-Agent": "g2po-bench/0.1"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - fixed https URL
        ctype = resp.headers.get("Content-Type", "")
        if "text/html" in ctype:
            raise DataDownloadError("the server answered with a web page instead of the file "
                                    "(Google Drive quota or a changed link)")
        fd, tmp = tempfile.mkstemp(prefix=".part-", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in iter(lambda: resp.read(_CHUNK), b""):
                    out.write(chunk)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _check_json(path: Path, kind: type) -> None:
    try:
        with path.open(encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataDownloadError(f"{path.name} is not valid JSON ({exc})") from None
    if not isinstance(data, kind):
        raise DataDownloadError(f"{path.name} holds a JSON {type(data).__name__}, expected {kind.__name__}")


def download_webshop(
    cache_dir: str | Path, *, full: bool = False, timeout: float = 20.0, base_url: str = DRIVE_BASE
) -> Path:
    """Fetch the WebShop data files into ``cache_dir`` (module docstring).

    Args:
        cache_dir: destination folder (created).
        full: also the 1.18 M-product files.
        timeout: seconds to wait for a connection or a read.
        base_url: download endpoint (tests point it at a closed local port).

    Returns:
        ``cache_dir``, usable as ``env.data_dir``.

    Raises:
        DataDownloadError: a file could not be fetched or verified.
    """
    dest = Path(cache_dir).expanduser()
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataDownloadError(f"cannot create the WebShop data folder {dest}: {exc}") from None
    sums = _read_sums(dest)
    for name, (file_id, kind, small) in WEBSHOP_FILES.items():
        if not (small or full):
            continue
        target = dest / name
        if target.is_file() and name in sums:
            if _sha256(target) == sums[name]:
                continue
            raise DataDownloadError(f"{target} does not match its recorded SHA-256 in "
                                    f"{dest / 'SHA256SUMS'}; delete it and download again")
        url = drive_url(file_id, base_url)
        try:
            _fetch(url, target, timeout)
        except DataDownloadError as exc:
            raise DataDownloadError(f"downloading {name} from {url} failed: {exc}. "
                                    f"{_manual_hint(name, file_id, dest)}") from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DataDownloadError(f"downloading {name} from {url} failed ({reason}); no internet "
                                    f"access? {_manual_hint(name, file_id, dest)}") from None
        _check_json(target, kind)
        sums[name] = _sha256(target)
        _write_sums(dest, sums)
    return dest


def main(argv: list[str] | None = None) -> int:
    """``python -m g2po_bench.benchmarks.webshop.download [DEST] [--full]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    full = "--full" in args
    args = [a for a in args if a != "--full"]
    dest = args[0] if args else os.path.join(os.path.expanduser("~"), ".cache", "g2po", "webshop")
    try:
        path = download_webshop(dest, full=full)
    except DataDownloadError as exc:
        print(f"download failed: {exc}", file=sys.stderr)
        return 1
    print(f"WebShop data in {path}; use env.data_dir={path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
