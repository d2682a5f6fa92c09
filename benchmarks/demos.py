"""Expert demonstrations: replay a benchmark's expert actions through the harness.

Used to warm-start a policy by supervised fine-tuning (SFT) on the training tasks' expert
walkthroughs, and to build the tokenizer corpus of the tiny CPU model. The prompts are the
exact step prompts the policy will see during RL (same template, same history).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from benchmarks.base import Task
from benchmarks.workers import EnvPool

__all__ = ["Demonstration", "collect_demonstrations"]


@dataclass
class Demonstration:
    """One expert step: the prompt the agent saw and the expert's response text."""

    task_id: str
    step: int
    prompt: str
    response: str


def collect_demonstrations(
    pool: EnvPool,
    benchmark: ModuleType,
    tasks: Sequence[Task],
    *,
    max_steps: int,
    history_length: int = 2,
) -> tuple[list[Demonstration], float]:
    """Play each task's ``expert_actions`` through the environments.

    Returns:
        (demonstrations, win rate of the replays in [0, 1]). Steps beyond ``max_steps`` are
        not recorded (a walkthrough longer than the step limit cannot be learned as a whole).
    """
    plans = [list(benchmark.expert_actions(t))[:max_steps] for t in tasks]
    obs = pool.reset(list(enumerate(tasks)))
    history: list[list[tuple[str, str]]] = [[] for _ in tasks]
    demos: list[Demonstration] = []
    won = [False] * len(tasks)
    active = {i for i in range(len(tasks)) if plans[i] and not obs[i].done}
    t = 0
    while active:
        step_items = []
        for i in sorted(active):
            action = plans[i][t]
            prompt = benchmark.build_prompt(obs[i], history[i], t, history_length)
            demos.append(Demonstration(tasks[i].task_id, t, prompt, benchmark.expert_response(action, obs[i])))
            history[i].append((obs[i].text, action))
            step_items.append((i, action))
        new = pool.step(step_items)
        for i, _ in step_items:
            obs[i] = new[i]
            if new[i].done or t + 1 >= len(plans[i]):
                won[i] = bool(new[i].won)
                active.discard(i)
        t += 1
    return demos, (sum(won) / len(tasks) if tasks else 0.0)
