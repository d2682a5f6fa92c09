"""Hand-computed values of every estimator on small graphs (the equations of each estimator's
module docstring).

Every expected number is derived by hand in the comments (numpy is used only as a calculator
for the final arithmetic, never the implementation). Most tests use gamma = 0.5 and
``mode="mean_norm"`` so the numbers stay readable; the ``mean_std_norm`` variants divide the
same centred values by (unbiased std + 1e-6).
"""

from __future__ import annotations

import numpy as np
import pytest

from g2po_bench.algorithms import compute_advantages, estimate
from g2po_bench.algorithms.registry import estimator_spec
from g2po_bench.algorithms.synthetic import batch_from_trajectories

EPS = 1e-6
ATOL = 1e-9


def close(actual, expected, atol=ATOL):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected, dtype=float), rtol=0, atol=atol)


def zstd(values):
    """unbiased std + eps, the mean_std_norm denominator (a calculator, not the code under test)."""
    return np.std(np.asarray(values, dtype=float), ddof=1) + EPS


# --------------------------------------------------------------------------- fixtures
# Graph "XYZ" (one task group, gamma = 0.5, p = 0.1, success reward 10). Rows in this order:
#   X: s0 -> a -> (success)              rows X0, X1      rewards 0, 10
#   Y: s0 -> a -> b -> (truncated fail)  rows Y0, Y1, Y2  rewards 0; Y1 is an invalid action
#   Z: s0 -> b -> (success)              rows Z0, Z1      rewards 0, 10
XYZ = [
    {"keys": ["s0", "a"], "success": True},
    {"keys": ["s0", "a", "b"], "success": False, "invalid": [1]},
    {"keys": ["s0", "b"], "success": True},
]
# Episode scores s = R - p [invalid] = [10, 10, 0, -0.1, 0, 10, 10]; mean over the 7 step rows
# = 39.9 / 7 = 5.7 -> centred: [4.3, 4.3, -5.7, -5.8, -5.7, 4.3, 4.3].
XYZ_S = np.array([10, 10, 0, -0.1, 0, 10, 10])
XYZ_EP = np.array([4.3, 4.3, -5.7, -5.8, -5.7, 4.3, 4.3])

# G2PO on XYZ (gamma 0.5): per-visit v = 0.5^(T-t) R: X0 2.5, X1 5, Y* 0, Z0 2.5, Z1 5.
# V(s0) = (2.5 + 0 + 2.5)/3 = 5/3, V(a) = (5 + 0)/2 = 2.5, V(b) = (0 + 5)/2 = 2.5.
# successors: X0->a, X1->T+(10), Y0->a, Y1->b, Y2->T-(0), Z0->b, Z1->T+(10)
# x = V(succ) - p[inv] = [2.5, 10, 2.5, 2.4, 0, 2.5, 10]
# A_NC (visits): s0 {2.5, 2.5, 2.5} all equal -> 0; a {10, 2.4} mean 6.2 -> +3.8, -3.8;
#               b {0, 10} mean 5 -> -5, +5
XYZ_NC = np.array([0, 3.8, 0, -3.8, -5, 0, 5])
# delta = V(succ) - V(node) = [5/6, 7.5, 5/6, 0, -2.5, 5/6, 7.5], mean over the group 15/7
XYZ_DELTA = np.array([5 / 6, 7.5, 5 / 6, 0, -2.5, 5 / 6, 7.5])
XYZ_EC = XYZ_DELTA - 15 / 7


@pytest.fixture
def xyz():
    return batch_from_trajectories(XYZ)


# --------------------------------------------------------------------------- GRPO
def test_grpo_cross_steps_both_modes(xyz):
    close(compute_advantages("grpo", xyz, mode="mean_norm"), XYZ_EP)
    # unbiased std of s over the 7 rows: sum of squared deviations 4*4.3^2 + 2*5.7^2 + 5.8^2
    # = 73.96 + 64.98 + 33.64 = 172.58, var = 172.58 / 6
    std = np.sqrt(172.58 / 6)
    close(compute_advantages("grpo", xyz), XYZ_EP / (std + EPS))


def test_grpo_per_trajectory_statistic(xyz):
    # reference values: the step-0 scores of X, Y, Z = 10, 0, 10 -> mean 20/3,
    # std = sqrt(((10/3)^2 * 2 + (20/3)^2) / 2) = sqrt(100/3)
    centred = XYZ_S - 20 / 3
    close(compute_advantages("grpo", xyz, mode="mean_norm", episode_stat="trajectories"), centred)
    close(
        compute_advantages("grpo", xyz, episode_stat="trajectories"),
        centred / (np.sqrt(100 / 3) + EPS),
    )


