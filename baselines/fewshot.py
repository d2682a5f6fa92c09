"""Few-shot transcripts for ReAct and Reflexion, built from the environments' own expert
walkthroughs on *training* tasks.

A transcript is produced by replaying ``benchmark.expert_actions(task)`` through a fresh
environment (``benchmark.make_env``): every step keeps the observation the expert acted on,
its action, and a short thought. Thoughts come from the benchmark's own
``expert_response(action, obs)`` (the same rationales used for supervised warm starts),
and the first step opens with a plan written for the task type (ALFWorld) or the goal
(WebShop), so the examples show reasoning and acting interleaved as ReAct does. Only
replays that win are used.

Examples never come from the evaluation panel: :func:`select_examples` refuses a split equal
to the evaluation split and any task id on the panel.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.core.protocol import Task

__all__ = ["Transcript", "replay_expert", "select_examples", "split_response"]

_THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)
_ACTION_RE = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)


@dataclass
class Transcript:
    """One solved task: ``steps`` are (thought, action, observation after the action)."""

    task_id: str
    task_type: str
    instruction: str
    first_observation: str
    steps: list[tuple[str, str, str]] = field(default_factory=list)
    won: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "task_type": self.task_type, "instruction": self.instruction,
                "first_observation": self.first_observation, "won": self.won,
                "steps": [list(s) for s in self.steps]}


def split_response(text: str) -> tuple[str, str]:
    """(thought, action) of a ``<think>..</think><action>..</action>`` response ('' when absent)."""
    t = _THINK_RE.search(text)
    a = _ACTION_RE.findall(text)
    return (t.group(1).strip() if t else ""), (a[-1].strip() if a else "")


def replay_expert(benchmark: Benchmark, env_name: str, env: Any, task: Task,
                  max_steps: int) -> Transcript:
    """Replay the expert walkthrough of ``task`` in ``env`` and return its transcript."""
    actions = list(benchmark.expert_actions(task))[:max_steps]
    obs = env.reset(task)
    tr = Transcript(task.task_id, task.task_type, obs.instruction, obs.text)
    for i, action in enumerate(actions):
        thought, _ = split_response(benchmark.expert_response(action, obs))
        if i == 0:
            thought = f"{benchmark.plan_sentence(task, actions, obs.instruction)} {thought}".strip()
        obs = env.step(action)
        tr.steps.append((thought, action, obs.text))
        if obs.done:
            tr.won = bool(obs.won)
            break
    return tr


def select_examples(
    benchmark: Benchmark,
    env_name: str,
    env_cfg: Any,
    split: str,
    *,
    per_type: int,
    task_types: Sequence[str],
    max_steps: int,
    exclude_ids: Sequence[str] = (),
    eval_split: str | None = None,
    max_candidates: int = 20,
) -> dict[str, list[Transcript]]:
    """``per_type`` winning transcripts per task type from training split ``split``.

    Candidates of each type are tried in task-id order (deterministic); at most
    ``max_candidates`` replays per type. A type without any winning replay gets none.

    Raises:
        ValueError: ``split`` is the evaluation split, or a chosen task is on the panel.
    """
    if eval_split is not None and split == eval_split:
        raise ValueError(f"few-shot examples must come from a training split, not the evaluation split {split!r}")
    out: dict[str, list[Transcript]] = {t: [] for t in task_types}
    if per_type <= 0:
        return out
    excluded = set(exclude_ids)
    tasks = sorted(benchmark.load_tasks(env_cfg, split), key=lambda t: t.task_id)
    env = benchmark.make_env(env_cfg)
    try:
        for ttype in task_types:
            cands = [t for t in tasks if t.task_type == ttype][:max_candidates]
            for task in cands:
                if len(out[ttype]) >= per_type:
                    break
                if task.task_id in excluded:
                    raise ValueError(f"few-shot candidate {task.task_id} is on the evaluation panel")
                tr = replay_expert(benchmark, env_name, env, task, max_steps)
                if tr.won:
                    out[ttype].append(tr)
    finally:
        try:
            env.close()
        except Exception:
            pass
    return out
