"""The prompting agents: direct prompting, ReAct and Reflexion, on the shared harness.

All three play the evaluation panel through :class:`g2po_bench.runtime.workers.EnvPool` with the
run's step limit (``env.max_steps``), on the RL rollouts' lock-step driver
(:class:`g2po_bench.benchmarks.driver.LockStepDriver`: ReAct and Reflexion with :class:`ReactAgent`,
Reflexion's reflections between its trials), and return the EVAL record of :mod:`g2po_bench.core.rundir`
(``iteration, success_rate, per_task_type, num_episodes, score, mean_steps, invalid_frac``),
so their rows sit next to the RL rows cell by cell.

- **direct**: the base model with the RL step prompt (``benchmark.build_prompt``, last
  ``env.history_length`` steps), played by :func:`g2po_bench.benchmarks.evaluation.evaluate`: exactly
  the protocol of an RL run's evaluation, with no training.
- **ReAct** (Yao et al., 2023): reasoning and acting interleaved; every step the model sees
  few-shot transcripts of solved *training* tasks (:mod:`g2po_bench.baselines.fewshot`) and the whole
  episode so far (its own thoughts, actions and the observations), and answers
  ``<think>...</think><action>...</action>``; one answer = one environment step.
- **Reflexion** (Shinn et al., 2023): ReAct trials on the same task; after a failed trial the
  model writes a verbal self-reflection that is stored in a per-task memory (the last
  ``max_reflections``) and shown in the prompts of the next trial; at most ``max_trials``
  trials. A task counts as solved when any trial solves it (``success_by_trial[k]`` is the
  success rate after k+1 trials); score and steps are those of the task's last trial.

Seeds: step ``t`` of trial ``k`` samples with seed ``seed * 1000 + 100_000 * k + t``
(the engine's ``seed * 1000 + t`` for the first trial); reflections after trial ``k`` with
``seed * 1000 + 100_000 * k + 999``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from g2po_bench.baselines.fewshot import Transcript
from g2po_bench.baselines.prompts import (
    COMPLETION_PREFIX,
    REFLECTION_PREFIX,
    StepView,
    action_tag,
    benchmark_of,
    render_react_prompt,
    render_reflection_prompt,
)
from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.benchmarks.driver import Episode, LockStepDriver, Reading, Sampling
from g2po_bench.benchmarks.evaluation import evaluate
from g2po_bench.benchmarks.parsing import ParsedAction, parse_response
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.rollout import success_by_task_type
from g2po_bench.core.protocol import Task
from g2po_bench.runtime.policy_protocol import Policy
from g2po_bench.runtime.workers import EnvPool

__all__ = ["parse_step", "Trial", "ReactAgent", "run_react_episodes", "run_react", "run_reflexion", "run_direct",
           "summarise", "step_seed", "STOP", "stop_strings"]

#: stop strings of a ReAct step (kept in the text by local and vLLM backends): the end of the
#: action, or a made-up next observation
STOP = ["</action>", "\nObservation:"]


def stop_strings(env_name: str = "") -> list[str]:
    """The ReAct stop strings of an environment: the end of its action tag (AppWorld: the end of
    the code cell), or a made-up next observation."""
    return [f"</{action_tag(env_name)}>", "\nObservation:"]

_THINK_RE = re.compile(r"<think>(.*?)(?:</think>|<action>|$)", re.DOTALL | re.IGNORECASE)
_OPEN_ACTION_RE = re.compile(r"<action>(.*)$", re.DOTALL | re.IGNORECASE)
_ACTION_LINE_RE = re.compile(r"^\s*(?:>\s*)?action\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def step_seed(seed: int, trial: int, t: int) -> int:
    """Seed of step ``t`` of trial ``trial`` (module docstring)."""
    return seed * 1000 + 100_000 * trial + t


def _parse_code_step(text: str, bench: Benchmark) -> tuple[str, ParsedAction]:
    """A code-cell answer (``action_tag == "code"``, AppWorld): the code of ``<code>...</code>``
    (the benchmark's own extraction; the thought is optional, as for the other environments),
    or of a ``<code>`` left open at the end (servers drop the stop string); the code is kept as
    written (no lowercasing)."""
    m = _THINK_RE.search(text)
    thought = m.group(1).strip() if m else text.split("<code>")[0].strip()
    p = bench.parse_response(text)
    if "<code>" in text and "</code>" in text:
        code = p.action
    elif "<code>" in text:
        code = text.split("<code>", 1)[1]
    else:
        return thought, p
    return thought, ParsedAction(code, bool(code.strip()), "" if code.strip() else "empty code")


def parse_step(text: str, env_name: str = "") -> tuple[str, ParsedAction]:
    """(thought, parsed action) of a ReAct answer (AppWorld: :func:`_parse_code_step`).

    Accepts ``<action>...</action>`` (the thought is optional), an ``<action>`` left open at the
    end (servers drop the stop string), or an ``Action: ...`` line. The action is lowercased
    and a trailing full stop removed; anything else is invalid (the environment gets the
    fallback text of :func:`g2po_bench.benchmarks.parsing.parse_response`, as in the RL rollouts).
    """
    bench = benchmark_of(env_name)
    if bench is not None and bench.action_tag == "code":
        return _parse_code_step(text, bench)
    m = _THINK_RE.search(text)
    thought = m.group(1).strip() if m else text.split("<action>")[0].strip()
    p = parse_response(text, require_think=False)
    if not p.valid:
        m2 = _OPEN_ACTION_RE.search(text) if "</action>" not in text.lower() else None
        cand = m2.group(1).strip().split("\n")[0].strip() if m2 else ""
        if not cand:
            lines = _ACTION_LINE_RE.findall(text)
            cand = lines[-1].strip() if lines else ""
        if cand:
            p = ParsedAction(cand.lower(), True, "")
    if p.valid:
        action = p.action.strip().strip("'\"`").strip()
        if action.endswith(".") and not action.endswith("..."):
            action = action[:-1].rstrip()
        p = ParsedAction(action, bool(action), "" if action else "empty action")
    return thought, p


@dataclass
class Trial:
    """One trial (one ReAct episode) of one task, as Reflexion and the run records see it."""

    slot: int
    task: Task
    trial: int
    instruction: str = ""
    first_observation: str = ""
    steps: list[StepView] = field(default_factory=list)
    responses: list[str] = field(default_factory=list)
    success: bool = False
    score: float = 0.0
    invalid: int = 0
    crashed: bool = False
    stuck: bool = False  # ended by env.stop_after_refusals

    @classmethod
    def of(cls, episode: Episode, trial: int) -> Trial:
        """The trial played as ``episode`` by the driver: its score is the environment's
        ``info["score"]``, else 100 x its reward, when it ended (``done``), else 0."""
        out = episode.outcome
        return cls(episode.slot, episode.task, trial, instruction=episode.first.instruction,
                   first_observation=episode.first.text, steps=_views(episode),
                   responses=[s.response for s in episode.steps], success=episode.won,
                   score=0.0 if out is None else float(out.info.get("score", 100.0 * out.reward)),
                   invalid=episode.invalid, crashed=episode.crashed, stuck=episode.stuck)

    def record(self, max_steps: int) -> dict[str, Any]:
        """The trajectory dict (the keys of :func:`g2po_bench.benchmarks.rollout.collect_rollouts`, plus
        ``trial`` and the steps)."""
        return {
            "traj_id": self.slot, "group_id": self.slot, "task_id": self.task.task_id,
            "task_type": self.task.task_type, "trial": self.trial, "success": self.success,
            "num_steps": len(self.steps), "score": self.score, "invalid_steps": self.invalid,
            "truncated": (not self.success) and len(self.steps) >= max_steps, "crashed": self.crashed,
            "stuck": self.stuck, "steps": [{"response": r, "thought": s.thought, "action": s.action, "valid": s.valid,
                       "observation": s.observation} for r, s in zip(self.responses, self.steps)],
        }


def _views(episode: Episode) -> list[StepView]:
    """The episode's steps as the ReAct prompt shows them."""
    return [StepView(s.thought, s.action, s.next_observation, s.valid) for s in episode.steps]


class ReactAgent:
    """The ReAct prompt and reading on the lock-step driver (an
    :class:`g2po_bench.benchmarks.driver.Agent`).

    Args:
        env_name: the benchmark name (its action tag and texts).
        max_steps: the step limit shown in the prompt.
        examples: few-shot transcripts per task type (same type as the task; none if missing).
        memory: slot -> reflections shown in the prompt (Reflexion), newest last.
        prompt_options: extra keyword arguments of :func:`render_react_prompt`; with
            ``style="completion"`` the answer continues ``<think>``, which is put back in front of it.
    """

    def __init__(self, env_name: str, *, max_steps: int, examples: dict[str, list[Transcript]] | None = None,
                 memory: dict[int, list[str]] | None = None, prompt_options: dict[str, Any] | None = None) -> None:
        self.env_name, self.max_steps = env_name, max_steps
        self.examples, self.memory = examples or {}, memory or {}
        self.options = dict(prompt_options or {})
        self.prefix = COMPLETION_PREFIX if self.options.get("style") == "completion" else ""

    def prompt(self, episode: Episode) -> str:
        """The ReAct prompt of the episode's next step: examples, reflections, the episode so far."""
        return render_react_prompt(
            self.env_name, instruction=episode.first.instruction, first_observation=episode.first.text,
            steps=_views(episode), current_observation=episode.observation.text,
            admissible_actions=episode.observation.admissible_actions, step=episode.num_steps,
            max_steps=self.max_steps, examples=self.examples.get(episode.task.task_type, []),
            reflections=self.memory.get(episode.slot, []), **self.options)

    def read(self, text: str) -> Reading:
        """The thought and action of an answer (:func:`parse_step`), the completion prefix put back."""
        full = self.prefix + text
        thought, action = parse_step(full, self.env_name)
        return Reading(full, action, thought)


def run_react_episodes(
    policy: Policy,
    pool: EnvPool,
    env_name: str,
    items: Sequence[tuple[int, Task]],
    *,
    max_steps: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    trial: int = 0,
    top_p: float = 1.0,
    examples: dict[str, list[Transcript]] | None = None,
    memory: dict[int, list[str]] | None = None,
    prompt_options: dict[str, Any] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    stop_after_refusals: int = 0,
) -> list[Trial]:
    """Play one ReAct episode per (slot, task) in lock-step
    (:class:`g2po_bench.benchmarks.driver.LockStepDriver` with :class:`ReactAgent`); slots index
    ``pool`` and ``memory``. Step ``t`` samples with :func:`step_seed` ``(seed, trial, t)``.

    Args:
        stop_after_refusals: an episode ends (a failure, ``stuck``) after this many refused actions
            in a row, as in RL rollouts (:class:`g2po_bench.core.protocol.RefusalStop`); 0 = never.
        examples, memory, prompt_options: as in :class:`ReactAgent`.
    """
    agent = ReactAgent(env_name, max_steps=max_steps, examples=examples, memory=memory,
                       prompt_options=prompt_options)
    bench = benchmark_of(env_name) or get_benchmark(pool.benchmark)
    driver = LockStepDriver(policy, pool, bench, agent, Sampling(temperature, max_new_tokens, top_p),
                            lambda t: step_seed(seed, trial, t), max_steps=max_steps,
                            stop_after_refusals=stop_after_refusals, on_step=on_step)
    return [Trial.of(ep, trial) for ep in driver.run(items)]


def summarise(records: Sequence[dict[str, Any]], *, iteration: int = 0, invalid: int | None = None,
              steps: int | None = None) -> dict[str, Any]:
    """The EVAL record of per-task trajectory dicts (one per task and episode)."""
    n = len(records)
    invalid = sum(r["invalid_steps"] for r in records) if invalid is None else invalid
    steps = sum(r["num_steps"] for r in records) if steps is None else steps
    return {
        "iteration": iteration,
        "success_rate": float(np.mean([r["success"] for r in records])) if n else 0.0,
        "per_task_type": success_by_task_type(records),
        "num_episodes": n,
        "score": float(np.mean([r["score"] for r in records])) if n else 0.0,
        "mean_steps": float(np.mean([r["num_steps"] for r in records])) if n else 0.0,
        "invalid_frac": invalid / steps if steps else 0.0,
    }


def _slots(panel: Sequence[Task], episodes_per_task: int) -> list[tuple[int, Task]]:
    return [(i * episodes_per_task + r, task) for i, task in enumerate(panel) for r in range(episodes_per_task)]


def run_react(policy: Policy, pool: EnvPool, env_name: str, panel: Sequence[Task], *, max_steps: int,
              temperature: float, max_new_tokens: int, seed: int, episodes_per_task: int = 1,
              top_p: float = 1.0, examples: dict[str, list[Transcript]] | None = None,
              prompt_options: dict[str, Any] | None = None, batch_tasks: int = 64,
              on_episode: Callable[[dict[str, Any]], None] | None = None,
              on_step: Callable[[int, int], None] | None = None, stop_after_refusals: int = 0) -> dict[str, Any]:
    """ReAct on the panel; returns the EVAL record (``on_episode`` gets each trajectory dict).
    ``stop_after_refusals``: as in :func:`run_react_episodes`."""
    items = _slots(panel, episodes_per_task)
    records = []
    for start in range(0, len(items), batch_tasks):
        eps = run_react_episodes(policy, pool, env_name, items[start:start + batch_tasks], max_steps=max_steps,
                                 temperature=temperature, max_new_tokens=max_new_tokens, seed=seed + start,
                                 top_p=top_p, examples=examples, prompt_options=prompt_options, on_step=on_step,
                                 stop_after_refusals=stop_after_refusals)
        for ep in eps:
            rec = ep.record(max_steps)
            records.append(rec)
            if on_episode is not None:
                on_episode(rec)
    return summarise(records)


def _outcome(env_name: str, ep: Trial, max_steps: int) -> str:
    if ep.crashed:
        return "the environment crashed."
    bench = benchmark_of(env_name)
    hint = bench.failure_hint([s.action for s in ep.steps], ep.score) if bench is not None else None
    if hint:
        return hint
    if ep.stuck:
        return "the episode was stopped because your last actions did nothing (\"Nothing happens.\")."
    if len(ep.steps) >= max_steps:
        return f"the task was not completed within the limit of {max_steps} steps."
    return "the task was not completed."


def run_reflexion(policy: Policy, pool: EnvPool, env_name: str, panel: Sequence[Task], *, max_steps: int,
                  temperature: float, max_new_tokens: int, seed: int, max_trials: int = 3,
                  max_reflections: int = 3, reflection_tokens: int = 128, episodes_per_task: int = 1,
                  top_p: float = 1.0, examples: dict[str, list[Transcript]] | None = None,
                  prompt_options: dict[str, Any] | None = None,
                  on_episode: Callable[[dict[str, Any]], None] | None = None,
                  on_reflection: Callable[[dict[str, Any]], None] | None = None,
                  on_step: Callable[[int, int], None] | None = None,
                  stop_after_refusals: int = 0) -> dict[str, Any]:
    """Reflexion on the panel (module docstring); returns the EVAL record plus
    ``success_by_trial`` (cumulative fractions) and ``trials`` (mean trials used per task).
    ``stop_after_refusals``: as in :func:`run_react_episodes`."""
    items = _slots(panel, episodes_per_task)
    memory: dict[int, list[str]] = {slot: [] for slot, _ in items}
    final: dict[int, dict[str, Any]] = {}
    trials_used: dict[int, int] = {}
    solved_after: list[float] = []
    invalid = steps = 0
    remaining = list(items)
    for trial in range(max_trials):
        if not remaining:
            solved_after.append(solved_after[-1] if solved_after else 0.0)
            continue
        eps = run_react_episodes(policy, pool, env_name, remaining, max_steps=max_steps, temperature=temperature,
                                 max_new_tokens=max_new_tokens, seed=seed, trial=trial, top_p=top_p,
                                 examples=examples, memory={s: memory[s][-max_reflections:] for s, _ in remaining},
                                 prompt_options=prompt_options, on_step=on_step,
                                 stop_after_refusals=stop_after_refusals)
        failed = []
        for ep in eps:
            rec = ep.record(max_steps)
            final[ep.slot] = rec
            trials_used[ep.slot] = trial + 1
            invalid += rec["invalid_steps"]
            steps += rec["num_steps"]
            if on_episode is not None:
                on_episode(rec)
            if not ep.success:
                failed.append(ep)
        solved_after.append(float(np.mean([final[s]["success"] for s, _ in items])))
        remaining = [(ep.slot, ep.task) for ep in failed]
        if trial < max_trials - 1 and failed:
            style = (prompt_options or {}).get("style", "chat")
            prompts = [render_reflection_prompt(env_name, instruction=ep.instruction,
                                                first_observation=ep.first_observation, steps=ep.steps,
                                                outcome=_outcome(env_name, ep, max_steps),
                                                reflections=memory[ep.slot][-max_reflections:], style=style)
                       for ep in failed]
            gens = policy.generate(prompts, temperature=temperature, max_new_tokens=reflection_tokens,
                                   top_p=top_p, seed=step_seed(seed, trial, 999))
            lead = REFLECTION_PREFIX + " " if style == "completion" else ""
            for ep, g in zip(failed, gens):
                text = " ".join((lead + g.text.split("\nObservation:")[0]).split())
                text = text or "Plan: try different places and follow the task exactly."
                memory[ep.slot].append(text)
                if on_reflection is not None:
                    on_reflection({"task_id": ep.task.task_id, "slot": ep.slot, "trial": trial, "reflection": text})
    records = [final[s] for s, _ in items]
    ev = summarise(records, invalid=invalid, steps=steps)
    ev["success_by_trial"] = solved_after
    ev["trials"] = float(np.mean(list(trials_used.values()))) if trials_used else 0.0
    ev["max_trials"] = max_trials
    return ev


def run_direct(policy: Policy, pool: EnvPool, benchmark: Benchmark, panel: Sequence[Task], *, max_steps: int,
               temperature: float, max_new_tokens: int, seed: int, episodes_per_task: int = 1,
               history_length: int = 2, stop_after_refusals: int = 0) -> dict[str, Any]:
    """Direct prompting: :func:`g2po_bench.benchmarks.evaluation.evaluate` with the RL step prompt (the
    reference template) and the RL episode end (``stop_after_refusals``)."""

    return evaluate(policy, pool, benchmark, panel, iteration=0, max_steps=max_steps, temperature=temperature,
                    max_new_tokens=max_new_tokens, seed=seed, episodes_per_task=episodes_per_task,
                    history_length=history_length, stop_after_refusals=stop_after_refusals)
