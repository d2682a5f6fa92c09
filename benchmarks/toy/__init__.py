"""A tiny deterministic text environment for fast tests and studies of the harness.

"Corridor": the agent starts in room 0 of a corridor of ``length`` rooms and must reach the
last room. Actions: ``go east``, ``go west``, ``look``. Anything else gets "Nothing happens."
(an unknown command, as in ALFWorld). Observations recur across trajectories, so the
state-key graph has shared nodes and self-loops like the real benchmarks.

:mod:`g2po_bench.benchmarks.toy.scripted_policy` holds a scripted stochastic policy with explicit action
probabilities (the exact mode of the credit instrument computes values from them).
"""

from __future__ import annotations

from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.core.protocol import Environment, Observation, Task

__all__ = ["CorridorEnv", "load_tasks", "make_env", "build_prompt", "expert_actions",
           "expert_detour", "expert_response", "TASK_TYPES", "ToyBenchmark", "BENCHMARK"]

TASK_TYPES = ("corridor",)


class CorridorEnv(Environment):
    """The corridor environment (see the module docstring). Reward 1 on reaching the end."""

    name = "toy"

    def __init__(self) -> None:
        self.length = 0
        self.pos = 0
        self.instruction = ""

    def _obs(self, text: str, *, reward: float = 0.0, done: bool = False, won: bool = False) -> Observation:
        admissible = ["go east", "go west", "look"]
        return Observation(text=text, instruction=self.instruction, admissible_actions=admissible,
                           state_key=f"room {self.pos}", reward=reward, done=done, won=won,
                           info={"refused": text.startswith("Nothing happens")})

    def reset(self, task: Task) -> Observation:
        self.length = int(task.payload["length"])
        self.pos = 0
        self.instruction = f"reach room {self.length - 1}."
        return self._obs(f"You are in room 0 of {self.length}.")

    def step(self, action: str) -> Observation:
        if action == "go east":
            self.pos = min(self.pos + 1, self.length - 1)
        elif action == "go west":
            self.pos = max(self.pos - 1, 0)
        elif action != "look":
            return self._obs("Nothing happens.")
        won = self.pos == self.length - 1
        return self._obs(f"You are in room {self.pos} of {self.length}.", reward=float(won), done=won, won=won)


def load_tasks(cfg, split: str) -> list[Task]:
    """Corridors of length 2..6 (train) or 3..7 (any other split)."""
    lengths = range(2, 7) if split == "train" else range(3, 8)
    return [Task(task_id=f"{split}/corridor-{n}", task_type="corridor", env="toy", payload={"length": n})
            for n in lengths]


def make_env(cfg=None) -> CorridorEnv:
    """A fresh :class:`CorridorEnv` (``cfg`` is unused)."""
    return CorridorEnv()


def build_prompt(obs: Observation, history: list[tuple[str, str]], step: int, history_length: int = 2,
                 style: str = "reference") -> str:
    """A one-line prompt: task, step, last ``history_length`` (observation, action) pairs, actions.
    The toy prompt is already compact: every ``style`` gives the same text."""
    recent = history[-history_length:] if history_length else []
    past = " ".join(f"[{o} -> {a}]" for o, a in recent)
    actions = ", ".join(obs.admissible_actions or [])
    return f"Task: {obs.instruction} Step {step}. History: {past} Now: {obs.text} Actions: {actions}. Answer:"


def expert_actions(task: Task) -> list[str]:
    """The winning plan: ``go east`` length-1 times."""
    return ["go east"] * (int(task.payload["length"]) - 1)


def expert_detour(plan: list[str], first_obs: Observation, rng, open_prob: float = 0.0) -> list[str]:
    """The plan with a wasted step pair: ``go west`` then ``go east`` inserted at a random point.

    Still wins, two steps later. A warm start trained on such demonstrations goes west now and
    then, which a tight step limit punishes: the toy setting where RL has something generic to
    learn (never go west), used by the learning test (``train.sft_detour_prob``).

    Args:
        plan: the expert plan (:func:`expert_actions`).
        first_obs: the reset observation (unused; the signature of the ALFWorld detour).
        rng: a ``numpy.random.Generator``.
        open_prob: unused (the ALFWorld detour's; the corridor has nothing to open).

    Returns:
        The new plan (``plan`` unchanged when it is empty).
    """
    if not plan:
        return list(plan)
    k = int(rng.integers(len(plan)))
    return [*plan[:k], "go west", "go east", *plan[k:]]


def expert_response(action: str, obs: Observation, style: str = "reference") -> str:
    """The expert's response text for ``action`` in the think/action format (any ``style``)."""
    return f"<think>go on</think><action>{action}</action>"


class ToyBenchmark(Benchmark):
    """The corridor as the suite's benchmark (tests and quick studies of the harness)."""

    name = "toy"
    task_types = TASK_TYPES
    projection = "alfworld"
    # the toy prompt is already compact: both styles give the same text
    prompt_styles = ("reference", "compact")
    expert_detour = staticmethod(expert_detour)

    # the package's functions are the protocol's required parts
    load_tasks = staticmethod(load_tasks)
    make_env = staticmethod(make_env)
    build_prompt = staticmethod(build_prompt)
    expert_actions = staticmethod(expert_actions)
    expert_response = staticmethod(expert_response)


BENCHMARK = ToyBenchmark()
