"""Value types of command-line options, shared by the ``g2po`` subcommands (``type=`` of
:meth:`argparse.ArgumentParser.add_argument`).

Each function turns an option's text into its value or raises
:class:`argparse.ArgumentTypeError`, whose message argparse prints after the option's name.
"""

from __future__ import annotations

import argparse

__all__ = ["positive_int", "non_negative_int"]


def _int_at_least(text: str, minimum: int) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < minimum:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= {minimum}")
    return n


def positive_int(text: str) -> int:
    """A whole number >= 1 (e.g. ``--groups 16``).

    Raises:
        argparse.ArgumentTypeError: not a whole number, or below 1.
    """
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """A whole number >= 0 (e.g. ``--batch-tokens 0``).

    Raises:
        argparse.ArgumentTypeError: not a whole number, or below 0.
    """
    return _int_at_least(text, 0)
