"""Continuations whose first action already decides their end, found without an environment each.

With common random numbers (:mod:`g2po_bench.analysis.credit.study`, coupling ``"common"``) a
continuation k of a task that reaches a history an earlier continuation k passed through has that
one's future, and the study stops it there (``merge``). On ALFWorld at the CPU default this happens
to about half of the continuations, and always right after their first action: the policy repeats
the recorded action a_t, so the continuation from h_t joins continuation k from h_{t+1}. Played as
episodes, each still cost its environment a reset, the replay of its t-action prefix and one step
(about 40 % of the continuations' environment time), for an action sampled from a state that all K
continuations of the prefix share.

So a wave first plays **one** episode per distinct prefix (its leader: reset, replay, one policy
step) and, in that one policy call, samples the first action of every continuation of the prefix
from its own seed (:class:`SampleMemo`); a continuation whose first action leads to a known history,
or to the start of another continuation k of the same wave, takes that end (:func:`first_step_joins`)
and is not played. The others are played as before, and their first policy step reuses the sample
already drawn for the same prompt and seed. The decisions are those the played episodes would make
(the same prompt, seed and history; a history that ends the episode is never a known one), so the
results equal those of playing every continuation (``tests/test_credit.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from g2po_bench.analysis.credit.replay import CreditHooks, EpisodeStart, step_seed
from g2po_bench.benchmarks.rollout import collect_rollouts
from g2po_bench.runtime.policy_protocol import Generation

__all__ = ["SampleMemo", "first_step_joins"]


class SampleMemo:
    """A policy wrapper that remembers samples by (prompt, seed) and can fan a call out.

    ``generate`` answers every (prompt, per-prompt seed) it has drawn before from memory and asks
    the wrapped policy for the rest. After :meth:`fan_out`, its next call is a call of leaders:
    the prompt of leader i (recognised by its seed) is sampled once for each of ``seeds[i]`` and
    all are remembered; each leader gets its first sample.

    Args:
        policy: a policy whose ``generate`` takes per-prompt ``seeds``.

    A memo serves one wave, whose calls share one temperature, top-p and response length (the
    key is the prompt and the seed only).
    """

    def __init__(self, policy) -> None:
        self.policy = policy
        self.memo: dict[tuple[str, int], Generation] = {}
        self.fanned: dict[int, list[Generation]] = {}
        self._fan: dict[int, tuple[int, list[int]]] | None = None

    def fan_out(self, leader_seeds: Sequence[int], seeds: Sequence[Sequence[int]]) -> None:
        """Make the next call a call of leaders: the prompt asked with seed ``leader_seeds[i]``
        is sampled with each of ``seeds[i]`` (:attr:`fanned` ``[i]``, in that order)."""
        self._fan = {int(s): (i, [int(x) for x in ss]) for i, (s, ss) in enumerate(zip(leader_seeds, seeds))}
        if len(self._fan) != len(leader_seeds):
            raise ValueError("fan_out: the leaders' seeds must be distinct")

    def end_fan_out(self) -> None:
        """Drop a :meth:`fan_out` whose call of leaders did not come: later calls are plain."""
        self._fan = None

    def generate(self, prompts: list[str], *, temperature: float, max_new_tokens: int, top_p: float = 1.0,
                 seed: int | None = None, seeds: list[int] | None = None) -> list[Generation]:
        """As the wrapped policy's ``generate`` (per-prompt ``seeds`` required).

        Raises:
            ValueError: no ``seeds``; a call of leaders with a seed :meth:`fan_out` did not name.
        """
        if seeds is None:
            raise ValueError("SampleMemo needs per-prompt seeds")
        sampling = {"temperature": temperature, "max_new_tokens": max_new_tokens, "top_p": top_p}
        if self._fan is not None:
            fan, self._fan = self._fan, None
            unknown = [s for s in seeds if int(s) not in fan]
            if unknown:
                raise ValueError(f"SampleMemo: a leader call with {len(unknown)} seed(s) fan_out did not name")
            wanted = [(p, x) for p, s in zip(prompts, seeds) for x in fan[int(s)][1]]
            self._ask(wanted, sampling)
            for p, s in zip(prompts, seeds):
                i, own = fan[int(s)]
                self.fanned[i] = [self.memo[(p, x)] for x in own]
            return [self.fanned[fan[int(s)][0]][0] for s in seeds]
        self._ask(list(zip(prompts, (int(s) for s in seeds))), sampling)
        return [self.memo[(p, int(s))] for p, s in zip(prompts, seeds)]

    def _ask(self, wanted: list[tuple[str, int]], sampling: dict[str, Any]) -> None:
        todo = list(dict.fromkeys(w for w in wanted if w not in self.memo))
        if todo:
            gens = self.policy.generate([p for p, _ in todo], seed=None, seeds=[s for _, s in todo], **sampling)
            self.memo.update(zip(todo, gens))


def first_step_joins(memo: SampleMemo, pool, bench, kw: dict[str, Any], tasks: Sequence, prefixes: Sequence,
                     wave: Sequence[tuple[int, int]], sample_seeds: Sequence[int], known: dict,
                     seed: int) -> tuple[dict[tuple[int, int], tuple[str, tuple]], dict[str, float], list[int]]:
    """Sample the first action of every continuation of a wave from one episode per prefix and
    find those it joins to a known end (module docstring).

    Args:
        memo: the wave's :class:`SampleMemo` (the played continuations reuse its samples).
        pool, bench, kw: the environment pool, the benchmark and the rollout keywords
            (:func:`g2po_bench.benchmarks.rollout.collect_rollouts`; ``group_size`` 1).
        tasks: the study's tasks; prefixes: the study's :class:`~g2po_bench.analysis.credit.groundtruth.Prefix` list.
        wave: the wave's (prefix, k) jobs; sample_seeds: each job's continuation seed, in order.
        known: (task, k, actions) -> (success, length) of the histories whose end is known.
        seed: the study seed (the rollout call's).

    Returns:
        ({job: (first action, ("known", end) or ("job", other job of the wave starting at that
        history))}, the leaders' rollout timing, the task index of each leader: leader i played
        in pool slot i).
    """
    ks: dict[int, list[tuple[int, int]]] = {}
    for job, s in zip(wave, sample_seeds):
        ks.setdefault(job[0], []).append((job[1], int(s)))
    # a first action at the step limit ends the episode there: no history after it is known
    leaders = [p for p in ks if prefixes[p].step + 1 < kw["max_steps"]]
    if not leaders:
        return {}, {}, []
    pre = [prefixes[p] for p in leaders]
    memo.fan_out([step_seed(i, x.step) for i, x in enumerate(pre)],
                 [[step_seed(s, x.step) for _, s in ks[p]] for p, x in zip(leaders, pre)])
    hooks = CreditHooks(bench, starts=[EpisodeStart(x.actions, x.observations, x.valid) for x in pre],
                        sample_seeds=list(range(len(pre))),
                        known_end=lambda i, actions: len(actions) > pre[i].step)
    try:
        rb = collect_rollouts(memo, pool, bench, [tasks[x.task_index] for x in pre], seed=seed, hooks=hooks, **kw)
    finally:
        memo.end_fan_out()  # a wave whose leaders made no policy call (every reset done) leaves none pending
    starts = {(prefixes[p].task_index, k, prefixes[p].actions): (p, k) for p, k in wave}
    joins: dict[tuple[int, int], tuple[str, tuple]] = {}
    for i, (p, x) in enumerate(zip(leaders, pre)):
        for (k, _), gen in zip(ks[p], memo.fanned.get(i, [])):
            # the action the lock-step driver's step-prompt agent reads (StepPromptAgent.read)
            action = bench.parse_response(gen.text).action
            key = (x.task_index, k, (*x.actions, action))
            if key in known:
                joins[(p, k)] = (action, ("known", known[key]))
            elif key in starts:
                joins[(p, k)] = (action, ("job", starts[key]))
    return joins, rb.timing, [x.task_index for x in pre]
