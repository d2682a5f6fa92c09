"""Command-line parsing shared by the ``g2po`` subcommands: the parser class and the value types
of options (``type=`` of :meth:`argparse.ArgumentParser.add_argument`).

Each value type turns an option's text into its value or raises
:class:`argparse.ArgumentTypeError`, whose message the parser prints after the option's name.
"""

from __future__ import annotations

import argparse

__all__ = ["ArgumentParser", "positive_int", "non_negative_int"]


class ArgumentParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose errors are one line on stderr, naming the fix.

    argparse prints the whole usage block before an error (a dozen lines for ``g2po credit``),
    which buries the one line that says what is wrong; this parser prints
    ``<prog>: error: <message> (<prog> --help lists the options)`` and exits with status 2, as
    argparse does. Subparsers made by :meth:`add_subparsers` are of this class too.
    """

    def error(self, message: str):  # noqa: D102 (argparse's hook)
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the options)\n")


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
