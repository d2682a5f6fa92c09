"""The WebShop prompt of verl-agent/G2PO, its observation formatting, and expert responses.

Facts (verl-agent ``WebshopEnvironmentManager`` and ``prompts/webshop.py``, as used by G2PO):

- The observation shown to the model (and the state key, "anchor") is the page text after
  the instruction: the ``text`` observation split on ``" [SEP] "``, everything after the
  first part equal to the instruction, each part wrapped in single quotes, joined by
  ``" [SEP] "``. When the instruction is not one of the parts (``text_rich`` mode), the
  observation is used unchanged (:func:`format_observation`).
- Available actions are listed one a line as ``'action',``.
- Step 0 (and ``history_length`` 0) uses the template without history; later steps show
  the last ``history_length`` (observation, action) pairs as
  ``[Observation k: '<obs>', Action k: '<action>']`` lines (k counts from 1), the number of
  steps already taken and the current step number. A prompt longer than 13,000 characters
  falls back to the template without history.
- The model answers ``<think>...</think><action>...</action>``; the action is parsed with
  :func:`g2po_bench.benchmarks.parsing.parse_response` with the ``webshop`` projection (the package's
  ``PROJECTION``; 20-character fallback): verl-agent lowercases the whole response, and the
  environment lowercases the action argument anyway (option values are stored lowercase),
  so lowercasing loses nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from g2po_bench.core.protocol import Observation

__all__ = [
    "PROMPT_STYLES",
    "TEMPLATE",
    "TEMPLATE_NO_HISTORY",
    "MAX_PROMPT_CHARS",
    "format_observation",
    "format_actions",
    "build_prompt",
    "build_compact_prompt",
    "page_text",
    "expert_response",
]

#: prompt styles (``env.prompt``): ``"reference"`` (verl-agent/G2PO's template, for real models)
#: and ``"compact"`` (a short transcript for the tiny CPU model, :func:`build_compact_prompt`)
PROMPT_STYLES = ("reference", "compact")

_INSTRUCTIONS = (
    "Now it's your turn to take one action for the current step.\n"
    "You should first reason step-by-step about the current situation, then think carefully which "
    "admissible action best advances the shopping goal. This reasoning process MUST be enclosed "
    "within <think> </think> tags. \n"
    "Once you've finished your reasoning, you should choose an admissible action for current step "
    "and present it within <action> </action> tags.\n"
)
_ACTIONS_BLOCK = (
    "Your admissible actions of the current situation are: \n"
    "[\n"
    "{available_actions}\n"
    "].\n"
    "\n"
)
#: the first-step template (verl-agent ``WEBSHOP_TEMPLATE_NO_HIS``; note the trailing spaces)
TEMPLATE_NO_HISTORY = (
    "\n"
    "You are an expert autonomous agent operating in the WebShop e\u2011commerce environment. \n"
    "Your task is to: {task_description}.\n"
    "Your current observation is: {current_observation}.\n"
    + _ACTIONS_BLOCK + _INSTRUCTIONS
)
#: the template with history (verl-agent ``WEBSHOP_TEMPLATE``)
TEMPLATE = (
    "\n"
    "You are an expert autonomous agent operating in the WebShop e\u2011commerce environment.\n"
    "Your task is to: {task_description}.\n"
    "Prior to this step, you have already taken {step_count} step(s). Below are the most recent "
    "{history_length} observations and the corresponding actions you took: {action_history}\n"
    "You are now at step {current_step} and your current observation is: {current_observation}.\n"
    + _ACTIONS_BLOCK + _INSTRUCTIONS
)

#: prompts longer than this (characters) drop the history (verl-agent's guard)
MAX_PROMPT_CHARS = 13000


def format_observation(text: str, instruction: str) -> str:
    """The page text after the instruction, parts quoted (module docstring)."""
    parts = text.split(" [SEP] ")
    try:
        i = parts.index(instruction)
    except ValueError:
        return text
    return " [SEP] ".join(f"'{p}'" for p in parts[i + 1:])


def format_actions(actions: Sequence[str] | None) -> str:
    """``'a',`` lines of the admissible actions."""
    return "\n".join(f"'{a}'," for a in (actions or []))


def _obs_text(o: Any, instruction: str) -> str:
    if isinstance(o, Observation):
        return format_observation(o.text, o.instruction)
    return format_observation(str(o), instruction)


def build_prompt(
    obs: Observation,
    history: Sequence[tuple[Any, str]],
    step: int,
    history_length: int = 2,
    style: str = "reference",
) -> str:
    """The prompt of one step.

    Args:
        obs: the current observation.
        history: the earlier (observation, action) pairs of the episode, oldest first (at
            least the last ``history_length``); an observation may be an
            :class:`~g2po_bench.core.protocol.Observation` or its raw ``text`` (formatted here).
        step: number of actions already taken (0 at the first step).
        history_length: pairs to show (verl-agent default 2; 0 = no history).
        style: ``"reference"`` (verl-agent's template) or ``"compact"``
            (:func:`build_compact_prompt`).

    Returns:
        the prompt text.

    Raises:
        ValueError: another ``style``.
    """
    _check_style(style)
    if style == "compact":
        return build_compact_prompt(obs, history, step, history_length)
    task = obs.instruction
    current = format_observation(obs.text, obs.instruction)
    actions = format_actions(obs.admissible_actions)
    no_history = TEMPLATE_NO_HISTORY.format(task_description=task, current_observation=current,
                                            available_actions=actions)
    if step <= 0 or history_length <= 0:
        return no_history
    recent = list(history)[-history_length:]
    start = max(step - len(recent), 0)
    lines = [
        f"[Observation {start + j + 1}: '{_obs_text(o, task)}', Action {start + j + 1}: '{a}']"
        for j, (o, a) in enumerate(recent)
    ]
    prompt = TEMPLATE.format(
        task_description=task, step_count=step, history_length=len(recent),
        action_history="\n".join(lines), current_step=step + 1, current_observation=current,
        available_actions=actions,
    )
    return no_history if len(prompt) > MAX_PROMPT_CHARS else prompt


def page_text(text: str, instruction: str) -> str:
    """The page of a ``text`` observation after the instruction, its parts joined by
    ``" [SEP] "`` as the observation joins them (the whole text when the instruction is not one
    of its parts, as in ``text_rich`` mode): :func:`format_observation` without the quotes."""
    parts = text.split(" [SEP] ")
    try:
        i = parts.index(instruction)
    except ValueError:
        return text
    return " [SEP] ".join(parts[i + 1:])


def build_compact_prompt(
    obs: Observation,
    history: Sequence[tuple[Any, str]],
    step: int,
    history_length: int = 4,
) -> str:
    """A short transcript prompt for the tiny CPU model (``env.prompt=compact``; this project's own).

    The reference prompt repeats verl-agent's instructions, lists every admissible action
    (ten product ids again on a results page) and shows the last two observations in full:
    on a results page about 900-1,400 tokens of a 1,024-token BPE trained on WebShop text, most
    of them what a model trained from scratch gains nothing from. The compact prompt keeps what
    the decision needs::

        Instruction: Find me machine wash men's pants with relaxed fit with color: grey, and ...
        Actions: search[find me machine wash men's pants with relaxed fit ...] | click[b07...]
        Page: Back to Search [SEP] < Prev [SEP] color [SEP] black [SEP] grey [SEP] size [SEP] ...
        >

    - the instruction;
    - the last ``history_length`` actions of the episode, oldest first, joined by ``" | "``
      (``... | `` in front when earlier ones are left out; no line at the first step): in
      ``text`` mode clicking an option does not change the page, so the actions are the only
      record of the options already chosen;
    - the current page: the observation's text after the instruction (:func:`page_text`),
      unchanged (every product id, title, price, option and button the page shows).

    The expected answer is the reference's ``<think>...</think><action>...</action>`` format
    (:func:`expert_response` with ``style="compact"`` gives an empty think).

    Args:
        obs: the current observation.
        history: the earlier (observation, action) pairs, oldest first (only the actions are used).
        step: number of actions already taken (0 at the first step).
        history_length: actions to show (>= 0).

    Returns:
        the prompt text.

    Raises:
        ValueError: ``step`` < 0 or ``history`` longer than ``step``.
    """
    if step < 0:
        raise ValueError("step must be >= 0")
    if len(history) > step:
        raise ValueError(f"history has {len(history)} entries but only {step} step(s) were taken")
    lines = [f"Instruction: {obs.instruction}"]
    shown = min(max(history_length, 0), len(history))
    if shown:
        recent = [a for _, a in list(history)[len(history) - shown:]]
        lead = "... | " if shown < len(history) else ""
        lines.append(f"Actions: {lead}{' | '.join(recent)}")
    lines.append(f"Page: {page_text(obs.text, obs.instruction)}")
    lines.append(">")
    return "\n".join(lines)


def _check_style(style: str) -> None:
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown WebShop prompt style {style!r}; choose one of {', '.join(PROMPT_STYLES)}")


def expert_response(action: str, obs: Observation, style: str = "reference") -> str:
    """A short ``<think>...</think><action>...</action>`` answer for ``action`` taken from
    ``obs`` (supervised warm-start targets).

    ``style="reference"``: the reasoning is a fixed sentence per kind of action.
    ``style="compact"``: an empty ``<think></think>`` (the tiny model spends its tokens on the
    action), and a product id is written as the page shows it (``click[B07XTK3P89]``, upper
    case): the model copies it from the page, and the projection lowercases the action as it
    does for every response (:mod:`g2po_bench.benchmarks.parsing`), so the environment receives
    the same ``click[b07xtk3p89]``.

    Raises:
        ValueError: another ``style``.
    """
    _check_style(style)
    a = action.strip()
    low = a.lower()
    if style == "compact":
        if low.startswith("click[") and obs.info.get("page") == "results":
            arg = a[6:-1]
            shown = next((p for p in obs.text.split(" [SEP] ") if p.lower() == arg.lower()), arg)
            a = f"click[{shown}]"
        return f"<think></think><action>{a}</action>"
    if low.startswith("search["):
        why = "I am on the search page, so I search for the product described in the instruction."
    elif low == "click[buy now]":
        why = "This product and the selected options match the instruction, so I buy it."
    elif low == "click[next >]":
        why = "The product I want is not on this page of results, so I go to the next page."
    elif low == "click[< prev]":
        why = "I should go back to the previous page."
    elif low == "click[back to search]":
        why = "I should start a new search."
    elif low in ("click[description]", "click[features]", "click[reviews]"):
        why = "I want to read more about this product before deciding."
    elif low.startswith("click[") and obs.info.get("page") == "results":
        why = "This result matches the instruction best, so I open it."
    elif low.startswith("click["):
        why = f"The instruction asks for {a[6:-1]}, so I select this option."
    else:
        why = "I take the next step towards the shopping goal."
    return f"<think>{why}</think><action>{a}</action>"
