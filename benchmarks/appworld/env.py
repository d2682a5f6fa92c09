"""The AppWorld environment behind the suite's environment protocol.

One :class:`AppWorldEnv` owns one world-server process (:class:`~g2po_bench.benchmarks.appworld.runtime.WorldServer`,
started on the first reset and reused across episodes) and plays one episode at a time.

Protocol (reference: verl-agent / G2PO ``env_package/appworld/envs.py`` ``AppWorldWorker`` and
``env_manager.py`` ``AppWorldEnvironmentManager``):

- ``reset(task)``: the previous world is closed and its databases deleted, then
  ``AppWorld(task_id, timeout_seconds=50)`` opens a world loaded from the task's own
  databases on disk, so every member of a task group starts from an identical world.
  Observation 0: ``instruction`` = the task instruction, ``info["supervisor"]`` = the
  supervisor's first/last name, email and phone number, ``text`` = both in the prompt's words
  (:func:`first_observation`: "My name is: ... Your task is: ..."; the RL prompt is built from
  ``instruction`` and ``info``, the prompting baselines show ``text``); state key ``""`` (the
  reference anchor of the first step).
- ``step(code)``: the step counter increases; code containing ``"..."`` is refused with
  :data:`ELLIPSIS_REFUSAL`, code containing ``"except"`` (any case; the reference test is
  ``"except" in action.lower()``) with :data:`TRY_EXCEPT_REFUSAL`; anything else runs in the
  world (``world.execute``) and its output is the observation. An exception raised by
  ``execute`` itself gives :data:`EXECUTION_ERROR` (the episode goes on, as in the reference).
  The state key is the raw output.
- The episode ends when the task is completed (the supervisor's ``complete_task``, i.e.
  ``world.task_completed()``) or when the step counter reaches ``max_interactions`` (the
  reference environment's own limit: its default 50, which the G2PO config does not override;
  the rollout's ``env.max_steps`` (30) normally ends the episode first). At the end the world
  is evaluated: ``won`` = ``world.evaluate().success``, reward 10 on success, else 0.
- A cell that hangs past ``cell_timeout`` seconds (beyond AppWorld's own ``timeout_seconds``,
  e.g. a catastrophic regular expression the alarm signal cannot interrupt) or that kills the
  server process ends the episode as failed (``info["crashed"]``); the server is killed and a
  fresh one is started at the next reset. This is the suite's rule for crashing
  environments (:mod:`g2po_bench.runtime.workers`), stricter than the reference, whose environment
  servers are restarted by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from g2po_bench.benchmarks.appworld.runtime import (
    WorldCrashed,
    WorldServer,
    WorldServerError,
    WorldTimeout,
    find_python,
)
from g2po_bench.core.protocol import Environment, Observation, Task, crashed_observation

__all__ = ["AppWorldEnv", "ELLIPSIS_REFUSAL", "TRY_EXCEPT_REFUSAL", "EXECUTION_ERROR", "refusal",
           "first_observation"]

#: fixed observation for code containing "..." (reference wording)
ELLIPSIS_REFUSAL = "Execution failed. You are not allowed to use ellipsis in your code."
#: fixed observation for code containing "except" (reference wording)
TRY_EXCEPT_REFUSAL = "Execution failed. You are not allowed to use try-except in your code."
#: observation when ``world.execute`` itself raises (reference wording)
EXECUTION_ERROR = "Execution failed due to timeout or error."


def first_observation(instruction: str, supervisor: dict[str, str]) -> str:
    """Observation 0: the supervisor's details and the task, worded as in the reference prompt."""
    s = supervisor
    return (f"My name is: {s.get('first_name', '')} {s.get('last_name', '')}. My personal email is "
            f"{s.get('email', '')} and phone number is {s.get('phone_number', '')}.\n\nYour task is: {instruction}")


def refusal(code: str) -> str | None:
    """The fixed refusal message for ``code``, or None when it may run.

    Reference rule (verl-agent ``AppWorldWorker.step``): ``"..." in code`` -> ellipsis
    refusal; else ``"except" in code.lower()`` -> try/except refusal. Note the second test is
    a substring test, so any code mentioning "except" (e.g. a string "exception") is refused
    too; kept as in the reference.
    """
    if "..." in code:
        return ELLIPSIS_REFUSAL
    if "except" in code.lower():
        return TRY_EXCEPT_REFUSAL
    return None


