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
- :class:`RunFolderBusy`: another process holds the run folder (``<run>/.lock``); the message
  names the run and the holding process. :class:`RunFolderLost`: the run folder was replaced
  while this process trained it (deleted and created again); the process writes nothing more.
  Both are :class:`RunFolderError` (docs/run-folder.md "One process per run folder").
"""

from __future__ import annotations

__all__ = ["DataError", "DataDownloadError", "EnvironmentSetupError", "MissingDependencyError", "CheckpointError",
           "RunFolderError", "RunFolderBusy", "RunFolderLost", "SUITE_ERRORS"]


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


class RunFolderError(Exception):
    """A run folder is not this process's to write (:class:`RunFolderBusy`, :class:`RunFolderLost`)."""


class RunFolderBusy(RunFolderError):
    """Another process holds the run folder's lock (``<run>/.lock``): it trains that run now (the
    message names the run and the holding process id)."""


class RunFolderLost(RunFolderError):
    """The run folder this process locked was replaced (deleted and created again, so its
    ``.lock`` is another file): the process stops and writes nothing more into it."""


SUITE_ERRORS: tuple[type[Exception], ...] = (DataError, EnvironmentSetupError, MissingDependencyError,
                                             CheckpointError, RunFolderError)
"""The errors a command reports as one line: a user can fix them without reading a traceback."""
