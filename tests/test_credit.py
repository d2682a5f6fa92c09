"""The credit-accuracy instrument (analysis/credit): ground truth, exact mode, scoring, CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from g2po_bench.analysis.credit.exact import ExactCorridor, exact_ground_truth
from g2po_bench.analysis.credit.groundtruth import Continuations, ground_truth, index_prefixes
from g2po_bench.analysis.credit.record import row_dicts
from g2po_bench.analysis.credit.replay import ReplayMismatch
from g2po_bench.analysis.credit.scoring import (
    group_stats,
    rank_average,
    score_rows,
    spearman_brown,
    summarize,
)
from g2po_bench.analysis.credit.study import (
    CreditSettings,
    choose_tasks,
    run_continuations,
    run_study,
)
from g2po_bench.analysis.credit.variants import (
    VARIANTS,
    MissingInput,
    Variant,
    study_variants,
    variant_advantages,
)
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.toy.scripted_policy import ScriptedCorridorPolicy, respond
from g2po_bench.core.protocol import Task
from g2po_bench.runconfig import load_config
from g2po_bench.runtime.workers import EnvPool

TOY = get_benchmark("toy")


def toy_cfg(*overrides: str):
    return load_config(None, ["env.name=toy", "env.max_steps=8", "env.stop_after_refusals=2", *overrides])


def corridor(length: int, **extra) -> Task:
    return Task(f"train/corridor-{length}", "corridor", "toy", {"length": length, **extra})


# ------------------------------------------------------------------ exact mode, by hand
def test_exact_values_equal_hand_computed_ones():
    """Corridor of 3 rooms (two 'go east' win), a policy that goes east or looks with probability
    1/2 each, step limit 3, discount 0.5:

    - V(room 0, t=0): at least 2 easts among 3 draws: P(Bin(3, 1/2) >= 2) = 4/8 = 0.5;
    - V(room 1, t=1): 1 east among 2 draws: 1 - 1/4 = 0.75; V(room 0, t=1): 2 among 2: 0.25;
    - V(room 1, t=2): 0.5; V(room 0, t=2): 0;
    - A*(east at t=0) = 0.75 - 0.5 = +0.25, A*(look at t=0) = 0.25 - 0.5 = -0.25;
    - V_gamma(room 0, t=0) = E[gamma^(T-1) success]: wins at step 1 (east, east: 1/4, gamma^1)
      or at step 2 (east-look-east, look-east-east: 2/8, gamma^2): 0.25 * 0.5 + 0.25 * 0.25 = 0.1875.
    """
    pol = ScriptedCorridorPolicy({respond("go east"): 0.5, respond("look"): 0.5})
    ex = ExactCorridor(pol, TOY, corridor(3), max_steps=3, stop_after_refusals=0, gamma=0.5)
    assert ex.values([]) == pytest.approx((0.5, 0.1875), abs=1e-12)
    assert ex.values(["go east"])[0] == pytest.approx(0.75, abs=1e-12)
    assert ex.values(["look"])[0] == pytest.approx(0.25, abs=1e-12)
    assert ex.values(["go east", "look"])[0] == pytest.approx(0.5, abs=1e-12)
    assert ex.values(["look", "look"])[0] == pytest.approx(0.0, abs=1e-12)
    assert ex.values(["go east", "go east"]) == (1.0, 0.0)  # terminal: its outcome
    assert ex.values(["look", "look", "look"]) == (0.0, 0.0)  # step limit reached: failure
    # V_gamma after one east: wins at step 1 (1/2, gamma^0) or step 2 (1/4, gamma^1): 0.5 + 0.125
    assert ex.values(["go east"])[1] == pytest.approx(0.625, abs=1e-12)
    # a refusal stop of 1: any refused action ends the episode; two easts in a row are needed
    pol = ScriptedCorridorPolicy({respond("go east"): 0.5, respond("jump"): 0.5})
    ex = ExactCorridor(pol, TOY, corridor(3), max_steps=10, stop_after_refusals=1, gamma=1.0)
    assert ex.values([])[0] == pytest.approx(0.25, abs=1e-12)


def test_exact_ground_truth_of_recorded_rows():
    """Two trajectories of the 3-room corridor (the hand values above): east-east (won) and
    look-look-look (truncated). A* per row: +0.25, +0.25 (0.75 -> 1); -0.25 (0.5 -> 0.25),
    -0.25 (0.25 -> 0), 0 (0 -> terminal failure 0)."""
    pol = ScriptedCorridorPolicy({respond("go east"): 0.5, respond("look"): 0.5})
    obs0, obs1 = "You are in room 0 of 3.", "You are in room 1 of 3."
    rows = index_prefixes(group_id=[0] * 5, traj_id=[0, 0, 1, 1, 1], step=[0, 1, 0, 1, 2], task_index=[0] * 5,
                          actions=["go east", "go east", "look", "look", "look"],
                          observations=[obs0, obs1, obs0, obs0, obs0], valid=[True] * 5,
                          won=[False, True, False, False, False], success=[True, True, False, False, False])
    assert len(rows.prefixes) == 4  # (), (east), (look), (look, look); h_0 shared by both trajectories
    gt = exact_ground_truth(rows, [corridor(3)], pol, TOY, max_steps=3, stop_after_refusals=0, gamma=0.5)
    np.testing.assert_allclose(gt.a_star, [0.25, 0.25, -0.25, -0.25, 0.0], atol=1e-12)
    np.testing.assert_allclose(gt.v, [0.5, 0.75, 0.5, 0.25, 0.0], atol=1e-12)
    # discounted: r_t + gamma V_gamma(next) - V_gamma(now), V_gamma(room 1, t=1) = 0.625 (above);
    # row 1 wins: 1 + 0 - 0.625
    np.testing.assert_allclose(gt.a_star_disc[:2], [0.5 * 0.625 - 0.1875, 1.0 - 0.625], atol=1e-12)
    assert np.all(gt.a_star_se == 0) and np.array_equal(gt.halves["a_star"][0], gt.a_star)


# ------------------------------------------------------------------ Monte Carlo by hand
def test_monte_carlo_ground_truth_by_hand():
    """One trajectory (two steps, success) from one prefix pair, K = 4 continuations each:
    h_0: outcomes 1,0,0,1 with first actions e,l,l,e; h_1: outcomes 1,1,0,1.
    V(h_0) = 0.5, V(h_1) = 0.75, V(h_2) = 1 (terminal success).
    Row 0 (action e): A* = 0.25; paired d = (0,1,0,0): mean 0.25, sd 0.5, SE 0.25.
    Pooled: p(e) = 2/4, Q(e) = (3 + 2) / (4 + 2) = 5/6, Q(other) = 0: (1 - 1/2) * 5/6 = 5/12.
    Row 1 (action e, last): A* = 1 - 0.75 = 0.25; pooled: Q(e) = 1 (terminal), first actions of
    h_1 are all 'x': p = 0, Q(other) = 0.75: A*_pool = 0.25.
    Halves (k < 2, k >= 2): row 0: V(h_1) - V(h_0) = 1 - 0.5 = 0.5 and 0.5 - 0.5 = 0."""
    rows = index_prefixes(group_id=[0, 0], traj_id=[0, 0], step=[0, 1], task_index=[0, 0], actions=["e", "e"],
                          observations=["o0", "o1"], valid=[True, True], won=[False, True], success=[True, True])
    cont = Continuations(success=np.array([[1, 0, 0, 1], [1, 1, 0, 1]], dtype=bool),
                         length=np.array([[2, 3, 3, 2], [2, 2, 5, 2]]),
                         first_action=np.array([["e", "l", "l", "e"], ["x", "x", "x", "x"]], dtype=object),
                         ok=np.ones((2, 4), dtype=bool))
    gt = ground_truth(rows, cont, gamma=0.5)
    np.testing.assert_allclose(gt.v, [0.5, 0.75])
    np.testing.assert_allclose(gt.a_star, [0.25, 0.25])
    np.testing.assert_allclose(gt.a_star_se[0], 0.25)
    np.testing.assert_allclose(gt.a_star_pool, [5 / 12, 0.25])
    np.testing.assert_allclose(gt.halves["a_star"][:, 0], [0.5, 0.0])
    # discounted, row 1 (wins): 1 - V_gamma(h_1); continuations from h_1 (t = 1) of length 2 win
    # at their step 1: gamma^0, three of them: V_gamma = 3/4
    np.testing.assert_allclose(gt.a_star_disc[1], 1 - 0.75)
    # a crashed continuation is left out of the means
    cont.ok[0, 1] = False
    gt = ground_truth(rows, cont, gamma=0.5)
    np.testing.assert_allclose(gt.v[0], 2 / 3)
    assert gt.crashed == 1


# ------------------------------------------------------------------ MC against exact
@pytest.fixture(scope="module")
def toy_study():
    cfg = toy_cfg()
    tasks = choose_tasks(TOY.load_tasks(cfg.env, "train"), 3, 0)
    with EnvPool(get_benchmark("toy"), cfg.env, 2, max_episodes=0) as pool:
        study = run_study(cfg, ScriptedCorridorPolicy(), pool, TOY, tasks,
                          CreditSettings(groups=3, continuations=48, exact=True, n_boot=300))
    return study


def test_monte_carlo_agrees_with_exact_within_its_ci(toy_study):
    st = toy_study
    mc, ex = st.monte_carlo, st.truth
    assert st.agreement["rows"] == len(st.rollouts.steps) > 40
    z = (mc.a_star - ex.a_star) / np.where(mc.a_star_se > 0, mc.a_star_se, np.inf)
    within = np.abs(mc.a_star - ex.a_star) <= 1.96 * mc.a_star_se + 1e-12
    assert within.mean() >= 0.85
    assert st.agreement["within_ci"] == pytest.approx(within.mean())
    assert abs(np.mean(z[np.isfinite(z)])) < 0.5
    # the pooled estimate is close too (a plug-in with a small bias)
    assert np.mean(np.abs(mc.a_star_pool - ex.a_star)) < np.mean(np.abs(mc.a_star - ex.a_star)) + 0.05


def test_grpo_is_constant_within_a_trajectory_and_a_constant_group_is_undefined(toy_study):
    from g2po_bench.algorithms.registry import estimate

    st = toy_study
    steps = st.rollouts.steps
    adv, traj, valid = st.advantages["grpo"], steps.traj_id, steps.action_valid
    assert (~valid).any()  # the scripted policy answers without tags now and then
    for t in np.unique(traj):  # one value per trajectory, the invalid-action penalty apart
        for v in (True, False):
            sel = adv[(traj == t) & (valid == v)]
            assert sel.size == 0 or np.ptp(sel) == 0.0
    no_penalty = estimate("grpo", steps, invalid_penalty=0.0).advantages
    for t in np.unique(traj):
        assert np.ptp(no_penalty[traj == t]) == 0.0
    # a group whose rollouts all failed gets GRPO advantages that are all equal (0): undefined
    gs = group_stats(np.zeros(6), np.array([0.1, -0.2, 0.3, 0.0, 0.5, -0.4]), np.zeros(6, dtype=int))
    assert math.isnan(gs.spearman[0]) and math.isnan(gs.pearson[0])
    gs2 = group_stats(np.r_[np.zeros(6), np.arange(6.0)], np.r_[np.arange(6.0), np.arange(6.0)],
                      np.r_[np.zeros(6, dtype=int), np.ones(6, dtype=int)])
    s = summarize(gs2, n_boot=100)
    assert s["spearman"]["groups"] == 1 and s["spearman"]["undefined"] == 1
    assert s["spearman"]["mean"] == pytest.approx(1.0)  # the mean of the defined group only, not (0 + 1) / 2


def test_exact_mode_oracle_and_ceiling_are_one(toy_study):
    sc = toy_study.scores["a_star"]
    assert sc["rows"]["oracle"]["spearman"]["mean"] == pytest.approx(1.0)
    assert sc["ceiling"]["ceiling"]["mean"] == pytest.approx(1.0)
    for name, row in sc["rows"].items():
        assert row["spearman"]["mean"] <= 1.0 + 1e-12, name


def test_oracle_row_reaches_the_reliability_ceiling():
    """Synthetic ground truth with known noise: the true advantage of every row is A ~ N(0, 1),
    each half of the continuations measures it with noise of sd 1 (split-half r = 1/2), the full
    estimate with sd 1/sqrt(2) (reliability 2r/(1+r) = 2/3). The oracle row's correlation is the
    split-half r; a perfect estimator (A itself) scored against the full estimate reaches the
    ceiling sqrt(2/3) = 0.816; every estimator stays below it."""
    rng = np.random.default_rng(0)
    g, n = 400, 25
    group = np.repeat(np.arange(g), n)
    true = rng.normal(size=g * n)
    halves = np.stack([true + rng.normal(size=g * n), true + rng.normal(size=g * n)])
    full = halves.mean(axis=0)
    noisy = true + rng.normal(scale=1.0, size=g * n)
    sc = score_rows({"perfect": true, "noisy": noisy}, full, halves, group, n_boot=200)
    rows, ceil = sc["rows"], sc["ceiling"]
    assert ceil["split_half"]["mean"] == rows["oracle"]["spearman"]["mean"]
    assert rows["oracle"]["pearson"]["mean"] == pytest.approx(0.5, abs=0.03)
    assert ceil["reliability"]["mean"] == pytest.approx(spearman_brown(rows["oracle"]["spearman"]["mean"]))
    assert rows["perfect"]["pearson"]["mean"] == pytest.approx(math.sqrt(2 / 3), abs=0.03)
    assert rows["perfect"]["spearman"]["mean"] == pytest.approx(ceil["ceiling"]["mean"], abs=0.03)
    lo, hi = ceil["ceiling"]["ci"]
    assert lo - 0.02 <= rows["perfect"]["spearman"]["mean"] <= hi + 0.02
    assert rows["noisy"]["spearman"]["mean"] < rows["perfect"]["spearman"]["mean"] - 0.1


def test_sign_agreement_and_decisive_mass_by_hand():
    """Target (0.5, -0.3, 0.1, 0.0, -0.25), advantages (1, 1, -2, 0, 0): decisive rows (|A*| >= 0.2)
    are 0, 1, 4; signs agree on row 0 only (row 4 has A = 0: no credit): 1/3; mass on decisive
    rows: (1 + 1 + 0) / 4 = 0.5; decisive fraction 3/5."""
    gs = group_stats(np.array([1.0, 1.0, -2.0, 0.0, 0.0]), np.array([0.5, -0.3, 0.1, 0.0, -0.25]),
                     np.zeros(5, dtype=int))
    s = summarize(gs, n_boot=50)
    assert s["sign_agreement"]["value"] == pytest.approx(1 / 3)
    assert s["decisive_mass"]["value"] == pytest.approx(0.5)
    assert s["decisive_frac"] == pytest.approx(0.6)
    np.testing.assert_allclose(rank_average(np.array([3.0, 1.0, 3.0, 2.0])), [3.5, 1.0, 3.5, 2.0])


# ------------------------------------------------------------------ determinism and batching
def test_a_non_deterministic_corridor_fails_with_the_one_line_replay_error():
    """The corridor of tests/faulty_toy.py whose moves slip at random (test support)."""
    from faulty_toy import faulty_toy

    cfg = toy_cfg()
    slippery = faulty_toy()
    tasks = [Task(f"train/corridor-{n}", "corridor", slippery.name, {"length": n, "slip": 0.4}) for n in (5, 6)]
    with EnvPool(slippery, cfg.env, 2, max_episodes=0) as pool:
        with pytest.raises(ReplayMismatch) as err:
            run_study(cfg, ScriptedCorridorPolicy(), pool, slippery, tasks, CreditSettings(groups=2, continuations=8))
    msg = str(err.value)
    assert "\n" not in msg and "train/corridor-" in msg and " at step " in msg and "not deterministic" in msg


def test_batched_and_unbatched_continuations_are_identical():
    from g2po_bench.analysis.credit.study import _study_rows, sample_groups

    cfg = toy_cfg()
    tasks = choose_tasks(TOY.load_tasks(cfg.env, "train"), 2, 1)
    pol = ScriptedCorridorPolicy()
    with EnvPool(get_benchmark("toy"), cfg.env, 2, max_episodes=0) as pool:
        base = CreditSettings(groups=2, group_size=3, continuations=4, seed=1)
        rb = sample_groups(pol, pool, TOY, cfg, tasks, base)
        rows = _study_rows(rb, tasks)
        results = []
        for wave in (1, 7, 10_000):
            base.wave = wave
            cont, _ = run_continuations(pol, pool, TOY, cfg, tasks, rows, base)
            results.append(cont)
    for other in results[1:]:
        for field in ("success", "length", "first_action", "ok"):
            np.testing.assert_array_equal(getattr(results[0], field), getattr(other, field))
    assert results[0].success.any() and not results[0].success.all()


def test_joining_continuations_with_the_same_history_and_seed_changes_no_result():
    """With common random numbers a continuation that reaches a history an earlier one (same k,
    same task) passed through takes its outcome instead of running on: the results equal those
    of running every continuation to its end, with less work."""
    from g2po_bench.analysis.credit.study import _study_rows, sample_groups

    cfg = toy_cfg()
    tasks = choose_tasks(TOY.load_tasks(cfg.env, "train"), 3, 2)
    pol = ScriptedCorridorPolicy()
    with EnvPool(get_benchmark("toy"), cfg.env, 2, max_episodes=0) as pool:
        base = CreditSettings(groups=3, group_size=4, continuations=8, seed=2, wave=40)
        rows = _study_rows(sample_groups(pol, pool, TOY, cfg, tasks, base), tasks)
        joined, joined_timing = run_continuations(pol, pool, TOY, cfg, tasks, rows, base)
        base.merge = False
        full, full_timing = run_continuations(pol, pool, TOY, cfg, tasks, rows, base)
    for field in ("success", "length", "first_action", "ok"):
        np.testing.assert_array_equal(getattr(joined, field), getattr(full, field))
    assert joined.merged.mean() > 0.1 and not full.merged.any()
    # joined from their first action, sampled in one episode per prefix: no episode of their own
    assert 0 < joined_timing["first_step_joins"] <= joined.merged.sum() and full_timing["first_step_joins"] == 0


def test_sticky_order_keeps_each_slot_on_its_last_task():
    """A wave's jobs go to the slots that played their task in the last wave where it can, the
    rest sorted by (task, job); every job once."""
    from g2po_bench.analysis.credit.study import sticky_order

    jobs = [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
    tasks = [5, 5, 7, 7, 9]
    assert sticky_order(jobs, tasks, []) == jobs
    order = sticky_order(jobs, tasks, [7, 9, 5, 7, 3, 5])
    assert order == [(1, 0), (2, 0), (0, 0), (1, 1), (0, 1)]
    assert sorted(order) == sorted(jobs)
    assert sticky_order(jobs[:2], tasks[:2], [7, 7, 7]) == jobs[:2]


def test_play_order_plays_tasks_in_blocks_long_prefixes_first():
    """Prefixes go in blocks of TASK_BLOCK tasks, and within a block by length, longest first
    (ties by index): a later block's long prefix waits for an earlier block's short one."""
    from g2po_bench.analysis.credit.study import TASK_BLOCK, play_order

    b = TASK_BLOCK
    task = [0, b, 1, b + 1, 0, 2 * b]
    step = [1, 9, 3, 0, 3, 5]
    assert play_order(task, step) == [2, 4, 0, 1, 3, 5]
    # one block: long prefixes first over all tasks
    assert play_order([0, 1, 2, 1], [2, 5, 2, 0]) == [1, 0, 2, 3]
    assert play_order([], []) == []


def test_batched_and_unbatched_continuations_of_a_local_model_are_identical(tmp_path):
    """The same with a (tiny, untrained) transformers policy: per-sample seeds through generate()."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from local_trainer import tiny_model_dir

    from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer
    from g2po_bench.algorithms.backends.local.transformers_policy import LocalPolicy
    from g2po_bench.analysis.credit.study import _study_rows, sample_groups

    model, tok = load_model_and_tokenizer(tiny_model_dir(tmp_path), device="cpu")
    pol = LocalPolicy(model, tok)
    cfg = toy_cfg("env.max_steps=3", "train.max_response_tokens=10", "env.stop_after_refusals=0")
    tasks = choose_tasks(TOY.load_tasks(cfg.env, "train"), 2, 0)
    with EnvPool(get_benchmark("toy"), cfg.env, 2, max_episodes=0) as pool:
        base = CreditSettings(groups=2, group_size=2, continuations=2)
        rb = sample_groups(pol, pool, TOY, cfg, tasks, base)
        rows = _study_rows(rb, tasks)
        base.wave = 1
        one, _ = run_continuations(pol, pool, TOY, cfg, tasks, rows, base)
        base.wave = 1000
        pol.max_batch_tokens = 60  # and cut the policy batches differently
        many, _ = run_continuations(pol, pool, TOY, cfg, tasks, rows, base)
    np.testing.assert_array_equal(one.first_action, many.first_action)
    np.testing.assert_array_equal(one.length, many.length)
    assert len(set(one.first_action.ravel().tolist())) > 2  # the samples differ from each other
    # a model policy reports its token entropies: EMPG (which declares them) is scored on them
    assert len(rb.entropies) == len(rb.steps) and np.isfinite(rb.entropies).all() and (rb.entropies > 0).all()
    batches = {rule: dataclasses.replace(rb.steps, state_key=rb.state_keys_by_rule(rule)) for rule in ("raw", "reference")}
    common = {"mode": cfg.algorithm.mode, "gamma": cfg.algorithm.gamma}
    inputs = {"values": None, "state_texts": rb.state_texts_by_rule, "entropies": rb.entropies,
              "action_texts": rb.actions}
    adv = variant_advantages(Variant("empg", "empg"), batches, common, inputs)
    assert adv.shape == (len(rb.steps),) and np.isfinite(adv).all()
    with pytest.raises(MissingInput, match="entropies"):
        variant_advantages(Variant("empg", "empg"), batches, common, {**inputs, "entropies": None})