def test_grpo_singleton_group_uses_mean0_std1():
    # a task group with a single row: mean 0, std 1 -> 10 / (1 + eps) and 10
    b = batch_from_trajectories([{"keys": [1], "success": True}])
    close(compute_advantages("grpo", b), [10 / (1 + EPS)])
    close(compute_advantages("grpo", b, mode="mean_norm"), [10.0])


def test_all_success_and_all_failure_groups_are_exactly_zero():
    b = batch_from_trajectories(
        [
            {"group": 0, "keys": [1], "success": True},
            {"group": 0, "keys": [1], "success": True},
            {"group": 0, "keys": [1], "success": True},
            {"group": 1, "keys": [1, 3, 4], "success": False},
            {"group": 1, "keys": [1, 2], "success": False},
        ]
    )
    # group 0: identical one-step successes (scores 10, G = 10, v = 9.5, delta = 10 - 9.5 for
    # all); group 1: all rewards 0, no invalid action. Every reference set is constant -> every
    # term is exactly 0 (no float noise; 0.95*10 summed three times is not exactly 3*9.5/3)
    for name in ("grpo", "gigpo", "g2po", "rloo"):
        for mode in ("mean_std_norm", "mean_norm"):
            adv = compute_advantages(name, b, mode=mode)
            assert np.all(adv == 0.0), (name, mode, adv)
    # multi-step all-success group: the episode term is exactly 0 (the step terms of G2PO
    # are not: delta differs between the steps)
    b2 = batch_from_trajectories([{"keys": [1, 2], "success": True}] * 2)
    assert np.all(compute_advantages("grpo", b2) == 0.0)
    assert np.all(compute_advantages("gigpo", b2) == 0.0)  # step groups {9.5, 9.5}, {10, 10}


def test_g2po_identical_successes_keep_the_edge_term():
    # 8 identical 3-step successes a -> b -> c -> success, gamma 0.95: V(a) = 10 g^3, V(b) = 10 g^2,
    # V(c) = 10 g, terminal 10; delta = 10 g^2 (1 - g), 10 g (1 - g), 10 (1 - g) = 0.45125, 0.475,
    # 0.5, standardized over the group's 24 rows (unbiased std). A_EP = A_NC = 0 (all equal).
    b = batch_from_trajectories([{"keys": ["a", "b", "c"], "success": True, "traj": i} for i in range(8)])
    res = estimate("g2po", b)
    delta = 10 * (1 - 0.95) * np.array([0.95**2, 0.95, 1.0])
    rows = np.tile(delta, 8)
    expected = (delta - rows.mean()) / (rows.std(ddof=1) + 1e-6)
    np.testing.assert_allclose(res.advantages[:3], expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.advantages[:3], [-1.1885, -0.0205, 1.2090], atol=1e-4)
    assert np.all(res.row_terms["a_ep"] == 0) and np.all(res.row_terms["a_nc"] == 0)
    assert not estimator_spec("g2po").zero_on_uniform_group  # the declaration says so


# --------------------------------------------------------------------------- RLOO
def test_rloo_leave_one_out_with_penalty():
    b = batch_from_trajectories(
        [
            {"keys": [1], "success": True},  # A: R = 10
            {"keys": [1, 2], "success": False, "invalid": [1]},  # B: R = 0, row B1 invalid
            {"keys": [3], "success": False},  # C: R = 0
            {"group": 1, "keys": [1, 2], "success": True, "invalid": [0]},  # lone trajectory
        ]
    )
    # A: 10 - (0+0)/2 = 10; B: 0 - (10+0)/2 = -5 and B1 -0.1 - 5 = -5.1; C: 0 - 5 = -5;
    # group 1 has a single trajectory -> 0 on every row, penalty included
    close(compute_advantages("rloo", b), [10, -5, -5.1, -5, 0, 0])
    # "steps" variant: rows s = [10, 0, -0.1, 0], n = 4, total 9.9, A = s - (9.9 - s)/3;
    # group 1 has two rows s = [9.9, 10] -> leave-one-row-out 9.9 - 10, 10 - 9.9
    close(
        compute_advantages("rloo", b, episode_stat="steps"),
        [10 + 0.1 / 3, -3.3, -0.1 - 10 / 3, -3.3, -0.1, 0.1],
    )


