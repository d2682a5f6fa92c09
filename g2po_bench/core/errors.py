"""The errors every layer may raise and the CLI turns into one line (no traceback).

- :class:`DataError`: a benchmark's data is missing, incomplete or unreadable; the message says
  which and the command that fetches or generates it (ALFWorld games, WebShop products, AppWorld
  tasks, a split shorter than its manifest).
- :class:`DataDownloadError`: ``g2po data download`` failed (no internet, a bad checksum, a missing
  interpreter); the message names what failed and the manual alternative.
- :class:`EnvironmentSetupError`: an environment cannot start (e.g. AppWorld's interpreter or
  server is missing); the message says how to install it.
"""

from __future__ import annotations

__all__ = ["DataError", "DataDownloadError", "EnvironmentSetupError", "SUITE_ERRORS"]


class DataError(Exception):
    """A benchmark's data is missing, incomplete or unreadable (the message says how to fix it)."""


class DataDownloadError(DataError):
    """Fetching or verifying a benchmark's data failed (the message names what failed and the
    manual alternative)."""


class EnvironmentSetupError(RuntimeError):
    """An environment cannot start because something it runs on is missing or broken (the message
    says what and how to install it)."""


SUITE_ERRORS: tuple[type[Exception], ...] = (DataError, EnvironmentSetupError)
"""The errors a command reports as one line: a user can fix them without reading a traceback."""
