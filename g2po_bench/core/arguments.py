"""Command-line parsing shared by the ``g2po`` subcommands: the parser class and the value types
of options (``type=`` of :meth:`argparse.ArgumentParser.add_argument`).

Each value type turns an option's text into its value or raises
:class:`argparse.ArgumentTypeError`, whose message the parser prints after the option's name.
"""

from __future__ import annotations

import argparse

__all__ = ["ArgumentParser", "positive_int", "non_negative_int", "int_at_least"]


class ArgumentParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose errors are one line on stderr, naming the fix.

    argparse prints the whole usage block before an error (a dozen lines for ``g2po credit``),
    which buries the one line that says what is wrong; this parser prints
    ``<prog>: error: <message> (<prog> --help lists the options)`` and exits with status 2, as
    argparse does. Subparsers made by :meth:`add_subparsers` are of this class too.
    """

    #: the subcommands' action of :meth:`add_subparsers` (None before it is called)
    subcommands: argparse.Action | None = None

    def error(self, message: str):  # noqa: D102 (argparse's hook)
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the options)\n")

    def add_subparsers(self, **kwargs):  # noqa: D102 (argparse's; remembered in ``subcommands``)
        if self.subcommands is None:
            self.subcommands = super().add_subparsers(**kwargs)
            return self.subcommands
        return super().add_subparsers(**kwargs)  # argparse's own error: one subcommand set per parser


def int_at_least(minimum: int):
    """The value type of a whole number >= ``minimum`` (e.g. ``type=int_at_least(2)`` for a group
    size: a group compares two rollouts at least).

    Returns:
        a function ``text -> int`` that raises :class:`argparse.ArgumentTypeError` for text that
        is not a whole number or is below ``minimum``.
    """
    def parse(text: str) -> int:
        return _int_at_least(text, minimum)

    parse.__name__ = f"int_at_least_{minimum}"
    return parse


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