def test_rloo_all_equal_returns_keeps_only_the_penalty():
    b = batch_from_trajectories(
        [{"keys": [1, 2], "success": True, "invalid": [0]}, {"keys": [1], "success": True}]
    )
    # baseline = 10 exactly for both trajectories -> A = s - 10 = [-0.1, 0, 0]
    adv = compute_advantages("rloo", b)
    close(adv, [-0.1, 0, 0])
    assert adv[1] == 0.0 and adv[2] == 0.0


# --------------------------------------------------------------------------- GiGPO
def test_gigpo_hand_values(xyz):
    # step returns (gamma 0.5): X0 = 0.5*10 = 5, X1 = 10; Y = 0, 0, 0 then Y1 - 0.1 = -0.1;
    # Z0 = 5, Z1 = 10. Step groups: s0 {5, 0, 5} mean 10/3; a {10, -0.1} mean 4.95;
    # b {0, 10} mean 5
    a_s = np.array([5 / 3, 5.05, -10 / 3, -5.05, -5, 5 / 3, 5])
    close(compute_advantages("gigpo", xyz, gamma=0.5, mode="mean_norm"), XYZ_EP + a_s)
    # mean_std_norm: divide each centred value by (std of its step group + eps)
    d_s0, d_a, d_b = zstd([5, 0, 5]), zstd([10, -0.1]), zstd([0, 10])
    a_s_z = a_s / np.array([d_s0, d_a, d_s0, d_a, d_b, d_s0, d_b])
    ep_z = XYZ_EP / zstd(XYZ_S)
    close(compute_advantages("gigpo", xyz, gamma=0.5), ep_z + a_s_z)
    # omega = 0.5
    close(
        compute_advantages("gigpo", xyz, gamma=0.5, mode="mean_norm", step_weight=0.5),
        XYZ_EP + 0.5 * a_s,
    )


def test_gigpo_default_gamma_and_truncation():
    b = batch_from_trajectories(
        [{"keys": [0, 1], "success": True}, {"keys": [0, 1], "success": False}]
    )
    # G: success 0.95*10 = 9.5, 10; truncated failure 0, 0. Step groups {9.5, 0} and {10, 0}
    # -> +-4.75 and +-5; episode term +-5 (scores 10,10,0,0)
    close(compute_advantages("gigpo", b, mode="mean_norm"), [9.75, 10, -9.75, -10])


def test_gigpo_self_loop_revisit_is_one_step_group():
    # trajectory P stays in s0 for two steps (a self-loop), Q leaves at once
    b = batch_from_trajectories(
        [{"keys": [0, 0, 1], "success": True}, {"keys": [0, 1], "success": False}]
    )
    # G (gamma .5): P = [2.5, 5, 10], Q = [0, 0]. s0 {2.5, 5, 0} mean 2.5 -> 0, 2.5, -2.5;
    # node 1 {10, 0} -> 5, -5. Episode: scores 10,10,10,0,0 mean 6 -> 4, 4, 4, -6, -6
    close(
        compute_advantages("gigpo", b, gamma=0.5, mode="mean_norm"),
        [4 + 0, 4 + 2.5, 4 + 5, -6 - 2.5, -6 - 5],
    )


def test_gigpo_diagnostics(xyz):
    diag = estimate("gigpo", xyz, gamma=0.5, mode="mean_norm").diagnostics
    assert diag["singleton_frac"] == 0.0
    assert diag["node_size_mean"] == pytest.approx(7 / 3)
    assert diag["node_size_max"] == 3.0
    assert diag["nodes_per_group"] == 3.0
    # edges: s0->a, s0->b, a->T+, a->b, b->T-, b->T+
    assert diag["edges_per_group"] == 6.0
    # var(G) per step group: s0 25/3, a 10.1^2/2, b 50
    assert diag["node_return_var_mean"] == pytest.approx((25 / 3 + 10.1**2 / 2 + 50) / 3)
    assert diag["step_nonzero_frac"] == 1.0


