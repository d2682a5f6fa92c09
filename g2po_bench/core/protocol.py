"""The environment protocol shared by every benchmark (ALFWorld, WebShop, AppWorld, ...).

One small protocol (docs/design-notes.md "Data flow"): reset a task, step a text action, report
reward, done, success, admissible actions if any, and the state key. The rollout engine only talks
to this protocol; prompts and action parsing are per environment (``prompt.py`` of each benchmark)
and share :mod:`g2po_bench.benchmarks.parsing`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Task", "Observation", "crashed_observation", "Environment", "Mistake", "IfAdmissible", "RefusalStop",
           "state_key_rule", "check_state_key_rule", "OwnStateKey", "STATE_KEY_RULES"]

#: the state-key rules a benchmark may offer: G2PO's reference key, GiGPO's raw observation
#: (docs/design-notes.md "State keys")
STATE_KEY_RULES = ("reference", "raw")


@dataclass(frozen=True)
class Task:
    """One task instance (a game, a goal, ...).

    Attributes:
        task_id: stable, unique id, used for grouping, evaluation panels and reports
            (e.g. ``"valid_seen/pick_and_place_simple-Book-None-Sofa-229/trial_T2019..."``).
        task_type: the reporting category (ALFWorld task type, ``"webshop"``, ...).
        env: benchmark name (``"alfworld"``, ``"webshop"``).
        payload: environment-specific data needed to reset (a game file path, a goal dict).
            Must be picklable: tasks travel to worker processes.
    """

    task_id: str
    task_type: str
    env: str
    payload: Any = None


@dataclass
class Observation:
    """What the environment reports after ``reset`` or ``step``.

    Attributes:
        text: the observation text shown to the agent (the engine's reply to the last action).
        instruction: the task description ("Your task is to: ...", the WebShop instruction).
        admissible_actions: valid commands in this state, or None if the env has no such list.
        state_key: the anchor-state key of *this* state (docs/design-notes.md "State keys"),
            computed with the environment's configured key rule; an action taken from this state is
            recorded with this key.
        reward: reward of the last step in the environment's own units (ALFWorld: 1 on a win;
            WebShop: the purchase reward in [0, 1]); 0 after ``reset``.
        done: the episode ended (win, purchase, or the environment's own end).
        won: the episode ended in success.
        info: extra data (e.g. WebShop ``score``), JSON-serialisable.
    """

    text: str
    instruction: str
    admissible_actions: list[str] | None
    state_key: str
    reward: float = 0.0
    done: bool = False
    won: bool = False
    info: dict[str, Any] = field(default_factory=dict)


def crashed_observation(error: str) -> Observation:
    """The terminal, failed observation recorded for a crashed environment."""
    return Observation(text="", instruction="", admissible_actions=None, state_key="<crashed>",
                       reward=0.0, done=True, won=False, info={"crashed": True, "error": error})


class Mistake(str):
    """An expert-plan action that is a deliberate mistake: played, never imitated.

    A plan for the warm start's demonstrations (:func:`g2po_bench.benchmarks.demos.collect_demonstrations`)
    may contain such actions (e.g. ALFWorld's :func:`g2po_bench.benchmarks.alfworld.expert_mistake`): the
    environment executes them and they appear in the history of the following prompts, but no
    demonstration step is recorded for them, so a policy trained on the demonstrations learns the
    recovery from the mistake, not the mistake.
    """

    __slots__ = ()


class IfAdmissible(str):
    """An expert-plan action played only where the environment admits it, else skipped.

    For plans fixed before the episode starts that depend on what the agent will find: ALFWorld's
    search detour opens the receptacle it visits (:func:`g2po_bench.benchmarks.alfworld.expert_detour`), which
    only a closed receptacle admits (some drawers are open shelves). When the observation the
    action would be taken in does not list it among its admissible actions, the replay
    (:func:`g2po_bench.benchmarks.demos.collect_demonstrations`) goes on with the next action of the plan.
    """

    __slots__ = ()


class RefusalStop:
    """Ends an episode that is stuck: ``limit`` refused actions in a row (``env.stop_after_refusals``).

    One rule for every episode (the lock-step driver, :mod:`g2po_bench.benchmarks.driver`, that plays the RL
    rollouts and evaluations and the prompting baselines' episodes), so that their episodes end alike. An action is
    refused when its observation has ``info["refused"]`` true (ALFWorld's "Nothing happens.");
    any other observation resets the count.

    Args:
        limit: consecutive refusals that end an episode (as a failure); 0 = never.

    Raises:
        ValueError: ``limit`` < 0.
    """

    def __init__(self, limit: int = 0) -> None:
        if int(limit) < 0:
            raise ValueError(f"stop_after_refusals must be >= 0, got {limit}")
        self.limit = int(limit)
        self._in_a_row: dict[Any, int] = {}

    def stuck(self, episode: Any, obs: Observation) -> bool:
        """Count ``obs`` (the observation after an action of ``episode``, any hashable key);
        True when the episode must end now as stuck (the limit is reached and it is not over)."""
        n = self._in_a_row.get(episode, 0) + 1 if obs.info.get("refused", False) else 0
        self._in_a_row[episode] = n
        return bool(self.limit) and n >= self.limit and not obs.done


class Environment(ABC):
    """A text environment that plays one episode of one task at a time.

    Implementations are constructed inside worker processes from picklable settings and
    must not download anything at construction (docs/design-notes.md "Rules of the house").
    """

    name: str = "base"

    @abstractmethod
    def reset(self, task: Task) -> Observation:
        """Start an episode of ``task``; returns the first observation."""

    @abstractmethod
    def step(self, action: str) -> Observation:
        """Send a text command (already parsed from the model output; an invalid output is
        passed as the fallback text chosen by the parser) and return the next observation."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (subprocesses, files)."""


def state_key_rule(cfg) -> str:
    """The state-key rule an environment applies for an ``EnvConfig``: ``cfg.state_key``
    (``"reference"`` or ``"raw"``). ``"auto"`` is resolved by ``g2po_bench.runconfig.load_config`` to
    the estimator's rule; an EnvConfig built without a run (tests, tools) has no estimator,
    and ``"auto"`` then means the environment's reference key.

    Raises:
        ValueError: an unknown rule.
    """
    rule = getattr(cfg, "state_key", "reference")
    if rule == "auto":
        return "reference"
    if rule not in ("reference", "raw"):
        raise ValueError(f"unknown state key rule {rule!r}; choose auto, reference or raw")
    return rule


def check_state_key_rule(rule: str) -> str:
    """``rule`` when it is a name of :data:`STATE_KEY_RULES` (what a benchmark's key rule or
    environment accepts).

    Raises:
        ValueError: another rule name (the message lists the rules).
    """
    if rule not in STATE_KEY_RULES:
        raise ValueError(f"unknown state key rule {rule!r}; choose {' or '.join(STATE_KEY_RULES)}")
    return rule


class OwnStateKey:
    """The observation key rule of an environment with a single key rule (the toy corridor,
    AppWorld): every rule name gives the environment's own ``Observation.state_key``. It serves
    a benchmark's ``make_state_key_rule`` (the ``key_rules`` of the credit instrument's rollout hooks).

    Args:
        rule: ``"reference"`` or ``"raw"``.

    Raises:
        ValueError: another rule name.
    """

    def __init__(self, rule: str) -> None:
        self.rule = check_state_key_rule(rule)

    def reset(self, obs: Observation) -> str:
        return obs.state_key

    def update(self, obs: Observation) -> str:
        return obs.state_key
