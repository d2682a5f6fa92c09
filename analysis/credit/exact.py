"""Exact ground truth on the toy corridor: values by dynamic programming, no Monte Carlo.

For a policy whose response distribution is explicit and depends on the current observation
only (:class:`g2po_bench.benchmarks.toy.scripted_policy.ScriptedCorridorPolicy`), the value of a history
of the corridor (:mod:`g2po_bench.benchmarks.toy`) is a function of the state
``s = (room, observation text, step t, refused actions in a row r)``:

- ``V(s) = sum over responses y of pi(y | observation) * [1 if the action parse(y) wins, else
  0 if the episode ends there (step limit: t + 1 = max_steps; refusal stop: r' >= limit),
  else V(s')]`` with ``s'`` the state the environment answers (``r' = r + 1`` after a refused
  action, else 0);
- ``V_gamma(s)`` the same with ``1`` for a win and ``gamma * V_gamma(s')`` for a step on, i.e.
  ``E[gamma^(T' - 1 - t) * success]`` as in :mod:`g2po_bench.analysis.credit.groundtruth`.

The transitions are the real ones: every successor comes from :class:`CorridorEnv.step` of
the benchmark (placed in the room), every action from the benchmark's parser, the refusal rule
from :class:`g2po_bench.core.protocol.RefusalStop`'s definition (a refused action is one whose
observation has ``info["refused"]``). The memo holds one value per reachable state, so the cost
is (rooms x observations x steps x refusal counts) x responses, microseconds here.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from g2po_bench.analysis.credit.groundtruth import TARGETS, GroundTruth, StudyRows
from g2po_bench.core.protocol import Task

__all__ = ["ExactCorridor", "exact_ground_truth"]


class ExactCorridor:
    """Exact values of histories of one corridor task under a scripted policy.

    Args:
        policy: has ``response_probabilities(prompt) -> {response: probability}`` depending on
            the prompt's current observation only.
        benchmark: the toy benchmark (``make_env``, ``build_prompt``, ``parse_response``).
        task: the corridor task (``payload["length"]``).
        max_steps, stop_after_refusals, gamma: as in the rollouts (``env.max_steps``,
            ``env.stop_after_refusals``, ``algorithm.gamma``).

    Raises:
        ValueError: a policy without ``response_probabilities``.
    """

    def __init__(self, policy, benchmark, task: Task, *, max_steps: int, stop_after_refusals: int,
                 gamma: float, history_length: int = 2, prompt_style: str = "reference"):
        if not hasattr(policy, "response_probabilities"):
            raise ValueError(f"exact mode needs a policy with explicit response probabilities "
                             f"(response_probabilities); {type(policy).__name__} has none")
        self.policy, self.bench, self.task = policy, benchmark, task
        self.max_steps, self.limit, self.gamma = int(max_steps), int(stop_after_refusals), float(gamma)
        self.history_length, self.prompt_style = history_length, prompt_style
        self._parse = lambda text: benchmark.parse_response(text).action
        self._env = benchmark.make_env(None)
        self._first = self._env.reset(task)
        self._value = lru_cache(maxsize=None)(self._solve)

    def _at(self, room: int):
        env = copy.copy(self._env)
        env.pos = room
        return env

    def _solve(self, room: int, text: str, t: int, refused: int) -> tuple[float, float]:
        """(V, V_gamma) of state (room, observation text, step, refusals in a row)."""
        if t >= self.max_steps:
            return 0.0, 0.0
        obs = copy.copy(self._first)
        obs.text = text
        prompt = self.bench.build_prompt(obs, [], t, self.history_length, style=self.prompt_style)
        v = vg = 0.0
        for response, prob in self.policy.response_probabilities(prompt).items():
            if prob == 0:
                continue
            env = self._at(room)
            o = env.step(self._parse(response))
            if o.won:
                v += prob
                vg += prob
                continue
            r = refused + 1 if o.info.get("refused", False) else 0
            if o.done or t + 1 >= self.max_steps or (self.limit and r >= self.limit):
                continue
            nv, nvg = self._value(env.pos, o.text, t + 1, r)
            v += prob * nv
            vg += prob * self.gamma * nvg
        return v, vg

    def history_state(self, actions: Sequence[str]) -> tuple[int, str, int, int, bool, bool]:
        """Replay ``actions`` from the reset: (room, observation text, t, refusals in a row,
        ended, won) of the history they reach."""
        env = copy.copy(self._env)
        env.pos = 0
        text, refused, ended, won = self._first.text, 0, False, False
        for t, a in enumerate(actions):
            o = env.step(a)
            refused = refused + 1 if o.info.get("refused", False) else 0
            text, won = o.text, bool(o.won)
            ended = o.done or t + 1 >= self.max_steps or bool(self.limit and refused >= self.limit)
        return env.pos, text, len(actions), refused, ended, won

    def values(self, actions: Sequence[str]) -> tuple[float, float]:
        """(V, V_gamma) of the history reached by ``actions`` (a terminal one: its outcome and 0)."""
        room, text, t, refused, ended, won = self.history_state(actions)
        if ended:
            return float(won), 0.0
        return self._value(room, text, t, refused)


def exact_ground_truth(rows: StudyRows, tasks: Sequence[Task], policy, benchmark, *, max_steps: int,
                       stop_after_refusals: int, gamma: float, history_length: int = 2,
                       prompt_style: str = "reference") -> GroundTruth:
    """The exact :class:`GroundTruth` of every row (no noise: ``a_star_se`` = 0, the pooled
    and the plain advantage coincide, both halves equal the whole).

    Args:
        rows: :func:`g2po_bench.analysis.credit.groundtruth.index_prefixes` of the sampled rows.
        tasks: the study's tasks (``rows.task_index`` indexes them).
        policy, benchmark, max_steps, stop_after_refusals, gamma, history_length, prompt_style:
            see :class:`ExactCorridor`.

    Raises:
        ValueError: see :class:`ExactCorridor`.
    """
    solvers: dict[int, ExactCorridor] = {}

    def solver(i: int) -> ExactCorridor:
        if i not in solvers:
            solvers[i] = ExactCorridor(policy, benchmark, tasks[i], max_steps=max_steps,
                                       stop_after_refusals=stop_after_refusals, gamma=gamma,
                                       history_length=history_length, prompt_style=prompt_style)
        return solvers[i]

    pv = [solver(p.task_index).values(p.actions) for p in rows.prefixes]
    v_p = np.array([x[0] for x in pv])
    vg_p = np.array([x[1] for x in pv])
    term = rows.next_prefix < 0
    nxt = np.maximum(rows.next_prefix, 0)
    v = v_p[rows.prefix]
    v_next = np.where(term, rows.next_outcome, v_p[nxt])
    a_star = v_next - v
    a_disc = rows.won.astype(float) + gamma * np.where(term, 0.0, vg_p[nxt]) - vg_p[rows.prefix]
    cols = {"a_star": a_star, "a_star_pool": a_star, "a_star_disc": a_disc}
    return GroundTruth(v=v, v_next=v_next, a_star=a_star, a_star_se=np.zeros_like(a_star), a_star_disc=a_disc,
                       a_star_pool=a_star.copy(), halves={k: np.stack([cols[k], cols[k]]) for k in TARGETS},
                       gamma=float(gamma), continuations=0)
