"""One credit-accuracy study: sample groups, continue every prefix, score every estimator.

The phases (each timed; :class:`CreditStudy` ``timing``):

1. **rollouts**: G task groups of N rollouts, sampled exactly as a training iteration samples
   them (:func:`g2po_bench.algorithms.backends.common.training_rollout_settings`: sampler,
   temperature, prompt, step limit, refusal stop), with the state keys of both rules recorded
   on the same rollouts (GiGPO groups by the raw key, G2PO by the reference key);
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
   very same StepBatch (:mod:`g2po_bench.analysis.credit.scoring`).

Rows of trajectories whose environment crashed have no ground truth (NaN, left out of every
score); crashed continuations are left out of the means. Both counts are reported.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from g2po_bench.algorithms.backends.common import training_rollout_settings
from g2po_bench.algorithms.backends.progress import RunProgress
from g2po_bench.analysis.credit.exact import exact_ground_truth
from g2po_bench.analysis.credit.groundtruth import (
    TARGETS,
    Continuations,
    GroundTruth,
    StudyRows,
    ground_truth,
    index_prefixes,
)
from g2po_bench.analysis.credit.replay import CreditHooks, EpisodeStart
from g2po_bench.analysis.credit.scoring import ceiling, group_stats, score_rows, summarize
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

__all__ = ["CreditSettings", "CreditStudy", "choose_tasks", "sample_groups", "continuation_seed",
           "run_continuations", "run_study", "COUPLINGS"]

COUPLINGS = ("common", "independent")


@dataclass
class CreditSettings:
    """What a study samples and how it scores.

    Attributes:
        groups: G task groups (>= 1).
        group_size: N rollouts per group (>= 2; 8 as in training).
        continuations: K continuations per prefix (>= 2, even: two halves; 0 only with
            ``exact``: no Monte Carlo at all).
        seed: seed of the task choice, the sampled rollouts and the continuations.
        decisive: |A*| threshold of decisive steps (success probability).
        coupling: ``"common"`` or ``"independent"`` (module docstring).
        wave: continuation episodes per engine call (one policy batch per step).
        merge: with ``"common"`` coupling, stop a continuation as soon as it reaches a history
            that an earlier continuation with the same k of the same task passed through (its
            future is the same: same history, same random numbers) and take that outcome; the
            results are those of running it to its end.
        exact: values by dynamic programming (toy corridor, scripted policy).
        n_boot, confidence: bootstrap settings of the CIs.

    Raises:
        ValueError (:meth:`check`): a value out of range, named.
    """

    groups: int = 16
    group_size: int = 8
    continuations: int = 16
    seed: int = 0
    decisive: float = 0.2
    coupling: str = "common"
    wave: int = 512
    merge: bool = True
    exact: bool = False
    n_boot: int = 2000
    confidence: float = 0.95

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
        return self


@dataclass
class CreditStudy:
    """The result of :func:`run_study` (everything ``credit.json`` and the report hold).

    Attributes:
        settings: the :class:`CreditSettings`.
        tasks: the G tasks (task group g plays ``tasks[g]``).
        rollouts: the sampled :class:`~g2po_bench.benchmarks.rollout.RolloutBatch` (B rows).
        rows: the rows' prefixes (:class:`~g2po_bench.analysis.credit.groundtruth.StudyRows`).
        truth: the ground truth scored against (exact in exact mode, else Monte Carlo).
        monte_carlo: the Monte-Carlo ground truth (None without continuations).
        variants: the scored rows; ``advantages``: name -> (B,) float64; ``skipped``: name ->
            why a variant could not be scored (e.g. no critic).
        scores: target name -> :func:`~g2po_bench.analysis.credit.scoring.score_rows` result.
        agreement: exact mode with continuations: how the Monte-Carlo A* agrees with the exact
            one (``within_ci`` fraction of rows within 1.96 SE, ``mean_z``, ``max_abs_z``, ``rows``).
        mc_ceiling: exact mode with continuations: target -> the Monte-Carlo ceiling of the
            continuations (:func:`~g2po_bench.analysis.credit.scoring.ceiling`; the exact one is 1).
        crashed_rows: rows without ground truth (their trajectory crashed).
        merged: continuations whose end was taken from an earlier one (``CreditSettings.merge``).
        timing: seconds per phase (``rollouts``, ``continuations`` with ``resets``,
            ``replays``, ``generation``, ``env_steps``, ``ground_truth``, ``scoring``).
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
    agreement: dict[str, float] | None = None
    mc_ceiling: dict[str, dict] | None = None
    crashed_rows: int = 0
    merged: int = 0
    timing: dict[str, float] = field(default_factory=dict)