# ------------------------------------------------------------------ variants and the registry
def test_every_registered_estimator_gets_a_row_and_the_table_is_data():
    rows = study_variants(["grpo", "g2po", "newest"])
    names = [v.name for v in rows]
    assert "newest" in names and "gigpo" not in names and "g2po w=0.8" in names
    assert all(isinstance(v, Variant) for v in VARIANTS)
    assert {v.options["step_weight"] for v in VARIANTS if v.name.startswith("g2po w=")} == {0.0, 0.2, 0.4, 0.6, 0.8,
                                                                                            1.2}
    keys = {(v.options.get("mode", "mean_std_norm"), v.state_key) for v in VARIANTS if v.estimator == "gigpo"}
    assert keys == {("mean_std_norm", "raw"), ("mean_norm", "raw"), ("mean_std_norm", "reference"),
                    ("mean_norm", "reference")}


def test_an_estimator_the_table_names_only_in_ablations_still_gets_its_main_row():
    # HGPO and GraphGPO have ablation rows in the table but no row at their defaults there
    rows = study_variants(["grpo", "hgpo", "graphgpo"])
    main = {v.name: v for v in rows if not v.axis}
    assert set(main) == {"grpo", "hgpo", "graphgpo"}
    assert main["hgpo"] == Variant("hgpo", "hgpo") and main["graphgpo"] == Variant("graphgpo", "graphgpo")
    assert {"hgpo mean_norm", "hgpo +episode", "graphgpo mean_norm"} <= {v.name for v in rows if v.axis}
    assert {v.name for v in study_variants() if not v.axis} >= {"grpo", "rloo", "gigpo", "g2po", "crbc", "hgpo",
                                                                  "graphgpo", "empg", "ppo"}