def test_gigpo_similarity_grouping():
    b = batch_from_trajectories(
        [{"keys": [0, 1], "success": True}, {"keys": [2, 3], "success": False}]
    )
    texts = ["you are in the kitchen.", "you open the fridge 1.",
             "you are in the kitchen!", "you see nothing special here at all"]
    # rows 0 and 2 differ in one character out of 23 (ratio ~0.957) -> same step group at
    # threshold 0.95: G = 9.5 vs 0 -> +-4.75; rows 1 and 3 are singletons -> 0.
    # Episode term +-5.
    adv = compute_advantages("gigpo", b, mode="mean_norm", grouping="similarity", state_texts=texts)
    close(adv, [9.75, 5, -9.75, -5])
    # exact grouping on the (distinct) keys gives GRPO
    close(compute_advantages("gigpo", b, mode="mean_norm"), [5, 5, -5, -5])
    # at threshold 1.0 only identical texts group
    adv = compute_advantages("gigpo", b, mode="mean_norm", grouping="similarity",
                             state_texts=texts, similarity_threshold=1.0)
    close(adv, [5, 5, -5, -5])
    with pytest.raises(ValueError, match="state_texts"):
        compute_advantages("gigpo", b, grouping="similarity")
    with pytest.raises(ValueError, match="one string per row"):
        compute_advantages("gigpo", b, grouping="similarity", state_texts=texts[:3])


# --------------------------------------------------------------------------- G2PO
def test_g2po_reference_values_mean_norm(xyz):
    close(compute_advantages("g2po", xyz, gamma=0.5, mode="mean_norm"), XYZ_EP + XYZ_NC + XYZ_EC)


def test_g2po_reference_values_mean_std_norm(xyz):
    ep = XYZ_EP / zstd(XYZ_S)
    # NC: node a has x {10, 2.4}, node b {0, 10}; s0 is constant -> 0
    d_a, d_b = zstd([10, 2.4]), zstd([0, 10])
    nc = np.array([0, 3.8 / d_a, 0, -3.8 / d_a, -5 / d_b, 0, 5 / d_b])
    ec = XYZ_EC / zstd(XYZ_DELTA)
    close(compute_advantages("g2po", xyz, gamma=0.5), ep + nc + ec)


def test_g2po_default_gamma_and_truncated_failure():
    b = batch_from_trajectories(
        [{"keys": [0, 1], "success": True}, {"keys": [0, 1], "success": False}]
    )
    # v: A0 = 0.95^2*10 = 9.025, A1 = 9.5, B = 0 -> V(0) = 4.5125, V(1) = 4.75
    # x: A0 -> 4.75, B0 -> 4.75 (NC 0); A1 -> 10, B1 -> 0 (truncation: terminal 0) -> +-5
    # delta: 0.2375, 5.25, 0.2375, -4.75; mean 0.24375 -> EC -0.00625, 5.00625, -0.00625,
    # -4.99375; EP +-5
    close(
        compute_advantages("g2po", b, mode="mean_norm"),
        [5 - 0.00625, 5 + 5 + 5.00625, -5 - 0.00625, -5 - 5 - 4.99375],
    )


def test_g2po_self_loop_and_revisit():
    b = batch_from_trajectories(
        [{"keys": ["s0", "s0", "a"], "success": True}, {"keys": ["s0", "a"], "success": False}]
    )
    # P visits s0 twice (self-loop: P0's successor is s0 itself), Q once. gamma 0.5:
    # v: P0 = 0.5^3*10 = 1.25, P1 = 2.5, P2 = 5, Q = 0 -> V(s0) = 3.75/3 = 1.25, V(a) = 2.5
    # x: P0 -> s0: 1.25, P1 -> a: 2.5, P2 -> T+: 10, Q0 -> a: 2.5, Q1 -> T-: 0
    # NC: s0 {1.25, 2.5, 2.5} mean 25/12 -> -5/6, 5/12, 5/12; a {10, 0} -> 5, -5
    # delta: P0 0 (self-loop), P1 1.25, P2 7.5, Q0 1.25, Q1 -2.5; mean 1.5
    #   -> EC -1.5, -0.25, 6, -0.25, -4
    # EP: scores 10, 10, 10, 0, 0 mean 6 -> 4, 4, 4, -6, -6
    close(
        compute_advantages("g2po", b, gamma=0.5, mode="mean_norm"),
        [4 - 5 / 6 - 1.5, 4 + 5 / 12 - 0.25, 4 + 5 + 6, -6 + 5 / 12 - 0.25, -6 - 5 - 4],
    )


SINGLETONS = [
    {"keys": ["s0", "c"], "success": True},
    {"keys": ["s0", "d"], "success": False},
]


