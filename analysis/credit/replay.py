"""The credit instrument's rollout hooks: prefix replay, per-sample seeds, known ends, key rules.

The credit instrument (:mod:`g2po_bench.analysis.credit`) continues recorded episodes: a fresh
environment replays a recorded action prefix (:class:`EpisodeStart`) and the policy takes over from
the replayed history; every continuation samples from seeds of its own, so it does not depend on
which other episodes share a policy call; a continuation that reaches a history whose future is
already known stops there; and every row records its state key under both key rules. These are
:class:`CreditHooks` on the lock-step driver (:class:`g2po_bench.benchmarks.driver.RolloutHooks`), given
to :func:`g2po_bench.benchmarks.rollout.collect_rollouts` as ``hooks``; training passes none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.benchmarks.driver import Episode, LockStepDriver, RolloutHooks
from g2po_bench.core.protocol import Observation
from g2po_bench.core.seeding import mix_seed
from g2po_bench.runtime.policy_protocol import supports_sample_seeds

__all__ = ["EpisodeStart", "ReplayMismatch", "CreditHooks", "step_seed"]


def step_seed(sample_seed: int, step: int) -> int:
    """The sampling seed of step ``step`` of an episode whose own seed is ``sample_seed``
    (``mix_seed(sample_seed, step)``, :func:`g2po_bench.core.seeding.mix_seed`): the one rule by
    which a study's episodes draw their actions, so two episodes with the same seed and history
    sample the same action (:class:`CreditHooks`, the first-step fan-out)."""
    return mix_seed(sample_seed, step)


@dataclass(frozen=True)
class EpisodeStart:
    """Where an episode starts when it does not start at the task's reset: an action prefix.

    :class:`CreditHooks` resets the environment, replays ``actions`` in order (no policy call), and
    the policy takes over at step ``len(actions)`` with the history, step counter and refused-in-a-row
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


