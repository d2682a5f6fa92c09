"""Bootstrap confidence intervals (g2po_bench/core/stats.py) on hand-computed cases."""

import math

import numpy as np
import pytest

from g2po_bench.core.stats import bootstrap_ci, paired_improvement_ci


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