def test_ppo_rows_need_a_critic_and_are_scored_with_one(toy_study):
    # the scripted policy reports no token entropies either: EMPG is skipped, saying so
    assert set(toy_study.skipped) == {"ppo", "ppo turn_gae", "empg"}
    assert "entropies" in toy_study.skipped["empg"]
    cfg = toy_cfg()
    tasks = choose_tasks(TOY.load_tasks(cfg.env, "train"), 2, 0)
    with EnvPool(get_benchmark("toy"), cfg.env, 2, max_episodes=0) as pool:
        st = run_study(cfg, ScriptedCorridorPolicy(), pool, TOY, tasks,
                       CreditSettings(groups=2, continuations=0, exact=True, n_boot=50),
                       values_fn=lambda rb: np.full(len(rb.steps), 5.0))
    assert set(st.skipped) == {"empg"} and "ppo" in st.scores["a_star"]["rows"]
    # reference convention: A = s_i - V = R_tau - p [invalid] - 5
    rb = st.rollouts
    expected = np.where(rb.steps.success, 10.0, 0.0) - 0.1 * (~rb.steps.action_valid) - 5.0
    np.testing.assert_allclose(st.advantages["ppo"], expected)


# ------------------------------------------------------------------ command line and report
def test_g2po_credit_exact_on_the_toy_writes_its_record_and_report(tmp_path, capsys):
    from g2po_bench.cli import main

    out = tmp_path / "study"
    rc = main(["credit", "env.name=toy", "env.max_steps=6", "--policy", "toy-scripted", "--exact", "--groups", "2",
               "--continuations", "8", "--n-boot", "50", "--out", str(out)])
    assert rc == 0
    rec = json.loads((out / "credit.json").read_text())
    assert rec["kind"] == "credit" and rec["mode"] == "exact" and rec["settings"]["groups"] == 2
    assert rec["command"][:2] == ["g2po", "credit"]
    rows = row_dicts(rec)
    row = rows[0]
    assert {"task", "trajectory", "step", "state_key", "action", "a_star", "a_star_se", "advantages"} <= set(row)
    assert set(row["state_key"]) == {"raw", "reference"} and "g2po" in row["advantages"]
    assert rec["agreement"]["rows"] == len(rows)
    assert "has no model" in rec["gradient"]["note"] and rec["scores"]["a_star"]["gradient"] is None
    assert (out / "report.md").read_text().startswith("# Credit-assignment accuracy")
    assert (out / "figures" / "correlations.png").is_file() and (out / "figures" / "scatter.png").is_file()
    assert not (out / "config.yaml").exists()  # a credit folder is not a run folder
    # the suite report finds it (a folder without any training run)
    report = tmp_path / "report"
    assert main(["report", str(tmp_path), "--out", str(report), "--no-figures"]) == 0
    text = (report / "report.md").read_text()
    assert "## Credit-assignment accuracy" in text and "exact ground truth, ceiling 1" in text
    # bad arguments fail before any work, in one line
    assert main(["credit", "--exact", "--groups", "2"]) == 2
    assert "env.name=toy --policy toy-scripted" in capsys.readouterr().err


