"""Shared pytest helpers.

``shared_data``: the folder of shared test data (``$G2PO_SHARED_DATA``, else
``<repo>/../shared/data``). Missing data skips the test outside CI and fails it in CI
(env ``CI`` set), so CI never silently skips data-dependent tests.

``dispositions``: set signal dispositions of the pytest process for one test. A test that
signals this process (or forks children that inherit its dispositions) sets the ones it relies
on: pytest may have been started with SIGINT ignored (``nohup ... &``, ``cmd &`` in a script),
and the suite must pass however it was started.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest


def shared_data_dir() -> Path:
    """Path of the shared data folder (may not exist)."""
    root = os.environ.get("G2PO_SHARED_DATA")
    return Path(root) if root else Path(__file__).resolve().parents[1].parent / "shared" / "data"


def require_shared(sub: str = "") -> Path:
    """``shared_data_dir() / sub``; skip (fail in CI) when it does not exist."""
    path = shared_data_dir() / sub
    if not path.exists():
        msg = (
            f"shared test data not found at {path} (set G2PO_SHARED_DATA to the shared data folder)"
        )
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder; skips outside CI / fails in CI when it is missing."""
    return require_shared()


@pytest.fixture
def dispositions():
    """``dispositions(sig, handler)`` sets this process's handler of ``sig`` for the test; the
    previous handlers are restored afterwards."""
    saved: dict[int, object] = {}

    def set_(sig: int, handler) -> None:
        saved.setdefault(sig, signal.getsignal(sig))
        signal.signal(sig, handler)

    yield set_
    for sig, handler in saved.items():
        signal.signal(sig, handler)