def choose_tasks(tasks: Sequence[Task], groups: int, seed: int) -> list[Task]:
    """``groups`` distinct tasks drawn without replacement (``numpy.random.default_rng([seed,
    0])``), in the order of ``tasks``.

    Raises:
        ValueError: fewer than ``groups`` tasks.
    """
    if len(tasks) < groups:
        raise ValueError(f"the study needs {groups} distinct tasks, the split has {len(tasks)}; lower the groups")
    rng = np.random.default_rng([seed, 0])
    return [tasks[i] for i in sorted(rng.choice(len(tasks), size=groups, replace=False))]


def sample_groups(policy, pool, bench, cfg, tasks: Sequence[Task], settings: CreditSettings,
                  on_step: Callable[[int, int], None] | None = None):
    """The G x N sampled rollouts (training's settings, :func:`training_rollout_settings`, with
    ``group_size`` = N and the state keys of both rules)."""
    kw = training_rollout_settings(cfg)
    kw["group_size"] = settings.group_size
    return collect_rollouts(policy, pool, bench, list(tasks), seed=settings.seed, on_step=on_step,
                            hooks=CreditHooks(bench, key_rules=STATE_KEY_RULES), **kw)


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
        ``env_steps``).

    Raises:
        ReplayMismatch: a replayed observation differs from the recorded one.
    """
    k_count = settings.continuations
    n_prefix = len(rows.prefixes)
    success = np.zeros((n_prefix, k_count), dtype=bool)
    length = np.zeros((n_prefix, k_count), dtype=np.int64)
    first = np.full((n_prefix, k_count), "", dtype=object)
    ok = np.zeros((n_prefix, k_count), dtype=bool)
    kw = training_rollout_settings(cfg)
    kw["group_size"] = 1
    # long prefixes first: a wave then holds episodes with similar remaining horizons
    order = sorted(range(n_prefix), key=lambda p: (-rows.prefixes[p].step, p))
    jobs = [(p, k) for p in order for k in range(k_count)]
    timing = {"resets": 0.0, "replays": 0.0, "generation": 0.0, "env_steps": 0.0}
    merged = np.zeros((n_prefix, k_count), dtype=bool)
    # (task, k, actions so far) -> (success, episode length): with common random numbers every
    # continuation k of a task that reaches the same history has the same future
    known: dict[tuple[int, int, tuple[str, ...]], tuple[bool, int]] = {}
    merge = settings.merge and settings.coupling == "common"
    for start in range(0, len(jobs), settings.wave):
        # a wave's slots ordered by task: a slot mostly keeps its game from one wave to the next
        chunk = sorted(jobs[start:start + settings.wave], key=lambda j: (rows.prefixes[j[0]].task_index, j))
        pre = [rows.prefixes[p] for p, _ in chunk]

        def known_end(i: int, actions: tuple[str, ...], chunk=chunk, pre=pre) -> bool:
            # only after the continuation's own first action (the pooled estimate needs it)
            return len(actions) > pre[i].step and (pre[i].task_index, chunk[i][1], actions) in known

        hooks = CreditHooks(
            bench, starts=[EpisodeStart(x.actions, x.observations, x.valid) for x in pre],
            sample_seeds=[continuation_seed(settings, tasks[x.task_index].task_id, x.actions, k)
                          for x, (_, k) in zip(pre, chunk)], known_end=known_end if merge else None)
        rb = collect_rollouts(policy, pool, bench, [tasks[x.task_index] for x in pre], seed=settings.seed,
                              hooks=hooks, **kw)
        for key, src in (("resets", "reset_s"), ("replays", "replay_s"), ("generation", "generate_s"),
                         ("env_steps", "step_s")):
            timing[key] += rb.timing.get(src, 0.0)
        st = rb.steps
        actions: list[list[str]] = [[] for _ in chunk]
        for r in np.lexsort((st.step, st.traj_id)):
            actions[int(st.traj_id[r])].append(rb.actions[r])
        for j, ((p, k), x) in enumerate(zip(chunk, pre)):
            tr = rb.trajectories[j]
            acts = actions[j]
            first[p, k] = acts[x.step] if len(acts) > x.step else ""
            ok[p, k] = not tr["crashed"]
            if tr["cut"]:
                success[p, k], length[p, k] = known[(x.task_index, k, tuple(acts))]
                merged[p, k] = True
            else:
                success[p, k], length[p, k] = bool(tr["success"]), int(tr["num_steps"])
            if ok[p, k]:
                for s in range(x.step, len(acts) + int(tr["cut"])):
                    known.setdefault((x.task_index, k, tuple(acts[:s])), (bool(success[p, k]), int(length[p, k])))
        if on_wave is not None:
            on_wave(start + len(chunk), len(jobs))
    return Continuations(success=success, length=length, first_action=first, ok=ok, merged=merged), timing


def _study_rows(rb, tasks: Sequence[Task]) -> StudyRows:
    index = {t.task_id: i for i, t in enumerate(tasks)}
    traj_task = {tr["traj_id"]: index[tr["task_id"]] for tr in rb.trajectories}
    st = rb.steps
    return index_prefixes(st.group_id, st.traj_id, st.step, [traj_task[int(t)] for t in st.traj_id], rb.actions,
                          rb.observations, st.action_valid, st.reward > 0, st.success)


def _agreement(exact: GroundTruth, mc: GroundTruth, mask: np.ndarray) -> dict[str, float]:
    """How the Monte-Carlo A* agrees with the exact A* (rows in ``mask``)."""
    diff = (mc.a_star - exact.a_star)[mask]
    se = mc.a_star_se[mask]
    within = np.abs(diff) <= 1.96 * np.nan_to_num(se, nan=0.0) + 1e-12
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(se > 0, diff / se, np.where(np.abs(diff) <= 1e-12, 0.0, np.inf))
    finite = np.isfinite(z)
    return {"rows": int(mask.sum()), "within_ci": float(within.mean()) if within.size else math.nan,
            "mean_z": float(z[finite].mean()) if finite.any() else math.nan,
            "max_abs_z": float(np.abs(z).max()) if z.size else math.nan}


def _pairs(variants: Sequence[Variant]) -> list[tuple[str, str]]:
    """Paired differences wanted: every pair of main rows (later minus earlier in table order),
    and each ablation row minus its estimator's main row."""
    main = [v for v in variants if not v.axis]
    pairs = [(b.name, a.name) for i, a in enumerate(main) for b in main[i + 1:]]
    main_of = {v.estimator: v.name for v in main}
    pairs += [(v.name, main_of[v.estimator]) for v in variants if v.axis and v.estimator in main_of]
    return pairs


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
    timing.update(ctime)
    t0 = time.perf_counter()
    mc = ground_truth(rows, cont, gamma=cfg.algorithm.gamma)
    timing["ground_truth"] = time.perf_counter() - t0
    merged = int(cont.merged.sum()) if cont.merged is not None else 0
    progress.log(f"continuations: {total} episodes in {timing['continuations']:.1f} s (generation "
                 f"{ctime['generation']:.1f}, replays {ctime['replays']:.1f}, resets {ctime['resets']:.1f}, "
                 f"environment steps {ctime['env_steps']:.1f}); {merged} joined an earlier one with the same "
                 f"history and seed; {mc.crashed} crashed")
    return mc, merged