def _toy_monte_carlo_study():
    """A Monte-Carlo study of the scripted toy policy: 3 task groups, K = 8 (config, study)."""
    cfg = toy_cfg()
    tasks = choose_tasks(TOY.load_tasks(cfg.env, "train"), 3, 0)
    with EnvPool(get_benchmark("toy"), cfg.env, 2, max_episodes=0) as pool:
        st = run_study(cfg, ScriptedCorridorPolicy(), pool, TOY, tasks, CreditSettings(groups=3, continuations=8,
                                                                                         n_boot=100))
    return cfg, st


def test_a_monte_carlo_record_reports_its_ceiling_and_every_row(tmp_path):
    from g2po_bench.analysis.credit.record import read_record, study_record, write_record
    from g2po_bench.analysis.credit.report import ceiling_line, write_study_report

    cfg, st = _toy_monte_carlo_study()
    rec = study_record(st, cfg, policy={"kind": "scripted"}, command=["g2po", "credit"])
    write_record(tmp_path, rec)
    back = read_record(tmp_path)
    assert back["mode"] == "monte_carlo" and len(row_dicts(back)) == len(st.rollouts.steps)
    assert back["summary"]["continuation_episodes"] == len(st.rows.prefixes) * 8
    r = st.scores["a_star"]["ceiling"]["split_half"]["mean"]
    assert ceiling_line(back).startswith(f"split-half Spearman r = {r:.2f}")
    np.testing.assert_allclose([x["a_star"] for x in row_dicts(back)], st.truth.a_star)
    text = write_study_report(tmp_path, back, figures=False).read_text()
    for name in [v.name for v in st.variants] + ["oracle"]:
        assert f"| {name} |" in text
    with pytest.raises(ValueError, match="not a credit record"):
        (tmp_path / "x.json").write_text('{"kind": "evaluation"}')
        read_record(tmp_path / "x.json")


