"""Data that fails to load never vanishes silently (every benchmark's loaders use this).

- :func:`warn_skipped`: one :class:`DataLoadWarning` naming every item a loader skipped
  (a game, a product, a goal, a task) with the reason; an item is named once per process.
- :class:`SplitTooSmallError`: a split holds fewer items than its manifest records or than its
  definition needs (a WebShop split cut short by a small catalogue); raised, never a silently
  smaller split.
- :func:`check_split_count`: a split whose size differs from the published one (ALFWorld's
  official splits): a :class:`SplitCountWarning` naming the items left out, or for an evaluation
  split a :class:`SplitCountError` unless the run accepts it (``env.allow_incomplete_eval_split``). :class:`SmallPanelWarning`: fewer tasks than ``eval.num_tasks`` (the default
  may exceed a small split, so a warning, not an error).

What a benchmark leaves out *by its definition* (ALFWorld's ``movable``/``Sliced`` task folders
and games not marked solvable, as AlfredTWEnv does; WebShop products without an instruction,
which never were goals in the original) is documented by each loader and is not a failure.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

from g2po_bench.core.errors import DataError

__all__ = ["DataLoadWarning", "SmallPanelWarning", "SplitTooSmallError", "SplitCountWarning", "SplitCountError",
           "warn_skipped", "require_at_least", "check_split_count"]

_NAMED: set[tuple[str, str]] = set()


class DataLoadWarning(UserWarning):
    """Items of a data set were skipped while loading; the message names each with its reason."""


class SmallPanelWarning(UserWarning):
    """The evaluation split holds fewer tasks than ``eval.num_tasks``: the panel is the whole split."""


class SplitTooSmallError(DataError, ValueError):
    """A split has fewer items than its manifest records or the config asks for; the message
    says how many were expected, how many load, and what to do."""


class SplitCountWarning(DataLoadWarning):
    """A split holds another number of items than its published size; the message says how many
    and names the items the loader left out."""


class SplitCountError(DataError, ValueError):
    """An evaluation split holds another number of items than its published size (the panel would
    not be the published one); the message names the items left out and the key that accepts it."""


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


def check_split_count(have: int, expected: int, what: str, left_out: Iterable[tuple[str, str]], *,
                      strict: bool, accept: str, noun: str = "items") -> None:
    """Compare a split's size with its published one.

    Args:
        have: items that loaded; expected: the published count.
        what: the split, e.g. ``"ALFWorld split 'valid_seen' of /data/alfworld"``.
        left_out: ``(item name, reason)`` of the items the loader left out (all are named).
        strict: raise instead of warning (an evaluation split).
        accept: the setting that turns the error into the warning, e.g.
            ``"env.allow_incomplete_eval_split=true"``.
        noun: what the items are, plural (``"games"``).

    Raises:
        SplitCountError: ``strict`` and ``have != expected``.

    Warns:
        SplitCountWarning: not ``strict`` and ``have != expected``.
    """
    if have == expected:
        return
    items = list(left_out)
    named = "; ".join(f"{name} ({reason})" for name, reason in items)
    diff = (f"{expected - have} fewer" if have < expected else f"{have - expected} more")
    msg = (f"{what} holds {have} {noun}, the published split {expected} ({diff}); "
           + (f"the loader left out {len(items)}: {named}" if items else "the loader left out none of them")
           + ". Results on it are not comparable with results on the published split")
    if strict:
        raise SplitCountError(f"{msg}. Get the complete split, or set {accept} to evaluate on it anyway")
    warnings.warn(msg, SplitCountWarning, stacklevel=3)