def _exact_phase(policy, bench, cfg, tasks: Sequence[Task], rows: StudyRows, settings: CreditSettings,
                 progress: RunProgress, timing: dict[str, float], mc: GroundTruth | None,
                 no_truth: np.ndarray) -> tuple[GroundTruth, dict[str, float] | None, dict[str, Any] | None]:
    """Exact mode: (exact ground truth, its agreement with the Monte-Carlo one, the Monte-Carlo
    ceiling per target); the last two None without continuations.

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
        return truth, None, None
    agreement = _agreement(truth, mc, ~no_truth)
    mc_ceiling = {}
    for target in TARGETS:
        halves = np.where(no_truth[None, :], np.nan, mc.halves[target])
        gs = group_stats(halves[0], halves[1], rows.group_id, decisive=settings.decisive)
        mc_ceiling[target] = ceiling(summarize(gs, n_boot=settings.n_boot, seed=settings.seed,
                                               confidence=settings.confidence))
    progress.log(f"exact mode: the Monte-Carlo A* lies within its 95 % CI of the exact A* on "
                 f"{agreement['within_ci']:.1%} of {agreement['rows']} rows (mean z {agreement['mean_z']:+.2f})")
    return truth, agreement, mc_ceiling


def _scoring_phase(cfg, rb, truth: GroundTruth, no_truth: np.ndarray, settings: CreditSettings,
                   values_fn: Callable[[Any], np.ndarray] | None
                   ) -> tuple[list[Variant], dict[str, np.ndarray], dict[str, str], dict[str, Any]]:
    """Every variant's advantages on the sampled steps, scored against ``truth``: (scored variants,
    advantages, variants skipped with the reason, target -> scores)."""
    variants = study_variants()
    a = cfg.algorithm
    common = {"mode": a.mode, "gamma": a.gamma, "step_weight": a.step_weight,
              "invalid_penalty": a.invalid_penalty, "success_reward": a.success_reward}
    st = rb.steps
    batches = {rule: StepBatch(group_id=st.group_id, traj_id=st.traj_id, step=st.step,
                               state_key=rb.state_keys_by_rule(rule), reward=st.reward, success=st.success,
                               action_valid=st.action_valid) for rule in STATE_KEY_RULES}
    inputs = {"values": values_fn(rb) if values_fn is not None else None,
              "state_texts": rb.state_texts_by_rule,
              "next_state_key": {rule: rb.next_state_keys_by_rule(rule) for rule in rb.next_state_texts_by_rule},
              "entropies": rb.entropies if len(rb.entropies) == len(st) else None,
              "action_texts": rb.actions if len(rb.actions) == len(st) else None}
    advantages: dict[str, np.ndarray] = {}
    skipped: dict[str, str] = {}
    for v in variants:
        try:
            advantages[v.name] = variant_advantages(v, batches, common, inputs)
        except MissingInput as exc:
            skipped[v.name] = str(exc)
    scored = [v for v in variants if v.name in advantages]
    pairs = _pairs(scored)
    scores = {}
    for target in TARGETS:
        y = np.where(no_truth, np.nan, truth.target(target))
        halves = np.where(no_truth[None, :], np.nan, truth.halves[target])
        scores[target] = score_rows(advantages, y, halves, st.group_id, decisive=settings.decisive,
                                    n_boot=settings.n_boot, seed=settings.seed,
                                    confidence=settings.confidence, pairs=pairs)
    return scored, advantages, skipped, scores


def run_study(cfg, policy, pool, bench, tasks: Sequence[Task], settings: CreditSettings, *, progress=None,
              values_fn: Callable[[Any], np.ndarray] | None = None) -> CreditStudy:
    """Run the phases of the module docstring.

    Args:
        cfg: the run config (environment, sampling and estimator common options).
        policy: the policy (per-prompt ``seeds`` needed for continuations; explicit
            ``response_probabilities`` for exact mode).
        pool: an EnvPool of the benchmark.
        bench: the benchmark module.
        tasks: the G tasks (:func:`choose_tasks`).
        settings: :class:`CreditSettings`.
        progress: a :class:`g2po_bench.algorithms.backends.progress.RunProgress` (None: silent).
        values_fn: ``values_fn(rollouts) -> (B,)`` critic values V(s_t) (a policy with a critic;
            PPO rows are skipped without it).

    Raises:
        ValueError: bad settings; exact mode outside the toy corridor or without a scripted
            policy.
        ReplayMismatch: the environment did not replay a prefix identically.
    """
    settings.check()
    progress = progress or RunProgress(None)
    timing: dict[str, float] = {}
    n = settings.groups * settings.group_size
    t0 = time.perf_counter()
    with progress.phase(f"rollouts: {settings.groups} groups x {settings.group_size}", total=cfg.env.max_steps,
                        key="rollouts") as h:
        rb = sample_groups(policy, pool, bench, cfg, tasks, settings,
                           on_step=lambda t, a: h.update(t, f"steps, {a} of {n} episodes active"))
    timing["rollouts"] = time.perf_counter() - t0
    rows = _study_rows(rb, tasks)
    crashed_traj = {tr["traj_id"] for tr in rb.trajectories if tr["crashed"]}
    no_truth = np.isin(rows.traj_id, list(crashed_traj))
    progress.log(f"rollouts: {len(rb.steps)} step rows, success {rb.success_rate:.1%}, "
                 f"{len(rows.prefixes)} distinct prefixes ({timing['rollouts']:.1f} s)")
    mc, merged = _monte_carlo_phase(policy, pool, bench, cfg, tasks, rows, settings, progress, timing)
    truth = mc
    agreement = mc_ceiling = None
    if settings.exact:
        truth, agreement, mc_ceiling = _exact_phase(policy, bench, cfg, tasks, rows, settings, progress, timing, mc,
                                                    no_truth)
    assert truth is not None
    t0 = time.perf_counter()
    with progress.phase("scoring", key="scoring"):
        scored, advantages, skipped, scores = _scoring_phase(cfg, rb, truth, no_truth, settings, values_fn)
    timing["scoring"] = time.perf_counter() - t0
    if skipped:
        progress.log("not scored: " + "; ".join(skipped.values()))
    return CreditStudy(settings=settings, tasks=list(tasks), rollouts=rb, rows=rows, truth=truth, monte_carlo=mc,
                       variants=scored, advantages=advantages, skipped=skipped, scores=scores, agreement=agreement,
                       mc_ceiling=mc_ceiling, crashed_rows=int(no_truth.sum()), merged=merged,
                       timing=timing)

