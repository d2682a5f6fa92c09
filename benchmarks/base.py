"""The Benchmark protocol: everything the suite needs from one benchmark, behind one object.

One subpackage per environment behind one small protocol (docs/design-notes.md "Data flow"). An
environment (:class:`g2po_bench.core.protocol.Environment`) plays one episode; a
:class:`Benchmark` is the family around it: where its tasks come from, how an environment is
built, how a prompt is written and a response parsed, what an expert would do, and how its own
config settings are checked. The rollout engine, the evaluation, the warm start, the prompting
baselines and the CLI talk to this class only; none of them names a benchmark.

A benchmark package (``benchmarks/<name>/``) exports ``BENCHMARK``, an instance of a subclass,
and may hold its presets in ``presets/<preset>.yaml``; :mod:`g2po_bench.benchmarks.registry`
finds both (and benchmarks of other installed packages, entry point group ``g2po.benchmarks``).
Adding an environment is one new subpackage plus its presets (docs/extending.md).

Required: :attr:`name`, :attr:`task_types`, :attr:`projection`, :meth:`load_tasks`,
:meth:`make_env`, :meth:`build_prompt`, :meth:`expert_actions`, :meth:`expert_response`.
Everything else is an optional hook whose default does nothing benchmark-specific (the reward,
:meth:`Benchmark.step_reward`, defaults to the reference's success reward).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from g2po_bench.benchmarks.parsing import PROJECTIONS, ParsedAction, parse_response
from g2po_bench.core.config import EnvConfig, RunConfig, require
from g2po_bench.core.errors import DataDownloadError
from g2po_bench.core.protocol import Environment, Observation, OwnStateKey, Task

__all__ = ["Benchmark"]


class Benchmark(ABC):
    """One benchmark (ALFWorld, WebShop, AppWorld, the toy corridor, ...).

    Class attributes (required):
        name: the benchmark's name, ``env.name`` in a run config.
        task_types: the reporting categories, in table order (ALFWorld's six task types).
        projection: the reference action projection that turns a response into an action, a
            name of :data:`g2po_bench.benchmarks.parsing.PROJECTIONS` (verl-agent's
            ``alfworld_projection`` / ``webshop_projection``).

    Class attributes (optional):
        prompt_styles: the prompt styles it offers (``env.prompt``); ``"compact"`` is the
            short transcript of the tiny CPU model, where a benchmark has one.
        action_tag: the tag of an action in a response, ``"action"`` or ``"code"`` (AppWorld),
            for the prompting baselines' ReAct format.
        agent_intro: the prompting baselines' opening sentence: what the environment is.
        episode_score_default: the score of an episode that ends without the environment
            reporting one (WebShop: 0.0, an episode that never buys, as the reference scores every
            episode); None (the default): the environment reports no score (ALFWorld). The rollout
            engine gives it to such episodes, so an evaluation's score counts every episode.
        reference_max_steps: the step limit of an episode in the benchmark's published protocol
            (ALFWorld 50, WebShop 15, AppWorld 30), or None (the default) when there is none. A
            prompting-baseline run whose config does not set ``env.max_steps`` plays with it
            (:func:`g2po_bench.baselines.config.load_baseline_config`), and ``g2po report`` marks
            a baseline row that played with fewer steps.
        expert_detour, expert_stall, expert_mistake: plan editors for the warm start's
            demonstrations (:func:`g2po_bench.benchmarks.demos.collect_demonstrations`), or None
            when the benchmark has none (signatures: ALFWorld's functions of the same names).
    """

    name: ClassVar[str]
    task_types: ClassVar[tuple[str, ...]]
    projection: ClassVar[str]
    prompt_styles: ClassVar[tuple[str, ...]] = ("reference",)
    action_tag: ClassVar[str] = "action"
    episode_score_default: ClassVar[float | None] = None
    reference_max_steps: ClassVar[int | None] = None
    agent_intro: ClassVar[str] = ("You are an agent in a text environment. You solve a task by taking actions "
                                  "one step at a time.")
    expert_detour: ClassVar[Callable[..., list[str]] | None] = None
    expert_stall: ClassVar[Callable[..., list[str]] | None] = None
    expert_mistake: ClassVar[Callable[..., list[str]] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls, "__abstractmethods__", None):
            return  # an intermediate base
        for attr in ("name", "task_types", "projection"):
            if not hasattr(cls, attr):
                raise TypeError(f"benchmark class {cls.__name__} must set the class attribute {attr!r}")
        if cls.projection not in PROJECTIONS:
            raise TypeError(f"benchmark {cls.name!r}: unknown projection {cls.projection!r}; "
                            f"known: {', '.join(PROJECTIONS)}")

    # ------------------------------------------------------------------ required
    @abstractmethod
    def load_tasks(self, cfg: EnvConfig, split: str) -> list[Task]:
        """The tasks of ``split`` (sorted, deterministic), filtered by ``cfg.task_types``.

        Raises:
            g2po_bench.core.errors.DataError: data missing (the message names the command that
                fetches or generates it), or a split that loads fewer tasks than it should.
        """

    @abstractmethod
    def make_env(self, cfg: EnvConfig) -> Environment:
        """A fresh environment (cheap, no download; called in worker processes)."""

    @abstractmethod
    def build_prompt(self, obs: Observation, history: Sequence[tuple[str, str]], step: int,
                     history_length: int, style: str = "reference") -> str:
        """The prompt of step ``step`` (0-based): the observation ``obs`` and the last
        ``history_length`` (observation, action) pairs of ``history``, in ``style``."""

    @abstractmethod
    def expert_actions(self, task: Task) -> list[str]:
        """A winning action sequence of ``task`` (warm starts, few-shot examples, tests)."""

    @abstractmethod
    def expert_response(self, action: str, obs: Observation, style: str = "reference") -> str:
        """The response text an expert would give to play ``action`` from ``obs``."""

    # ------------------------------------------------------------------ optional hooks
    def parse_response(self, text: str) -> ParsedAction:
        """The action of a model response: the reference projection :attr:`projection`
        (:func:`g2po_bench.benchmarks.parsing.parse_response`); never raises."""
        return parse_response(text, projection=self.projection)

    def step_reward(self, observation: Observation, success_reward: float) -> float:
        """The reward of a step that led to ``observation``, in the trainer's units (the
        StepBatch ``reward``).

        The default is the reference setting: ``success_reward`` (``algorithm.success_reward``,
        10) on the step that wins the episode (``observation.won``), 0 on every other step. A
        benchmark with a reward of its own (a shaped reward, a task score) overrides it; the
        estimators take any per-step reward.

        Args:
            observation: the observation after the step (``reward`` in the environment's own
                units, ``done``, ``won``, ``info``).
            success_reward: the reward of a successful episode's final step.

        Returns:
            float.
        """
        return success_reward if observation.won else 0.0

    def validate_config(self, cfg: RunConfig) -> None:
        """Check the benchmark's own settings of ``cfg`` before any work starts.

        The default checks ``env.task_types`` against :attr:`task_types` and ``env.prompt``
        against :attr:`prompt_styles`; a benchmark with settings of its own extends it.

        Raises:
            g2po_bench.core.config.ConfigError: naming the key and how to fix it.
        """
        for t in cfg.env.task_types:
            require(t in self.task_types, "env.task_types",
                    f"{t!r} is not a task type of {self.name}; known: {', '.join(self.task_types)}")
        require(cfg.env.prompt in ("auto", *self.prompt_styles), "env.prompt",
                f"{self.name} has the prompt styles {', '.join(self.prompt_styles)}; "
                f"use env.prompt={self.prompt_styles[0]}")

    def default_prompt_style(self, cfg: RunConfig) -> str:
        """What ``env.prompt=auto`` means for ``cfg`` (the first of :attr:`prompt_styles`)."""
        return self.prompt_styles[0]

    def episode_set_score(self, trajectories: Sequence[dict[str, Any]]) -> float | None:
        """An evaluation score computed over the whole set of episodes (AppWorld's scenario
        completion), or None: the evaluation then averages the episodes' own scores."""
        return None

    def make_state_key_rule(self, rule: str):
        """A fresh per-episode key rule over observations for ``rule`` (``"reference"`` or
        ``"raw"``), whatever rule the environments key with: an object with ``reset(obs)`` and
        ``update(obs)`` returning the key text of that observation's state. The credit instrument's
        rollout hooks (``key_rules``, :class:`g2po_bench.analysis.credit.replay.CreditHooks`) record both rules' keys on the same rollouts (GiGPO groups by the raw key,
        G2PO by the reference key). The default serves benchmarks with a single key rule: every
        rule name gives the environment's own ``Observation.state_key``
        (:class:`g2po_bench.core.protocol.OwnStateKey`); a benchmark whose ``env.state_key``
        changes the key overrides it.

        Raises:
            ValueError: an unknown rule name.
        """
        return OwnStateKey(rule)

    def preload_worker_modules(self) -> None:  # noqa: B027 - optional hook
        """Import the environments' libraries in the process that forks the environment
        workers, so that a new or recycled worker does not import them itself."""

    def generate(self, cfg: EnvConfig) -> Path | None:
        """Generate the embedded default's tasks offline into their cache folder (``g2po data
        generate``); returns the folder, or None when the benchmark generates nothing."""
        return None

    def download(self, dest: Path) -> Path:
        """Fetch and verify the official data into ``dest`` (``g2po data download``); returns the
        folder to give as ``env.data_dir``.

        Raises:
            g2po_bench.core.errors.DataDownloadError: no download exists, or it failed.
        """

        raise DataDownloadError(f"benchmark {self.name!r} has no data download")

    #: whether :meth:`download` / :meth:`generate` do anything (what ``g2po data`` offers)
    downloads: ClassVar[bool] = False
    generates: ClassVar[bool] = False

    def tokenizer_words(self, cfg: EnvConfig) -> list[str]:
        """Strings the tiny CPU model's tokenizer keeps as one token each when
        ``model.item_tokens`` is on (ids a policy copies from an observation into an action,
        such as WebShop's product ids); [] (the default) adds none."""
        return []

    def describe_data(self, path: Path) -> str:
        """Where :meth:`download` put the data, as ``g2po data download`` reports it."""
        return str(path)

    def speed_benchmark(self, argv: Sequence[str]) -> int | None:
        """``g2po bench <name> ARGS``: a speed benchmark of the environment that prints its
        figures; returns its exit code, or None when the benchmark has none."""
        return None

    # ------------------------------------------------------------------ prompting baselines
    def format_observation(self, text: str, instruction: str) -> str:
        """An observation as the prompting baselines show it (WebShop: the page after the
        instruction, as in the RL prompt)."""
        return text

    def plan_sentence(self, task: Task, actions: Sequence[str], instruction: str) -> str:
        """The opening plan of a few-shot example, written from the task and its walkthrough."""
        return f"My goal: {instruction.rstrip('.')}."

    def failure_hint(self, actions: Sequence[str], score: float | None) -> str | None:
        """What Reflexion tells the agent about a failed episode with these actions, when the
        benchmark can say more than the generic outcome (WebShop: a wrong purchase), else None."""
        return None

    def __repr__(self) -> str:
        return f"<benchmark {self.name}>"