def test_g2po_singleton_nodes_and_diagnostics():
    b = batch_from_trajectories(SINGLETONS)
    # v: X0 2.5, X1 5, Y 0 -> V(s0) = 1.25, V(c) = 5, V(d) = 0
    # x: X0 -> c: 5, X1 -> T+: 10, Y0 -> d: 0, Y1 -> T-: 0
    # NC: s0 {5, 0} -> +2.5, -2.5; c and d are singleton nodes -> 0
    # delta: 3.75, 5, -1.25, 0; mean 1.875 -> EC 1.875, 3.125, -3.125, -1.875; EP +-5
    res = estimate("g2po", b, gamma=0.5, mode="mean_norm")
    close(res.advantages, [5 + 2.5 + 1.875, 5 + 0 + 3.125, -5 - 2.5 - 3.125, -5 + 0 - 1.875])
    d = res.diagnostics
    assert d["singleton_frac"] == 0.5  # rows X1, Y1 sit in singleton nodes
    assert d["node_size_mean"] == pytest.approx(4 / 3)
    assert d["node_size_max"] == 2.0
    assert d["nodes_per_group"] == 3.0
    assert d["edges_per_group"] == 4.0  # s0->c, c->T+, s0->d, d->T-
    assert d["node_return_var_mean"] == pytest.approx(3.125)  # var{2.5, 0}
    assert d["step_nonzero_frac"] == 1.0
    assert d["nc_nonzero_frac"] == 0.5
    # w = 0.5: A = EP + 0.5 (NC + EC)
    close(
        compute_advantages("g2po", b, gamma=0.5, mode="mean_norm", step_weight=0.5),
        [5 + 0.5 * 4.375, 5 + 0.5 * 3.125, -5 - 0.5 * 5.625, -5 - 0.5 * 1.875],
    )


def test_g2po_invalid_action_in_all_failure_group():
    b = batch_from_trajectories(
        [{"keys": [0, 1], "success": False, "invalid": [0]}, {"keys": [0, 1], "success": False}]
    )
    # all R = 0 -> every V = 0. EP: s = [-0.1, 0, 0, 0], mean -0.025 -> -0.075, 0.025 x3
    # NC: node 0 x {-0.1, 0} -> -0.05, +0.05; node 1 x {0, 0} -> 0. EC: all delta 0 -> 0
    close(compute_advantages("g2po", b, mode="mean_norm"), [-0.125, 0.025, 0.075, 0.025])
    ep_d = zstd([-0.1, 0, 0, 0])  # = 0.05 + eps
    nc_d = zstd([-0.1, 0])
    close(
        compute_advantages("g2po", b),
        [-0.075 / ep_d - 0.05 / nc_d, 0.025 / ep_d, 0.025 / ep_d + 0.05 / nc_d, 0.025 / ep_d],
    )


def test_g2po_no_aggregation(xyz):
    # per-trajectory values: cur = v_i, succ = v_{i+1} or the terminal value
    # x = [5, 10, 0, -0.1, 0, 5, 10] -> NC: s0 {5, 0, 5} mean 10/3; a {10, -0.1}; b {0, 10}
    nc = np.array([5 / 3, 5.05, -10 / 3, -5.05, -5, 5 / 3, 5])
    # delta = [2.5, 5, 0, 0, 0, 2.5, 5], mean 15/7
    ec = np.array([2.5, 5, 0, 0, 0, 2.5, 5]) - 15 / 7
    close(
        compute_advantages("g2po", xyz, gamma=0.5, mode="mean_norm", aggregation=False),
        XYZ_EP + nc + ec,
    )
    # the ladder step "ep+nc" is A_EP + A_NC without aggregation
    close(
        compute_advantages("g2po", xyz, gamma=0.5, mode="mean_norm", components="ep+nc"),
        XYZ_EP + nc,
    )


def test_g2po_components_ladder(xyz):
    kw = dict(gamma=0.5, mode="mean_norm")
    close(compute_advantages("g2po", xyz, components="ep", **kw), XYZ_EP)
    close(compute_advantages("g2po", xyz, components="ep+nc+agg", **kw), XYZ_EP + XYZ_NC)
    close(compute_advantages("g2po", xyz, components="full", **kw), XYZ_EP + XYZ_NC + XYZ_EC)
    # w = 0 is GRPO
    close(compute_advantages("g2po", xyz, step_weight=0.0, **kw), XYZ_EP)


