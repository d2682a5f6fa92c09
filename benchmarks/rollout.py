"""The multi-turn rollout engine: groups of N rollouts per task, emitted as a StepBatch.

For each of G tasks, N environments start the same task (a *task group*, docs/design-notes.md
"The StepBatch") and are played in lock-step: at every step the prompts of all active
environments are generated in one batch by the policy, parsed
(:func:`g2po_bench.benchmarks.parsing.parse_response`), and stepped in parallel worker processes
(:class:`g2po_bench.runtime.workers.EnvPool`). An episode ends on success, on the environment's own
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

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.core.batch import StepBatch, hash_state_keys
from g2po_bench.core.protocol import Observation, RefusalStop, Task
from g2po_bench.core.seeding import mix_seed
from g2po_bench.runtime.policy_protocol import Policy, response_was_cut, supports_sample_seeds
from g2po_bench.runtime.workers import EnvPool

__all__ = ["RolloutBatch", "EpisodeStart", "ReplayMismatch", "collect_rollouts", "success_by_task_type",
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
            ``start_step`` (the length of its :class:`EpisodeStart` prefix, else 0), ``cut``
            (stopped by ``collect_rollouts``' ``known_end``).
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
        replayed: (B,) bool, the step was replayed from an :class:`EpisodeStart` prefix (no
            policy call: empty prompt and response tokens); empty when not recorded.
        state_texts_by_rule: state-key texts under other key rules (``collect_rollouts``
            ``key_rules``): rule -> B texts; empty when none were asked for.
        next_state_texts: B state-key texts of the observation each step led to (the next
            row's ``state_texts`` entry inside a trajectory; after the last step, the
            observation the episode ended on); empty when the producer did not record them.
            :attr:`next_state_keys` hashes them (the estimator input ``next_state_key``).
        next_state_texts_by_rule: the same under the ``key_rules`` rules: rule -> B texts.
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
            KeyError: ``rule`` was not recorded (``collect_rollouts(key_rules=...)``).
        """
        if rule not in self.state_texts_by_rule:
            raise KeyError(f"state keys of rule {rule!r} were not recorded; pass key_rules=({rule!r},) to "
                           "collect_rollouts")
        return hash_state_keys(self.state_texts_by_rule[rule])

    def next_state_keys_by_rule(self, rule: str) -> np.ndarray:
        """(B,) int64 hashed keys under ``rule`` of the observation each step led to (see
        ``next_state_texts``).

        Raises:
            KeyError: ``rule`` was not recorded (``collect_rollouts(key_rules=...)``).
        """
        if rule not in self.next_state_texts_by_rule:
            raise KeyError(f"next state keys of rule {rule!r} were not recorded; pass key_rules=({rule!r},) "
                           "to collect_rollouts")
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


@dataclass(frozen=True)
class EpisodeStart:
    """Where an episode starts when it does not start at the task's reset: an action prefix.

    The engine resets the environment, replays ``actions`` in order (no policy call), and the
    policy takes over at step ``len(actions)`` with the history, step counter and refused-in-a-row
    count the episode had after those actions, so the step limit still counts from the reset.

    Attributes:
        actions: the environment actions of steps 0..t-1 (what the parser sent, e.g.
            ``RolloutBatch.actions`` of a recorded trajectory).
        observations: None, or the expected observation texts of the states 0..t (``t + 1``
            texts: the reset observation, then the observation after each action, e.g.
            ``RolloutBatch.observations`` of the recorded steps 0..t). Each replayed
            observation is compared with it; a difference raises :class:`ReplayMismatch`.
        valid: None (every replayed action counts as valid), or ``t`` flags: the recorded
            ``action_valid`` of the replayed steps (their rows carry it).

    Raises:
        ValueError: ``observations`` or ``valid`` of the wrong length.
    """

    actions: tuple[str, ...]
    observations: tuple[str, ...] | None = None
    valid: tuple[bool, ...] | None = None

    def __post_init__(self):
        object.__setattr__(self, "actions", tuple(self.actions))
        if self.observations is not None:
            object.__setattr__(self, "observations", tuple(self.observations))
            if len(self.observations) != len(self.actions) + 1:
                raise ValueError(f"EpisodeStart with {len(self.actions)} actions needs {len(self.actions) + 1} "
                                 f"observations (reset + one per action), got {len(self.observations)}")
        if self.valid is not None:
            object.__setattr__(self, "valid", tuple(bool(v) for v in self.valid))
            if len(self.valid) != len(self.actions):
                raise ValueError(f"EpisodeStart with {len(self.actions)} actions needs {len(self.actions)} "
                                 f"valid flags, got {len(self.valid)}")


class ReplayMismatch(RuntimeError):
    """Replaying an action prefix did not reproduce the recorded observation: the environment is
    not deterministic (or the prefix belongs to another task). The message is one line naming
    the task, the step and both texts (cut to 80 characters)."""


