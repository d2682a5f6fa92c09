"""One credit-accuracy study: sample groups, continue every prefix, score every estimator.

A study of G task groups plays them in **blocks** of B groups (B = ``train.groups_per_batch``, the
groups of one training batch): group g plays task g of one seeded permutation of the split
(:func:`task_order`), block j holds the groups jB..(j+1)B - 1, and every estimator sees one block
at a time, as training sees one batch (what a batch statistic, e.g. G2PO's batch-scope graph or
EMPG's entropy range, is taken over). Every random number of a group comes from seeds of that
group alone (the study seed, its task and the rollout or continuation index), so a group's rows,
ground truth, advantages and scores do not depend on which other groups share the run: a study
run as shards (``shard`` of ``shards``: disjoint ranges of whole blocks) and pooled
(:mod:`g2po_bench.analysis.credit.pool`) equals the study run at once, group for group.

The phases (each timed; :class:`CreditStudy` ``timing``):

1. **rollouts**: the part's task groups of N rollouts, sampled as a training iteration samples
   them (:func:`g2po_bench.algorithms.backends.common.training_rollout_settings`: sampler,
   temperature, prompt, step limit, refusal stop; every rollout from its own seed,
   :func:`rollout_seed`), with the state keys of both rules recorded on the same rollouts (GiGPO
   groups by the raw key, G2PO by the reference key);
2. **continuations**: for every distinct history h_t of the sampled rows, K continuations of
   the same policy from the replayed prefix (:class:`g2po_bench.analysis.credit.replay.EpisodeStart`;
   the replayed observations must equal the recorded ones, else
   :class:`g2po_bench.analysis.credit.replay.ReplayMismatch` names the task and step). Continuations
   of many prefixes run together in waves of ``wave`` episodes (one policy batch per lock-step
   step; the environment pool's workers are reused), each episode sampled from its own seed
   (``sample_seeds``), so the results do not depend on the waves. Coupling ``"common"``
   (default) gives continuation k of every prefix of a task the same random numbers at the
   same step (common random numbers: V(h_t) and V(h_{t+1}) are estimated with correlated
   noise, which the paired standard error accounts for); ``"independent"`` seeds each prefix
   apart. With common random numbers two continuations k of a task that reach the same history
   have the same future, so a continuation stops as soon as it reaches a history an earlier
   one passed through and takes its outcome (``merge``; prefixes run longest first, so the
   continuation from h_t that repeats the recorded action a_t joins the one from h_{t+1});
3. **ground truth**: :mod:`g2po_bench.analysis.credit.groundtruth` (or the exact values of
   :mod:`g2po_bench.analysis.credit.exact` on the toy corridor with a scripted policy);
4. **scoring**: every row of :func:`g2po_bench.analysis.credit.variants.study_variants` on the
   very same rows, block by block, and the per-group figures of every row against every target
   (:mod:`g2po_bench.analysis.credit.scoring`);
5. **gradients** (a policy with a model): the loss gradient of every row's step, and the inner
   products of the group gradients under every row's advantages and the truth's halves, block by
   block (:mod:`g2po_bench.analysis.credit.gradients`, :mod:`g2po_bench.analysis.credit.alignment`).

The figures with their CIs come from the per-group numbers
(:func:`g2po_bench.analysis.credit.pool.score_groups`), the same function for a study, a pool of
shards and a study grown in chunks. Rows of trajectories whose environment crashed have no
ground truth (NaN, left out of every score); crashed continuations are left out of the means.
Both counts are reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from g2po_bench.algorithms.backends.common import training_rollout_settings
from g2po_bench.algorithms.backends.progress import RunProgress
from g2po_bench.analysis.credit.alignment import HALVES, GroupGradients, gradient_pairs
from g2po_bench.analysis.credit.exact import exact_ground_truth
from g2po_bench.analysis.credit.first_step import SampleMemo, first_step_joins
from g2po_bench.analysis.credit.groundtruth import (
    TARGETS,
    Continuations,
    GroundTruth,
    StudyRows,
    ground_truth,
    index_prefixes,
)
from g2po_bench.analysis.credit.pool import (
    MC_ORACLE,
    GroupData,
    monte_carlo_agreement,
    score_groups,
)
from g2po_bench.analysis.credit.replay import CreditHooks, EpisodeStart
from g2po_bench.analysis.credit.scoring import ORACLE, GroupStats, group_stats
from g2po_bench.analysis.credit.variants import (
    MissingInput,
    Variant,
    study_variants,
    variant_advantages,
)
from g2po_bench.benchmarks.rollout import collect_rollouts
from g2po_bench.core.batch import StepBatch
from g2po_bench.core.protocol import STATE_KEY_RULES, Task
from g2po_bench.core.seeding import mix_seed, text_seed

__all__ = ["CreditSettings", "CreditStudy", "task_order", "choose_tasks", "shard_range", "rollout_seed", "sticky_order", "play_order",
           "sample_groups", "continuation_seed", "run_continuations", "run_study", "COUPLINGS", "MC_ORACLE"]

COUPLINGS = ("common", "independent")


@dataclass
class CreditSettings:
    """What a study samples and how it scores.

    Attributes:
        groups: G task groups of the whole study (>= 1).
        group_size: N rollouts per group (>= 2; 8 as in training).
        continuations: K continuations per prefix (>= 2, even: two halves; 0 only with
            ``exact``: no Monte Carlo at all).
        seed: seed of the task order, the sampled rollouts and the continuations.
        decisive: |A*| threshold of decisive steps (success probability).
        coupling: ``"common"`` or ``"independent"`` (module docstring).
        wave: continuation episodes per engine call (one policy batch per step).
        merge: with ``"common"`` coupling, stop a continuation as soon as it reaches a history
            that an earlier continuation with the same k of the same task passed through (its
            future is the same: same history, same random numbers) and take that outcome; the
            results are those of running it to its end.
        exact: values by dynamic programming (toy corridor, scripted policy).
        n_boot, confidence: bootstrap settings of the CIs.
        batch_groups: B, the groups of one training batch (``train.groups_per_batch``): the
            blocks the estimators see at once and the batch of the gradient alignment.
        gradient: compute the gradient alignment when the policy has a model.
        sketch_dim: CountSketch buckets of the per-row gradients (0: exact gradients).
        shard, shards: this run plays shard ``shard`` (0-based) of ``shards``: a contiguous range
            of whole blocks (:func:`shard_range`).

    Raises:
        ValueError (:meth:`check`): a value out of range, named.
    """

    groups: int = 16
    group_size: int = 8
    continuations: int = 16
    seed: int = 0
    decisive: float = 0.2
    coupling: str = "common"
    wave: int = 1024
    merge: bool = True
    exact: bool = False
    n_boot: int = 2000
    confidence: float = 0.95
    batch_groups: int = 16
    gradient: bool = True
    sketch_dim: int = 16384
    shard: int = 0
    shards: int = 1

    def check(self) -> CreditSettings:
        """Validate (returns self)."""
        if self.groups < 1:
            raise ValueError(f"groups must be >= 1, got {self.groups}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (a group compares rollouts), got {self.group_size}")
        if self.continuations != 0 or not self.exact:
            if self.continuations < 2 or self.continuations % 2:
                raise ValueError(f"continuations must be even and >= 2 (two halves), got {self.continuations}"
                                 + ("" if not self.exact else "; or 0 with exact mode (no Monte Carlo)"))
        if self.decisive < 0:
            raise ValueError(f"decisive must be >= 0, got {self.decisive}")
        if self.coupling not in COUPLINGS:
            raise ValueError(f"coupling must be one of {', '.join(COUPLINGS)}, got {self.coupling!r}")
        if self.wave < 1:
            raise ValueError(f"wave must be >= 1, got {self.wave}")
        if self.n_boot < 1 or not 0 < self.confidence < 1:
            raise ValueError("n_boot must be >= 1 and confidence in (0, 1)")
        if self.batch_groups < 1:
            raise ValueError(f"batch_groups must be >= 1, got {self.batch_groups}")
        if self.sketch_dim < 0:
            raise ValueError(f"sketch_dim must be >= 0 (0 = exact gradients), got {self.sketch_dim}")
        shard_range(self.groups, self.batch_groups, self.shard, self.shards)
        return self

    def group_range(self) -> tuple[int, int]:
        """(first, stop): the groups this run plays (:func:`shard_range`)."""
        return shard_range(self.groups, self.batch_groups, self.shard, self.shards)


@dataclass
class CreditStudy:
    """The result of :func:`run_study` on one range of groups (everything ``credit.json`` and the
    report hold for it).

    Attributes:
        settings: the :class:`CreditSettings`.
        tasks: the part's tasks (its group ``first_group + i`` plays ``tasks[i]``).
        first_group: the global index of the part's first group (a multiple of ``batch_groups``).
        rollouts: the sampled :class:`~g2po_bench.benchmarks.rollout.RolloutBatch` (B rows; its
            ``group_id`` are local: 0 for the part's first group).
        rows: the rows' prefixes (:class:`~g2po_bench.analysis.credit.groundtruth.StudyRows`).
        truth: the ground truth scored against (exact or Monte Carlo).
        monte_carlo: the Monte-Carlo ground truth (None in exact mode without continuations).
        variants: the scored rows; advantages: name -> (B,) advantages (every block apart).
        skipped: variants not scored, with the reason.
        group_stats: target -> row set (every variant, ``oracle``, in exact mode with
            continuations :data:`MC_ORACLE`) -> per-group figures (global group ids).
        gradients: the per-block inner products of the group gradients
            (:class:`~g2po_bench.analysis.credit.alignment.GroupGradients`), or None.
        gradient_note: why there are no gradients, or how they were computed.
        scores: target -> the figures of this part alone (:func:`g2po_bench.analysis.credit.pool.score_groups`).
        agreement: exact mode with continuations: how the Monte-Carlo A* agrees with the exact one.
        crashed_rows: rows without ground truth; merged: continuations joined to an earlier one.
        timing: seconds per phase (``rollouts``, ``continuations`` and within it ``resets``,
            ``replays``, ``generation``, ``env_steps``; ``ground_truth``, ``scoring``, ``gradients``).
    """

    settings: CreditSettings
    tasks: list[Task]
    rollouts: Any
    rows: StudyRows
    truth: GroundTruth
    monte_carlo: GroundTruth | None
    variants: list[Variant]
    advantages: dict[str, np.ndarray]
    skipped: dict[str, str]
    scores: dict[str, dict]
    first_group: int = 0
    group_stats: dict[str, dict[str, GroupStats]] = field(default_factory=dict)
    gradients: Any = None
    gradient_note: str = ""
    agreement: dict[str, float] | None = None
    crashed_rows: int = 0
    merged: int = 0
    timing: dict[str, float] = field(default_factory=dict)

    @property
    def mc_ceiling(self) -> dict[str, Any] | None:
        """Exact mode with continuations: target -> the Monte-Carlo halves' ceiling, else None."""
        out = {t: sc["mc_ceiling"] for t, sc in self.scores.items() if sc.get("mc_ceiling")}
        return out or None


def task_order(tasks: Sequence[Task], seed: int) -> list[Task]:
    """Every task, in the order of one seeded permutation (``numpy.random.default_rng([seed, 0])``):
    group g of a study plays task g, so a larger study keeps the groups of a smaller one."""
    rng = np.random.default_rng([seed, 0])
    return [tasks[i] for i in rng.permutation(len(tasks))]


def choose_tasks(tasks: Sequence[Task], groups: int, seed: int) -> list[Task]:
    """The first ``groups`` tasks of :func:`task_order` (distinct; group g plays the g-th).

    Raises:
        ValueError: fewer than ``groups`` tasks.
    """
    if len(tasks) < groups:
        raise ValueError(f"the study needs {groups} distinct tasks, the split has {len(tasks)}; lower the groups")
    return task_order(tasks, seed)[:groups]


def shard_range(groups: int, batch_groups: int, shard: int = 0, shards: int = 1) -> tuple[int, int]:
    """The groups ``[first, stop)`` of shard ``shard`` of ``shards``: the study's blocks of
    ``batch_groups`` groups (the last one may be smaller) dealt into ``shards`` contiguous runs of
    as equal a number of blocks as can be.

    Raises:
        ValueError: ``shard`` outside 0..shards-1, or more shards than blocks.
    """
    if shards < 1 or not 0 <= shard < shards:
        raise ValueError(f"shard must be in 0..{shards - 1} of {shards} shards, got {shard}")
    blocks = -(-groups // batch_groups)
    if shards > blocks:
        raise ValueError(f"{shards} shards of a study of {groups} groups in {blocks} block(s) of {batch_groups} "
                         f"(--batch-groups, default train.groups_per_batch): at most {blocks} shard(s); use fewer "
                         f"shards, more --groups or a smaller --batch-groups (a shard plays whole blocks)")
    first, stop = shard * blocks // shards, (shard + 1) * blocks // shards
    return first * batch_groups, min(stop * batch_groups, groups)


def rollout_seed(settings: CreditSettings, task_id: str, j: int) -> int:
    """The sample seed of rollout ``j`` of the group that plays ``task_id`` (the engine mixes in
    the step index)."""
    return mix_seed(settings.seed, 0x5A3, text_seed(task_id), j)


def sample_groups(policy, pool, bench, cfg, tasks: Sequence[Task], settings: CreditSettings,
                  on_step: Callable[[int, int], None] | None = None):
    """The sampled rollouts of ``tasks`` (training's settings, :func:`training_rollout_settings`,
    with ``group_size`` = N, every rollout from its own seed (:func:`rollout_seed`) and the state
    keys of both rules)."""
    kw = training_rollout_settings(cfg)
    kw["group_size"] = settings.group_size
    seeds = [rollout_seed(settings, t.task_id, j) for t in tasks for j in range(settings.group_size)]
    return collect_rollouts(policy, pool, bench, list(tasks), seed=settings.seed, on_step=on_step,
                            hooks=CreditHooks(bench, key_rules=STATE_KEY_RULES, sample_seeds=seeds), **kw)


def continuation_seed(settings: CreditSettings, task_id: str, actions: Sequence[str], k: int) -> int:
    """The sample seed of continuation ``k`` of a prefix (the engine mixes in the step index):
    ``"common"``: one seed per (study seed, task, k); ``"independent"``: per (study seed, task,
    action prefix, k)."""
    if settings.coupling == "common":
        return mix_seed(settings.seed, 0xC0C0, text_seed(task_id), k)
    return mix_seed(settings.seed, 0x1DE9, text_seed("\x1f".join([task_id, *actions])), k)


def run_continuations(policy, pool, bench, cfg, tasks: Sequence[Task], rows: StudyRows, settings: CreditSettings,
                      on_wave: Callable[[int, int], None] | None = None) -> tuple[Continuations, dict[str, float]]:
    """K continuations of every prefix of ``rows``, in waves (module docstring).

    With ``merge`` a wave first samples every continuation's first action from one episode per
    prefix and does not play the continuations that action joins to a known end
    (:mod:`g2po_bench.analysis.credit.first_step`); the results are those of playing them.

    Args:
        policy: a policy that takes per-prompt ``seeds``.
        pool: an EnvPool with at least ``settings.wave`` slots' worth of memory.
        bench, cfg: the benchmark module and the run config (its training rollout settings).
        tasks: the study's tasks (``Prefix.task_index`` indexes them).
        rows: the prefixes.
        settings: K, the wave size, the seed and the coupling.
        on_wave: ``on_wave(done_episodes, total_episodes)`` after each wave.

    Returns:
        (:class:`Continuations` (P, K), seconds: ``resets``, ``replays``, ``generation``,
        ``env_steps``; and ``first_step_joins``, the continuations joined from their first
        action without an episode of their own).

    Raises:
        ReplayMismatch: a replayed observation differs from the recorded one.
    """
    k_count = settings.continuations
    n_prefix = len(rows.prefixes)
    out = Continuations(success=np.zeros((n_prefix, k_count), dtype=bool),
                        length=np.zeros((n_prefix, k_count), dtype=np.int64),
                        first_action=np.full((n_prefix, k_count), "", dtype=object),
                        ok=np.zeros((n_prefix, k_count), dtype=bool), merged=np.zeros((n_prefix, k_count), dtype=bool))
    kw = training_rollout_settings(cfg)
    kw["group_size"] = 1
    order = play_order([x.task_index for x in rows.prefixes], [x.step for x in rows.prefixes])
    jobs = [(p, k) for p in order for k in range(k_count)]
    timing = {"resets": 0.0, "replays": 0.0, "generation": 0.0, "env_steps": 0.0, "first_step_joins": 0}
    # (task, k, actions so far) -> (success, episode length): with common random numbers every
    # continuation k of a task that reaches the same history has the same future
    known: dict[tuple[int, int, tuple[str, ...]], tuple[bool, int]] = {}
    merge = settings.merge and settings.coupling == "common"
    slot_tasks: list[int] = []
    for start in range(0, len(jobs), settings.wave):
        wave = jobs[start:start + settings.wave]
        memo = SampleMemo(policy)
        joins: dict[tuple[int, int], tuple[str, tuple]] = {}
        if merge:
            seeds = [continuation_seed(settings, tasks[rows.prefixes[p].task_index].task_id, rows.prefixes[p].actions, k)
                     for p, k in wave]
            joins, lead_timing, lead_tasks = first_step_joins(memo, pool, bench, kw, tasks, rows.prefixes, wave, seeds,
                                                              known, settings.seed)
            _add_timing(timing, lead_timing)
            timing["first_step_joins"] += len(joins)
            slot_tasks = lead_tasks + slot_tasks[len(lead_tasks):]
        played = [j for j in wave if j not in joins]
        chunk = sticky_order(played, [rows.prefixes[p].task_index for p, _ in played], slot_tasks)
        ends = _play_wave(memo, pool, bench, kw, tasks, rows, settings, chunk, known, merge, timing, out) if chunk else {}
        slot_tasks = [rows.prefixes[p].task_index for p, _ in chunk] or slot_tasks
        for (p, k), (action, _) in joins.items():
            end = _joined_end((p, k), joins, ends)
            x = rows.prefixes[p]
            out.first_action[p, k], out.merged[p, k], out.ok[p, k] = action, True, end is not None
            if end is not None:
                out.success[p, k], out.length[p, k] = end
                for hist in (x.actions, (*x.actions, action)):
                    known.setdefault((x.task_index, k, hist), end)
        if on_wave is not None:
            on_wave(start + len(wave), len(jobs))
    return out, timing


def _add_timing(timing: dict[str, float], rollout_timing: dict[str, float]) -> None:
    """Add a rollout call's seconds (``RolloutBatch.timing``) to the continuations' counters."""
    for key, src in (("resets", "reset_s"), ("replays", "replay_s"), ("generation", "generate_s"),
                     ("env_steps", "step_s")):
        timing[key] += rollout_timing.get(src, 0.0)


def _joined_end(job: tuple[int, int], joins: dict, ends: dict) -> tuple[bool, int] | None:
    """The end of a continuation joined from its first action: a known end, or (through a chain of
    joins, each to a longer prefix) the end of a continuation of the wave."""
    while True:
        kind, target = joins[job][1]
        if kind == "known":
            return target
        if target not in joins:
            return ends[target]
        job = target


def _play_wave(policy, pool, bench, kw: dict, tasks: Sequence[Task], rows: StudyRows, settings: CreditSettings,
               chunk: list[tuple[int, int]], known: dict, merge: bool, timing: dict[str, float],
               out: Continuations) -> dict[tuple[int, int], tuple[bool, int] | None]:
    """Play the continuations ``chunk`` (job i in pool slot i) as episodes, fill their entries of
    ``out`` and ``known``; returns every job's end (None for a crashed one)."""
    pre = [rows.prefixes[p] for p, _ in chunk]
    # within the wave: (task, k, history) -> the episode that passed through it first; an episode
    # that reaches it later (one that started a step earlier on the same path) follows that one
    passed: dict[tuple[int, int, tuple[str, ...]], int] = {}
    follows: dict[int, int] = {}

    def known_end(i: int, actions: tuple[str, ...]) -> bool:
        key = (pre[i].task_index, chunk[i][1], actions)
        # only after the continuation's own first action (the pooled estimate needs it)
        if len(actions) > pre[i].step:
            if key in known:
                return True
            if passed.get(key, i) != i:
                follows[i] = passed[key]
                return True
        passed.setdefault(key, i)
        return False

    hooks = CreditHooks(
        bench, starts=[EpisodeStart(x.actions, x.observations, x.valid) for x in pre],
        sample_seeds=[continuation_seed(settings, tasks[x.task_index].task_id, x.actions, k)
                      for x, (_, k) in zip(pre, chunk)], known_end=known_end if merge else None)
    rb = collect_rollouts(policy, pool, bench, [tasks[x.task_index] for x in pre], seed=settings.seed,
                          hooks=hooks, **kw)
    _add_timing(timing, rb.timing)
    st = rb.steps
    actions: list[list[str]] = [[] for _ in chunk]
    for r in np.lexsort((st.step, st.traj_id)):
        actions[int(st.traj_id[r])].append(rb.actions[r])
    ends = _wave_ends(rb.trajectories, [(x.task_index, k, tuple(a)) for x, (_, k), a in zip(pre, chunk, actions)],
                      follows, known)
    for j, ((p, k), x) in enumerate(zip(chunk, pre)):
        tr, acts, end = rb.trajectories[j], actions[j], ends[j]
        out.first_action[p, k] = acts[x.step] if len(acts) > x.step else ""
        out.ok[p, k] = end is not None
        out.merged[p, k] = bool(tr["cut"])
        if end is None:
            continue
        out.success[p, k], out.length[p, k] = end
        for s in range(x.step, len(acts) + int(tr["cut"])):
            known.setdefault((x.task_index, k, tuple(acts[:s])), end)
    return {job: ends[j] for j, job in enumerate(chunk)}


#: tasks whose continuations are played together (:func:`play_order`): the 16 games a worker's
#: engine memos hold (``SAS_CACHE_SIZE`` of the ALFWorld engine: 32 translations, two per game)
TASK_BLOCK = 16


def play_order(task_index: Sequence[int], step: Sequence[int]) -> list[int]:
    """The order in which a study plays its prefixes' continuations (the waves are cut from it).

    Tasks go in blocks of :data:`TASK_BLOCK` (by task index), and within a block long prefixes
    go first: a wave then holds episodes with similar remaining horizons, and a task's longer
    prefixes end before its shorter ones start, so these join the known ends. Without the blocks
    (long prefixes first over all tasks) a 208-group study's waves each touched most of its 208
    games, the workers' memos no longer held them, and game loads grew to a quarter of the
    continuations (``docs/credit.md`` "Speed").

    Args:
        task_index, step: (P,) ints, each prefix's task and length.

    Returns:
        the P prefix indices, in play order.
    """
    return sorted(range(len(step)), key=lambda p: (task_index[p] // TASK_BLOCK, -step[p], p))


def sticky_order(jobs: Sequence[tuple[int, int]], tasks: Sequence[int], slot_tasks: Sequence[int]) -> list[tuple[int, int]]:
    """The order of a wave's jobs, that is their pool slots (job i plays in slot i): slot i keeps
    the task it played in the last wave (``slot_tasks[i]``) while the wave has jobs of that task
    (a slot whose game changes loads the new one, about a tenth of a worker's time when slots were
    only sorted by task); the other jobs fill the other slots sorted by (task, job).

    Args:
        jobs: the wave's (prefix, k) jobs; tasks: the task index of each job (same length).
        slot_tasks: the task index each slot played in the last wave ([] for the first wave).

    Returns:
        the jobs, each once, in slot order.
    """
    by_task: dict[int, list[tuple[int, int]]] = {}
    for task, job in sorted(zip(tasks, jobs)):
        by_task.setdefault(task, []).append(job)
    taken = {task: 0 for task in by_task}
    order: list[tuple[int, int] | None] = [None] * len(jobs)
    for i, task in enumerate(slot_tasks[:len(jobs)]):
        if task in by_task and taken[task] < len(by_task[task]):
            order[i] = by_task[task][taken[task]]
            taken[task] += 1
    rest = iter([job for task in sorted(by_task) for job in by_task[task][taken[task]:]])
    return [job if job is not None else next(rest) for job in order]


def _wave_ends(trajectories: Sequence[dict], paths: Sequence[tuple], follows: dict[int, int],
               known: dict[tuple, tuple[bool, int]]) -> list[tuple[bool, int] | None]:
    """(success, length) of every episode of a wave, None for a crashed one: its own end, the end
    of the episode it follows (further along the same path in the wave), or the known end of the
    history it stopped at (``paths``: (task, k, its actions))."""
    ends: dict[int, tuple[bool, int] | None] = {}
    for j in range(len(trajectories)):
        chain, i = [], j
        while i not in ends:
            tr = trajectories[i]
            if tr["crashed"]:
                ends[i] = None
            elif not tr["cut"]:
                ends[i] = (bool(tr["success"]), int(tr["num_steps"]))
            elif i in follows:
                chain.append(i)
                i = follows[i]
            else:
                ends[i] = known[paths[i]]
        for c in chain:
            ends[c] = ends[i]
    return [ends[j] for j in range(len(trajectories))]


def _study_rows(rb, tasks: Sequence[Task]) -> StudyRows:
    index = {t.task_id: i for i, t in enumerate(tasks)}
    traj_task = {tr["traj_id"]: index[tr["task_id"]] for tr in rb.trajectories}
    st = rb.steps
    return index_prefixes(st.group_id, st.traj_id, st.step, [traj_task[int(t)] for t in st.traj_id], rb.actions,
                          rb.observations, st.action_valid, st.reward > 0, st.success)


def _monte_carlo_phase(policy, pool, bench, cfg, tasks: Sequence[Task], rows: StudyRows, settings: CreditSettings,
                       progress: RunProgress, timing: dict[str, float]) -> tuple[GroundTruth | None, int]:
    """The continuations and their Monte-Carlo ground truth: (ground truth or None without
    continuations, continuations joined to an earlier one); adds the phases' seconds to ``timing``."""
    if not settings.continuations:
        return None, 0
    total = len(rows.prefixes) * settings.continuations
    t0 = time.perf_counter()
    with progress.phase(f"continuations: {len(rows.prefixes)} prefixes x {settings.continuations}", total=total,
                        key="continuations") as h:
        cont, ctime = run_continuations(policy, pool, bench, cfg, tasks, rows, settings,
                                        on_wave=lambda d, t: h.update(d, "episodes"))
    timing["continuations"] = time.perf_counter() - t0
    first_joins = int(ctime.pop("first_step_joins", 0))
    timing.update(ctime)
    t0 = time.perf_counter()
    mc = ground_truth(rows, cont, gamma=cfg.algorithm.gamma)
    timing["ground_truth"] = time.perf_counter() - t0
    merged = int(cont.merged.sum()) if cont.merged is not None else 0
    progress.log(f"continuations: {total} episodes in {timing['continuations']:.1f} s (generation "
                 f"{ctime['generation']:.1f}, replays {ctime['replays']:.1f}, resets {ctime['resets']:.1f}, "
                 f"environment steps {ctime['env_steps']:.1f}); {merged} joined another with the same history "
                 f"and seed ({first_joins} from their first action, without an episode of their own)"
                 f"{'' if settings.merge and settings.coupling == 'common' else ' (joining off)'}; "
                 f"{mc.crashed} crashed")
    return mc, merged


def _exact_phase(policy, bench, cfg, tasks: Sequence[Task], rows: StudyRows, progress: RunProgress,
                 timing: dict[str, float], mc: GroundTruth | None,
                 no_truth: np.ndarray) -> tuple[GroundTruth, dict[str, float] | None]:
    """Exact mode: (exact ground truth, its agreement with the Monte-Carlo one or None without
    continuations).

    Raises:
        ValueError: the environment is not the toy corridor.
    """
    if cfg.env.name != "toy":
        raise ValueError(f"exact mode needs the toy corridor (env.name=toy), not {cfg.env.name}")
    t0 = time.perf_counter()
    truth = exact_ground_truth(rows, tasks, policy, bench, max_steps=cfg.env.max_steps,
                               stop_after_refusals=cfg.env.stop_after_refusals, gamma=cfg.algorithm.gamma,
                               history_length=cfg.env.history_length, prompt_style=cfg.env.prompt)
    timing["exact"] = time.perf_counter() - t0
    if mc is None:
        return truth, None
    agreement = monte_carlo_agreement(truth.a_star, mc.a_star, mc.a_star_se, ~no_truth)
    progress.log(f"exact mode: the Monte-Carlo A* lies within its 95 % CI of the exact A* on "
                 f"{agreement['within_ci']:.1%} of {agreement['rows']} rows (mean z {agreement['mean_z']:+.2f})")
    return truth, agreement


def _blocks(first_group: int, n_groups: int, batch_groups: int) -> list[tuple[int, int]]:
    """The part's blocks as local group ranges [lo, hi) (the part starts at a block's start)."""
    out, lo = [], 0
    while lo < n_groups:
        hi = min(n_groups, lo + batch_groups - (first_group + lo) % batch_groups)
        out.append((lo, hi))
        lo = hi
    return out


def _advantages_phase(cfg, rb, settings: CreditSettings, first_group: int,
                      values_fn: Callable[[Any], np.ndarray] | None
                      ) -> tuple[list[Variant], dict[str, np.ndarray], dict[str, str]]:
    """Every variant's advantages on the sampled steps, one block at a time (a batch of training):
    (scored variants, name -> (B,) advantages, variants skipped with the reason)."""
    variants = study_variants()
    a = cfg.algorithm
    common = {"mode": a.mode, "gamma": a.gamma, "step_weight": a.step_weight,
              "invalid_penalty": a.invalid_penalty, "success_reward": a.success_reward}
    st = rb.steps
    values = values_fn(rb) if values_fn is not None else None
    keys = {rule: rb.state_keys_by_rule(rule) for rule in STATE_KEY_RULES}
    next_keys = {rule: rb.next_state_keys_by_rule(rule) for rule in rb.next_state_texts_by_rule}
    entropies = rb.entropies if len(rb.entropies) == len(st) else None
    actions = rb.actions if len(rb.actions) == len(st) else None
    advantages = {v.name: np.full(len(st), np.nan) for v in variants}
    skipped: dict[str, str] = {}
    for lo, hi in _blocks(first_group, int(st.group_id.max()) + 1 if len(st) else 0, settings.batch_groups):
        sel = np.flatnonzero((st.group_id >= lo) & (st.group_id < hi))
        idx = sel.tolist()
        batches = {rule: StepBatch(group_id=st.group_id[sel], traj_id=st.traj_id[sel], step=st.step[sel],
                                   state_key=keys[rule][sel], reward=st.reward[sel], success=st.success[sel],
                                   action_valid=st.action_valid[sel]) for rule in STATE_KEY_RULES}
        inputs = {"values": None if values is None else np.asarray(values)[sel],
                  "state_texts": {r: [t[i] for i in idx] for r, t in rb.state_texts_by_rule.items()},
                  "next_state_key": {r: k[sel] for r, k in next_keys.items()},
                  "entropies": None if entropies is None else entropies[sel],
                  "action_texts": None if actions is None else [actions[i] for i in idx]}
        for v in variants:
            if v.name in skipped:
                continue
            try:
                advantages[v.name][sel] = variant_advantages(v, batches, common, inputs)
            except MissingInput as exc:
                skipped[v.name] = str(exc)
    scored = [v for v in variants if v.name not in skipped]
    return scored, {v.name: advantages[v.name] for v in scored}, skipped


def _target_columns(truth: GroundTruth, no_truth: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """target -> ((B,) target, (2, B) halves), NaN on rows without ground truth."""
    return {t: (np.where(no_truth, np.nan, truth.target(t)), np.where(no_truth[None, :], np.nan, truth.halves[t]))
            for t in TARGETS}


def _group_stats_phase(rb, advantages: dict[str, np.ndarray], truth: GroundTruth, mc: GroundTruth | None,
                       no_truth: np.ndarray, settings: CreditSettings, first_group: int
                       ) -> dict[str, dict[str, GroupStats]]:
    """target -> row set -> per-group figures (global group ids): every variant, the oracle (half
    against half) and, in exact mode with continuations, the Monte-Carlo halves (:data:`MC_ORACLE`)."""
    gid = rb.steps.group_id + first_group
    out: dict[str, dict[str, GroupStats]] = {}
    mc_cols = _target_columns(mc, no_truth) if settings.exact and mc is not None else None
    for t, (y, halves) in _target_columns(truth, no_truth).items():
        stats = {name: group_stats(a, y, gid, decisive=settings.decisive) for name, a in advantages.items()}
        stats[ORACLE] = group_stats(halves[0], halves[1], gid, decisive=settings.decisive)
        if mc_cols is not None:
            stats[MC_ORACLE] = group_stats(mc_cols[t][1][0], mc_cols[t][1][1], gid, decisive=settings.decisive)
        out[t] = stats
    return out


def _gradient_phase(cfg, policy, rb, advantages: dict[str, np.ndarray], truth: GroundTruth, no_truth: np.ndarray,
                    settings: CreditSettings, first_group: int, progress: RunProgress) -> tuple[Any, str]:
    """The per-block inner products of the group gradients (docs/credit.md "Update-direction
    accuracy"): (:class:`~g2po_bench.analysis.credit.alignment.GroupGradients` or None, a note)."""
    model, tokenizer = getattr(policy, "model", None), getattr(policy, "tokenizer", None)
    if not settings.gradient:
        return None, "not computed (turned off)"
    if model is None or tokenizer is None:
        return None, (f"not computed: the policy ({type(policy).__name__}) has no model whose loss gradient could "
                      "be taken")
    # lazy: torch (about 5 s to import) only for a policy with a model
    from g2po_bench.analysis.credit.gradients import block_gradients

    st = rb.steps
    n_groups = int(st.group_id.max()) + 1 if len(st) else 0
    families = dict(advantages)
    for t, (y, halves) in _target_columns(truth, no_truth).items():
        families[t], families[t + HALVES[0]], families[t + HALVES[1]] = y, halves[0], halves[1]
    pairs = gradient_pairs(list(advantages), TARGETS)
    check_pairs = gradient_pairs(list(advantages), TARGETS[:1])
    blocks = _blocks(first_group, n_groups, settings.batch_groups)
    mats, checks = [], []
    with progress.phase(f"gradients: {len(st)} rows in {len(blocks)} block(s)", total=len(st), key="gradients") as h:
        done = 0
        for lo, hi in blocks:
            sel = np.flatnonzero((st.group_id >= lo) & (st.group_id < hi))
            m, c = block_gradients(policy, cfg, [rb.prompt_ids[i] for i in sel], [rb.response_ids[i] for i in sel],
                                   st.group_id[sel] - lo, hi - lo, {k: v[sel] for k, v in families.items()},
                                   pairs, check_pairs, sketch_dim=settings.sketch_dim, seed=settings.seed)
            mats.append(m)
            checks.append(c)
            done += len(sel)
            h.update(done, "rows")
    gid = np.arange(first_group, first_group + n_groups)
    gg = GroupGradients.from_blocks(gid, gid // settings.batch_groups, settings.batch_groups, mats,
                                    checks if all(checks) else ())
    how = ("exact gradients" if settings.sketch_dim == 0 else
           f"CountSketch of {settings.sketch_dim} buckets (a second, independent sketch checks it)")
    return gg, (f"the loss gradient of every sampled row, {how}; loss aggregation {cfg.train.loss_agg_mode}, "
                f"each block of {settings.batch_groups} groups one batch")


def run_study(cfg, policy, pool, bench, tasks: Sequence[Task], settings: CreditSettings, *, progress=None,
              values_fn: Callable[[Any], np.ndarray] | None = None,
              groups: tuple[int, int] | None = None) -> CreditStudy:
    """Run the phases of the module docstring on one range of groups.

    Args:
        cfg: the run config (environment, sampling and estimator common options, the trainer's
            loss aggregation).
        policy: the policy (per-prompt ``seeds``; explicit ``response_probabilities`` for exact
            mode; ``model`` and ``tokenizer`` for the gradient alignment).
        pool: an EnvPool of the benchmark.
        bench: the benchmark module.
        tasks: the study's tasks in group order (:func:`choose_tasks`), at least up to the last
            group played.
        settings: :class:`CreditSettings`.
        progress: a :class:`g2po_bench.algorithms.backends.progress.RunProgress` (None: silent).
        values_fn: ``values_fn(rollouts) -> (B,)`` critic values V(s_t) (a policy with a critic;
            PPO rows are skipped without it).
        groups: (first, stop) the groups to play (first a multiple of ``settings.batch_groups``);
            default the shard's (:meth:`CreditSettings.group_range`).

    Raises:
        ValueError: bad settings or group range; exact mode outside the toy corridor or without a
            scripted policy.
        ReplayMismatch: the environment did not replay a prefix identically.
    """
    settings.check()
    progress = progress or RunProgress(None)
    first, stop = settings.group_range() if groups is None else groups
    if first % settings.batch_groups or not 0 <= first < stop <= len(tasks):
        raise ValueError(f"groups {first}..{stop - 1}: the range must start at a block of {settings.batch_groups} "
                         f"groups and lie within the {len(tasks)} tasks")
    part = list(tasks[first:stop])
    timing: dict[str, float] = {}
    n = len(part) * settings.group_size
    t0 = time.perf_counter()
    with progress.phase(f"rollouts: groups {first}..{stop - 1} x {settings.group_size}", total=cfg.env.max_steps,
                        key="rollouts") as h:
        rb = sample_groups(policy, pool, bench, cfg, part, settings,
                           on_step=lambda t, a: h.update(t, f"steps, {a} of {n} episodes active"))
    timing["rollouts"] = time.perf_counter() - t0
    rows = _study_rows(rb, part)
    crashed_traj = {tr["traj_id"] for tr in rb.trajectories if tr["crashed"]}
    no_truth = np.isin(rows.traj_id, list(crashed_traj))
    progress.log(f"rollouts: {len(rb.steps)} step rows, success {rb.success_rate:.1%}, "
                 f"{len(rows.prefixes)} distinct prefixes ({timing['rollouts']:.1f} s)")
    mc, merged = _monte_carlo_phase(policy, pool, bench, cfg, part, rows, settings, progress, timing)
    truth, agreement = mc, None
    if settings.exact:
        truth, agreement = _exact_phase(policy, bench, cfg, part, rows, progress, timing, mc, no_truth)
    assert truth is not None
    t0 = time.perf_counter()
    with progress.phase("scoring", key="scoring"):
        scored, advantages, skipped = _advantages_phase(cfg, rb, settings, first, values_fn)
        stats = _group_stats_phase(rb, advantages, truth, mc, no_truth, settings, first)
    timing["scoring"] = time.perf_counter() - t0
    if skipped:
        progress.log("not scored: " + "; ".join(skipped.values()))
    t0 = time.perf_counter()
    gradients, note = _gradient_phase(cfg, policy, rb, advantages, truth, no_truth, settings, first, progress)
    if gradients is not None:
        timing["gradients"] = time.perf_counter() - t0
    else:
        progress.log(f"gradient alignment {note}")
    t0 = time.perf_counter()
    scores = score_groups(GroupData(groups=np.arange(first, stop), stats=stats, gradients=gradients), scored, settings)
    timing["scoring"] += time.perf_counter() - t0
    return CreditStudy(settings=settings, tasks=part, first_group=first, rollouts=rb, rows=rows, truth=truth,
                       monte_carlo=mc, variants=scored, advantages=advantages, skipped=skipped, scores=scores,
                       group_stats=stats, gradients=gradients, gradient_note=note, agreement=agreement,
                       crashed_rows=int(no_truth.sum()), merged=merged, timing=timing)
