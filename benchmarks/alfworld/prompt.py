"""The ALFWorld step prompt of verl-agent / G2PO, and short expert responses for warm starts.

Source (read, not copied): verl-agent ``agent_system/environments/prompts/alfworld.py``
(``ALFWORLD_TEMPLATE_NO_HIS`` / ``ALFWORLD_TEMPLATE``, current version spelling
"observations"; an older verl-agent commit spelled it "observaitons") and
``agent_system/environments/env_manager.py`` (``AlfWorldEnvironmentManager.build_text_obs``)
plus ``agent_system/memory/memory.py`` (``SimpleMemory.fetch``) of Nala-YN/G2PO:

- step 0 (or ``history_length <= 0``): the no-history template with the *raw reset text* as
  current observation ("-= Welcome to TextWorld, ALFRED! =-\\n\\n<room>\\n\\nYour task is to:
  <task>");
- later steps: the task, "Prior to this step, you have already taken N step(s). Below are
  the most recent K observations and the corresponding actions you took: " + one line
  ``[Observation i: '<obs>', Action i: '<action>']`` per remembered step (i = 1-based step
  number; the observation is the one the action was taken in), then "You are now at step N+1
  and your current observation is: <obs>";
- admissible actions as ``'a'`` items joined by ``"\\n "`` inside ``[...]``, without "help";
- the instruction to reason inside ``<think> </think>`` and answer inside ``<action> </action>``.

The reference stores the raw reset text (banner + room + task) as the observation of step 1 in
the history; :func:`build_prompt` rebuilds that text from ``Observation.text`` and
``instruction`` for the step-1 entry, so the rollout engine can pass plain ``Observation.text``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from g2po_bench.benchmarks.alfworld.engine import INTRO_BANNER, TASK_PREFIX
from g2po_bench.core.protocol import Observation, Task

__all__ = [
    "plan_sentence",
    "PROMPT_STYLES",
    "TEMPLATE_NO_HISTORY",
    "TEMPLATE",
    "build_prompt",
    "build_compact_prompt",
    "expert_response",
    "format_admissible",
]

#: prompt styles: ``"reference"`` (verl-agent/G2PO template, the default for real models) and
#: ``"compact"`` (a short transcript for the tiny CPU model, see :func:`build_compact_prompt`).
PROMPT_STYLES = ("reference", "compact")

_INSTRUCTIONS = (
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process "
    "MUST be enclosed within <think> </think> tags. \n"
    "Once you've finished your reasoning, you should choose an admissible action for current "
    "step and present it within <action> </action> tags.\n"
)

#: the first prompt of an episode (reference ``ALFWORLD_TEMPLATE_NO_HIS``).
TEMPLATE_NO_HISTORY = (
    "\nYou are an expert agent operating in the ALFRED Embodied Environment.\n"
    "Your current observation is: {current_observation}\n"
    "Your admissible actions of the current situation are: [{admissible_actions}].\n\n"
    + _INSTRUCTIONS
)

#: every later prompt (reference ``ALFWORLD_TEMPLATE``).
TEMPLATE = (
    "\nYou are an expert agent operating in the ALFRED Embodied Environment. "
    "Your task is to: {task_description}\n"
    "Prior to this step, you have already taken {step_count} step(s). Below are the most recent "
    "{history_length} observations and the corresponding actions you took: {action_history}\n"
    "You are now at step {current_step} and your current observation is: {current_observation}\n"
    "Your admissible actions of the current situation are: [{admissible_actions}].\n\n"
    + _INSTRUCTIONS
)


def format_admissible(actions: Sequence[str] | None) -> str:
    """``["go to desk 1", "help", "look"]`` -> ``"'go to desk 1'\\n 'look'"`` (reference format)."""
    return "\n ".join(f"'{a}'" for a in (actions or ()) if a != "help")


def _intro(obs: Observation, text: str) -> str:
    if text.startswith(INTRO_BANNER):
        return text
    return f"{INTRO_BANNER}\n\n{text}\n\n{TASK_PREFIX}{obs.instruction}"


def build_prompt(
    obs: Observation,
    history: Sequence[tuple[str, str]],
    step: int,
    history_length: int = 2,
    style: str = "reference",
) -> str:
    """The prompt for the agent's next action.

    Args:
        obs: the current observation (``text``, ``instruction``, ``admissible_actions``; at
            step 0 ``info["intro"]`` is used when present).
        history: ``(observation text, action)`` of the previous steps, oldest first (the
            observation the action was taken in; pass ``Observation.text``). Only the last
            ``history_length`` entries are shown.
        step: number of steps already taken in this episode (0 after reset).
        history_length: how many past steps to show (reference: 2); <= 0 always uses the
            no-history template, as the reference does.
        style: ``"reference"`` (this template) or ``"compact"`` (:func:`build_compact_prompt`).

    Returns:
        The prompt text (a user message; chat templating is the caller's business).

    Raises:
        ValueError: ``step`` < 0, ``history`` longer than ``step``, or an unknown ``style``.
    """
    if style == "compact":
        return build_compact_prompt(obs, history, step, history_length)
    if style != "reference":
        raise ValueError(f"unknown ALFWorld prompt style {style!r}; choose one of {PROMPT_STYLES}")
    if step < 0:
        raise ValueError("step must be >= 0")
    if len(history) > step:
        raise ValueError(f"history has {len(history)} entries but only {step} step(s) were taken")
    admissible = format_admissible(obs.admissible_actions)
    if step == 0 or history_length <= 0:
        current = obs.info.get("intro") if step == 0 else None
        if not current:
            current = _intro(obs, obs.text) if step == 0 else obs.text
        return TEMPLATE_NO_HISTORY.format(
            current_observation=current, admissible_actions=admissible
        )
    recent = list(history)[-history_length:]
    first = step - len(recent) + 1
    lines = []
    for j, (past_obs, past_action) in enumerate(recent):
        n = first + j
        shown = _intro(obs, past_obs) if n == 1 else past_obs
        lines.append(f"[Observation {n}: '{shown}', Action {n}: '{past_action}']")
    return TEMPLATE.format(
        task_description=obs.instruction,
        step_count=step,
        history_length=len(recent),
        action_history="\n".join(lines),
        current_step=step + 1,
        current_observation=obs.text,
        admissible_actions=admissible,
    )


def build_compact_prompt(
    obs: Observation,
    history: Sequence[tuple[str, str]],
    step: int,
    history_length: int = 3,
) -> str:
    """A short transcript prompt for small models (``env.prompt=compact``; this project's own).

    The reference prompt (:data:`TEMPLATE`) costs 300-700 tokens a step, most of them fixed
    instructions that a model trained from scratch gains nothing from. The compact prompt keeps
    what the decision needs, as a text-adventure transcript::

        Task: look at cellphone under the desklamp.
        You are in the middle of a room. Looking quickly around you, you see a drawer 2, ...
        ...
        > go to drawer 2
        You arrive at drawer 2. The drawer 2 is closed.
        Actions: close drawer 2, go to drawer 1, go to sidetable 1, inventory, look, open drawer 2
        >

    - the task sentence; the room description of the episode's first observation (every
      receptacle in the room, so the agent knows where it can search), on every step;
    - the last ``history_length`` actions, each followed by the engine's reply (``...`` marks
      older steps left out);
    - the admissible actions joined by ``", "`` (without "help").

    The expected answer is the same ``<think>...</think><action>...</action>`` format as the
    reference (:func:`expert_response` with ``style="compact"`` gives an empty think).

    Args:
        obs: the current observation.
        history: ``(observation text, action)`` of every previous step, oldest first (the
            first entry's observation is the room description).
        step: number of steps already taken (0 after reset).
        history_length: how many past actions to show (>= 0).

    Returns:
        The prompt text (about 60-200 tokens of the tiny model's tokenizer).

    Raises:
        ValueError: ``step`` < 0 or ``history`` longer than ``step``.
    """
    if step < 0:
        raise ValueError("step must be >= 0")
    if len(history) > step:
        raise ValueError(f"history has {len(history)} entries but only {step} step(s) were taken")
    room = history[0][0] if history else obs.text
    lines = [f"Task: {obs.instruction}", room]
    shown = min(max(history_length, 0), len(history))
    first = len(history) - shown
    if first > 0:
        lines.append("...")
    for j in range(first, len(history)):
        reply = history[j + 1][0] if j + 1 < len(history) else obs.text
        lines.append(f"> {history[j][1]}")
        lines.append(reply)
    actions = ", ".join(a for a in (obs.admissible_actions or ()) if a != "help")
    lines.append(f"Actions: {actions}")
    lines.append(">")
    return "\n".join(lines)


def _think(action: str) -> str:
    words = action.split()
    verb = words[0] if words else ""
    if action.startswith("go to "):
        return f"Next I check the {action[6:]}."
    if verb == "open":
        return f"The {action[5:]} is closed, so I open it."
    if verb == "take" and " from " in action:
        obj = action[5:].split(" from ")[0]
        return f"I pick up the {obj} for my task."
    if verb in ("heat", "cool", "clean") and " with " in action:
        obj, tool = action[len(verb) + 1 :].split(" with ", 1)
        past = {"heat": "hot", "cool": "cool", "clean": "clean"}[verb]
        return f"The {obj} must be {past}, so I {verb} it with the {tool}."
    if verb == "use":
        return f"I turn on the {action[4:]} to look at the object under its light."
    if verb == "move" and " to " in action:
        obj, recep = action[5:].split(" to ", 1)
        return f"The {obj} is ready, so I move it to the {recep}."
    return f"I {action}."


def expert_response(action: str, obs: Observation | None = None, style: str = "reference") -> str:
    """A short, deterministic response in the trained format for a known-good action.

    ``expert_response("heat apple 1 with microwave 1", obs)`` ->
    ``"<think>The apple 1 must be hot, so I heat it with the microwave 1.</think><action>heat
    apple 1 with microwave 1</action>"``. Used to warm-start a small model by supervised
    fine-tuning on walkthroughs; it parses as valid with :func:`g2po_bench.benchmarks.parsing.parse_response`.

    Args:
        action: the command (e.g. a walkthrough step).
        obs: the observation the action is taken in (unused today; kept so richer rationales
            can use it without an API change).
        style: ``"reference"`` (a one-sentence rationale) or ``"compact"`` (an empty
            ``<think></think>``: the tiny model spends its few tokens on the action).

    Raises:
        ValueError: an unknown ``style``.
    """
    action = action.strip()
    if style == "compact":
        return f"<think></think><action>{action}</action>"
    if style != "reference":
        raise ValueError(f"unknown ALFWorld prompt style {style!r}; choose one of {PROMPT_STYLES}")
    return f"<think>{_think(action)}</think><action>{action}</action>"


def _noun(item: str) -> str:
    """``"alarmclock 2"`` -> ``"alarmclock"``."""
    return re.sub(r"\s+\d+$", "", item.strip())


def plan_sentence(task: Task, actions: Sequence[str]) -> str:
    """The opening plan of a prompting baseline's few-shot example, written from the task type
    and the walkthrough ``actions`` (the object taken and where it goes)."""
    take = next((a for a in actions if a.startswith("take ") and " from " in a), "")
    obj = _noun(take[5:].split(" from ")[0]) if take else "object"
    place = next((a for a in reversed(actions) if a.startswith(("move ", "put ")) and (" to " in a or " in " in a)), "")
    target = _noun(re.split(r" to | in/on | in | on ", place, maxsplit=1)[-1]) if place else "target"
    plans = {
        "pick_and_place_simple": f"To solve the task, I need to find and take a {obj}, then put it in/on the {target}.",
        "look_at_obj_in_light": f"To solve the task, I need to find a {obj} and a desklamp, then look at the {obj} under the lit desklamp.",
        "pick_clean_then_place_in_recep": f"To solve the task, I need to find and take a {obj}, clean it with the sinkbasin, then put it in/on the {target}.",
        "pick_heat_then_place_in_recep": f"To solve the task, I need to find and take a {obj}, heat it with the microwave, then put it in/on the {target}.",
        "pick_cool_then_place_in_recep": f"To solve the task, I need to find and take a {obj}, cool it with the fridge, then put it in/on the {target}.",
        "pick_two_obj_and_place": f"To solve the task, I need to find and take the first {obj} and put it in/on the {target}, then find and take the second {obj} and put it in/on the {target} too.",
    }
    return plans.get(task.task_type, "To solve the task, I will look for the objects it names, one likely place at a time.")