def _short(text: str, n: int = 80) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= n else flat[: n - 3] + "..."


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
    starts: Sequence[EpisodeStart | None] | None = None,
    sample_seeds: Sequence[int] | None = None,
    key_rules: Sequence[str] = (),
    known_end: Callable[[int, tuple[str, ...]], bool] | None = None,
) -> RolloutBatch:
    """Play ``group_size`` episodes of every task in lock-step and collect the steps.

    Args:
        policy: any :class:`g2po_bench.runtime.policy_protocol.Policy`.
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
        starts: None (every episode starts at its task's reset, the training default), or one
            entry per episode (``len(tasks) * group_size``, episode i plays ``tasks[i //
            group_size]``): None or an :class:`EpisodeStart` whose actions are replayed first.
            Replayed steps are rows of the batch (``replayed`` True, empty prompt and response
            tokens), so every trajectory still has the steps 0..T-1 of a StepBatch.
        sample_seeds: None (one sampler seed per lock-step step and call, the training
            default), or one non-negative integer per episode: step t of episode i is sampled
            with the per-prompt seed ``mix_seed(sample_seeds[i], t)``
            (:func:`g2po_bench.core.seeding.mix_seed`), so an episode does not depend on
            which other episodes share the call. Needs a policy that takes ``seeds``
            (:func:`g2po_bench.runtime.policy_protocol.supports_sample_seeds`).
        key_rules: state-key rules (``"raw"``, ``"reference"``) whose keys are recorded for
            every row besides the configured one (``RolloutBatch.state_keys_by_rule``), computed
            from the observations by :meth:`Benchmark.make_state_key_rule`; () records none.
        known_end: None, or ``known_end(i, actions)`` called before each policy step of episode
            i with the actions taken so far: True stops the episode there, before the policy
            call, as one whose end the caller already knows (its trajectory says ``cut``; its
            ``success`` is False and the rest is the caller's to fill in). With per-sample seeds
            that depend on the step only, two episodes of one task, seed and history have the
            same future: the credit instrument stops the second (:mod:`g2po_bench.analysis.credit`).

    Returns:
        RolloutBatch with one row per step taken (replayed steps included).

    Raises:
        ValueError: ``starts`` or ``sample_seeds`` of the wrong length, a policy that cannot
            seed per sample, a rule the benchmark does not know in ``key_rules``, a prefix
            longer than its episode.
        ReplayMismatch: a replayed observation differs from ``EpisodeStart.observations``.
    """
    n_env = len(tasks) * group_size
    if starts is not None and len(starts) != n_env:
        raise ValueError(f"starts has {len(starts)} entries for {n_env} episodes (tasks x group_size)")
    if sample_seeds is not None:
        if len(sample_seeds) != n_env:
            raise ValueError(f"sample_seeds has {len(sample_seeds)} entries for {n_env} episodes (tasks x group_size)")
        if not supports_sample_seeds(policy):
            raise ValueError(f"sample_seeds needs a policy whose generate() takes seeds (one per prompt); "
                             f"{type(policy).__name__} does not")
    t_start = time.perf_counter()
    timing = {"reset_s": 0.0, "replay_s": 0.0, "generate_s": 0.0, "step_s": 0.0}
    env_task = [tasks[i // group_size] for i in range(n_env)]
    group_of = [group_offset + i // group_size for i in range(n_env)]
    traj_of = [group_offset * group_size + i for i in range(n_env)]
    t0 = time.perf_counter()
    obs: dict[int, Observation] = pool.reset(list(enumerate(env_task)))
    timing["reset_s"] += time.perf_counter() - t0
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
    rules = {r: [benchmark.make_state_key_rule(r) for _ in range(n_env)] for r in key_rules}
    keys_now = {r: [rules[r][i].reset(obs[i]) for i in range(n_env)] for r in rules}
    # the benchmark's action extraction: its reference projection, or its own (AppWorld's <code> cells)
    parse = benchmark.parse_response

    def record(i: int, t: int, o: Observation, row: dict[str, Any], action: str, valid: bool) -> None:
        """Book step t of episode i (taken from ``obs[i]``, answered by ``o``)."""
        done = o.done or t == max_steps - 1
        refused = bool(o.info.get("refused", False))
        row.update({"env": i, "step": t, "state_text": obs[i].state_key, "observation": obs[i].text,
                    "valid": valid and not (refused_is_invalid and refused), "refused": refused,
                    "reward": success_reward if o.won else 0.0, "action": action,
                    "keys": {r: keys_now[r][i] for r in rules}})
        rows.append(row)
        n_steps[i] += 1
        invalid[i] += int(not valid)
        cut_responses[i] += int(row["response_truncated"])
        history[i].append((obs[i].text, action))
        if refusal_stop.stuck(i, o):
            stuck[i] = done = True
        obs[i] = o
        row["next_state_text"] = o.state_key
        for r in rules:
            keys_now[r][i] = rules[r][i].update(o)
        row["next_keys"] = {r: keys_now[r][i] for r in rules}
        if o.info.get("crashed"):
            crashed[i] = True
        if o.done:
            won[i] = bool(o.won)
            if "score" in o.info:
                score[i] = float(o.info["score"])
        if done:
            active[i] = False

    if starts is not None:
        t0 = time.perf_counter()
        longest = max((len(s.actions) for s in starts if s is not None), default=0)
        for r in range(longest):
            idx = [i for i in range(n_env) if starts[i] is not None and r < len(starts[i].actions)]
            _check_replay(starts, idx, r, obs, env_task)
            for i in idx:
                if not active[i]:
                    raise ValueError(f"episode {i} of task {env_task[i].task_id!r} ended at step {n_steps[i]} "
                                     f"before its {len(starts[i].actions)}-action prefix was replayed")
            new_obs = pool.step([(i, starts[i].actions[r]) for i in idx])
            for i in idx:
                s = starts[i]
                rec = {"prompt_ids": [], "response_ids": [], "response": "", "logprobs": None,
                       "entropy": float("nan"), "prompt_truncated": False, "response_truncated": False, "replayed": True}
                record(i, n_steps[i], new_obs[i], rec, s.actions[r], True if s.valid is None else s.valid[r])
        for i in range(n_env):  # the state the policy takes over from
            if starts[i] is not None and starts[i].actions:
                _check_replay(starts, [i], len(starts[i].actions), obs, env_task)
        timing["replay_s"] += time.perf_counter() - t0

    cut = [False] * n_env
    for rnd in range(max_steps):
        if known_end is not None:
            for i in range(n_env):
                if active[i] and known_end(i, tuple(a for _, a in history[i])):
                    active[i], cut[i] = False, True
        idx = [i for i in range(n_env) if active[i]]
        if not idx:
            break
        if on_step is not None:
            on_step(rnd, len(idx))
        prompts = [benchmark.build_prompt(obs[i], history[i], n_steps[i], history_length, style=prompt_style)
                   for i in idx]
        t0 = time.perf_counter()
        if sample_seeds is None:
            gens = policy.generate(prompts, temperature=temperature, max_new_tokens=max_new_tokens,
                                   top_p=top_p, seed=seed * 1000 + rnd)
        else:
            gens = policy.generate(prompts, temperature=temperature, max_new_tokens=max_new_tokens, top_p=top_p,
                                   seed=None, seeds=[mix_seed(sample_seeds[i], n_steps[i]) for i in idx])
        timing["generate_s"] += time.perf_counter() - t0
        parsed = [parse(g.text) for g in gens]
        t0 = time.perf_counter()
        new_obs = pool.step([(i, p.action) for i, p in zip(idx, parsed)])
        timing["step_s"] += time.perf_counter() - t0
        for i, gen, p in zip(idx, gens, parsed):
            rec = {"prompt_ids": gen.prompt_ids, "response_ids": gen.response_ids, "response": gen.text,
                   "logprobs": gen.logprobs, "entropy": _mean_entropy(gen),
                   "prompt_truncated": bool(gen.info.get("prompt_truncated", False)),
                   "response_truncated": response_was_cut(gen), "replayed": False}
            record(i, n_steps[i], new_obs[i], rec, p.action, p.valid)

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
            "start_step": 0 if starts is None or starts[i] is None else len(starts[i].actions),
            "cut": cut[i],
        }
        for i in range(n_env)
    ]
    timing["total_s"] = time.perf_counter() - t_start
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
        observations=[r["observation"] for r in rows],
        refused=np.array([r["refused"] for r in rows], dtype=bool),
        replayed=np.array([r["replayed"] for r in rows], dtype=bool),
        state_texts_by_rule={rule: [r["keys"][rule] for r in rows] for rule in rules},
        next_state_texts=[r["next_state_text"] for r in rows],
        next_state_texts_by_rule={rule: [r["next_keys"][rule] for r in rows] for rule in rules},
        timing=timing,
    )


