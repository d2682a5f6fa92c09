"""The errors every layer may raise and the CLI turns into one line (no traceback).

- :class:`DataError`: a benchmark's data is missing, incomplete or unreadable; the message says
  which and the command that fetches or generates it (ALFWorld games, WebShop products, AppWorld
  tasks, a split shorter than its manifest).
- :class:`DataDownloadError`: ``g2po data download`` failed (no internet, a bad checksum, a missing
  interpreter); the message names what failed and the manual alternative.
- :class:`EnvironmentSetupError`: an environment cannot start (e.g. AppWorld's interpreter or
  server is missing); the message says how to install it.
- :class:`MissingDependencyError`: an optional dependency a command needs is not installed (e.g.
  ``backend=openrlhf`` without OpenRLHF and its GPU stack); the message says how to install it.
  It is also an ``ImportError``.
- :class:`CheckpointError`: a run's checkpoint is incomplete or corrupt (a truncated or torn
  file); the message names the file and what is still intact.
"""

from __future__ import annotations

__all__ = ["DataError", "DataDownloadError", "EnvironmentSetupError", "MissingDependencyError", "CheckpointError",
           "SUITE_ERRORS"]


class DataError(Exception):
    """A benchmark's data is missing, incomplete or unreadable (the message says how to fix it)."""


class DataDownloadError(DataError):
    """Fetching or verifying a benchmark's data failed (the message names what failed and the
    manual alternative)."""


class EnvironmentSetupError(RuntimeError):
    """An environment cannot start because something it runs on is missing or broken (the message
    says what and how to install it)."""


class MissingDependencyError(ImportError):
    """An optional dependency a command needs is not installed (the message says what is missing and
    how to install it). An ``ImportError``, so callers that catch that keep working."""


class CheckpointError(Exception):
    """A run's checkpoint is incomplete or corrupt: a file is missing, shorter or longer than the
    checkpoint's manifest records, or not readable in its format (the message names the file)."""


SUITE_ERRORS: tuple[type[Exception], ...] = (DataError, EnvironmentSetupError, MissingDependencyError,
                                             CheckpointError)
"""The errors a command reports as one line: a user can fix them without reading a traceback."""