def test_g2po_edge_norm_scope_node(xyz):
    # delta per node: s0 {5/6 x3} constant -> 0; a {7.5, 0} -> +-3.75; b {-2.5, 7.5} -> -5, 5
    ec = np.array([0, 3.75, 0, -3.75, -5, 0, 5])
    close(
        compute_advantages("g2po", xyz, gamma=0.5, mode="mean_norm", edge_norm_scope="node"),
        XYZ_EP + XYZ_NC + ec,
    )


def test_g2po_edge_norm_scope_batch():
    b = batch_from_trajectories(
        [dict(t, group=0) for t in XYZ] + [dict(t, group=1, traj=10 + i) for i, t in enumerate(SINGLETONS)]
    )
    # deltas: group 0 as XYZ (sum 15), group 1 [3.75, 5, -1.25, 0] (sum 7.5);
    # batch mean 22.5/11
    delta = np.concatenate([XYZ_DELTA, [3.75, 5, -1.25, 0]])
    ep = np.concatenate([XYZ_EP, [5, 5, -5, -5]])
    nc = np.concatenate([XYZ_NC, [2.5, 0, -2.5, 0]])
    close(
        compute_advantages("g2po", b, gamma=0.5, mode="mean_norm", edge_norm_scope="batch"),
        ep + nc + delta - 22.5 / 11,
    )
    # default (group scope) for comparison: each group centred on its own mean
    ec = np.concatenate([XYZ_EC, np.array([3.75, 5, -1.25, 0]) - 1.875])
    close(compute_advantages("g2po", b, gamma=0.5, mode="mean_norm"), ep + nc + ec)


def test_g2po_graph_scope_batch():
    b = batch_from_trajectories(
        [{"group": 0, "keys": [7], "success": True}, {"group": 1, "keys": [7], "success": False}]
    )
    # group scope: two single-row groups, singleton nodes -> A = EP = s (mean 0, std 1)
    close(compute_advantages("g2po", b, gamma=0.5, mode="mean_norm"), [10, 0])
    # batch scope: node 7 has visits v = 5, 0 (V = 2.5); x = 10, 0 -> NC +-5; EC per task
    # group is a singleton -> 0
    close(
        compute_advantages("g2po", b, gamma=0.5, mode="mean_norm", graph_scope="batch"), [15, -5]
    )
    # + edge normalization over the batch: delta = 10 - 2.5, 0 - 2.5 -> +-5
    close(
        compute_advantages(
            "g2po", b, gamma=0.5, mode="mean_norm", graph_scope="batch", edge_norm_scope="batch"
        ),
        [20, -10],
    )
    d = estimate("g2po", b, gamma=0.5, graph_scope="batch").diagnostics
    assert d["nodes_per_group"] == 1.0 and d["edges_per_group"] == 1.0


def test_g2po_successor_reference_set(xyz):
    # S(s0) = {a: 2.5, b: 2.5} constant -> 0; S(a) = {T+: 10, b: 2.5} mean 6.25 ->
    # X1 10 - 6.25 = 3.75, Y1 2.4 - 6.25 = -3.85; S(b) = {T-: 0, T+: 10} -> -5, 5
    nc = np.array([0, 3.75, 0, -3.85, -5, 0, 5])
    close(
        compute_advantages("g2po", xyz, gamma=0.5, mode="mean_norm", node_reference_set="successors"),
        XYZ_EP + nc + XYZ_EC,
    )


def test_g2po_successors_differ_from_visits():
    b = batch_from_trajectories(
        [
            {"keys": ["n", "m"], "success": True},
            {"keys": ["n", "m"], "success": True},
            {"keys": ["n", "q"], "success": False},
        ]
    )
    # v: K1, K2 = 2.5, 5; K3 = 0, 0 -> V(n) = 5/3, V(m) = 5, V(q) = 0
    # x at n: 5, 5, 0. visits: mean 10/3 -> 5/3, 5/3, -10/3.
    # successors S(n) = {m: 5, q: 0}: mean 2.5 -> 2.5, 2.5, -2.5 (std sqrt(12.5))
    # node m: x 10, 10 constant -> 0 (and |S(m)| = 1); q singleton -> 0.
    # EP: scores 10,10,10,10,0,0 mean 20/3 -> 10/3 x4, -20/3 x2
    ep = np.array([10 / 3, 10 / 3, 10 / 3, 10 / 3, -20 / 3, -20 / 3])
    kw = dict(gamma=0.5, mode="mean_norm", components="ep+nc+agg")
    close(compute_advantages("g2po", b, **kw), ep + [5 / 3, 0, 5 / 3, 0, -10 / 3, 0])
    close(
        compute_advantages("g2po", b, node_reference_set="successors", **kw),
        ep + [2.5, 0, 2.5, 0, -2.5, 0],
    )
    ep_z = (np.array([10, 10, 10, 10, 0, 0]) - 20 / 3) / zstd([10, 10, 10, 10, 0, 0])
    d = np.sqrt(12.5) + EPS
    close(
        compute_advantages("g2po", b, gamma=0.5, components="ep+nc+agg", node_reference_set="successors"),
        ep_z + [2.5 / d, 0, 2.5 / d, 0, -2.5 / d, 0],
    )


