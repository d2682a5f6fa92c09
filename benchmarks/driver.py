"""The lock-step episode driver: per-episode state, one loop, and the hooks a caller adds.

Every episode of the suite is played here: the RL rollouts and evaluations
(:func:`g2po_bench.benchmarks.rollout.collect_rollouts`) and the prompting baselines
(:mod:`g2po_bench.baselines.agents`). An :class:`Episode` holds the state of one episode (its task,
current observation, history, step counter, flags and the steps booked so far);
:class:`LockStepDriver` plays a set of episodes in lock-step: at every step it asks the
:class:`Agent` for the prompts of the active episodes, calls the policy once for all of them, lets
the agent read each response into an action, steps the environments in parallel
(:class:`g2po_bench.runtime.workers.EnvPool`) and books each step into its episode.

An episode ends on success, on the environment's own end, at ``max_steps`` (truncation), after
``stop_after_refusals`` refused actions in a row (:class:`g2po_bench.core.protocol.RefusalStop`;
``stuck``), when its environment crashes (the worker restarts it for the next episode), or when a
hook knows its end already (``cut``).

The reward of a step is the benchmark's: :meth:`g2po_bench.benchmarks.base.Benchmark.step_reward` of
the observation the step led to (by default ``success_reward`` on the winning step, else 0).

:class:`RolloutHooks` is what a caller adds to the episodes without the training path carrying it:
a start before the policy takes over (a replayed action prefix), per-sample seeds, a known end,
and extra state keys per observation. The default adds nothing; the credit instrument's hooks live
in :mod:`g2po_bench.analysis.credit.replay`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.benchmarks.parsing import ParsedAction
from g2po_bench.core.protocol import Observation, RefusalStop, Task
from g2po_bench.runtime.policy_protocol import Generation, Policy, response_was_cut
from g2po_bench.runtime.workers import EnvPool

__all__ = ["Sampling", "Reading", "Agent", "Step", "Episode", "RolloutHooks", "LockStepDriver", "mean_entropy"]


@dataclass(frozen=True)
class Sampling:
    """The sampling settings of every policy call of a driver.

    Attributes:
        temperature: sampling temperature (0 = greedy).
        max_new_tokens: the longest response, in tokens.
        top_p: nucleus-sampling mass (1.0 = off).
    """

    temperature: float
    max_new_tokens: int
    top_p: float = 1.0


@dataclass(frozen=True)
class Reading:
    """What an agent reads from one response.

    Attributes:
        response: the response text as recorded (a completion-style agent puts the text its prompt
            ended with back in front of the generated text).
        action: the parsed action (``action.action`` is sent to the environment; for an invalid
            output, the parser's fallback text).
        thought: the reasoning before the action, where the agent keeps it (ReAct), else "".
    """

    response: str
    action: ParsedAction
    thought: str = ""


class Agent(Protocol):
    """How an episode becomes a prompt and a response becomes an action (the RL step prompt,
    :class:`g2po_bench.benchmarks.rollout.StepPromptAgent`; ReAct, :mod:`g2po_bench.baselines.agents`)."""

    def prompt(self, episode: Episode) -> str:
        """The prompt of the episode's next step (its ``observation``, ``history``, ``num_steps``)."""
        ...

    def read(self, text: str) -> Reading:
        """The reading of a generated response text; never raises."""
        ...


@dataclass
class Step:
    """One booked step of an episode.

    Attributes:
        step: the step index within the episode (0-based, counted from the reset).
        state_text: the state-key text (``Observation.state_key``) of the state the action was
            taken from.
        observation: that state's observation text.
        action: the action sent to the environment.
        valid: the parser's verdict on the response (a replayed step: the recorded flag).
        refused: the observation after the step has ``info["refused"]`` true.
        reward: the step's reward (:meth:`Benchmark.step_reward`).
        next_state_text: the state-key text of the observation the step led to.
        next_observation: that observation's text.
        response: the response text (:attr:`Reading.response`; "" for a replayed step).
        thought: :attr:`Reading.thought` ("" for a replayed step).
        replayed: the step was replayed without a policy call (:meth:`LockStepDriver.replay`).
        prompt_ids, response_ids, logprobs: the policy's :class:`Generation` fields (empty, empty
            and None for a replayed step).
        entropy: the mean token entropy of the response (:func:`mean_entropy`; NaN when not
            reported or replayed).
        prompt_truncated: the prompt was cut to the policy's ``max_prompt_tokens``
            (``Generation.info["prompt_truncated"]``).
        response_truncated: the response was cut at the token limit (:func:`response_was_cut`).
        keys: the hooks' extra state keys (:meth:`RolloutHooks.record`) of the state the action
            was taken from; ``next_keys``: of the state it led to.
    """

    step: int
    state_text: str
    observation: str
    action: str
    valid: bool
    refused: bool
    reward: float
    next_state_text: str
    next_observation: str
    response: str = ""
    thought: str = ""
    replayed: bool = False
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    entropy: float = float("nan")
    prompt_truncated: bool = False
    response_truncated: bool = False
    keys: dict[str, str] = field(default_factory=dict)
    next_keys: dict[str, str] = field(default_factory=dict)

    @classmethod
    def generated(cls, gen: Generation, reading: Reading, **fields) -> Step:
        """A step answered by the policy: the response and token fields of ``gen`` and ``reading``,
        the rest from ``fields``."""
        return cls(**fields, response=reading.response, thought=reading.thought, prompt_ids=gen.prompt_ids,
                   response_ids=gen.response_ids, logprobs=gen.logprobs, entropy=mean_entropy(gen),
                   prompt_truncated=bool(gen.info.get("prompt_truncated", False)),
                   response_truncated=response_was_cut(gen))


def mean_entropy(gen: Generation) -> float:
    """Mean of ``gen.entropies`` over the response tokens; NaN when not reported (an empty
    response has entropy 0: nothing was sampled)."""
    ents = getattr(gen, "entropies", None)
    if ents is None:
        return float("nan")
    return float(np.mean(ents)) if len(ents) else 0.0


@dataclass
class Episode:
    """The state of one episode played by :class:`LockStepDriver`.

    Attributes:
        index: the episode's position in the driver call (what hooks index their settings by).
        slot: its environment slot in the pool.
        task: the task it plays.
        first: the observation of the reset (instruction and first observation text).
        observation: the current observation (after the last booked step).
        history: one (observation text, action) pair per booked step.
        steps: the booked :class:`Step` rows.
        active: the episode is still played.
        crashed: its environment crashed (at the reset or at a step).
        stuck: it ended after ``stop_after_refusals`` refused actions in a row.
        cut: a hook stopped it before a policy step, its end being known
            (:meth:`RolloutHooks.should_stop`).
        outcome: the observation that ended it (``done``), or None when it did not end that way
            (step limit, stuck, cut, crashed at the reset).
        invalid: steps whose action was invalid (:attr:`Step.valid` False).
        truncated_responses: steps whose response was cut at the token limit.
        replayed: steps replayed before the policy took over (:meth:`LockStepDriver.replay`).
        keys: the hooks' extra state keys of the current observation.
    """

    index: int
    slot: int
    task: Task
    first: Observation
    observation: Observation
    history: list[tuple[str, str]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    active: bool = True
    crashed: bool = False
    stuck: bool = False
    cut: bool = False
    outcome: Observation | None = None
    invalid: int = 0
    truncated_responses: int = 0
    replayed: int = 0
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def num_steps(self) -> int:
        """Steps booked so far (the index of the next step)."""
        return len(self.steps)

    @property
    def won(self) -> bool:
        """The episode ended in success."""
        return self.outcome is not None and bool(self.outcome.won)

    @property
    def actions(self) -> tuple[str, ...]:
        """The actions taken so far, in order."""
        return tuple(a for _, a in self.history)


class RolloutHooks:
    """What a caller adds to the driver's episodes; this default adds nothing (the training path).

    A subclass overrides any of the methods; :class:`g2po_bench.analysis.credit.replay.CreditHooks`
    (prefix replay, per-sample seeds, known ends, state keys of several rules) is the credit
    instrument's.
    """

    #: the names of the extra state keys :meth:`record` returns (``RolloutBatch.state_texts_by_rule``)
    key_rules: tuple[str, ...] = ()

    def start(self, driver: LockStepDriver, episodes: Sequence[Episode]) -> None:
        """Called once after the reset, before the policy takes over: may check the episodes and
        replay steps (:meth:`LockStepDriver.replay`)."""

    def seeds(self, episodes: Sequence[Episode], step: int) -> list[int] | None:
        """Per-sample seeds of the active ``episodes`` at lock-step step ``step``, one per
        episode, or None: the policy call samples with the driver's ``step_seed(step)``."""
        return None

    def should_stop(self, episode: Episode) -> bool:
        """True to end ``episode`` before its next policy step (its end is known: ``cut``)."""
        return False

    def record(self, episode: Episode, observation: Observation) -> dict[str, str]:
        """Extra state keys of ``observation``, the reset's (``episode.steps`` empty) or the one a
        step led to; {} records none."""
        return {}


class LockStepDriver:
    """Plays episodes in lock-step with one policy call per step (module docstring).

    Args:
        policy: any :class:`g2po_bench.runtime.policy_protocol.Policy`.
        pool: the environment pool (slots are created on first use).
        benchmark: the benchmark (:meth:`Benchmark.step_reward`).
        agent: the :class:`Agent` that writes prompts and reads responses.
        sampling: temperature, response length and top-p of every policy call.
        step_seed: ``step_seed(t)`` is the sampling seed of lock-step step ``t`` (unless the hooks
            give per-sample seeds).
        max_steps: the step limit per episode, counted from the reset.
        success_reward: passed to :meth:`Benchmark.step_reward`.
        stop_after_refusals: refused actions in a row that end an episode as stuck; 0 = never.
        hooks: :class:`RolloutHooks` (None: the default, which adds nothing).
        on_step: optional ``on_step(t, num_active)`` before every policy step (progress display).

    Attributes:
        timing: seconds spent: ``reset_s``, ``replay_s`` (the hooks' start), ``generate_s``
            (policy calls), ``step_s`` (environment steps after policy calls); summed over
            :meth:`run` calls.
    """

    def __init__(self, policy: Policy, pool: EnvPool, benchmark: Benchmark, agent: Agent, sampling: Sampling,
                 step_seed: Callable[[int], int], *, max_steps: int, success_reward: float = 10.0,
                 stop_after_refusals: int = 0, hooks: RolloutHooks | None = None,
                 on_step: Callable[[int, int], None] | None = None) -> None:
        self.policy, self.pool, self.benchmark, self.agent = policy, pool, benchmark, agent
        self.sampling, self.step_seed, self.max_steps = sampling, step_seed, max_steps
        self.success_reward, self.stop_after_refusals = success_reward, stop_after_refusals
        self.hooks = hooks if hooks is not None else RolloutHooks()
        self.on_step = on_step
        self.timing = {"reset_s": 0.0, "replay_s": 0.0, "generate_s": 0.0, "step_s": 0.0}
        self._refusals = RefusalStop(stop_after_refusals)

    def run(self, items: Sequence[tuple[int, Task]]) -> list[Episode]:
        """Play one episode per (slot, task) of ``items`` to its end.

        Returns:
            the episodes, in the order of ``items``.

        Raises:
            whatever the hooks' :meth:`RolloutHooks.start` raises (e.g. a replay that does not
            reproduce its recording).
        """
        self._refusals = RefusalStop(self.stop_after_refusals)
        episodes = self._reset(items)
        t0 = time.perf_counter()
        self.hooks.start(self, episodes)
        self.timing["replay_s"] += time.perf_counter() - t0
        for t in range(self.max_steps):
            for ep in episodes:
                if ep.active and self.hooks.should_stop(ep):
                    ep.active, ep.cut = False, True
            active = [ep for ep in episodes if ep.active]
            if not active:
                break
            if self.on_step is not None:
                self.on_step(t, len(active))
            self._policy_step(active, t)
        return episodes

    def replay(self, moves: Sequence[tuple[Episode, str, bool]]) -> None:
        """Step each (episode, action, valid) of ``moves`` without a policy call and book it as a
        replayed step (``valid``: the recorded verdict on the action)."""
        new = self.pool.step([(ep.slot, action) for ep, action, _ in moves])
        for ep, action, valid in moves:
            self._book(ep, new[ep.slot], Step(**self._fields(ep, new[ep.slot], action, valid), replayed=True))
            ep.replayed += 1

    def _reset(self, items: Sequence[tuple[int, Task]]) -> list[Episode]:
        t0 = time.perf_counter()
        obs = self.pool.reset([(slot, task) for slot, task in items])
        self.timing["reset_s"] += time.perf_counter() - t0
        episodes = []
        for i, (slot, task) in enumerate(items):
            o = obs[slot]
            ep = Episode(i, slot, task, first=o, observation=o, active=not o.done,
                         crashed=bool(o.info.get("crashed")))
            ep.keys = self.hooks.record(ep, o)
            episodes.append(ep)
        return episodes

    def _policy_step(self, active: list[Episode], t: int) -> None:
        """One lock-step step of the ``active`` episodes: prompts, one policy call, readings,
        environment steps, bookings."""
        prompts = [self.agent.prompt(ep) for ep in active]
        seeds = self.hooks.seeds(active, t)
        s = self.sampling
        t0 = time.perf_counter()
        if seeds is None:
            gens = self.policy.generate(prompts, temperature=s.temperature, max_new_tokens=s.max_new_tokens,
                                        top_p=s.top_p, seed=self.step_seed(t))
        else:
            gens = self.policy.generate(prompts, temperature=s.temperature, max_new_tokens=s.max_new_tokens,
                                        top_p=s.top_p, seed=None, seeds=seeds)
        self.timing["generate_s"] += time.perf_counter() - t0
        readings = [self.agent.read(g.text) for g in gens]
        t0 = time.perf_counter()
        new = self.pool.step([(ep.slot, r.action.action) for ep, r in zip(active, readings)])
        self.timing["step_s"] += time.perf_counter() - t0
        for ep, gen, r in zip(active, gens, readings):
            o = new[ep.slot]
            self._book(ep, o, Step.generated(gen, r, **self._fields(ep, o, r.action.action, r.action.valid)))

    def _fields(self, ep: Episode, o: Observation, action: str, valid: bool) -> dict:
        """The fields of the step ``action`` of ``ep`` (taken from ``ep.observation``, answered by
        ``o``) besides the response's."""
        return {"step": ep.num_steps, "state_text": ep.observation.state_key, "observation": ep.observation.text,
                "action": action, "valid": valid, "refused": bool(o.info.get("refused", False)),
                "reward": self.benchmark.step_reward(o, self.success_reward), "next_state_text": o.state_key,
                "next_observation": o.text, "keys": ep.keys}

    def _book(self, ep: Episode, o: Observation, step: Step) -> None:
        """Book ``step`` of ``ep`` (taken from ``ep.observation``, answered by ``o``)."""
        done = o.done or ep.num_steps == self.max_steps - 1
        ep.steps.append(step)
        ep.invalid += int(not step.valid)
        ep.truncated_responses += int(step.response_truncated)
        ep.history.append((ep.observation.text, step.action))
        if self._refusals.stuck(ep.index, o):
            ep.stuck = done = True
        ep.observation = o
        ep.keys = step.next_keys = self.hooks.record(ep, o)
        if o.info.get("crashed"):
            ep.crashed = True
        if o.done:
            ep.outcome = o
        if done:
            ep.active = False
