"""The evaluation protocol: a fixed task panel played at validation temperature.

The panel is chosen once from the (sorted) evaluation split, round-robin across task types so
every type is represented, and is the same for every run with the same settings, which makes
runs comparable cell by cell (validation temperature 0.4, as verl-agent's
``examples/gigpo_trainer/run_alfworld.sh`` and ``run_webshop.sh`` set it; docs/design-notes.md
"Training-loop facts"). The result is the EVAL record of ``g2po_bench/core/rundir.py``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.benchmarks.loading import SmallPanelWarning
from g2po_bench.benchmarks.rollout import collect_rollouts, success_by_task_type
from g2po_bench.core.protocol import Task
from g2po_bench.core.stats import bootstrap_ci
from g2po_bench.runtime.policy_protocol import Policy
from g2po_bench.runtime.workers import EnvPool

__all__ = ["select_panel", "evaluate"]


def _ci(values: list[float]) -> list[float] | None:
    """95 % percentile-bootstrap interval of the mean of ``values`` (0/1 successes or episode
    scores; None for < 2 values)."""
    if len(values) < 2:
        return None
    lo, hi = bootstrap_ci(values, confidence=0.95, n_boot=2000, seed=0)
    return [lo, hi]


def _episode_scores(benchmark: Benchmark, trajs: Sequence[dict[str, Any]]) -> list[float] | None:
    """The score of every episode (a trajectory without one gets the benchmark's
    ``episode_score_default``), or None when the environment reports no score at all.

    Raises:
        ValueError: some episodes carry a score and others none, and the benchmark declares no
            ``episode_score_default`` (a mean over the scored ones alone would leave the others out).
    """
    default = benchmark.episode_score_default
    scores = [t["score"] if t["score"] is not None else default for t in trajs]
    missing = sum(s is None for s in scores)
    if missing == len(scores):
        return None
    if missing:
        raise ValueError(f"{missing} of {len(scores)} episodes carry no score and benchmark "
                         f"{benchmark.name} declares no episode_score_default: the mean score must count "
                         "every episode (g2po_bench.benchmarks.base.Benchmark)")
    return [float(s) for s in scores]


def select_panel(tasks: Sequence[Task], num_tasks: int) -> list[Task]:
    """Pick ``num_tasks`` tasks (0 = all) round-robin across task types, in sorted order.

    Deterministic: depends only on the task ids. Returns tasks sorted by task_id.

    A split with fewer than ``num_tasks`` tasks gives the whole split and a
    :class:`g2po_bench.benchmarks.loading.SmallPanelWarning` saying so (never a silently smaller panel; not
    an error, since ``eval.num_tasks`` has a default that small splits such as the toy
    environment's are below).
    """
    tasks = sorted(tasks, key=lambda t: t.task_id)
    if 0 < len(tasks) < num_tasks:
        warnings.warn(f"eval.num_tasks={num_tasks} but the evaluation split holds {len(tasks)} tasks: the panel "
                      "is the whole split (set eval.num_tasks=0 for the whole split, or use a larger split)",
                      SmallPanelWarning, stacklevel=2)
    if num_tasks <= 0 or num_tasks >= len(tasks):
        return tasks
    by_type: dict[str, list[Task]] = {}
    for t in tasks:
        by_type.setdefault(t.task_type, []).append(t)
    queues = [list(v) for _, v in sorted(by_type.items())]
    panel: list[Task] = []
    while len(panel) < num_tasks:
        for q in queues:
            if q and len(panel) < num_tasks:
                panel.append(q.pop(0))
    return sorted(panel, key=lambda t: t.task_id)


def evaluate(
    policy: Policy,
    pool: EnvPool,
    benchmark: Benchmark,
    panel: Sequence[Task],
    *,
    iteration: int,
    max_steps: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    episodes_per_task: int = 1,
    history_length: int = 2,
    batch_tasks: int = 32,
    prompt_style: str = "reference",
    on_progress=None,
    stop_after_refusals: int = 0,
) -> dict[str, Any]:
    """Play every panel task ``episodes_per_task`` times and summarise.

    ``on_progress(done_episodes, total_episodes)`` is called after each batch of ``batch_tasks``;
    ``stop_after_refusals`` as in :func:`g2po_bench.benchmarks.rollout.collect_rollouts`.

    Returns:
        EVAL dict: ``iteration, success_rate`` (fraction), ``success_ci`` ([low, high], the 95 %
        percentile-bootstrap interval over episodes, :func:`g2po_bench.core.stats.bootstrap_ci`),
        ``per_task_type`` (fractions), ``per_task_type_ci`` ({type: [low, high]}),
        ``num_episodes, score`` (mean task score over **every** episode, WebShop: reward x 100 with
        0 for an episode that never buys, the benchmark's ``episode_score_default``; None where the
        environment reports none; a benchmark's ``episode_set_score(trajectories)`` when it has one),
        ``episode_scores`` (one score per episode in panel order, where the environment reports
        scores) and ``score_ci`` (the 95 % percentile-bootstrap interval of their mean, the
        interval of ``success_ci`` for scores),
        ``mean_steps, invalid_frac``, ``truncated_prompts`` (number of
        steps whose prompt was cut to the policy's ``max_prompt_tokens``), ``truncated_responses``
        (fraction of steps whose response was cut at ``max_new_tokens``), and ``episodes``: one
        ``[task_id, success (0/1)]`` pair per episode in panel order (paired comparisons of two
        evaluations of the same panel), and ``panel_size`` (tasks in the panel).
    """
    trajs: list[dict[str, Any]] = []
    invalid = 0
    steps = 0
    cut_prompts = 0
    cut_responses = 0
    for start in range(0, len(panel), batch_tasks):
        chunk = list(panel[start:start + batch_tasks])
        rb = collect_rollouts(
            policy, pool, benchmark, chunk, group_size=episodes_per_task, max_steps=max_steps,
            temperature=temperature, max_new_tokens=max_new_tokens, seed=seed + start,
            history_length=history_length, group_offset=start, prompt_style=prompt_style,
            stop_after_refusals=stop_after_refusals,
        )
        trajs.extend(rb.trajectories)
        invalid += int((~rb.steps.action_valid).sum())
        steps += len(rb.steps)
        cut_prompts += rb.truncated_prompts
        cut_responses += int(rb.response_truncated.sum())
        if on_progress is not None:
            on_progress(len(trajs), len(panel) * episodes_per_task)
    episode_scores = _episode_scores(benchmark, trajs)
    scores = episode_scores or []
    wins = [float(t["success"]) for t in trajs]
    by_type: dict[str, list[float]] = {}
    for t in trajs:
        by_type.setdefault(t["task_type"], []).append(float(t["success"]))
    set_score = benchmark.episode_set_score(trajs)  # e.g. AppWorld's scenario completion
    if set_score is not None:
        scores = [set_score]
    return {
        "iteration": iteration,
        "success_rate": float(np.mean(wins)) if trajs else 0.0,
        "success_ci": _ci(wins),
        "per_task_type": success_by_task_type(trajs),
        "per_task_type_ci": {k: _ci(v) for k, v in sorted(by_type.items())},
        "episodes": [[t["task_id"], int(t["success"])] for t in trajs],
        **({"episode_scores": episode_scores, "score_ci": _ci(episode_scores)} if episode_scores is not None else {}),
        "num_episodes": len(trajs),
        "panel_size": len(panel),
        "score": float(np.mean(scores)) if scores else None,
        "mean_steps": float(np.mean([t["num_steps"] for t in trajs])) if trajs else 0.0,
        "invalid_frac": invalid / steps if steps else 0.0,
        "truncated_prompts": cut_prompts,
        "truncated_responses": cut_responses / steps if steps else 0.0,
    }