def test_studies_side_by_side_quote_each_record_and_the_report_finds_them(tmp_path):
    from g2po_bench.analysis.credit.record import study_record, write_record
    from g2po_bench.analysis.credit.report import credit_section, studies_table

    cfg, st = _toy_monte_carlo_study()
    rec = study_record(st, cfg, policy={"kind": "scripted"}, command=["g2po", "credit"])
    # the checkout a study started on is what its record names (the CLI reads it before the study)
    started = {"commit": "0" * 40, "dirty": False}
    assert study_record(st, cfg, policy={}, command=[], code=started)["code"] == started
    scores = rec["scores"]["a_star"]
    g2po, grpo = scores["rows"]["g2po"]["spearman"], scores["rows"]["grpo"]["spearman"]
    diff = next(d["spearman"] for d in scores["differences"] if (d["a"], d["b"]) == ("g2po", "grpo"))
    table = studies_table([("one", rec), ("two", rec)])
    line = next(x for x in table.splitlines() if x.startswith("| g2po |"))
    cell = f"{g2po['mean']:.2f} [{g2po['ci'][0]:.2f}, {g2po['ci'][1]:.2f}]; Δ {diff['mean']:+.2f}"
    assert line.count(cell) == 2
    assert next(x for x in table.splitlines() if x.startswith("| grpo |")).count("Δ") == 0  # not against itself
    ceiling = scores["ceiling"]["ceiling"]["mean"]
    assert table.splitlines()[-2].startswith(f"| reliability index sqrt(reliability) | {ceiling:.2f}")
    assert table.splitlines()[-1] == "| shared groups (every row defined) | 3 of 3 | 3 of 3 |"
    assert f"{grpo['mean']:.2f}" in table
    undefined = json.loads(json.dumps(rec))  # a study too small for any group to define the difference
    for d in undefined["scores"]["a_star"]["differences"]:
        d["spearman"].update(mean=None, ci=[None, None])
    assert "| g2po | " + f"{g2po['mean']:.2f}" in studies_table([("tiny", undefined)])
    assert "Δ n/a" in studies_table([("tiny", undefined)])
    for name in ("a", "b"):
        write_record(tmp_path / name, rec)
    lines, problems = credit_section(tmp_path, tmp_path / "report")
    assert not problems and "| row | `a` | `b` |" in "\n".join(lines)


