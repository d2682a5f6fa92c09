"""Parsing of model responses in the ``<think>...</think><action>...</action>`` format.

Source: the G2PO/verl-agent prompt protocol (ALGORITHMS.md "Training loop facts"). A response
is *valid* when it holds a ``<think>...</think>`` block and a non-empty ``<action>...</action>``
block. An invalid response is not an error: the episode goes on, the environment receives a
fallback text (the engine replies with its own message, e.g. ALFWorld's "Nothing happens."),
and the step is penalised by the estimator (penalty p = 0.1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ParsedAction", "parse_response", "FALLBACK_CHARS"]

#: number of trailing characters of an unparseable response sent to the environment
#: (the reference projection sends the tail of the text so the engine answers it).
FALLBACK_CHARS = 30

_ACTION_RE = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
_THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class ParsedAction:
    """The result of parsing one response.

    Attributes:
        action: the command to send to the environment (the fallback text when invalid).
        valid: whether the response followed the format.
        reason: why it is invalid ("" when valid), for logs.
    """

    action: str
    valid: bool
    reason: str = ""


def parse_response(text: str, *, require_think: bool = True, lowercase: bool = True) -> ParsedAction:
    """Extract the action from a model response.

    Args:
        text: the decoded response (special tokens removed).
        require_think: also require a ``<think>...</think>`` block (reference behaviour).
        lowercase: lowercase the action (ALFWorld's parser is case-sensitive lowercase).

    Returns:
        ParsedAction; never raises on malformed text.
    """
    matches = _ACTION_RE.findall(text)
    action = matches[-1].strip() if matches else ""
    if lowercase:
        action = action.lower()
    if not matches:
        return ParsedAction(_fallback(text, lowercase), False, "missing <action>...</action>")
    if not action:
        return ParsedAction(_fallback(text, lowercase), False, "empty <action></action>")
    if require_think and not _THINK_RE.search(text):
        return ParsedAction(action, False, "missing <think>...</think>")
    return ParsedAction(action, True, "")


def _fallback(text: str, lowercase: bool) -> str:
    tail = text.strip()[-FALLBACK_CHARS:]
    return tail.lower() if lowercase else tail
