"""Prompt text of the ReAct and Reflexion agents (one user message per step).

Layout of a step prompt::

    <intro for the environment: what it is, the answer format>
    Here are examples of solved tasks.            (few-shot transcripts, see g2po_bench.baselines.fewshot)
    ### Example 1
    Task: ...
    Observation: ...
    <think>...</think><action>...</action>
    Observation: ...
    ...
    Reflections from your earlier failed attempts at this task:   (Reflexion only)
    - Attempt 1: ...
    ### Your task
    Task: ...
    Observation: <first observation>
    <think>...</think><action>...</action>        (this episode so far, newest last)
    Observation: ...
    Admissible actions: [...]
    You are at step k of at most N. Think briefly inside <think> </think>, then give exactly
    one admissible action inside <action> </action>.

With ``style="completion"`` (models without a chat template, or small instruct models that
follow a transcript better than an instruction, as in the original ReAct prompts) the closing
sentence is replaced by ``<think>`` and the model continues the transcript.

The examples take at most about half of ``max_chars`` (their observations are clipped harder
until they fit). The episode so far is shown whole when the prompt fits ``max_chars``;
otherwise the oldest steps are listed as actions only ("Earlier actions: ..."). Observations of past steps are clipped to
``past_obs_chars`` characters, the current one to ``current_obs_chars``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from g2po_bench.baselines.fewshot import Transcript
from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.benchmarks.registry import get_benchmark

__all__ = ["StepView", "benchmark_of", "format_obs", "render_react_prompt", "render_reflection_prompt",
           "ANSWER_FORMAT", "CODE_ANSWER_FORMAT", "action_tag", "intro", "answer_format", "COMPLETION_PREFIX",
           "REFLECTION_PREFIX"]


#: what a completion-style prompt ends with (the answer continues it)
COMPLETION_PREFIX = "<think>"
REFLECTION_PREFIX = "Plan:"

ANSWER_FORMAT = ("First reason briefly about the current situation inside <think> </think>, then give exactly one "
                 "admissible action inside <action> </action>.")
#: environments whose action is a code cell inside <code> </code> (their own answer format)
CODE_ANSWER_FORMAT = ("First reason briefly about the current situation inside <think> </think>, then give exactly "
                      "one Python code cell inside <code> </code>.")


def benchmark_of(env_name: str) -> Benchmark | None:
    """The registered benchmark ``env_name``; None for "" (the generic text-action format).

    Raises:
        ValueError: an unknown benchmark name (the message lists the registered ones).
    """
    return get_benchmark(env_name) if env_name else None


def action_tag(env_name: str) -> str:
    """The tag of an answer's action: ``"action"``, or the benchmark's own (AppWorld: ``"code"``)."""
    bench = benchmark_of(env_name)
    return bench.action_tag if bench is not None else "action"


def intro(env_name: str) -> str:
    """The opening sentence of a prompt: what the environment is (the benchmark's ``agent_intro``)."""
    bench = benchmark_of(env_name)
    return bench.agent_intro if bench is not None else Benchmark.agent_intro


def answer_format(env_name: str) -> str:
    """The answer-format sentence of an environment (a Python cell where the action is code)."""
    return CODE_ANSWER_FORMAT if action_tag(env_name) == "code" else ANSWER_FORMAT


@dataclass
class StepView:
    """One past step of the current episode as shown in the prompt."""

    thought: str
    action: str
    observation: str
    valid: bool = True


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: max(n - 3, 0)].rstrip() + "..."


def format_obs(env_name: str, text: str, instruction: str) -> str:
    """Observation text for the prompt (the benchmark's :meth:`~g2po_bench.benchmarks.base.Benchmark.format_observation`;
    WebShop: the page after the instruction, as in the RL prompt)."""
    bench = benchmark_of(env_name)
    return bench.format_observation(text, instruction) if bench is not None else text


def _step_line(thought: str, action: str, valid: bool = True, env_name: str = "") -> str:
    tag = action_tag(env_name)
    line = f"<think>{thought}</think><{tag}>{action}</{tag}>"
    return line + " (this answer did not follow the format)" if not valid else line


def render_example(env_name: str, tr: Transcript, obs_chars: int) -> str:
    """Render one few-shot example transcript as prompt text."""
    lines = [f"Task: {tr.instruction}", f"Observation: {_clip(format_obs(env_name, tr.first_observation, tr.instruction), obs_chars)}"]
    for thought, action, obs in tr.steps:
        lines.append(_step_line(thought, action, env_name=env_name))
        lines.append(f"Observation: {_clip(format_obs(env_name, obs, tr.instruction), obs_chars)}")
    lines.append("(Task completed.)")
    return "\n".join(lines)