def test_a_study_of_a_run_that_is_not_done_says_which_checkpoint_it_scores(tmp_path, capfd):
    """``g2po credit --run`` of a stopped run scores its latest checkpoint, and the log, credit.json
    and report.md say that the run is not done and which iteration the checkpoint is."""
    from g2po_bench.cli import main
    from g2po_bench.core.rundir import RunDir
    from g2po_bench.train import run_train

    toy = ["env.name=toy", "env.max_steps=4", "env.num_workers=1", "train.groups_per_batch=2", "train.group_size=2",
           "train.sft_epochs=1", "train.sft_batch_size=8", "train.max_response_tokens=8", "model.hidden_size=32",
           "model.intermediate_size=64", "model.num_heads=2", "model.vocab_size=300", "eval.num_tasks=2",
           "eval.every=0", "progress=false", f"train.warm_start_cache={tmp_path / 'ws'}"]
    run = run_train(load_config(None, [*toy, "train.iterations=1", "run_id=r", f"output_dir={tmp_path}"])).root
    RunDir(run).write_status("interrupted", 1, 5, error="SIGTERM")  # as a run stopped at iteration 1 of 5 says
    args = ["credit", "--run", str(run), "--groups", "2", "--continuations", "4", "--batch-groups", "2",
            "--n-boot", "100", "--no-figures"]
    assert main([*args, "--out", str(tmp_path / "study")]) == 0
    captured = capfd.readouterr()
    assert "warning: the run is interrupted, not done: the study scores its checkpoint of iteration 1 of 5" in \
        captured.out + captured.err
    rec = json.loads((tmp_path / "study" / "credit.json").read_text())
    assert (rec["policy"]["run_state"], rec["policy"]["checkpoint_iteration"], rec["policy"]["total_iterations"]) \
        == ("interrupted", 1, 5)
    report = (tmp_path / "study" / "report.md").read_text()
    assert "(checkpoint of iteration 1 of 5, **the run interrupted, not done**)" in report
    assert "- ppo: needs values" in report and "ppo: ppo:" not in report  # the row is named once