# --------------------------------------------------------------------------- PPO
PPO_TRAJ = [
    {"keys": [0, 1], "success": True},  # X: rewards 0, 10
    {"keys": [0, 2], "success": False, "invalid": [1]},  # Y: rewards 0, 0; Y1 invalid
]
PPO_VALUES = np.array([1.0, 2.0, 3.0, 4.0])  # V(X0), V(X1), V(Y0), V(Y1)


def test_ppo_reference_convention():
    b = batch_from_trajectories(PPO_TRAJ)
    res = estimate("ppo", b, values=PPO_VALUES)
    # returns = R - p[inv] = 10, 10, 0, -0.1; A = returns - V
    close(res.returns, [10, 10, 0, -0.1])
    close(res.advantages, [9, 8, -3, -4.1])


def test_ppo_turn_gae():
    b = batch_from_trajectories(PPO_TRAJ)
    res = estimate("ppo", b, values=PPO_VALUES, convention="turn_gae", gamma=0.5, lam=0.5)
    # X: delta1 = 10 + 0 - 2 = 8; delta0 = 0 + 0.5*2 - 1 = 0; A1 = 8, A0 = 0 + 0.25*8 = 2
    # Y: r1 = -0.1; delta1 = -0.1 - 4 = -4.1; delta0 = 0 + 0.5*4 - 3 = -1;
    #    A1 = -4.1, A0 = -1 + 0.25*(-4.1) = -2.025. returns = A + V
    close(res.advantages, [2, 8, -2.025, -4.1])
    close(res.returns, [3, 10, 0.975, -0.1])


def test_ppo_whiten_and_errors():
    b = batch_from_trajectories(PPO_TRAJ)
    adv = compute_advantages("ppo", b, values=PPO_VALUES, whiten=True)
    raw = np.array([9, 8, -3, -4.1])  # mean 2.475; unbiased var over the 4 rows
    var = ((raw - 2.475) ** 2).sum() / 3
    close(adv, (raw - 2.475) / np.sqrt(var + 1e-8))
    with pytest.raises(ValueError, match="critic values"):
        estimate("ppo", b)
    with pytest.raises(ValueError, match="shape"):
        estimate("ppo", b, values=np.zeros(3))
    with pytest.raises(ValueError, match="finite"):
        estimate("ppo", b, values=np.array([0.0, np.nan, 0.0, 0.0]))


# --------------------------------------------------------------------------- misc
def test_row_order_of_the_output_follows_the_batch(xyz):
    # reversing the rows reverses the advantages
    rev = xyz.take(np.arange(len(xyz))[::-1])
    for name in ("grpo", "rloo", "gigpo", "g2po"):
        close(compute_advantages(name, rev), compute_advantages(name, xyz)[::-1])
    close(
        compute_advantages("ppo", rev, values=np.arange(7.0)[::-1]),
        compute_advantages("ppo", xyz, values=np.arange(7.0))[::-1],
    )


def test_empty_batch():
    from g2po_bench.core.batch import StepBatch

    empty = StepBatch(**{k: np.zeros(0) for k in ("group_id", "traj_id", "step", "state_key")},
                      reward=np.zeros(0), success=np.zeros(0, bool), action_valid=np.zeros(0, bool))
    for name in ("grpo", "rloo", "gigpo", "g2po"):
        res = estimate(name, empty)
        assert res.advantages.shape == (0,) and res.advantages.dtype == np.float64
    assert estimate("ppo", empty, values=np.zeros(0)).returns.shape == (0,)
    assert estimate("gigpo", empty, grouping="similarity", state_texts=[]).advantages.shape == (0,)
