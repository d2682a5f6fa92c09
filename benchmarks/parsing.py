"""Parsing of model responses in the ``<think>...</think><action>...</action>`` format.

Source: the G2PO/verl-agent prompt protocol (docs/design-notes.md "Training-loop facts") and the
reference *projections* that turn a response into the text sent to the environment
(verl-agent ``agent_system/environments/env_package/<env>/projection.py``:
``alfworld_projection``, ``webshop_projection``, ``appworld_projection``). An invalid
response is not an error: the episode goes on, the environment receives the projected text
(the engine replies with its own message, e.g. ALFWorld's "Nothing happens."), and the step
is penalised by the estimator (penalty p = 0.1).

The reference rules, each applied in :func:`parse_response` (in our words):

1. **Lowercase first.** The whole response is lowercased before the tags are searched, so
   ``<ACTION>`` counts as ``<action>`` and the action is lowercase (AppWorld: no lowercasing;
   its code is case-sensitive).
2. **First block.** The action is the text between the *first* ``<action>`` and the *first*
   ``</action>`` (``str.find``), stripped (AppWorld: ``<code>``/``</code>``, not stripped).
   A ``</action>`` that comes before the first ``<action>`` gives an empty action (Python
   slicing), as in the reference.
3. **Empty is valid.** ``<action></action>`` (or only blanks) is a valid response whose
   action is the empty string, sent as is.
4. **No block -> fallback.** Without both tags the response is invalid and the text sent is
   the last N characters of the lowercased, *unstripped* response: N = 30 (ALFWorld),
   20 (WebShop), 100 (AppWorld, not lowercased).
5. **Think check.** A response with a block is still invalid unless the *original* text
   contains both ``<think>`` and ``</think>``, case-sensitively, in any order (two
   independent ``find`` calls); its action is still sent.
6. **CJK check.** A response with any character in U+4E00..U+9FFF (CJK unified ideographs,
   which Qwen models sometimes emit) is invalid; its action is still sent (ALFWorld and
   WebShop; the AppWorld projection has no such check).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ParsedAction", "Projection", "PROJECTIONS", "parse_response", "FALLBACK_CHARS"]


@dataclass(frozen=True)
class Projection:
    """One environment's reference projection (module docstring, rules 1-6).

    Attributes:
        name: the environment (``alfworld``, ``webshop``, ``appworld``).
        open_tag, close_tag: the action block's tags.
        lowercase: lowercase the response before searching (rule 1).
        strip: strip the extracted action (rule 2).
        fallback_chars: N of rule 4.
        reject_cjk: apply rule 6.
    """

    name: str
    open_tag: str = "<action>"
    close_tag: str = "</action>"
    lowercase: bool = True
    strip: bool = True
    fallback_chars: int = 30
    reject_cjk: bool = True


#: the reference projections by environment name
PROJECTIONS = {
    "alfworld": Projection("alfworld"),
    "webshop": Projection("webshop", fallback_chars=20),
    "appworld": Projection("appworld", "<code>", "</code>", lowercase=False, strip=False,
                           fallback_chars=100, reject_cjk=False),
}

#: number of trailing characters of an unparseable response sent to ALFWorld (rule 4)
FALLBACK_CHARS = PROJECTIONS["alfworld"].fallback_chars

_CJK = re.compile(r"[\u4e00-\u9fff]")


@dataclass(frozen=True)
class ParsedAction:
    """The result of parsing one response.

    Attributes:
        action: the text to send to the environment (the fallback text when no block).
        valid: whether the response followed the format.
        reason: why it is invalid ("" when valid), for logs.
    """

    action: str
    valid: bool
    reason: str = ""


def parse_response(
    text: str, *, require_think: bool = True, lowercase: bool | None = None,
    projection: str | Projection = "alfworld",
) -> ParsedAction:
    """Extract the action from a model response, as the reference projection does (module
    docstring, rules 1-6).

    Args:
        text: the decoded response (special tokens removed).
        require_think: apply the think check (rule 5; the reference always does; the
            prompting baselines turn it off).
        lowercase: override the projection's rule 1 (None: the projection's).
        projection: a name of :data:`PROJECTIONS` or a :class:`Projection`.

    Returns:
        ParsedAction; never raises on malformed text.

    Raises:
        KeyError: unknown projection name.
    """
    proj = PROJECTIONS[projection] if isinstance(projection, str) else projection
    lower = proj.lowercase if lowercase is None else lowercase
    # rule 1: the tags are searched in the (lowercased) text
    searched = text.lower() if lower else text
    start = searched.find(proj.open_tag)
    end = searched.find(proj.close_tag)
    if start == -1 or end == -1:
        # rule 4: the tail of the unstripped text
        return ParsedAction(searched[-proj.fallback_chars:], False,
                            f"missing {proj.open_tag}...{proj.close_tag}")
    # rules 2 and 3: first open tag to first close tag; may be empty (still valid)
    action = searched[start + len(proj.open_tag):end]
    if proj.strip:
        action = action.strip()
    # rule 5: both think tags in the original text, case-sensitive, any order
    if require_think and ("<think>" not in text or "</think>" not in text):
        return ParsedAction(action, False, "missing <think>...</think>")
    # rule 6: CJK characters
    if proj.reject_cjk and _CJK.search(text):
        return ParsedAction(action, False, "CJK characters in the response")
    return ParsedAction(action, True, "")
