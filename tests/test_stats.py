"""The suite's bootstrap (g2po_bench/core/stats.py) on hand-computed cases: the stratified scheme
(rliable's, seeded; one task is the plain percentile bootstrap) and the two-level paired one."""

import math

import numpy as np
import pytest

from g2po_bench.core.stats import bootstrap_ci, paired_improvement_ci, stratified_bootstrap_ci


def test_constant_values_give_a_degenerate_interval():
    assert bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)
    assert bootstrap_ci([0, 0, 0, 0]) == (0.0, 0.0)


def test_two_values_cover_the_whole_range():
    # resampled means of [0, 1] are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4: the 2.5 % and
    # 97.5 % percentiles are 0 and 1
    lo, hi = bootstrap_ci([0.0, 1.0], n_boot=20_000, seed=3)
    assert (lo, hi) == (0.0, 1.0)


def test_interval_of_a_success_rate_matches_the_normal_approximation():
    # 30 successes in 100 episodes: p = 0.3, standard error sqrt(0.3 * 0.7 / 100) = 0.0458;
    # the percentile bootstrap interval is close to 0.3 -/+ 1.96 * 0.0458 = [0.210, 0.390]
    x = np.r_[np.ones(30), np.zeros(70)]
    lo, hi = bootstrap_ci(x, n_boot=20_000, seed=0)
    assert lo == pytest.approx(0.21, abs=0.015) and hi == pytest.approx(0.39, abs=0.015)


def test_fewer_than_two_values_and_bad_confidence():
    lo, hi = bootstrap_ci([0.5])
    assert math.isnan(lo) and math.isnan(hi)
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci([0, 1], confidence=1.5)


def test_paired_improvement_hand_cases():
    # every episode flips from failure to success: +1 with no uncertainty
    assert paired_improvement_ci(np.zeros((3, 4)), np.ones((3, 4))) == (1.0, 1.0, 1.0)
    # the same panel, same outcomes: 0 and a zero-width interval
    b = [[1, 0, 1, 0], [0, 0, 1, 1]]
    assert paired_improvement_ci(b, b) == (0.0, 0.0, 0.0)
    # one seed, differences [1, 0]: mean 0.5; resampled task means are 0, 0.5, 1 -> CI [0, 1]
    d, lo, hi = paired_improvement_ci([[0, 0]], [[1, 0]], n_boot=20_000, seed=1)
    assert (d, lo, hi) == (0.5, 0.0, 1.0)


def test_paired_improvement_is_tighter_than_unpaired_when_outcomes_are_correlated():
    rng = np.random.default_rng(0)
    before = (rng.random((3, 120)) < 0.3).astype(float)
    after = before.copy()
    after[:, :24] = 1.0  # the same tasks as before, plus 24 more solved per seed
    d, lo, hi = paired_improvement_ci(before, after, n_boot=5000, seed=0)
    assert d == pytest.approx((after - before).mean())
    assert lo > 0 and lo <= d <= hi


def test_paired_improvement_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="seeds, tasks"):
        paired_improvement_ci(np.zeros((2, 5)), np.zeros((2, 4)))
    with pytest.raises(ValueError, match="seeds, tasks"):
        paired_improvement_ci(np.zeros(5), np.zeros(5))


def _mean_of_all(r):
    return r.reshape(len(r), -1).mean(axis=1)


def test_stratified_bootstrap_resamples_runs_within_each_task():
    """rliable's scheme: for every resample and task, the runs are drawn with replacement from that
    task's column only (the draws of default_rng(seed), first matrix first)."""
    m = np.arange(12, dtype=float).reshape(4, 3) * np.array([1.0, 100.0, 10_000.0])
    seen = []
    lo, hi = stratified_bootstrap_ci(m, statistic=lambda r: seen.append(r.copy()) or _mean_of_all(r), n_boot=50,
                                     seed=3)
    (r,) = seen
    assert r.shape == (50, 4, 3)
    for task in range(3):  # each column keeps its own values: no run moves to another task
        assert set(np.unique(r[:, :, task])) <= set(m[:, task])
    idx = np.random.default_rng(3).integers(0, 4, size=(50, 4, 3))
    assert np.array_equal(r, m[idx, np.arange(3)])
    assert (lo, hi) == tuple(np.percentile(_mean_of_all(r), [2.5, 97.5]))


def test_stratified_bootstrap_hand_cases():
    assert stratified_bootstrap_ci(np.full((3, 6), 50.0), statistic=_mean_of_all) == (50.0, 50.0)
    # one task with runs [0, 1]: resampled means 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4
    assert stratified_bootstrap_ci(np.array([[0.0], [1.0]]), statistic=_mean_of_all, n_boot=20_000) == (0.0, 1.0)
    m = np.random.default_rng(0).normal(size=(3, 6))
    a = stratified_bootstrap_ci(m, statistic=_mean_of_all, n_boot=2000, seed=1)
    assert a == stratified_bootstrap_ci(m, statistic=_mean_of_all, n_boot=2000, seed=1)  # reproducible
    assert a != stratified_bootstrap_ci(m, statistic=_mean_of_all, n_boot=2000, seed=2)
    assert a[0] <= m.mean() <= a[1]
    assert all(math.isnan(v) for v in stratified_bootstrap_ci(m[:1], statistic=_mean_of_all))  # one run
    with pytest.raises(ValueError, match="runs, tasks"):
        stratified_bootstrap_ci(np.zeros(4), statistic=_mean_of_all)
    with pytest.raises(ValueError, match="confidence"):
        stratified_bootstrap_ci(m, statistic=_mean_of_all, confidence=0.0)


def test_stratified_bootstrap_of_a_vector_statistic_and_of_two_matrices():
    m = np.array([[0.0, 10.0], [20.0, 30.0], [40.0, 50.0]])
    lo, hi = stratified_bootstrap_ci(m, statistic=lambda r: np.stack([r.min(axis=(1, 2)), r.max(axis=(1, 2))], 1),
                                     n_boot=5000)
    assert lo.shape == hi.shape == (2,)
    assert lo[0] == 0.0 and hi[1] == 50.0  # min of the mins, max of the maxes: always reachable
    # two matrices, resampled independently: x always beats y by 100, whatever the draws
    x, y = m + 100.0, m[:2]
    lo, hi = stratified_bootstrap_ci(x, y, statistic=lambda a, b: a.min(axis=(1, 2)) - b.max(axis=(1, 2)), n_boot=500)
    assert lo >= 100.0 - 30.0 and hi <= 150.0
    assert all(math.isnan(v) for v in stratified_bootstrap_ci(x, y[:1], statistic=lambda a, b: a.mean()))


def test_the_plain_bootstrap_is_the_stratified_one_with_one_task():
    """One bootstrap in the suite: bootstrap_ci draws the same resamples as a one-column stratified bootstrap."""
    rng = np.random.default_rng(0)
    for n in (2, 5, 37):
        x = rng.normal(size=n)
        assert bootstrap_ci(x, n_boot=3000, seed=n) == stratified_bootstrap_ci(
            x[:, None], statistic=_mean_of_all, n_boot=3000, seed=n)
