"""The multi-turn rollout engine: groups of N rollouts per task, emitted as a StepBatch.

For each of G tasks, N environments start the same task (a *task group*, ALGORITHMS.md
"Notation") and are played in lock-step: at every step the prompts of all active
environments are generated in one batch by the policy, parsed
(:func:`g2po_bench.benchmarks.parsing.parse_response`), and stepped in parallel worker processes
(:class:`g2po_bench.benchmarks.workers.EnvPool`). An episode ends on success, on the environment's own
end, at ``max_steps`` (truncation: a failure), after ``stop_after_refusals`` consecutive
actions the engine refused when that option is on (``Observation.info["refused"]``; a
failure, recorded as ``stuck``), or when its environment crashes (a failure, restarted for the
next episode).

Rewards follow the reference setting: the final step of a successful episode gets
``success_reward`` (10), every other step 0; an environment that reports a task score
(WebShop: ``info["score"]`` = purchase reward x 100) has it kept as the trajectory's ``score``;
an episode that ends without one gets the benchmark's ``episode_score_default`` (WebShop: 0, a
non-buyer; None where the environment reports no score, :class:`g2po_bench.benchmarks.base.Benchmark`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.benchmarks.policy import Policy, response_was_cut
from g2po_bench.benchmarks.workers import EnvPool
from g2po_bench.core.batch import StepBatch, hash_state_keys
from g2po_bench.core.protocol import Observation, RefusalStop, Task

__all__ = ["RolloutBatch", "collect_rollouts", "success_by_task_type", "state_label"]


def state_label(text: str, max_chars: int = 60) -> str:
    """A short readable label of a state-key text, for drawings and logs.

    The first non-empty line of ``text``, cut after its first sentence when that sentence ends
    within ``max_chars`` characters ("You arrive at cabinet 1. The cabinet 1 is closed." ->
    "You arrive at cabinet 1."), else cut to ``max_chars`` characters with a trailing "...".
    Distinct states can share a label; the state key (its hash) identifies the state.

    Args:
        text: the state-key text (``Observation.state_key``).
        max_chars: the longest label returned (>= 4).

    Returns:
        str of at most ``max_chars`` characters ("" for an empty text).

    Raises:
        ValueError: ``max_chars`` < 4.
    """
    if max_chars < 4:
        raise ValueError(f"state_label max_chars must be >= 4, got {max_chars}")
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    end = line.find(". ")
    if 0 <= end < max_chars:
        return line[: end + 1]
    if len(line) <= max_chars:
        return line
    return line[: max_chars - 3].rstrip() + "..."


@dataclass
class RolloutBatch:
    """Rollouts of one batch: the StepBatch plus row-aligned token data and per-trajectory info.

    Attributes:
        steps: StepBatch with B rows, ordered by (traj_id, step).
        prompt_ids: B lists of prompt token ids (empty for remote policies).
        response_ids: B lists of response token ids.
        responses: B response texts.
        state_texts: B state-key texts (before hashing), for similarity grouping and logs.
        prompt_truncated: (B,) bool, the step's prompt was longer than the policy's
            ``max_prompt_tokens`` and kept only its last tokens (``Generation.info
            ["prompt_truncated"]``).
        response_truncated: (B,) bool, the step's response was cut at ``max_new_tokens``
            (:func:`g2po_bench.benchmarks.policy.response_was_cut`); its action is usually invalid.
        trajectories: one dict per trajectory: ``traj_id, group_id, task_id, task_type,
            success, num_steps, score, invalid_steps, truncated`` (ran to the step limit
            without success), ``stuck`` (ended by ``stop_after_refusals``),
            ``truncated_responses`` (steps whose response was cut at the token limit), ``crashed``.
        sampler_logprobs: B entries, each the sampler's log-probs of the response tokens
            (``Generation.logprobs``) or None where the policy does not report them.
        actions: B action texts sent to the environment (the parser's choice; for an invalid
            output, the parser's fallback text); empty when the producer did not record them.
        entropies: (B,) float64, the mean token entropy (nats) of each step's response under
            the sampling policy (``Generation.entropies``; the estimator input ``entropies``),
            NaN where the policy does not report it; empty when the producer did not record it.
    """

    steps: StepBatch
    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    responses: list[str]
    state_texts: list[str]
    prompt_truncated: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    response_truncated: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    trajectories: list[dict[str, Any]] = field(default_factory=list)
    sampler_logprobs: list[list[float] | None] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    entropies: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))

    @property
    def state_labels(self) -> list[str]:
        """B short readable state labels (:func:`state_label` of ``state_texts``)."""
        return [state_label(t) for t in self.state_texts]

    @property
    def success_rate(self) -> float:
        """Fraction of trajectories that succeeded."""
        if not self.trajectories:
            return 0.0
        return float(np.mean([t["success"] for t in self.trajectories]))

    @property
    def truncated_prompts(self) -> int:
        """Number of steps whose prompt was cut to ``max_prompt_tokens``."""
        return int(self.prompt_truncated.sum())

    @property
    def truncated_response_frac(self) -> float:
        """Fraction of steps whose response was cut at the token limit (0.0 without steps)."""
        return float(self.response_truncated.mean()) if len(self.response_truncated) else 0.0


def collect_rollouts(
    policy: Policy,
    pool: EnvPool,
    benchmark: Benchmark,
    tasks: Sequence[Task],
    *,
    group_size: int,
    max_steps: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    top_p: float = 1.0,
    history_length: int = 2,
    success_reward: float = 10.0,
    group_offset: int = 0,
    on_step: Any = None,
    prompt_style: str = "reference",
    stop_after_refusals: int = 0,
    refused_is_invalid: bool = False,
) -> RolloutBatch:
    """Play ``group_size`` episodes of every task in lock-step and collect the steps.

    Args:
        policy: any :class:`g2po_bench.benchmarks.policy.Policy`.
        pool: the environment pool (needs ``len(tasks) * group_size`` slots; slots are
            created on first use).
        benchmark: the benchmark module (``build_prompt``; see :mod:`g2po_bench.benchmarks.registry`).
        tasks: G tasks; task g forms task group ``group_offset + g``.
        group_size: N rollouts per task.
        max_steps: step limit per episode (ALFWorld 50, WebShop 15 in the reference).
        temperature, top_p, max_new_tokens: sampling settings (temperature 0 = greedy).
        seed: base seed; step t of this call samples with seed ``seed * 1000 + t``, so the
            same seed, tasks and policy give the same rollouts.
        history_length: (observation, action) pairs shown in the prompt.
        success_reward: reward of the final step of a successful episode.
        group_offset: first task-group id (keeps ids distinct across calls).
        on_step: optional callback ``on_step(t, num_active)`` for progress display.
        prompt_style: the benchmark's prompt style (``env.prompt``: ``"reference"`` or, for
            ALFWorld, ``"compact"``).
        stop_after_refusals: end an episode (a failure) after this many consecutive steps whose
            observation has ``info["refused"]`` true (ALFWorld's "Nothing happens."); 0 = never.
        refused_is_invalid: a refused action's row is marked invalid (``action_valid`` False),
            so the estimators' invalid-action penalty applies to it as to a malformed output.

    Returns:
        RolloutBatch with one row per step taken.
    """
    n_env = len(tasks) * group_size
    env_task = [tasks[i // group_size] for i in range(n_env)]
    group_of = [group_offset + i // group_size for i in range(n_env)]
    traj_of = [group_offset * group_size + i for i in range(n_env)]
    obs: dict[int, Observation] = pool.reset(list(enumerate(env_task)))
    history: list[list[tuple[str, str]]] = [[] for _ in range(n_env)]
    active = [not obs[i].done for i in range(n_env)]
    crashed = [bool(obs[i].info.get("crashed")) for i in range(n_env)]
    won = [False] * n_env
    score: list[float | None] = [benchmark.episode_score_default] * n_env
    n_steps = [0] * n_env
    invalid = [0] * n_env
    cut_responses = [0] * n_env
    refusal_stop = RefusalStop(stop_after_refusals)
    stuck = [False] * n_env
    rows: list[dict[str, Any]] = []
    # the benchmark's action extraction: its reference projection, or its own (AppWorld's <code> cells)
    parse = benchmark.parse_response

    for t in range(max_steps):
        idx = [i for i in range(n_env) if active[i]]
        if not idx:
            break
        if on_step is not None:
            on_step(t, len(idx))
        prompts = [benchmark.build_prompt(obs[i], history[i], t, history_length, style=prompt_style)
                   for i in idx]
        gens = policy.generate(prompts, temperature=temperature, max_new_tokens=max_new_tokens,
                               top_p=top_p, seed=seed * 1000 + t)
        parsed = [parse(g.text) for g in gens]
        new_obs = pool.step([(i, p.action) for i, p in zip(idx, parsed)])
        for i, gen, p in zip(idx, gens, parsed):
            o = new_obs[i]
            done = o.done or t == max_steps - 1
            refused = bool(o.info.get("refused", False))
            rows.append({
                "env": i, "step": t, "state_text": obs[i].state_key,
                "valid": p.valid and not (refused_is_invalid and refused),
                "reward": success_reward if o.won else 0.0,
                "prompt_ids": gen.prompt_ids, "response_ids": gen.response_ids, "response": gen.text,
                "logprobs": gen.logprobs,
                "entropy": _mean_entropy(gen),
                "action": p.action,
                "prompt_truncated": bool(gen.info.get("prompt_truncated", False)),
                "response_truncated": response_was_cut(gen),
            })
            n_steps[i] += 1
            invalid[i] += int(not p.valid)
            cut_responses[i] += int(rows[-1]["response_truncated"])
            history[i].append((obs[i].text, p.action))
            if refusal_stop.stuck(i, o):
                stuck[i] = done = True
            obs[i] = o
            if o.info.get("crashed"):
                crashed[i] = True
            if o.done:
                won[i] = bool(o.won)
                if "score" in o.info:
                    score[i] = float(o.info["score"])
            if done:
                active[i] = False

    rows.sort(key=lambda r: (traj_of[r["env"]], r["step"]))
    envs = np.array([r["env"] for r in rows], dtype=np.int64)
    group_arr = np.asarray(group_of, dtype=np.int64)
    traj_arr = np.asarray(traj_of, dtype=np.int64)
    won_arr = np.asarray(won, dtype=bool)
    steps = StepBatch(
        group_id=group_arr[envs] if rows else np.zeros(0, np.int64),
        traj_id=traj_arr[envs] if rows else np.zeros(0, np.int64),
        step=np.array([r["step"] for r in rows], dtype=np.int64),
        state_key=hash_state_keys(r["state_text"] for r in rows),
        reward=np.array([r["reward"] for r in rows], dtype=np.float64),
        success=won_arr[envs] if rows else np.zeros(0, bool),
        action_valid=np.array([r["valid"] for r in rows], dtype=bool),
    )
    trajectories = [
        {
            "traj_id": traj_of[i], "group_id": group_of[i], "task_id": env_task[i].task_id,
            "task_type": env_task[i].task_type, "success": won[i], "num_steps": n_steps[i],
            "score": score[i], "invalid_steps": invalid[i],
            "truncated": (not won[i]) and n_steps[i] >= max_steps, "stuck": stuck[i],
            "truncated_responses": cut_responses[i], "crashed": crashed[i],
        }
        for i in range(n_env)
    ]
    return RolloutBatch(
        steps=steps,
        prompt_ids=[r["prompt_ids"] for r in rows],
        response_ids=[r["response_ids"] for r in rows],
        responses=[r["response"] for r in rows],
        state_texts=[r["state_text"] for r in rows],
        prompt_truncated=np.array([r["prompt_truncated"] for r in rows], dtype=bool),
        response_truncated=np.array([r["response_truncated"] for r in rows], dtype=bool),
        trajectories=trajectories,
        sampler_logprobs=[r["logprobs"] for r in rows],
        actions=[r["action"] for r in rows],
        entropies=np.array([r["entropy"] for r in rows], dtype=np.float64),
    )


def _mean_entropy(gen) -> float:
    """Mean of ``gen.entropies`` over the response tokens; NaN when not reported (an empty
    response has entropy 0: nothing was sampled)."""
    ents = getattr(gen, "entropies", None)
    if ents is None:
        return float("nan")
    return float(np.mean(ents)) if len(ents) else 0.0


def success_by_task_type(trajectories: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Success rate (fraction) per task type over the given trajectories."""
    out: dict[str, list[bool]] = {}
    for t in trajectories:
        out.setdefault(t["task_type"], []).append(bool(t["success"]))
    return {k: float(np.mean(v)) for k, v in sorted(out.items())}
