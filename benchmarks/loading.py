"""Data that fails to load never vanishes silently (every benchmark's loaders use this).

- :func:`warn_skipped`: one :class:`DataLoadWarning` naming every item a loader skipped
  (a game, a product, a goal, a task) with the reason; an item is named once per process.
- :class:`SplitTooSmallError`: a split holds fewer items than its manifest records or than its
  definition needs (a WebShop split cut short by a small catalogue); raised, never a silently
  smaller split. :class:`SmallPanelWarning`: fewer tasks than ``eval.num_tasks`` (the default
  may exceed a small split, so a warning, not an error).

What a benchmark leaves out *by its definition* (ALFWorld's ``movable``/``Sliced`` task folders
and games not marked solvable, as AlfredTWEnv does; WebShop products without an instruction,
which never were goals in the original) is documented by each loader and is not a failure.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

from g2po_bench.core.errors import DataError

__all__ = ["DataLoadWarning", "SmallPanelWarning", "SplitTooSmallError", "warn_skipped", "require_at_least"]

_NAMED: set[tuple[str, str]] = set()


class DataLoadWarning(UserWarning):
    """Items of a data set were skipped while loading; the message names each with its reason."""


class SmallPanelWarning(UserWarning):
    """The evaluation split holds fewer tasks than ``eval.num_tasks``: the panel is the whole split."""


class SplitTooSmallError(DataError, ValueError):
    """A split has fewer items than its manifest records or the config asks for; the message
    says how many were expected, how many load, and what to do."""


def warn_skipped(what: str, where: str, skipped: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Issue one :class:`DataLoadWarning` naming the skipped items not named before in this
    process.

    Args:
        what: the kind of item, plural (``"ALFWorld games"``, ``"WebShop products"``).
        where: the file or folder they come from.
        skipped: ``(item name, reason)`` pairs, e.g. ``("train/pick.../trial_1", "no game.tw-pddl")``.

    Returns:
        The pairs named by this call (empty when all were named before, or none was skipped).
    """
    new = []
    for name, reason in skipped:
        key = (f"{what}|{where}", name)
        if key not in _NAMED:
            _NAMED.add(key)
            new.append((name, reason))
    if new:
        items = "; ".join(f"{name} ({reason})" for name, reason in new)
        warnings.warn(f"skipped {len(new)} {what} in {where} that failed to load: {items}",
                      DataLoadWarning, stacklevel=3)
    return new


def require_at_least(have: int, expected: int, what: str, fix: str) -> None:
    """Raise :class:`SplitTooSmallError` when ``have < expected``.

    Args:
        have: items that loaded.
        expected: items the manifest records or the config asks for.
        what: the split, e.g. ``"ALFWorld split 'train' of /data/games (manifest.json)"``.
        fix: what to do about it (one sentence).
    """
    if have < expected:
        raise SplitTooSmallError(f"{what}: only {have} load, {expected} expected; {fix}")
