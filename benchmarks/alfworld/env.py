"""``AlfworldEnv``: the real ALFWorld text engine behind the project's Environment protocol.

One instance plays one episode at a time and can reset to any game file; the engine is built
once (one fast-downward library copy per instance, handed to the next instance on close) and a game is (re)loaded only when the
requested game file (path, modification time, size) differs from the loaded one (textworld's ``PddlEnv.reset`` rebuilds the game
state from the cached problem translation, see :mod:`g2po_bench.benchmarks.alfworld.engine`). A generated
game's translations and grammar parse are read from its ``game.parsed.pkl`` (written by the
generator) when there is one. Loading a new game drops the facts textworld interned for the games
played before (:func:`~g2po_bench.benchmarks.alfworld.engine.release_interned_facts`), so a process
that plays many games does not keep every game's facts.

Observation fields (``g2po_bench.core.protocol.Observation``):
- ``text``: after ``reset`` the initial observation without the banner and the task
  ("You are in the middle of a room. Looking quickly around you, you see ..."); after a step
  the engine's feedback ("You arrive at ...", "Nothing happens.", ...).
- ``instruction``: the task sentence after "Your task is to: " (e.g. "put a clean egg in
  microwave."), as verl-agent's ``extract_task`` takes it.
- ``admissible_actions``: the engine's sorted admissible commands without ``"help"``
  (verl-agent drops "help" when it shows the list to the model and in its anchors).
- ``state_key``: from the configured rule (:mod:`g2po_bench.benchmarks.alfworld.state_keys`).
- ``reward``: 1.0 on the step that wins, else 0.0 (ALFWorld's score; papers rescale to 10).
- ``done`` / ``won``: the game is won (ALFWorld has no losing end; the rollout engine applies
  the step limit, this class never truncates).
- ``info``: ``{"gamefile", "task_id", "step", "intro"}`` (``intro`` = the engine's raw reset text,
  only after reset).

An invalid command (not among the engine's valid commands, e.g. the parser's fallback text) is
answered "Nothing happens." and the episode goes on, as in ALFWorld.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from g2po_bench.benchmarks.alfworld.engine import (
    load_parsed_game,
    make_pddl_env,
    release_downward_lib,
    release_interned_facts,
    split_intro,
)
from g2po_bench.benchmarks.alfworld.games import PARSED_FILE
from g2po_bench.benchmarks.alfworld.state_keys import NOTHING_HAPPENS, StateKeyRule, make_state_key
from g2po_bench.core.protocol import Environment, Observation, Task

__all__ = ["AlfworldEnv"]


class AlfworldEnv(Environment):
    """ALFWorld (text) environment.

    Args:
        state_key: ``"reference"`` (G2PO key), ``"raw"`` (observation text), or a zero-argument
            factory returning a :class:`~g2po_bench.benchmarks.alfworld.state_keys.StateKeyRule`.
        caches: install the engine speed-ups (:func:`g2po_bench.benchmarks.alfworld.engine.install_caches`:
            memoized translation/parsing, shallow context copies; same observations, ~10x
            faster steps). They are process-wide: ``False`` does not remove them once installed.

    Construction is cheap and never downloads anything; the engine is created at the first
    ``reset``.
    """

    name = "alfworld"

    def __init__(
        self,
        state_key: str | Callable[[], StateKeyRule] = "reference",
        *,
        caches: bool = True,
    ) -> None:
        self._key_kind = state_key
        self._key_rule: StateKeyRule = make_state_key(state_key)  # validates the name early
        self._caches = caches
        self._env: Any = None
        self._loaded: str | None = None
        self._loaded_version: tuple[str, int, int] | None = None
        self._task: Task | None = None
        self._instruction = ""
        self._steps = 0
        self._done = True
        self._last_key = ""

    # ------------------------------------------------------------------ protocol
    def reset(self, task: Task) -> Observation:
        """Start an episode of ``task`` (``task.payload`` = path of a ``game.tw-pddl`` file).

        Raises:
            FileNotFoundError: the game file does not exist.
            ValueError: the task is not an ALFWorld task or the intro has no task sentence.
        """
        if task.env != "alfworld":
            raise ValueError(f"AlfworldEnv cannot play a {task.env!r} task ({task.task_id})")
        game = str(task.payload)
        if not Path(game).is_file():
            raise FileNotFoundError(
                f"ALFWorld game file {game!r} of task {task.task_id!r} does not exist"
            )
        if self._env is None:
            self._env = make_pddl_env(caches=self._caches)
        stat = Path(game).stat()
        version = (game, stat.st_mtime_ns, stat.st_size)
        if self._loaded_version != version:
            self._loaded = self._loaded_version = None
            release_interned_facts()  # the facts of games played before: kept by textworld for good
            if self._caches:  # a generated game's stored parse (absent: parsed here)
                load_parsed_game(Path(game).with_name(PARSED_FILE))
            self._env.load(game)
            self._loaded, self._loaded_version = game, version
        state = self._env.reset()
        intro = str(state["feedback"])
        text, self._instruction = split_intro(intro)
        self._task = task
        self._steps = 0
        self._done = False
        admissible = _admissible(state)
        self._key_rule = make_state_key(self._key_kind)
        self._last_key = self._key_rule.reset(text, admissible)
        won = bool(state["won"])
        self._done = won
        return Observation(
            text=text,
            instruction=self._instruction,
            admissible_actions=admissible,
            state_key=self._last_key,
            reward=0.0,
            done=won,
            won=won,
            info={"gamefile": game, "task_id": task.task_id, "step": 0, "intro": intro},
        )

    def step(self, action: str) -> Observation:
        """Send one command; returns the engine's reply.

        Raises:
            RuntimeError: no episode is running (``reset`` not called, or the game is won).
        """
        if self._task is None or self._done:
            raise RuntimeError(
                "AlfworldEnv.step called without a running episode; call reset(task)"
            )
        state, score, done = self._env.step(str(action))
        self._steps += 1
        text = str(state["feedback"])
        admissible = _admissible(state)
        self._last_key = self._key_rule.update(text, admissible)
        won = bool(state["won"])
        self._done = bool(done) or won
        return Observation(
            text=text,
            instruction=self._instruction,
            admissible_actions=admissible,
            state_key=self._last_key,
            reward=1.0 if won else 0.0,
            done=self._done,
            won=won,
            info={"gamefile": self._loaded, "task_id": self._task.task_id, "step": self._steps,
                  "refused": text.startswith(NOTHING_HAPPENS)},
        )

    def close(self) -> None:
        """Drop the engine; its fast-downward library copy goes to the next engine of this process
        (:func:`g2po_bench.benchmarks.alfworld.engine.release_downward_lib`: a copy cannot be
        unmapped, so the copies a process maps stay bounded by the engines open at once)."""
        env, self._env = self._env, None
        self._loaded = self._loaded_version = None
        self._task = None
        self._done = True
        if env is not None:
            with contextlib.suppress(Exception):  # closing is best effort
                env.close()
            release_downward_lib(env)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle only the settings; the engine is rebuilt lazily in the receiving process."""
        return {"state_key": self._key_kind, "caches": self._caches}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["state_key"], caches=state["caches"])  # type: ignore[misc]


def _admissible(state: Any) -> list[str]:
    return [a for a in state["admissible_commands"] if a != "help"]
