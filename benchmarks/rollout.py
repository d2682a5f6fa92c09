"""The multi-turn rollout engine: groups of N rollouts per task, emitted as a StepBatch.

For each of G tasks, N environments start the same task (a *task group*, docs/design-notes.md
"The StepBatch") and are played in lock-step by :class:`g2po_bench.benchmarks.driver.LockStepDriver`:
at every step the prompts of all active environments (the benchmark's step prompt,
:class:`StepPromptAgent`) are generated in one batch by the policy, parsed (the benchmark's
``parse_response``), and stepped in parallel worker processes
(:class:`g2po_bench.runtime.workers.EnvPool`). An episode ends on success, on the environment's own
end, at ``max_steps`` (truncation: a failure), after ``stop_after_refusals`` consecutive
actions the engine refused when that option is on (``Observation.info["refused"]``; a
failure, recorded as ``stuck``), or when its environment crashes (a failure, restarted for the
next episode).

Rewards are the benchmark's (:meth:`g2po_bench.benchmarks.base.Benchmark.step_reward`), by default the
reference setting: the final step of a successful episode gets ``success_reward`` (10), every
other step 0; an environment that reports a task score (WebShop: ``info["score"]`` = purchase
reward x 100) has it kept as the trajectory's ``score``; an episode that ends without one gets
the benchmark's ``episode_score_default`` (WebShop: 0, a non-buyer; None where the environment
reports no score, :class:`g2po_bench.benchmarks.base.Benchmark`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.benchmarks.driver import Episode, LockStepDriver, Reading, RolloutHooks, Sampling
from g2po_bench.core.batch import StepBatch, hash_state_keys
from g2po_bench.core.protocol import Task
from g2po_bench.runtime.policy_protocol import Policy
from g2po_bench.runtime.workers import EnvPool

__all__ = ["RolloutBatch", "StepPromptAgent", "collect_rollouts", "rollout_batch", "success_by_task_type",
           "state_label"]


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
            (:func:`g2po_bench.runtime.policy_protocol.response_was_cut`); its action is usually invalid.
        trajectories: one dict per trajectory: ``traj_id, group_id, task_id, task_type,
            success, num_steps, score, invalid_steps, truncated`` (ran to the step limit
            without success), ``stuck`` (ended by ``stop_after_refusals``),
            ``truncated_responses`` (steps whose response was cut at the token limit), ``crashed``,
            ``start_step`` (the length of its replayed prefix, else 0), ``cut`` (stopped by the
            hooks, :meth:`g2po_bench.benchmarks.driver.RolloutHooks.should_stop`).
        sampler_logprobs: B entries, each the sampler's log-probs of the response tokens
            (``Generation.logprobs``) or None where the policy does not report them.
        actions: B action texts sent to the environment (the parser's choice; for an invalid
            output, the parser's fallback text); empty when the producer did not record them.
        entropies: (B,) float64, the mean token entropy (nats) of each step's response under
            the sampling policy (``Generation.entropies``; the estimator input ``entropies``),
            NaN where the policy does not report it; empty when the producer did not record it.
        observations: B observation texts (``Observation.text``) of the states the actions were
            taken from; empty when the producer did not record them.
        refused: (B,) bool, the observation after the step was refused (``info["refused"]``,
            ALFWorld's "Nothing happens."); empty when not recorded.
        replayed: (B,) bool, the step was replayed from an action prefix (no policy call: empty
            prompt and response tokens); empty when not recorded.
        state_texts_by_rule: state-key texts under other key rules (the hooks' ``key_rules``,
            e.g. :class:`g2po_bench.analysis.credit.replay.CreditHooks`): rule -> B texts; empty
            when none were asked for.
        next_state_texts: B state-key texts of the observation each step led to (the next
            row's ``state_texts`` entry inside a trajectory; after the last step, the
            observation the episode ended on); empty when the producer did not record them.
            :attr:`next_state_keys` hashes them (the estimator input ``next_state_key``).
        next_state_texts_by_rule: the same under the hooks' ``key_rules``: rule -> B texts.
        timing: seconds of the call: ``reset_s``, ``replay_s`` (prefix replays), ``generate_s``
            (policy calls), ``step_s`` (environment steps after policy calls), ``total_s``.
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
    observations: list[str] = field(default_factory=list)
    refused: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    replayed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    state_texts_by_rule: dict[str, list[str]] = field(default_factory=dict)
    next_state_texts: list[str] = field(default_factory=list)
    next_state_texts_by_rule: dict[str, list[str]] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)

    def state_keys_by_rule(self, rule: str) -> np.ndarray:
        """(B,) int64 hashed state keys under ``rule`` (:func:`g2po_bench.core.batch.hash_state_keys`
        of ``state_texts_by_rule[rule]``).

        Raises:
            KeyError: ``rule`` was not recorded (hooks with ``key_rules``).
        """
        if rule not in self.state_texts_by_rule:
            raise KeyError(f"state keys of rule {rule!r} were not recorded; pass hooks with key_rules=({rule!r},) "
                           "to collect_rollouts")
        return hash_state_keys(self.state_texts_by_rule[rule])

    def next_state_keys_by_rule(self, rule: str) -> np.ndarray:
        """(B,) int64 hashed keys under ``rule`` of the observation each step led to (see
        ``next_state_texts``).

        Raises:
            KeyError: ``rule`` was not recorded (hooks with ``key_rules``).
        """
        if rule not in self.next_state_texts_by_rule:
            raise KeyError(f"next state keys of rule {rule!r} were not recorded; pass hooks with "
                           f"key_rules=({rule!r},) to collect_rollouts")
        return hash_state_keys(self.next_state_texts_by_rule[rule])

    @property
    def next_state_keys(self) -> np.ndarray | None:
        """(B,) int64 hashed keys of the observation each step led to (the estimator input
        ``next_state_key``), or None when ``next_state_texts`` were not recorded."""
        if len(self.next_state_texts) != len(self.state_texts):
            return None
        return hash_state_keys(self.next_state_texts)

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


class StepPromptAgent:
    """The RL step prompt: the benchmark's :meth:`Benchmark.build_prompt` of the current
    observation and the last ``history_length`` steps, read by its :meth:`Benchmark.parse_response`
    (an :class:`g2po_bench.benchmarks.driver.Agent`).

    Args:
        benchmark: the benchmark.
        history_length: (observation, action) pairs shown in the prompt.
        prompt_style: the benchmark's prompt style (``env.prompt``).
    """

    def __init__(self, benchmark: Benchmark, history_length: int = 2, prompt_style: str = "reference") -> None:
        self.benchmark, self.history_length, self.prompt_style = benchmark, history_length, prompt_style

    def prompt(self, episode: Episode) -> str:
        """The step prompt of ``episode``'s next step."""
        return self.benchmark.build_prompt(episode.observation, episode.history, episode.num_steps,
                                           self.history_length, style=self.prompt_style)

    def read(self, text: str) -> Reading:
        """The benchmark's action of ``text`` (its reference projection, or its own: AppWorld's
        ``<code>`` cells)."""
        return Reading(text, self.benchmark.parse_response(text))


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
    on_step: Callable[[int, int], None] | None = None,
    prompt_style: str = "reference",
    stop_after_refusals: int = 0,
    refused_is_invalid: bool = False,
    hooks: RolloutHooks | None = None,
) -> RolloutBatch:
    """Play ``group_size`` episodes of every task in lock-step and collect the steps.

    Episode ``i`` (of ``len(tasks) * group_size``) plays ``tasks[i // group_size]`` in pool slot
    ``i`` (:class:`g2po_bench.benchmarks.driver.LockStepDriver` with the RL step prompt,
    :class:`StepPromptAgent`).

    Args:
        policy: any :class:`g2po_bench.runtime.policy_protocol.Policy`.
        pool: the environment pool (needs ``len(tasks) * group_size`` slots; slots are
            created on first use).
        benchmark: the benchmark (``build_prompt``, ``parse_response``, ``step_reward``; see
            :mod:`g2po_bench.benchmarks.registry`).
        tasks: G tasks; task g forms task group ``group_offset + g``.
        group_size: N rollouts per task.
        max_steps: step limit per episode (ALFWorld 50, WebShop 15 in the reference).
        temperature, top_p, max_new_tokens: sampling settings (temperature 0 = greedy).
        seed: base seed; step t of this call samples with seed ``seed * 1000 + t``, so the
            same seed, tasks and policy give the same rollouts.
        history_length: (observation, action) pairs shown in the prompt.
        success_reward: passed to the benchmark's :meth:`Benchmark.step_reward` (by default the
            reward of the final step of a successful episode).
        group_offset: first task-group id (keeps ids distinct across calls).
        on_step: optional callback ``on_step(t, num_active)`` for progress display.
        prompt_style: the benchmark's prompt style (``env.prompt``: ``"reference"`` or, for
            ALFWorld, ``"compact"``).
        stop_after_refusals: end an episode (a failure) after this many consecutive steps whose
            observation has ``info["refused"]`` true (ALFWorld's "Nothing happens."); 0 = never.
        refused_is_invalid: a refused action's row is marked invalid (``action_valid`` False),
            so the estimators' invalid-action penalty applies to it as to a malformed output.
        hooks: None (training: every episode starts at its task's reset and samples with the
            call's seed), or :class:`g2po_bench.benchmarks.driver.RolloutHooks` that add to the
            episodes: the credit instrument's
            (:class:`g2po_bench.analysis.credit.replay.CreditHooks`) replays action prefixes
            (rows with ``replayed`` True, empty prompt and response tokens), seeds every sample
            of its own, stops episodes whose end it knows (``cut``) and records the state keys
            of other key rules (``state_texts_by_rule``).

    Returns:
        RolloutBatch with one row per step taken (replayed steps included).

    Raises:
        whatever the hooks raise (e.g. ``ValueError`` for settings of the wrong length,
        ``ReplayMismatch`` for a replay that does not reproduce its recording).
    """
    t_start = time.perf_counter()
    driver = LockStepDriver(policy, pool, benchmark, StepPromptAgent(benchmark, history_length, prompt_style),
                            Sampling(temperature, max_new_tokens, top_p), lambda t: seed * 1000 + t,
                            max_steps=max_steps, success_reward=success_reward,
                            stop_after_refusals=stop_after_refusals, hooks=hooks, on_step=on_step)
    episodes = driver.run([(i, tasks[i // group_size]) for i in range(len(tasks) * group_size)])
    rb = rollout_batch(episodes, group_size=group_size, group_offset=group_offset, max_steps=max_steps,
                       refused_is_invalid=refused_is_invalid, key_rules=driver.hooks.key_rules,
                       score_default=benchmark.episode_score_default)
    rb.timing = {**driver.timing, "total_s": time.perf_counter() - t_start}
    return rb


def rollout_batch(episodes: Sequence[Episode], *, group_size: int, group_offset: int, max_steps: int,
                  refused_is_invalid: bool = False, key_rules: Sequence[str] = (),
                  score_default: float | None = None) -> RolloutBatch:
    """The :class:`RolloutBatch` of episodes played by the driver (episode ``i`` of task group
    ``group_offset + i // group_size``, trajectory ``group_offset * group_size + i``), rows
    ordered by (trajectory, step); ``timing`` is left empty.

    Args:
        episodes: the driver's episodes, in the order of their indices.
        group_size, group_offset, max_steps: as in :func:`collect_rollouts`.
        refused_is_invalid: a refused step's row is marked invalid.
        key_rules: the names of the hooks' extra state keys (``state_texts_by_rule``).
        score_default: the score of an episode that ends without the environment reporting one
            (:attr:`Benchmark.episode_score_default`).
    """
    rows = [(ep.index, s) for ep in episodes for s in ep.steps]
    envs = np.array([i for i, _ in rows], dtype=np.int64)
    group_arr = np.asarray([group_offset + ep.index // group_size for ep in episodes], dtype=np.int64)
    traj_arr = np.asarray([group_offset * group_size + ep.index for ep in episodes], dtype=np.int64)
    won_arr = np.asarray([ep.won for ep in episodes], dtype=bool)
    steps = [s for _, s in rows]
    batch = StepBatch(
        group_id=group_arr[envs] if rows else np.zeros(0, np.int64),
        traj_id=traj_arr[envs] if rows else np.zeros(0, np.int64),
        step=np.array([s.step for s in steps], dtype=np.int64),
        state_key=hash_state_keys(s.state_text for s in steps),
        reward=np.array([s.reward for s in steps], dtype=np.float64),
        success=won_arr[envs] if rows else np.zeros(0, bool),
        action_valid=np.array([s.valid and not (refused_is_invalid and s.refused) for s in steps], dtype=bool),
    )
    return RolloutBatch(
        steps=batch,
        prompt_ids=[s.prompt_ids for s in steps],
        response_ids=[s.response_ids for s in steps],
        responses=[s.response for s in steps],
        state_texts=[s.state_text for s in steps],
        prompt_truncated=np.array([s.prompt_truncated for s in steps], dtype=bool),
        response_truncated=np.array([s.response_truncated for s in steps], dtype=bool),
        trajectories=[_trajectory(ep, int(group_arr[k]), int(traj_arr[k]), max_steps, score_default)
                      for k, ep in enumerate(episodes)],
        sampler_logprobs=[s.logprobs for s in steps],
        actions=[s.action for s in steps],
        entropies=np.array([s.entropy for s in steps], dtype=np.float64),
        observations=[s.observation for s in steps],
        refused=np.array([s.refused for s in steps], dtype=bool),
        replayed=np.array([s.replayed for s in steps], dtype=bool),
        state_texts_by_rule={rule: [s.keys[rule] for s in steps] for rule in key_rules},
        next_state_texts=[s.next_state_text for s in steps],
        next_state_texts_by_rule={rule: [s.next_keys[rule] for s in steps] for rule in key_rules},
    )


def _trajectory(ep: Episode, group_id: int, traj_id: int, max_steps: int, score_default: float | None) -> dict:
    """The trajectory dict of one episode (:attr:`RolloutBatch.trajectories`)."""
    score = score_default
    if ep.outcome is not None and "score" in ep.outcome.info:
        score = float(ep.outcome.info["score"])
    return {
        "traj_id": traj_id, "group_id": group_id, "task_id": ep.task.task_id, "task_type": ep.task.task_type,
        "success": ep.won, "num_steps": ep.num_steps, "score": score, "invalid_steps": ep.invalid,
        "truncated": (not ep.won) and ep.num_steps >= max_steps, "stuck": ep.stuck,
        "truncated_responses": ep.truncated_responses, "crashed": ep.crashed, "start_step": ep.replayed,
        "cut": ep.cut,
    }


def success_by_task_type(trajectories: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Success rate (fraction) per task type over the given trajectories."""
    out: dict[str, list[bool]] = {}
    for t in trajectories:
        out.setdefault(t["task_type"], []).append(bool(t["success"]))
    return {k: float(np.mean(v)) for k, v in sorted(out.items())}