class AppWorldEnv(Environment):
    """AppWorld tasks in a world-server process (module docstring).

    Args:
        data_root: folder holding ``data/`` (official data or :mod:`~g2po_bench.benchmarks.appworld.synthetic` tasks).
        python: the AppWorld interpreter; None = :func:`~g2po_bench.benchmarks.appworld.runtime.find_python`.
        max_interactions: the environment's own step limit (reference default 50).
        timeout_seconds: AppWorld's own per-cell time limit (reference 50); a timed-out cell
            answers AppWorld's "Execution timed out" message and the episode goes on.
        cell_timeout: hard limit in seconds for one request to the server (a hang beyond
            AppWorld's own limit); the episode fails and the server is restarted.
        start_timeout: seconds allowed for a server to start and for a reset.
        success_reward: reward of a successful episode (reference 10).

    Raises (at the first reset):
        g2po_bench.benchmarks.appworld.runtime.AppWorldUnavailable: no AppWorld interpreter.
    """

    name = "appworld"

    def __init__(self, data_root: str | Path, *, python: str | None = None, max_interactions: int = 50,
                 timeout_seconds: int = 50, cell_timeout: float = 60.0, start_timeout: float = 600.0,
                 success_reward: float = 10.0):
        if max_interactions < 1:
            raise ValueError(f"max_interactions must be >= 1, got {max_interactions}")
        if cell_timeout <= 0 or timeout_seconds <= 0:
            raise ValueError("cell_timeout and timeout_seconds must be > 0")
        self.data_root = Path(data_root)
        self._python = python
        self.max_interactions = int(max_interactions)
        self.timeout_seconds = int(timeout_seconds)
        self.cell_timeout = float(cell_timeout)
        self.start_timeout = float(start_timeout)
        self.success_reward = float(success_reward)
        self.server: WorldServer | None = None
        self.restarts = 0
        self.task_id = ""
        self.instruction = ""
        self.supervisor: dict[str, str] = {}
        self.steps = 0
        self.done = True

    # ------------------------------------------------------------------ server
    def _server(self) -> WorldServer:
        if self.server is None or not self.server.alive:
            if self.server is not None:
                self.restarts += 1
                self.server.close()
            self._python = self._python or find_python(None)
            self.server = WorldServer(self._python, self.data_root, start_timeout=self.start_timeout)
        return self.server

    def _obs(self, text: str, key: str, *, done: bool = False, won: bool = False,
             info: dict[str, Any] | None = None) -> Observation:
        info = dict(info or {})
        info.update({"supervisor": dict(self.supervisor), "task_id": self.task_id, "step_count": self.steps})
        return Observation(text=text, instruction=self.instruction, admissible_actions=None, state_key=key,
                           reward=self.success_reward if won else 0.0, done=done, won=won, info=info)

    def _fail(self, exc: Exception) -> Observation:
        """The failed end of an episode whose server hung or died: kill it (restarted at the
        next reset) and answer the harness's crashed observation."""
        if self.server is not None:
            self.server.kill()
        self.done = True
        obs = crashed_observation(f"{type(exc).__name__}: {exc}")
        obs.instruction = self.instruction
        obs.info.update({"supervisor": dict(self.supervisor), "task_id": self.task_id, "step_count": self.steps,
                         "timeout": isinstance(exc, WorldTimeout)})
        return obs

    # ------------------------------------------------------------------ protocol
    def reset(self, task: Task) -> Observation:
        """Open ``task``'s world (module docstring). Raises WorldServerError for an unknown
        task id; a server that hangs or dies during the reset is restarted once."""
        self.task_id = task.task_id
        self.steps = 0
        self.done = False
        for attempt in (0, 1):
            try:
                r = self._server().request("reset", self.start_timeout, task_id=task.task_id,
                                           timeout_seconds=self.timeout_seconds)
                break
            except (WorldTimeout, WorldCrashed):
                if attempt:
                    raise
        self.instruction = r["instruction"]
        self.supervisor = dict(r["supervisor"])
        return self._obs(first_observation(self.instruction, self.supervisor), "")

    def step(self, action: str) -> Observation:
        """Run one code cell (module docstring). Raises RuntimeError before a reset or after
        the episode ended."""
        if self.done:
            raise RuntimeError("AppWorldEnv.step called after the episode ended; call reset(task) first")
        self.steps += 1
        server = self.server
        if server is None or not server.alive:  # died between steps: its world is gone
            return self._fail(WorldCrashed("AppWorld world server is not running (it died between steps)"))
        try:
            msg = refusal(action)
            if msg is None:
                try:
                    r = server.request("execute", self.cell_timeout, code=action)
                    output, completed = r["output"], bool(r["completed"])
                except WorldServerError:
                    output = EXECUTION_ERROR
                    completed = bool(server.request("completed", self.cell_timeout)["completed"])
            else:  # a refused cell changes nothing: the task was not completed before it
                output, completed = msg, False
            done = completed or self.steps >= self.max_interactions
            if not done:
                return self._obs(output, output)
            ev = server.request("evaluate", self.cell_timeout)
        except (WorldTimeout, WorldCrashed) as exc:
            return self._fail(exc)
        self.done = True
        won = bool(ev["success"])
        return self._obs(output, output, done=True, won=won,
                         info={"completed": completed, "pass_count": ev["pass_count"], "num_tests": ev["num_tests"]})

    def close(self) -> None:
        """End the world server (its world closed, its databases deleted)."""
        if self.server is not None:
            self.server.close()
            self.server = None