def test_sample_memo_fans_a_leader_call_out_and_answers_repeats_from_memory():
    """A leader call samples each leader's prompt once per seed of its continuations; later calls
    take those samples from memory; a fan-out whose leader call never came is dropped, so the next
    call is a plain one (a wave whose leaders' resets all ended the episode)."""
    from g2po_bench.analysis.credit.first_step import SampleMemo
    from g2po_bench.runtime.policy_protocol import Generation

    class Echo:
        def __init__(self):
            self.asked = []

        def generate(self, prompts, *, temperature, max_new_tokens, top_p=1.0, seed=None, seeds=None):
            self.asked += list(zip(prompts, seeds))
            return [Generation(text=f"{p}|{s}", prompt_ids=[], response_ids=[]) for p, s in zip(prompts, seeds)]

    inner = Echo()
    memo = SampleMemo(inner)
    sampling = {"temperature": 1.0, "max_new_tokens": 4}
    memo.fan_out([7, 8], [[70, 71, 72], [80]])
    lead = memo.generate(["b", "a"], seeds=[8, 7], **sampling)  # leaders are known by their seeds
    assert [g.text for g in lead] == ["b|80", "a|70"]
    assert [g.text for g in memo.fanned[0]] == ["a|70", "a|71", "a|72"] and [g.text for g in memo.fanned[1]] == ["b|80"]
    again = memo.generate(["a", "a", "c"], seeds=[71, 72, 5], **sampling)
    assert [g.text for g in again] == ["a|71", "a|72", "c|5"]
    assert inner.asked == [("b", 80), ("a", 70), ("a", 71), ("a", 72), ("c", 5)]  # a and b drawn once
    memo.fan_out([9], [[90]])
    memo.end_fan_out()
    assert [g.text for g in memo.generate(["d"], seeds=[3], **sampling)] == ["d|3"]
    memo.fan_out([9], [[90]])
    with pytest.raises(ValueError, match="fan_out did not name"):
        memo.generate(["d"], seeds=[4], **sampling)

