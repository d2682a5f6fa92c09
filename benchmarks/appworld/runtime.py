"""The AppWorld interpreter and the client of one world-server process.

Why a second interpreter: ``appworld`` 0.1.3 pins ``pydantic<2``, ``psutil<6``,
``xxhash<4``, ``cryptography<40``, ``typer<0.17`` and ``httpx<0.28``; the suite's OpenRLHF
stack needs pydantic 2 (DeepSpeed) and psutil 7, so the two cannot share one environment.
The worlds therefore run in processes of a separate Python environment where ``appworld``
is installed (``python -m venv ~/.cache/g2po/appworld-venv && .../bin/pip install
appworld==0.1.3.post1 && .../bin/appworld install``). Each process is a
:mod:`g2po_bench.benchmarks.appworld.server` holding one world; this module finds the interpreter and
talks to one server with a hard per-request time limit (a hanging or crashing cell kills
the process, never the caller).

Interpreter lookup (:func:`find_python`): the ``env.appworld_python`` config key, else
``$G2PO_APPWORLD_PYTHON``, else this interpreter when it can import ``appworld``, else
``~/.cache/g2po/appworld-venv/bin/python``. None found raises :class:`AppWorldUnavailable`
with the install commands.
"""

from __future__ import annotations

import importlib.util
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from g2po_bench.core.errors import DataError, EnvironmentSetupError

__all__ = [
    "AppWorldUnavailable",
    "AppWorldDataMissing",
    "WorldServerError",
    "WorldTimeout",
    "WorldCrashed",
    "WorldServer",
    "find_python",
    "default_venv",
    "INSTALL_HINT",
    "DOWNLOAD_HINT",
    "check_data_root",
]

SERVER_SCRIPT = Path(__file__).with_name("server.py")

#: the appworld release the suite is tested with
APPWORLD_VERSION = "0.1.3.post1"


def default_venv() -> Path:
    """``~/.cache/g2po/appworld-venv``: where the install hint puts the AppWorld interpreter."""
    return Path(os.path.expanduser("~")) / ".cache" / "g2po" / "appworld-venv"


INSTALL_HINT = (
    "install AppWorld into its own Python environment (it pins pydantic<2, which the suite's "
    "OpenRLHF stack cannot share):\n"
    f"  python3 -m venv {default_venv()}\n"
    f"  {default_venv()}/bin/pip install appworld=={APPWORLD_VERSION}\n"
    f"  {default_venv()}/bin/appworld install\n"
    "then point the suite at it with env.appworld_python=PATH or $G2PO_APPWORLD_PYTHON "
    "(that folder's bin/python is found by default)"
)

DOWNLOAD_HINT = (
    "download the AppWorld task data (needs internet; its licence forbids re-hosting it): "
    "`g2po data download appworld` (wraps `appworld download data`), then pass "
    "env.data_dir=<the folder holding data/> or set $APPWORLD_ROOT"
)


class AppWorldUnavailable(EnvironmentSetupError):
    """No Python interpreter with ``appworld`` installed was found (message: how to install)."""


class AppWorldDataMissing(DataError, FileNotFoundError):
    """The AppWorld task data is not where the config points (message: how to download it)."""


class WorldServerError(RuntimeError):
    """The world server answered a request with an error (a Python exception inside it)."""


class WorldTimeout(RuntimeError):
    """The world server did not answer within the time limit; it has been killed."""


class WorldCrashed(RuntimeError):
    """The world server process died; the message holds its exit code and last log lines."""