def render_react_prompt(
    env_name: str,
    *,
    instruction: str,
    first_observation: str,
    steps: Sequence[StepView],
    current_observation: str,
    admissible_actions: Sequence[str] | None,
    step: int,
    max_steps: int,
    examples: Sequence[Transcript] = (),
    reflections: Sequence[str] = (),
    history_steps: int = 0,
    max_chars: int = 6000,
    example_obs_chars: int = 400,
    past_obs_chars: int = 300,
    current_obs_chars: int = 2000,
    style: str = "chat",
) -> str:
    """The prompt of step ``step`` (0-based) of a ReAct/Reflexion episode (module docstring).

    ``history_steps`` > 0 shows at most that many past steps in full; the rest (and any that do
    not fit ``max_chars``) appear as a list of earlier actions. ``style="completion"`` ends the
    prompt with ``<think>`` instead of the closing instruction, for models that continue a
    transcript (no chat template); the answer is then the rest of the step.
    """
    head = [intro(env_name), answer_format(env_name), ""]
    if examples:
        # examples take at most about half of the budget: their observations are clipped harder
        while True:
            rendered = [render_example(env_name, tr, example_obs_chars) for tr in examples]
            if sum(len(r) for r in rendered) <= max_chars // 2 or example_obs_chars <= 60:
                break
            example_obs_chars = int(example_obs_chars * 0.7)
        head.append("Here are examples of solved tasks.")
        for k, r in enumerate(rendered, 1):
            head += [f"### Example {k}", r, ""]
    if reflections:
        head.append("Reflections from your earlier failed attempts at this same task (use them to do better):")
        head += [f"- Attempt {k}: {_clip(r, 600)}" for k, r in enumerate(reflections, 1)]
        head.append("")
    head += ["### Your task", f"Task: {instruction}"]
    first = _clip(format_obs(env_name, first_observation, instruction), past_obs_chars if steps else current_obs_chars)
    actions = ", ".join(f"'{a}'" for a in (admissible_actions or []))
    tail = []
    if admissible_actions:
        tail.append(f"Admissible actions: [{actions}]")
    if style == "completion":
        tail.append(COMPLETION_PREFIX)
    else:
        tail.append(f"You are at step {step + 1} of at most {max_steps}. {answer_format(env_name)}")

    n = len(steps)
    shown = n if history_steps <= 0 else min(n, history_steps)
    while True:
        body = []
        hidden = steps[: n - shown]
        if hidden:
            body.append("Earlier actions: " + "; ".join(s.action for s in hidden))
        if shown == n:
            body.append(f"Observation: {first}")
        for j, s in enumerate(steps[n - shown:]):
            body.append(_step_line(_clip(s.thought, 300), s.action, s.valid, env_name))
            is_current = j == shown - 1
            obs = format_obs(env_name, s.observation if not is_current else current_observation, instruction)
            body.append(f"Observation: {_clip(obs, current_obs_chars if is_current else past_obs_chars)}")
        prompt = "\n".join(head + body + tail)
        if len(prompt) <= max_chars or shown == 0:
            return prompt
        shown -= 1


def render_reflection_prompt(
    env_name: str,
    *,
    instruction: str,
    first_observation: str,
    steps: Sequence[StepView],
    outcome: str,
    reflections: Sequence[str] = (),
    last_steps: int = 12,
    obs_chars: int = 250,
    style: str = "chat",
) -> str:
    """The Reflexion self-reflection prompt after a failed trial (``style="completion"`` ends
    with ``Plan:`` for the model to continue)."""
    lines = [intro(env_name), "",
             "You attempted the task below and did not complete it.",
             f"Task: {instruction}",
             f"Observation: {_clip(format_obs(env_name, first_observation, instruction), obs_chars)}"]
    shown = steps[-last_steps:]
    if len(steps) > len(shown):
        lines.append("Earlier actions: " + "; ".join(s.action for s in steps[: len(steps) - len(shown)]))
    for s in shown:
        lines.append(f"Action: {s.action}")
        lines.append(f"Observation: {_clip(format_obs(env_name, s.observation, instruction), obs_chars)}")
    lines.append(f"Outcome: {outcome}")
    if reflections:
        lines.append("Your earlier reflections: " + " ".join(_clip(r, 300) for r in reflections))
    lines += ["",
              "In two or three sentences, say what went wrong and give a concrete plan for the next attempt "
              "(which places to search, which actions to take). Start with \"Plan:\"."]
    if style == "completion":
        lines.append(REFLECTION_PREFIX)
    return "\n".join(lines)
