"""Anchor-state keys for ALFWorld (docs/design-notes.md "State keys"): pure, separately testable.

A key is computed for every state the agent acts from; rows with equal keys inside a task
group form one G2PO node / GiGPO step group. Two rules are offered:

``"raw"`` (:class:`RawStateKey`, GiGPO's ALFWorld anchor): the observation text itself
(after reset: the initial observation "You are in the middle of a room. ..."). Every
"Nothing happens." collapses into one node.

``"reference"`` (:class:`ReferenceStateKey`, G2PO's ALFWorld anchor). What the public
reference does (Nala-YN/G2PO, ``agent_system/environments/env_manager.py``,
``AlfWorldEnvironmentManager.step``, read for this project; not copied):

1. After each step the observation is extended with the admissible actions, formatted as
   ``obs + "\\nAdmissible actions:\\n " + "\\n ".join("'<a>'" for a in admissible if a != "help")
   + "\\n"`` (see :func:`format_state_text`).
2. A per-episode list of *meaningful* observations is kept: the extended observation is
   appended unless the raw observation starts with ``"Nothing happens"``.
3. ``PATTERNS = ["You heat", "You cool", "You clean", "You turn on"]``. If the list has at least
   two entries and the second-to-last one starts with one of the patterns, the key is the
   last two entries joined by one space (``" ".join(list[-2:])``); otherwise it is the last
   entry. "Two steps back" therefore means the previous *meaningful* observation, not the
   observation two env steps ago: after ``heat apple 1 with microwave 1`` the key of the
   state reached is the heat message itself; the state after the next meaningful action
   (e.g. ``go to diningtable 1``) is keyed by the heat message + the arrival message, so the
   invisible "the apple is hot" is kept for exactly one more state.
4. A "Nothing happens." step appends nothing, so the key equals the previous state's key (a
   self-loop in the graph), also right after a heat/cool/clean/turn-on effect.

Reference quirk at reset (documented, deliberately not reproduced): the reference's reset anchor is
the raw intro text *without* admissible actions, while its history list is seeded with the full
step-0 *prompt*; a "Nothing happens." as the first step therefore gets the prompt text as key, a
node different from the reset state's. The suite states the rule as "the step maps back to the
previous node" (docs/design-notes.md "State keys"), so here the reset state is keyed like every
other state (initial observation + admissible actions) and an invalid first action self-loops to
it. Only that one case differs; all other keys equal the reference anchors character for character
(given the same observation text and admissible list).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

__all__ = [
    "EFFECT_PATTERNS",
    "NOTHING_HAPPENS",
    "StateKeyRule",
    "RawStateKey",
    "ReferenceStateKey",
    "format_state_text",
    "make_state_key",
    "ObservationKeys",
]

#: observation prefixes whose effect is invisible in the next observation (reference ``PATTERNS``).
EFFECT_PATTERNS: tuple[str, ...] = ("You heat", "You cool", "You clean", "You turn on")
#: prefix of the engine's reply to an invalid command.
NOTHING_HAPPENS = "Nothing happens"


class StateKeyRule(Protocol):
    """Stateful per-episode key function: ``reset`` at episode start, ``update`` after each step."""

    def reset(self, obs: str, admissible: Sequence[str] | None) -> str: ...

    def update(self, obs: str, admissible: Sequence[str] | None) -> str: ...


def format_state_text(obs: str, admissible: Sequence[str] | None) -> str:
    """Observation + admissible-action list, in the reference's exact text format.

    ``format_state_text("You arrive at sinkbasin 1. ...", ["go to cabinet 1", "help", "look"])``
    == ``"You arrive at sinkbasin 1. ...\\nAdmissible actions:\\n 'go to cabinet 1'\\n 'look'\\n"``.
    ``"help"`` is dropped, as in verl-agent. ``admissible=None`` is treated as empty.
    """
    acts = "\n ".join(f"'{a}'" for a in (admissible or ()) if a != "help")
    return f"{obs}\nAdmissible actions:\n {acts}\n"


class RawStateKey:
    """GiGPO's ALFWorld key: the observation text unchanged."""

    def reset(self, obs: str, admissible: Sequence[str] | None = None) -> str:
        return obs

    def update(self, obs: str, admissible: Sequence[str] | None = None) -> str:
        return obs


class ReferenceStateKey:
    """G2PO's ALFWorld key (see the module docstring for the exact rules and their source).

    Example::

        k = ReferenceStateKey()
        k0 = k.reset("You are in the middle of a room. ...", adm0)
        k.update("Nothing happens.", adm0) == k0          # self-loop
        k.update("You heat the apple 1 using the microwave 1.", adm1)  # heat text + actions
        k.update("You arrive at diningtable 1. ...", adm2)  # heat text ... + " " + arrival text ...
    """

    def __init__(self, patterns: Sequence[str] = EFFECT_PATTERNS) -> None:
        self.patterns = tuple(patterns)
        self._history: list[str] = []

    def reset(self, obs: str, admissible: Sequence[str] | None) -> str:
        self._history = [format_state_text(obs, admissible)]
        return self._key()

    def update(self, obs: str, admissible: Sequence[str] | None) -> str:
        if not self._history:
            raise RuntimeError("ReferenceStateKey.update called before reset")
        if not obs.startswith(NOTHING_HAPPENS):
            self._history.append(format_state_text(obs, admissible))
            del self._history[:-2]  # only the last two meaningful observations matter
        return self._key()

    def _key(self) -> str:
        h = self._history
        if len(h) >= 2 and h[-2].startswith(self.patterns):
            return " ".join(h[-2:])
        return h[-1]


def make_state_key(kind: str | Callable[[], StateKeyRule]) -> StateKeyRule:
    """A fresh key rule: ``"reference"``, ``"raw"``, or a zero-argument factory of a custom rule.

    Raises:
        ValueError: unknown name.
    """
    if callable(kind):
        return kind()
    if kind == "reference":
        return ReferenceStateKey()
    if kind == "raw":
        return RawStateKey()
    raise ValueError(f"unknown ALFWorld state key {kind!r}; choose 'reference' or 'raw'")


class ObservationKeys:
    """A key rule fed with whole :class:`~g2po_bench.core.protocol.Observation` objects (the
    ``key_rules`` of the credit instrument's rollout hooks, :func:`g2po_bench.benchmarks.alfworld.make_state_key_rule`):
    ``reset(obs)`` / ``update(obs)`` give the key of ``rule`` for the observation's text and
    admissible actions, the same text :class:`~g2po_bench.benchmarks.alfworld.env.AlfworldEnv`
    keys with that rule.

    Args:
        rule: ``"reference"``, ``"raw"`` or a factory (:func:`make_state_key`).

    Raises:
        ValueError: unknown rule name.
    """

    def __init__(self, rule: str | Callable[[], StateKeyRule]) -> None:
        self._rule = make_state_key(rule)

    def reset(self, obs) -> str:
        return self._rule.reset(obs.text, obs.admissible_actions)

    def update(self, obs) -> str:
        return self._rule.update(obs.text, obs.admissible_actions)