def _can_import_appworld(python: str) -> bool:
    if os.path.abspath(python) == os.path.abspath(sys.executable):  # (a venv links to its base python)
        return importlib.util.find_spec("appworld") is not None
    try:
        # locate, do not import (an import takes seconds, much longer on a loaded machine)
        r = subprocess.run([python, "-c", "import importlib.util, sys; "
                            "sys.exit(importlib.util.find_spec('appworld') is None)"],
                           capture_output=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def find_python(configured: str | None = None) -> str:
    """The interpreter that runs the world servers (module docstring, "Interpreter lookup").

    Raises:
        AppWorldUnavailable: the configured interpreter does not exist or cannot import
            ``appworld``, or none was found.
    """
    for source, path in (("env.appworld_python", configured),
                         ("$G2PO_APPWORLD_PYTHON", os.environ.get("G2PO_APPWORLD_PYTHON"))):
        if path:
            p = os.path.expanduser(path)
            if not os.path.exists(p):
                raise AppWorldUnavailable(f"{source} = {path!r} does not exist; {INSTALL_HINT}")
            if not _can_import_appworld(p):
                raise AppWorldUnavailable(f"{source} = {path!r} cannot import appworld; {INSTALL_HINT}")
            return p
    if importlib.util.find_spec("appworld") is not None:
        return sys.executable
    venv_python = default_venv() / "bin" / "python"
    if venv_python.exists() and _can_import_appworld(str(venv_python)):
        return str(venv_python)
    raise AppWorldUnavailable(f"no Python environment with the appworld package found; {INSTALL_HINT}")


def check_data_root(root: str | os.PathLike[str]) -> Path:
    """``root`` if it holds AppWorld task data (``data/tasks`` and ``data/datasets``).

    Raises:
        AppWorldDataMissing: naming what is missing and the download command.
    """
    root = Path(root).expanduser()
    for sub in ("data/tasks", "data/datasets", "data/api_docs"):
        if not (root / sub).is_dir():
            raise AppWorldDataMissing(f"no AppWorld data at {root} ({root / sub} is missing); {DOWNLOAD_HINT}")
    return root


def _sweep_stale_logs() -> None:
    """Delete server logs left by clients that were killed (``g2po-appworld-log-<pid>-*.log``
    whose ``<pid>`` is no longer running)."""
    for path in Path(tempfile.gettempdir()).glob("g2po-appworld-log-*-*.log"):
        pid = path.name.split("-")[3]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except PermissionError:
            pass


class WorldServer:
    """One :mod:`g2po_bench.benchmarks.appworld.server` process (one world at a time).

    Args:
        python: the AppWorld interpreter (:func:`find_python`).
        data_root: the folder holding ``data/`` (the real root; the server works in a
            private copy-by-link of it, see the server's docstring).
        start_timeout: seconds allowed for start-up (imports take a few seconds).

    Every request waits at most its ``timeout`` seconds; on expiry the process group is
    killed and :class:`WorldTimeout` raised; a dead process raises :class:`WorldCrashed`;
    an exception inside the server raises :class:`WorldServerError`. After a timeout or
    crash the object is dead (``alive`` False): make a new one.
    """

    def __init__(self, python: str, data_root: str | os.PathLike[str], *, start_timeout: float = 600.0):
        self.python = python
        self.data_root = str(Path(data_root).expanduser().resolve())
        _sweep_stale_logs()
        self._log = tempfile.NamedTemporaryFile(prefix=f"g2po-appworld-log-{os.getpid()}-", suffix=".log",
                                                delete=False)
        env = dict(os.environ)
        env["G2PO_APPWORLD_DATA_ROOT"] = self.data_root
        env.setdefault("PYTHONUNBUFFERED", "1")
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = "1"
        self.proc = subprocess.Popen(
            [python, str(SERVER_SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._log, env=env, start_new_session=True, cwd=tempfile.gettempdir(),
        )
        self._buf = b""
        self.private_root = ""
        self.alive = True
        hello = self._read(start_timeout, "start-up")
        if not hello.get("ok"):
            self.kill()
            raise AppWorldUnavailable(f"the AppWorld interpreter {python} failed to start a world server: "
                                      f"{hello.get('error')}; {INSTALL_HINT}")
        self.version = hello.get("version", "")
        self.private_root = hello.get("root", "")

    @property
    def pid(self) -> int:
        """Process id of the server."""
        return self.proc.pid

    def log_tail(self, n: int = 2000) -> str:
        """The last ``n`` characters of the server's stderr log."""
        try:
            return Path(self._log.name).read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def _read(self, timeout: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorldTimeout(f"AppWorld world server gave no answer to {what} within {timeout:g} s; killed it")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                code = self.proc.wait(timeout=5)
                self.alive = False
                self._cleanup()
                raise WorldCrashed(f"AppWorld world server died during {what} (exit code {code}); "
                                   f"log tail:\n{self.log_tail(1500)}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, cmd: str, timeout: float, **kwargs: Any) -> dict[str, Any]:
        """Send one request and wait at most ``timeout`` seconds for its reply.

        Raises:
            WorldTimeout, WorldCrashed, WorldServerError (class docstring).
        """
        if not self.alive:
            raise WorldCrashed("AppWorld world server is not running (it was killed or died earlier)")
        try:
            self.proc.stdin.write((json.dumps({"cmd": cmd, **kwargs}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            code = self.proc.poll()
            self.alive = False
            self._cleanup()
            raise WorldCrashed(f"AppWorld world server is gone (exit code {code}); log tail:\n{self.log_tail(1500)}") from None
        reply = self._read(timeout, cmd)
        if not reply.get("ok"):
            raise WorldServerError(f"AppWorld {cmd} failed: {reply.get('error')}\n{reply.get('traceback', '')}")
        return reply

    def kill(self) -> None:
        """Kill the server's process group now."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
        self.alive = False
        self._cleanup()

    def close(self, timeout: float = 30.0) -> None:
        """Close the world and end the process (killed if it does not exit in time)."""
        if self.alive and self.proc.poll() is None:
            try:
                self.request("exit", timeout)
                self.proc.wait(timeout=timeout)
            except Exception:  # noqa: BLE001 - ending anyway
                pass
        self.kill()
        try:
            os.unlink(self._log.name)
        except OSError:
            pass

    def _cleanup(self) -> None:
        if self.private_root and self.proc.poll() is not None:  # a killed server cannot clean up
            shutil.rmtree(self.private_root, ignore_errors=True)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        try:
            self._log.close()
        except OSError:
            pass

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
        except Exception:  # noqa: BLE001
            pass