def _mean_entropy(gen) -> float:
    """Mean of ``gen.entropies`` over the response tokens; NaN when not reported (an empty
    response has entropy 0: nothing was sampled)."""
    ents = getattr(gen, "entropies", None)
    if ents is None:
        return float("nan")
    return float(np.mean(ents)) if len(ents) else 0.0


def _check_replay(starts: Sequence[EpisodeStart | None], idx: list[int], t: int, obs: dict[int, Observation],
                  env_task: Sequence[Task]) -> None:
    """Raise :class:`ReplayMismatch` when the observation of state ``t`` of a replayed episode
    differs from its :attr:`EpisodeStart.observations` (nothing to check without them)."""
    for i in idx:
        expected = starts[i].observations
        if expected is None:
            continue
        got = obs[i].text
        if obs[i].info.get("crashed"):
            raise ReplayMismatch(f"replay of task {env_task[i].task_id!r} crashed at step {t}: "
                                 f"{_short(obs[i].info.get('error', ''))}")
        if got != expected[t]:
            raise ReplayMismatch(
                f"replay of task {env_task[i].task_id!r} diverged at step {t}: expected observation "
                f"{_short(expected[t])!r}, got {_short(got)!r} (the environment is not deterministic)")


def success_by_task_type(trajectories: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Success rate (fraction) per task type over the given trajectories."""
    out: dict[str, list[bool]] = {}
    for t in trajectories:
        out.setdefault(t["task_type"], []).append(bool(t["success"]))
    return {k: float(np.mean(v)) for k, v in sorted(out.items())}
