"""Expert demonstrations: replay a benchmark's expert actions through the harness.

Used to warm-start a policy by supervised fine-tuning (SFT) on the training tasks' expert
walkthroughs, and to build the tokenizer corpus of the tiny CPU model. The prompts are the
exact step prompts the policy will see during RL (same template, same history).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.core.protocol import IfAdmissible, Mistake, Task
from g2po_bench.runtime.workers import EnvPool

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
    benchmark: Benchmark,
    tasks: Sequence[Task],
    *,
    max_steps: int,
    history_length: int = 2,
    prompt_style: str = "reference",
    on_progress=None,
    slots: int = 64,
    detour_prob: float = 0.0,
    detour_open_prob: float = 0.0,
    stall_prob: float = 0.0,
    recovery_prob: float = 0.0,
    seed: int = 0,
) -> tuple[list[Demonstration], float]:
    """Play each task's ``expert_actions`` through the environments.

    Tasks are replayed in lock-step batches of at most ``slots`` tasks on pool slots
    ``0..slots-1`` (the slots the training rollouts use as well), so the pool never builds more
    environments than a training iteration needs (an ALFWorld environment costs a planner
    library copy and a fraction of a second to build). ``prompt_style`` selects the benchmark's
    prompt and expert-response style (``env.prompt``); ``on_progress(done_tasks, total_tasks)``
    is called after every lock-step step. With ``detour_prob`` > 0 and a benchmark that offers
    ``expert_detour(plan, first_obs, rng)`` (ALFWorld), that fraction of the demonstrations
    first visit another receptacle (a searching expert; drawn with ``numpy.random.default_rng(seed)``),
    opening it first when it is closed with probability ``detour_open_prob`` (ALFWorld's ``open_prob``).
    With ``stall_prob`` > 0 and a benchmark that offers ``expert_stall(plan, rng, prob, max_len)``
    (ALFWorld), the expert wastes steps now and then (a dawdling expert whose demonstrations still
    win within ``max_steps``). With ``recovery_prob`` > 0 and a benchmark that offers
    ``expert_mistake(plan)`` (ALFWorld), that fraction of the detour demonstrations make a mistake
    at the wrong receptacle and recover from it (the mistake is played, never recorded:
    :class:`g2po_bench.core.protocol.Mistake`).

    Returns:
        (demonstrations in task order, win rate of the replays in [0, 1]). Steps beyond
        ``max_steps`` are not recorded (a walkthrough longer than the step limit cannot be
        learned as a whole).
    """
    demos: list[Demonstration] = []
    won = 0
    rng = np.random.default_rng(seed)
    detour = benchmark.expert_detour if detour_prob > 0 else None
    stall = benchmark.expert_stall if stall_prob > 0 else None
    mistake = benchmark.expert_mistake if recovery_prob > 0 else None
    for start in range(0, len(tasks), max(1, slots)):
        chunk = list(tasks[start:start + max(1, slots)])
        take = [bool(detour) and rng.random() < detour_prob for _ in chunk]
        slip = [t and recovery_prob > 0 and rng.random() < recovery_prob for t in take]

        def edit(i: int, plan: list[str], first_obs, take=take, slip=slip) -> list[str]:
            """The expert's plan for task ``i`` of the chunk: detour, mistake, stalls (as drawn)."""
            if take[i]:
                plan = detour(plan, first_obs, rng, open_prob=detour_open_prob)
            if slip[i] and mistake is not None:
                plan = mistake(plan)
            return stall(plan, rng, stall_prob, max_steps) if stall is not None else plan

        d, w = _replay(pool, benchmark, chunk, max_steps, history_length, prompt_style,
                       lambda done, _n, s=start: on_progress and on_progress(s + done, len(tasks)), edit)
        demos.extend(d)
        won += w
    return demos, (won / len(tasks) if tasks else 0.0)


def _replay(pool, benchmark, tasks, max_steps, history_length, prompt_style, on_progress, edit):
    """Lock-step replay of ``tasks`` on slots 0..len-1 with the plans ``edit(i, walkthrough,
    first_obs)`` makes of their walkthroughs; returns (demonstrations, wins). A task's replay ends
    when its episode ends, its plan is played out, or after ``max_steps`` actions; an
    :class:`~g2po_bench.core.protocol.IfAdmissible` action its observation does not admit is skipped."""
    obs = pool.reset(list(enumerate(tasks)))
    plans = [edit(i, list(benchmark.expert_actions(t)), obs[i]) for i, t in enumerate(tasks)]
    cursor = [0] * len(tasks)  # index of each task's next action in its plan

    def next_action(i: int):
        """Task ``i``'s next action to play (skipping what its observation does not admit), or None."""
        while cursor[i] < len(plans[i]):
            action = plans[i][cursor[i]]
            if not (isinstance(action, IfAdmissible) and action not in (obs[i].admissible_actions or ())):
                return action
            cursor[i] += 1
        return None

    history: list[list[tuple[str, str]]] = [[] for _ in tasks]
    steps: list[list[Demonstration]] = [[] for _ in tasks]
    won = [False] * len(tasks)
    active = {i for i in range(len(tasks)) if max_steps > 0 and not obs[i].done and next_action(i) is not None}
    while active:
        step_items = []
        for i in sorted(active):
            action = plans[i][cursor[i]]
            t = len(history[i])
            prompt = benchmark.build_prompt(obs[i], history[i], t, history_length, style=prompt_style)
            response = benchmark.expert_response(action, obs[i], style=prompt_style)
            if not isinstance(action, Mistake):  # a deliberate mistake is played, never imitated
                steps[i].append(Demonstration(tasks[i].task_id, t, prompt, response))
            # the history shows what the agent reads from the response (StepPromptAgent.read), as in
            # a rollout: WebShop's parser lowercases, so its history shows lowercase queries and ids
            history[i].append((obs[i].text, benchmark.parse_response(response).action))
            step_items.append((i, action))
        new = pool.step(step_items)
        for i, _ in step_items:
            obs[i] = new[i]
            cursor[i] += 1
            if new[i].done or len(history[i]) >= max_steps or next_action(i) is None:
                won[i] = bool(new[i].won)
                active.discard(i)
        on_progress(len(tasks) - len(active), len(tasks))
    return [d for per_task in steps for d in per_task], sum(won)