class CreditHooks(RolloutHooks):
    """The credit instrument's additions to a rollout call (module docstring).

    Episode ``i`` of the call (``Episode.index``; in :func:`g2po_bench.benchmarks.rollout.collect_rollouts`
    the one that plays ``tasks[i // group_size]``) takes entry ``i`` of ``starts`` and
    ``sample_seeds``.

    Args:
        benchmark: the benchmark (:meth:`Benchmark.make_state_key_rule` for ``key_rules``).
        starts: None (every episode starts at its task's reset), or one entry per episode: None
            or an :class:`EpisodeStart` whose actions are replayed first. Replayed steps are rows
            of the batch (``replayed`` True, empty prompt and response tokens), so every
            trajectory still has the steps 0..T-1 of a StepBatch.
        sample_seeds: None (the call's seed per lock-step step), or one non-negative integer per
            episode: step t of episode i is sampled with the per-prompt seed
            ``mix_seed(sample_seeds[i], t)`` (:func:`g2po_bench.core.seeding.mix_seed`), so an
            episode does not depend on which other episodes share the call. Needs a policy
            that takes ``seeds`` (:func:`g2po_bench.runtime.policy_protocol.supports_sample_seeds`).
        key_rules: state-key rules (``"raw"``, ``"reference"``) whose keys are recorded for every
            row besides the configured one (``RolloutBatch.state_keys_by_rule``), computed from
            the observations by :meth:`Benchmark.make_state_key_rule`; () records none.
        known_end: None, or ``known_end(i, actions)`` called before each policy step of episode i
            with the actions taken so far: True stops the episode there, before the policy call,
            as one whose end the caller already knows (its trajectory says ``cut``; its
            ``success`` is False and the rest is the caller's to fill in). With per-sample seeds
            that depend on the step only, two episodes of one task, seed and history have the
            same future: the credit instrument stops the second.

    Raises:
        ValueError: a rule the benchmark does not know in ``key_rules``; at the start of a call,
            ``starts`` or ``sample_seeds`` of the wrong length, a policy that cannot seed per
            sample, a prefix longer than its episode.
        ReplayMismatch: (at the start of a call) a replayed observation differs from
            ``EpisodeStart.observations``.
    """

    def __init__(self, benchmark: Benchmark, *, starts: Sequence[EpisodeStart | None] | None = None,
                 sample_seeds: Sequence[int] | None = None, key_rules: Sequence[str] = (),
                 known_end: Callable[[int, tuple[str, ...]], bool] | None = None) -> None:
        self.benchmark = benchmark
        self.starts = None if starts is None else list(starts)
        self.sample_seeds = None if sample_seeds is None else list(sample_seeds)
        self.key_rules = tuple(key_rules)
        self.known_end = known_end
        for rule in self.key_rules:
            benchmark.make_state_key_rule(rule)  # an unknown rule fails here, before any work
        self._rules: dict[int, dict] = {}

    def start(self, driver: LockStepDriver, episodes: Sequence[Episode]) -> None:
        """Check the settings against the call's episodes and replay the prefixes in lock-step.

        Raises:
            ValueError, ReplayMismatch: see the class.
        """
        n_env = len(episodes)
        if self.starts is not None and len(self.starts) != n_env:
            raise ValueError(f"starts has {len(self.starts)} entries for {n_env} episodes (tasks x group_size)")
        if self.sample_seeds is not None:
            if len(self.sample_seeds) != n_env:
                raise ValueError(f"sample_seeds has {len(self.sample_seeds)} entries for {n_env} episodes "
                                 "(tasks x group_size)")
            if not supports_sample_seeds(driver.policy):
                raise ValueError(f"sample_seeds needs a policy whose generate() takes seeds (one per prompt); "
                                 f"{type(driver.policy).__name__} does not")
        if self.starts is not None:
            self._replay(driver, episodes)

    def _replay(self, driver: LockStepDriver, episodes: Sequence[Episode]) -> None:
        """Replay every episode's prefix, one action of every prefix per lock-step step."""
        starts = self.starts
        longest = max((len(s.actions) for s in starts if s is not None), default=0)
        for r in range(longest):
            due = [ep for ep in episodes if starts[ep.index] is not None and r < len(starts[ep.index].actions)]
            self._check(due, r)
            for ep in due:
                if not ep.active:
                    raise ValueError(f"episode {ep.index} of task {ep.task.task_id!r} ended at step {ep.num_steps} "
                                     f"before its {len(starts[ep.index].actions)}-action prefix was replayed")
            driver.replay([(ep, starts[ep.index].actions[r],
                            True if starts[ep.index].valid is None else starts[ep.index].valid[r]) for ep in due])
        for ep in episodes:  # the state the policy takes over from
            if starts[ep.index] is not None and starts[ep.index].actions:
                self._check([ep], len(starts[ep.index].actions))

    def _check(self, episodes: Sequence[Episode], t: int) -> None:
        """Raise :class:`ReplayMismatch` when the observation of state ``t`` of a replayed episode
        differs from its :attr:`EpisodeStart.observations` (nothing to check without them)."""
        for ep in episodes:
            expected = self.starts[ep.index].observations
            if expected is None:
                continue
            obs = ep.observation
            if obs.info.get("crashed"):
                raise ReplayMismatch(f"replay of task {ep.task.task_id!r} crashed at step {t}: "
                                     f"{_short(obs.info.get('error', ''))}")
            if obs.text != expected[t]:
                raise ReplayMismatch(
                    f"replay of task {ep.task.task_id!r} diverged at step {t}: expected observation "
                    f"{_short(expected[t])!r}, got {_short(obs.text)!r} (the environment is not deterministic)")

    def seeds(self, episodes: Sequence[Episode], step: int) -> list[int] | None:
        """``mix_seed(sample_seeds[i], t)`` of each episode i at its step t, or None without
        ``sample_seeds``."""
        if self.sample_seeds is None:
            return None
        return [step_seed(self.sample_seeds[ep.index], ep.num_steps) for ep in episodes]

    def should_stop(self, episode: Episode) -> bool:
        """``known_end(i, actions so far)`` (False without ``known_end``)."""
        return self.known_end is not None and bool(self.known_end(episode.index, episode.actions))

    def record(self, episode: Episode, observation: Observation) -> dict[str, str]:
        """The key text of ``observation`` under every rule of ``key_rules`` (per-episode rules,
        fresh at the reset)."""
        if not self.key_rules:
            return {}
        if not episode.steps:
            rules = self._rules[episode.index] = {r: self.benchmark.make_state_key_rule(r) for r in self.key_rules}
            return {r: rule.reset(observation) for r, rule in rules.items()}
        return {r: rule.update(observation) for r, rule in self._rules[episode.index].items()}
