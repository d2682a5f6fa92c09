"""Hand-computed values of the 2026 step-level estimators: CRBC, HGPO, GraphGPO, EMPG
(arXiv 2609.35082, 2602.22817, 2605.26684, 2509.09265; docs/estimators/).

Every expected number is derived by hand in the comments; numpy only evaluates the final
arithmetic (sqrt, exp), never the implementation. ``mode="mean_norm"`` keeps the episode term
readable: with rewards R_tau and no invalid action it is R_tau minus the mean over the task
group's step rows.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from g2po_bench.algorithms import estimate
from g2po_bench.algorithms.estimators.crbc import closure_values
from g2po_bench.algorithms.registry import check_options, estimator_defaults
from g2po_bench.algorithms.synthetic import (
    batch_from_trajectories,
    next_state_keys,
    random_step_batch,
    trajectory_next_keys,
)

EPS = 1e-6
ATOL = 1e-9
SQ2 = np.sqrt(2.0)


def close(actual, expected, atol=ATOL):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected, dtype=float), rtol=0, atol=atol)


# --------------------------------------------------------------------------- CRBC
# Graph "merge" (one task group; rows in this order; action texts in brackets):
#   X: s0 [a] -> s1 [c] -> z+        rows X0, X1   (success)
#   Y: s0 [b] -> s1 [e] -> z-        rows Y0, Y1   (failure)
#   Z: s0 [b] -> s2 [d] -> z-        rows Z0, Z1   (failure)
MERGE = [
    {"keys": ["s0", "s1"], "success": True},
    {"keys": ["s0", "s1"], "success": False},
    {"keys": ["s0", "s2"], "success": False},
]
MERGE_ACTIONS = ["a", "c", "b", "e", "b", "d"]
# Counts: N(s0) = 3: (s0,a) 1 -> s1; (s0,b) 2 -> s1 once, s2 once. N(s1) = 2: (s1,c) -> z+,
# (s1,e) -> z-. N(s2) = 1: (s2,d) -> z-.
# Closure (b = beta): V(s1) = b * 1/2 (half of its transitions reach z+); V(s2) = 0;
#   V(s0) = b (2/3 V(s1) + 1/3 V(s2)) = b^2 / 3.
#   Q(s0,a) = b V(s1) = b^2/2;  Q(s0,b) = b (1/2 V(s1) + 1/2 V(s2)) = b^2/4
#   A(s0,a) = b^2/2 - b^2/3 = b^2/6;  A(s0,b) = b^2/4 - b^2/3 = -b^2/12
#     (centred: 1/3 b^2/6 - 2/3 b^2/12 = 0)
#   sigma(s0) = sqrt(1/3 (b^2/6)^2 + 2/3 (b^2/12)^2) = b^2 sqrt(1/108 + 1/216) = b^2 / (6 sqrt 2)
#     = 0.9604 / 8.485 = 0.1132 > sigma_min = 0.1 at b = 0.98, so
#   A_S(s0,a) = (b^2/6) / (b^2/(6 sqrt2)) = sqrt 2;   A_S(s0,b) = -(b^2/12) / (b^2/(6 sqrt2)) = -sqrt2/2
#   Q(s1,c) = b, Q(s1,e) = 0, V(s1) = b/2: A = +-b/2, sigma(s1) = b/2 -> A_S = +-1
#   s2 has one action -> A_S = 0.
# Episode term (mean_norm): R = 10, 10, 0, 0, 0, 0, mean 10/3 -> 20/3, 20/3, -10/3 x 4.
MERGE_EP = np.array([20 / 3, 20 / 3, -10 / 3, -10 / 3, -10 / 3, -10 / 3])


def test_crbc_closure_hand_values():
    b = batch_from_trajectories(MERGE)
    res = estimate("crbc", b, mode="mean_norm", inputs={"action_texts": MERGE_ACTIONS})
    a_s = np.array([SQ2, 1.0, -SQ2 / 2, -1.0, -SQ2 / 2, 0.0])
    close(res.row_terms["a_s"], a_s)
    close(res.advantages, MERGE_EP + 5.0 * a_s)  # (w_G, w_S) = (1, 5)
    beta = 0.98
    close(res.row_terms["node_value"], [beta**2 / 3, beta / 2, beta**2 / 3, beta / 2, beta**2 / 3, 0.0])
    close(res.row_terms["q_value"], [beta**2 / 2, beta, beta**2 / 4, 0.0, beta**2 / 4, 0.0])
    # every occurrence of the same (anchor, action) gets the same credit: Y0 and Z0 are (s0, b)
    assert res.row_terms["a_s"][2] == res.row_terms["a_s"][4]
    # weights: (w_G, w_S) = (0, 1) leaves A_S alone; (1, 0) leaves the GRPO term
    close(estimate("crbc", b, mode="mean_norm", group_weight=0.0, state_weight=1.0,
                   inputs={"action_texts": MERGE_ACTIONS}).advantages, a_s)
    close(estimate("crbc", b, mode="mean_norm", state_weight=0.0,
                   inputs={"action_texts": MERGE_ACTIONS}).advantages,
          estimate("grpo", b, mode="mean_norm").advantages)


def test_crbc_sigma_min_and_closure_depth():
    b = batch_from_trajectories(MERGE)
    beta = 0.98
    opts = dict(mode="mean_norm", group_weight=0.0, state_weight=1.0, sigma_min=1.0,
                inputs={"action_texts": MERGE_ACTIONS})
    # sigma_min = 1 exceeds every sigma (0.113 at s0, 0.49 at s1): A_S = A_inf itself
    close(estimate("crbc", b, **opts).advantages,
          [beta**2 / 6, beta / 2, -beta**2 / 12, -beta / 2, -beta**2 / 12, 0.0])
    # K = 0 (local averaging): G = b^(T-t) * 1[success]: X0 b^2, X1 b, the rest 0.
    #   Q0(s0,a) = b^2, Q0(s0,b) = 0, V0(s0) = b^2/3 -> A = 2b^2/3, -b^2/3;
    #   Q0(s1,c) = b, Q0(s1,e) = 0, V0(s1) = b/2 -> A = +-b/2. (The closure credits b for
    #   reaching s1, which can still succeed; the local average does not.)
    close(estimate("crbc", b, closure_depth=0, **opts).advantages,
          [2 * beta**2 / 3, beta / 2, -beta**2 / 3, -beta / 2, -beta**2 / 3, 0.0])
    # K = 1: Q1 = B V0: Q1(s0,a) = b V0(s1) = b^2/2, Q1(s0,b) = b (V0(s1) + V0(s2))/2 = b^2/4,
    #   V1(s0) = 1/3 b^2/2 + 2/3 b^2/4 = b^2/3: the closure's values (the graph is two steps deep)
    close(estimate("crbc", b, closure_depth=1, **opts).advantages,
          estimate("crbc", b, **opts).advantages)
    for bad in (-1, "infinite", 1.5, True):
        with pytest.raises(ValueError, match="closure_depth"):
            check_options("crbc", {"closure_depth": bad})
    check_options("crbc", {"closure_depth": 3})
    check_options("crbc", {"closure_depth": "inf"})


# Graph "loop": the closure needs the solve (a self-loop, ALFWorld's "Nothing happens").
#   X: s0 [look] -> s0 [go] -> z+     rows X0, X1   (success)
#   Y: s0 [go] -> z-                   row Y0        (failure)
# N(s0) = 3: look 1 -> s0; go 2 -> z+ once, z- once.
# V = b (1/3 V + 1/3 * 1 + 1/3 * 0)  ->  V (1 - b/3) = b/3  ->  V = b / (3 - b)
# Q(look) = b V = b^2/(3 - b);  Q(go) = b (1/2 * 1 + 1/2 * 0) = b/2
# A(look) = b(b - 1)/(3 - b) = -c,  A(go) = b(1 - b)/(2 (3 - b)) = c/2,  c = b(1 - b)/(3 - b)
# sigma = sqrt(1/3 c^2 + 2/3 c^2/4) = c / sqrt 2 = 0.00686 < sigma_min 0.1 -> A_S = A / 0.1
LOOP = [{"keys": ["s0", "s0"], "success": True}, {"keys": ["s0"], "success": False}]
LOOP_ACTIONS = ["look", "go", "go"]


def test_crbc_solve_with_a_self_loop():
    b = batch_from_trajectories(LOOP)
    beta = 0.98
    c = beta * (1 - beta) / (3 - beta)  # 0.0097030
    res = estimate("crbc", b, mode="mean_norm", inputs={"action_texts": LOOP_ACTIONS})
    close(res.row_terms["node_value"], [beta / (3 - beta)] * 3)
    a_s = np.array([-c / 0.1, c / 2 / 0.1, c / 2 / 0.1])
    # episode term: R = 10, 10, 0, mean 20/3 -> 10/3, 10/3, -20/3
    close(res.advantages, np.array([10 / 3, 10 / 3, -20 / 3]) + 5.0 * a_s)
    # beta = 1: V = 1/2, Q(look) = 1/2, Q(go) = 1/2: no action is better, A_S = 0 (and the
    # system I - M is still solvable: every anchor reaches a terminal node)
    res1 = estimate("crbc", b, beta=1.0, inputs={"action_texts": LOOP_ACTIONS})
    close(res1.row_terms["a_s"], [0.0, 0.0, 0.0])
    close(res1.row_terms["node_value"], [0.5, 0.5, 0.5])


def test_crbc_closure_equals_a_dense_solve_on_random_groups():
    """The batch's one sparse solve against numpy.linalg.solve of each group's dense system
    (I - beta M) V = b, built here from counts with loops."""
    from g2po_bench.algorithms._graph import successor_ids
    from g2po_bench.algorithms._prep import prepare
    from g2po_bench.algorithms.normalize import factorize, factorize_pairs

    rng = np.random.default_rng(0)
    for trial in range(5):
        batch = random_step_batch(rng, num_groups=6, group_size=8, max_steps=12, num_states=7,
                                  p_self_loop=0.3, shuffle=True)
        beta = [0.9, 0.95, 0.98, 0.99, 1.0][trial]
        prep = prepare(batch)
        kid, nk = factorize(prep.state_key)
        node, num_nodes = factorize_pairs(prep.group, prep.num_groups, kid, nk)
        succ = successor_ids(prep, node, num_nodes)
        fast = closure_values(node, succ, num_nodes, beta)
        node_group = np.zeros(num_nodes, dtype=np.int64)
        node_group[node] = prep.group
        for g in range(prep.num_groups):
            members = np.flatnonzero(node_group == g)
            index = {int(s): j for j, s in enumerate(members)}
            mat = np.eye(len(members))
            rhs = np.zeros(len(members))
            for i in np.flatnonzero(prep.group == g):
                s, x = int(node[i]), int(succ[i])
                n_s = np.count_nonzero(node == s)
                if x == num_nodes:  # z+
                    rhs[index[s]] += beta / n_s
                elif x < num_nodes:
                    mat[index[s], index[x]] -= beta / n_s
            np.testing.assert_allclose(fast[members], np.linalg.solve(mat, rhs), rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------- HGPO
# One task group, gamma = 0.5, p = 0.1, mode mean_norm, K = history_depth = 1 (windows of 1
# and 2 anchors). Rows:
#   X: s0 -> s1 (success)   R_t: X0 = 0.5 * 10 = 5, X1 = 10
#   Y: s0 -> s1 (failure; Y1 invalid)   Y0 = 0, Y1 = 0 - 0.1 = -0.1
#   Z: s2 -> s1 (success)   Z0 = 5, Z1 = 10
HG = [
    {"keys": ["s0", "s1"], "success": True},
    {"keys": ["s0", "s1"], "success": False, "invalid": [1]},
    {"keys": ["s2", "s1"], "success": True},
]
# Level k = 1 (the anchor): s0 {X0 5, Y0 0} mean 2.5 -> +2.5, -2.5; s1 {10, -0.1, 10} mean
#   19.9/3 -> X1 = Z1 = 10.1/3, Y1 = -20.2/3; s2 {Z0} a singleton: no item.
# Level k = 2 (windows (s_{t-1}, s_t), rows with t >= 1): (s0,s1) {X1 10, Y1 -0.1} mean 4.95 ->
#   +5.05, -5.05; (s2,s1) {Z1} a singleton: no item.
# Code weights u_k = (k+1)^1: u_1 = 2, u_2 = 3, normalised over the row's items (+1e-6).
HG_CODE = [
    2 * 2.5 / (2 + 1e-6),                                   # X0: k=1 only
    (2 * 10.1 / 3 + 3 * 5.05) / (5 + 1e-6),                 # X1: k=1 and k=2
    2 * -2.5 / (2 + 1e-6),                                  # Y0
    (2 * -20.2 / 3 + 3 * -5.05) / (5 + 1e-6),               # Y1
    0.0,                                                    # Z0: no item
    2 * 10.1 / 3 / (2 + 1e-6),                              # Z1: k=1 only
]


def test_hgpo_code_weights_hand_values():
    b = batch_from_trajectories(HG)
    res = estimate("hgpo", b, mode="mean_norm", gamma=0.5, history_depth=1)
    close(res.advantages, HG_CODE)
    close(res.row_terms["a_level_1"], [2.5, 10.1 / 3, -2.5, -20.2 / 3, 0.0, 10.1 / 3])
    close(res.row_terms["a_level_2"], [0.0, 5.05, 0.0, -5.05, 0.0, 0.0])


def test_hgpo_paper_weights_depth_and_episode_item():
    b = batch_from_trajectories(HG)
    # the paper's indexing: u = (shared history steps + 1)^alpha = k^alpha: u_1 = 1, u_2 = 2
    close(estimate("hgpo", b, mode="mean_norm", gamma=0.5, history_depth=1, weight_index="paper").advantages,
          [2.5 / (1 + 1e-6), (10.1 / 3 + 2 * 5.05) / (3 + 1e-6), -2.5 / (1 + 1e-6),
           (-20.2 / 3 + 2 * -5.05) / (3 + 1e-6), 0.0, 10.1 / 3 / (1 + 1e-6)])
    # alpha = 2: u_1 = 4, u_2 = 9
    close(estimate("hgpo", b, mode="mean_norm", gamma=0.5, history_depth=1, alpha=2.0).advantages[1],
          (4 * 10.1 / 3 + 9 * 5.05) / (13 + 1e-6))
    # K = 0: the anchor level only, so every row with an item gets exactly a_1 (u_1 / (u_1 + 1e-6))
    close(estimate("hgpo", b, mode="mean_norm", gamma=0.5, history_depth=0).advantages,
          np.array([2.5, 10.1 / 3, -2.5, -20.2 / 3, 0.0, 10.1 / 3]) * 2 / (2 + 1e-6))
    # the episode item at k = 0 with raw weight 1: A_EP (mean_norm) of s = 10, 10, 0, -0.1,
    # 10, 10 (mean 39.9/6 = 6.65): 3.35, 3.35, -6.65, -6.75, 3.35, 3.35
    ep = [3.35, 3.35, -6.65, -6.75, 3.35, 3.35]
    res = estimate("hgpo", b, mode="mean_norm", gamma=0.5, history_depth=1, episode_term=True)
    close(res.advantages, [
        (ep[0] + 2 * 2.5) / (3 + 1e-6),
        (ep[1] + 2 * 10.1 / 3 + 3 * 5.05) / (6 + 1e-6),
        (ep[2] + 2 * -2.5) / (3 + 1e-6),
        (ep[3] + 2 * -20.2 / 3 + 3 * -5.05) / (6 + 1e-6),
        ep[4] / (1 + 1e-6),
        (ep[5] + 2 * 10.1 / 3) / (3 + 1e-6),
    ])


def test_hgpo_uses_the_population_std():
    b = batch_from_trajectories(HG)
    # s0 {5, 0}: population std 2.5 (the unbiased one would be 3.54): a = +-2.5 / (2.5 + eps)
    adv = estimate("hgpo", b, gamma=0.5, history_depth=0).advantages
    close(adv[[0, 2]], np.array([1, -1]) * 2.5 / (2.5 + EPS) * 2 / (2 + 1e-6))
    # s1 {10, -0.1, 10}: mean 6.6333, population std = sqrt((2 (10.1/3)^2 + (20.2/3)^2) / 3)
    std = np.sqrt((2 * (10.1 / 3) ** 2 + (20.2 / 3) ** 2) / 3)
    close(adv[1], (10.1 / 3) / (std + EPS) * 2 / (2 + 1e-6))


def test_hgpo_longer_windows_follow_the_trajectory():
    # two rollouts reach s2 through different pasts: the level-2 windows (s0,s2) and (s1,s2)
    # differ, so only the anchor level pools them; level 3 needs t >= 2
    b = batch_from_trajectories([
        {"keys": ["s0", "s2", "s3"], "success": True},     # R (gamma 0.5): 2.5, 5, 10
        {"keys": ["s1", "s2", "s3"], "success": False},    # 0, 0, 0
    ])
    res = estimate("hgpo", b, mode="mean_norm", gamma=0.5, history_depth=2)
    # level 1: s0, s1 singletons; s2 {5, 0} -> +-2.5; s3 {10, 0} -> +-5
    close(res.row_terms["a_level_1"], [0, 2.5, 5, 0, -2.5, -5])
    # level 2: windows (s0,s2), (s2,s3) | (s1,s2), (s2,s3): (s2,s3) {10, 0} -> +-5
    close(res.row_terms["a_level_2"], [0, 0, 5, 0, 0, -5])
    # level 3: (s0,s2,s3) vs (s1,s2,s3): singletons
    close(res.row_terms["a_level_3"], [0] * 6)
    close(res.advantages, [0, 2.5 * 2 / (2 + 1e-6), (2 * 5 + 3 * 5) / (5 + 1e-6),
                           0, -2.5 * 2 / (2 + 1e-6), -(2 * 5 + 3 * 5) / (5 + 1e-6)])


# --------------------------------------------------------------------------- GraphGPO
# Group 0 (gamma_d = 0.5, success reward 10, p = 0.1, normalization mean_norm):
#   X: s0 -> s1 -> s2 -> success             rows X0 X1 X2
#   Y: s0 -> s3 -> (end of a failure)        rows Y0 Y1
#   Z: s0 -> s1 -> s3 -> (end of a failure)  rows Z0 Z1 Z2; Z0 is invalid
# Reverse BFS from "success": d(s2) = 1, d(s1) = 2, d(s0) = 3; s3 only leads to the ends of
# failures: unreachable -> largest finite (3) + 1 = 4; the ends of failures also 4.
# Group 1 (no success): d = 1 for every node.
#   U: t0 -> t1 (failure)   rows U0 U1;   W: t0 (failure; W0 invalid)   row W0
GRAPH = [
    {"keys": ["s0", "s1", "s2"], "success": True},
    {"keys": ["s0", "s3"], "success": False},
    {"keys": ["s0", "s1", "s3"], "success": False, "invalid": [0]},
    {"group": 1, "keys": ["t0", "t1"], "success": False},
    {"group": 1, "keys": ["t0"], "success": False, "invalid": [0]},
]


def graphgpo(trajectories, **options):
    """GraphGPO on readable trajectories, each ending where its ``"end"`` key says (default: an
    observation seen nowhere else)."""
    b = batch_from_trajectories(trajectories)
    return estimate("graphgpo", b, inputs={"next_state_key": trajectory_next_keys(trajectories)}, **options)


def test_graphgpo_absolute_distance_hand_values():
    res = graphgpo(GRAPH, distance_gamma=0.5, normalization="mean_norm")
    close(res.row_terms["distance"], [3, 2, 1, 3, 4, 3, 2, 4, 1, 1, 1])
    close(res.row_terms["next_distance"], [2, 1, 0, 4, 4, 2, 4, 4, 1, 1, 1])
    # R = 10 * 0.5^d(next) - 0.1 [invalid]:
    #   X 2.5, 5, 10 | Y 0.625, 0.625 | Z 2.5 - 0.1 = 2.4, 0.625, 0.625 | U 5, 5 | W 4.9
    close(res.row_terms["step_return"], [2.5, 5, 10, 0.625, 0.625, 2.4, 0.625, 0.625, 5, 5, 4.9])
    # A_S within anchors: s0 {2.5, 0.625, 2.4} mean 1.841667 -> 0.658333, -1.216667, 0.558333;
    #   s1 {5, 0.625} mean 2.8125 -> +-2.1875; s2 singleton 0; s3 {0.625, 0.625} equal -> 0;
    #   t0 {5, 4.9} mean 4.95 -> +-0.05; t1 singleton 0
    m0 = (2.5 + 0.625 + 2.4) / 3
    a_s = [2.5 - m0, 2.1875, 0, 0.625 - m0, 0, 2.4 - m0, -2.1875, 0, 0.05, 0, -0.05]
    close(res.row_terms["a_s"], a_s)
    # A_EP (mean_norm): group 0 s = 10 x3, 0 x2, -0.1, 0, 0 (mean 29.9/8 = 3.7375);
    #   group 1 s = 0, 0, -0.1 (mean -0.1/3)
    ep = [6.2625] * 3 + [-3.7375] * 2 + [-3.8375, -3.7375, -3.7375] + [0.1 / 3, 0.1 / 3, -0.2 / 3]
    close(res.advantages, np.array(ep) + np.array(a_s))


def test_graphgpo_relative_distance_and_defaults():
    res = graphgpo(GRAPH, distance_gamma=0.5, normalization="mean_norm", distance="relative")
    # exponent d(next) - d(anchor) + 1: X 0, 0, 0 | Y 2, 1 | Z 0, 3, 1 | U 1, 1 | W 1
    close(res.row_terms["step_return"], [10, 10, 10, 2.5, 5, 9.9, 1.25, 5, 5, 5, 4.9])
    # s0 {10, 2.5, 9.9} mean 22.4/3; s1 {10, 1.25} mean 5.625; s3 {5, 5} -> 0; t0 {5, 4.9}
    m0 = 22.4 / 3
    close(res.row_terms["a_s"], [10 - m0, 4.375, 0, 2.5 - m0, 0, 9.9 - m0, -4.375, 0, 0.05, 0, -0.05])
    # defaults: gamma_d 0.1 (ALFWorld), 0.2 on WebShop; mean_std_norm whatever algorithm.mode says
    assert estimator_defaults("graphgpo")["distance_gamma"] == 0.1
    assert estimator_defaults("graphgpo", env="webshop")["distance_gamma"] == 0.2
    from g2po_bench.algorithms.registry import run_estimator_options as trainer_options

    algo = SimpleNamespace(name="graphgpo", mode="mean_norm", gamma=0.95, step_weight=1.0,
                           invalid_penalty=0.1, success_reward=10.0, options={})
    assert trainer_options(SimpleNamespace(algorithm=algo, env=SimpleNamespace(name="webshop")))["distance_gamma"] == 0.2
    # on ALFWorld nothing is passed: the estimator's own default (0.1) applies
    assert "distance_gamma" not in trainer_options(SimpleNamespace(algorithm=algo, env=SimpleNamespace(name="alfworld")))
    algo.options = {"distance_gamma": 0.3}  # an explicit option wins
    assert trainer_options(SimpleNamespace(algorithm=algo, env=SimpleNamespace(name="webshop")))["distance_gamma"] == 0.3
    # the common mode is not read: mean_norm there changes nothing
    close(graphgpo(GRAPH, mode="mean_norm").advantages, graphgpo(GRAPH).advantages)


def test_graphgpo_a_failed_episode_ends_at_its_real_last_observation():
    # The recipe's minimal case: A goes s0 -> s1 -> success; B takes the same first step and is
    # cut off at the step limit, so its last observation is s1, A's anchor. gamma_d = 0.1.
    # d(success) 0, d(s1) 1, d(s0) 2. R: A0 = 10 * 0.1^1 = 1, A1 = 10, B0 = 10 * 0.1^d(s1) = 1.
    # A_S: s0 {1, 1} equal -> 0; s1 singleton -> 0. A_EP (steps: 10, 10, 0; unbiased std
    # sqrt(100/3)): B0 = (0 - 20/3) / (10/sqrt(3) + 1e-6) = -1.1547; mean_norm: -20/3.
    minimal = [{"keys": ["s0", "s1"], "success": True}, {"keys": ["s0"], "success": False, "end": "s1"}]
    res = graphgpo(minimal)
    close(res.row_terms["next_distance"], [1, 0, 1])
    close(res.advantages[2], -(20 / 3) / (10 / np.sqrt(3) + 1e-6))
    assert res.advantages[2] == pytest.approx(-1.1547, abs=1e-4)
    close(graphgpo(minimal, normalization="mean_norm").advantages[2], -20 / 3)
    # read as a dead end (an observation seen nowhere else) B0 leads to d = 3: R = 0.01, and
    # A_S(s0): {1, 0.01}, B0 = -0.495 / (0.99 / sqrt(2) + 1e-6) = -0.7071 -> -1.8618, what the
    # suite gave before the input existed
    dead_end = graphgpo([minimal[0], {"keys": ["s0"], "success": False}])
    close(dead_end.advantages[2], -(20 / 3) / (10 / np.sqrt(3) + 1e-6) - 0.495 / (0.99 / np.sqrt(2) + 1e-6))
    assert dead_end.advantages[2] == pytest.approx(-1.8618, abs=1e-4)
    # a failure that ends where a success started gives the end that node's distance, and the
    # node's own edges are unchanged: GRAPH with Y ending at s2 (d = 1) instead of a dead end
    ends_at_s2 = [dict(t) for t in GRAPH]
    ends_at_s2[1]["end"] = "s2"
    res = graphgpo(ends_at_s2, distance_gamma=0.5, normalization="mean_norm")
    # s3 -> s2 is an edge now: d(s3) = 2; Z's end (unseen) stays unreachable: largest (3) + 1
    close(res.row_terms["distance"], [3, 2, 1, 3, 2, 3, 2, 2, 1, 1, 1])
    close(res.row_terms["next_distance"], [2, 1, 0, 2, 1, 2, 2, 4, 1, 1, 1])


def test_graphgpo_refuses_next_keys_of_another_rule():
    b = batch_from_trajectories(GRAPH)
    nxt = trajectory_next_keys(GRAPH)
    nxt[0] += 1  # X0 does not lead to X1's anchor
    with pytest.raises(ValueError, match="next_state_key of step 0 of trajectory 0 differs from the state_key "
                                         "of its step 1"):
        estimate("graphgpo", b, inputs={"next_state_key": nxt})
    with pytest.raises(ValueError, match="estimator 'graphgpo' needs input 'next_state_key'"):
        estimate("graphgpo", b)


def _recipe_graphgpo(batch, next_key, gamma_d=0.1, p=0.1, eps=1e-6):
    """GraphGPO as the authors' recipe computes it, written independently of the suite with
    networkx: per task group a multigraph of anchor -> next-observation edges ("success" after
    a success's last step), distances to "success" on unit weights, unreachable nodes at the
    largest finite distance + 1 (every node at 1 without a success), R = 10 gamma^d(next) - p
    [invalid], GiGPO's step normalization within equal anchors and GRPO's episode term
    (mean_std_norm over the group's steps)."""
    import networkx as nx

    n = len(batch)
    adv = np.zeros(n)
    for g in np.unique(batch.group_id):
        rows = np.flatnonzero(batch.group_id == g)
        rows = rows[np.lexsort((batch.step[rows], batch.traj_id[rows]))]
        graph = nx.MultiDiGraph()
        target = {}
        for k, i in enumerate(rows):
            last = k + 1 == len(rows) or batch.traj_id[rows[k + 1]] != batch.traj_id[i]
            target[i] = "success" if last and batch.success[i] else int(next_key[i])
            graph.add_edge(int(batch.state_key[i]), target[i])
        dist = (nx.single_source_shortest_path_length(graph.reverse(), "success")
                if "success" in graph else {})
        finite = max(dist.values(), default=0)

        def d(node, dist=dist, finite=finite):
            return dist.get(node, finite + 1) if dist else 1

        ret = {i: 10 * gamma_d ** d(target[i]) - p * (not batch.action_valid[i]) for i in rows}
        episode = np.array([10.0 * batch.success[i] - p * (not batch.action_valid[i]) for i in rows])
        ep = (episode - episode.mean()) / ((episode.std(ddof=1) if len(rows) > 1 else 1.0) + eps)
        for k, i in enumerate(rows):
            same = [j for j in rows if batch.state_key[j] == batch.state_key[i]]
            vals = np.array([ret[j] for j in same])
            step = 0.0 if len(same) < 2 else (ret[i] - vals.mean()) / (vals.std(ddof=1) + eps)
            adv[i] = ep[k] + step
    return adv


def test_graphgpo_equals_the_recipe_on_random_groups():
    rng = np.random.default_rng(7)
    differs_from_dead_ends = 0
    for _ in range(60):
        b = random_step_batch(rng, num_groups=3, group_size=4, max_steps=5, num_states=4)
        nxt = next_state_keys(b, rng)
        res = estimate("graphgpo", b, inputs={"next_state_key": nxt})
        close(res.advantages, _recipe_graphgpo(b, nxt))
        unseen = nxt.copy()
        unseen[np.isin(nxt, b.state_key) & ~np.r_[b.traj_id[1:] == b.traj_id[:-1], False]] = 12345
        differs_from_dead_ends += not np.allclose(
            res.advantages, estimate("graphgpo", b, inputs={"next_state_key": unseen}).advantages)
    assert differs_from_dead_ends > 10  # the random groups do exercise ends at known states


# --------------------------------------------------------------------------- EMPG
# Rows X0, X1 (success, 2 steps), Y0 (failure, 1 step); GRPO mean_norm base: R = 10, 10, 0,
# mean 20/3 -> A = 10/3, 10/3, -20/3. Entropies H = 0, 1, 2 nats.
#   H~ = (H - 0) / (2 - 0 + 1e-8)        = 0, 0.5, 1 (up to the 1e-8)
#   g  = exp(-H~) / (mean exp(-H~) + 1e-8)
#   bonus: X0 gets zeta exp(-H~(X1)) = 0.1 e^-0.5; X1 and Y0 are last steps: 0
#   A  = g A + bonus - mean over the batch of (g A + bonus)
def test_empg_hand_values():
    b = batch_from_trajectories([{"keys": ["s0", "s1"], "success": True}, {"keys": ["s0"], "success": False}])
    ent = np.array([0.0, 1.0, 2.0])
    h = ent / (2.0 + 1e-8)
    conf = np.exp(-h) / (np.exp(-h).mean() + 1e-8)     # 1.51944, 0.92159, 0.55897
    base = np.array([10 / 3, 10 / 3, -20 / 3])
    mod = conf * base + np.array([0.1 * np.exp(-h[1]), 0.0, 0.0])
    res = estimate("empg", b, mode="mean_norm", inputs={"entropies": ent})
    close(res.advantages, mod - mod.mean())
    close(res.row_terms["confidence"], conf)
    assert res.diagnostics["confidence_mean"] == pytest.approx(1.0, abs=1e-7)
    # k' and zeta: zeta = 0 leaves the centred, confidence-scaled GRPO advantage
    mod0 = conf * base
    close(estimate("empg", b, mode="mean_norm", zeta=0.0, inputs={"entropies": ent}).advantages, mod0 - mod0.mean())
    # k = 0: g = 1 (up to 1e-8), the base advantage plus the bonus, centred
    mod_k0 = base / (1 + 1e-8) + np.array([0.1 * np.exp(-2 * h[1]), 0, 0])
    close(estimate("empg", b, mode="mean_norm", k=0.0, k_prime=2.0, inputs={"entropies": ent}).advantages,
          mod_k0 - mod_k0.mean())
    with pytest.raises(ValueError, match="estimator 'empg' needs input 'entropies'"):
        estimate("empg", b)
    with pytest.raises(ValueError, match=">= 0"):
        estimate("empg", b, inputs={"entropies": [0.0, -1.0, 2.0]})


def test_empg_is_refused_on_openrlhf():
    pytest.importorskip("omegaconf")
    from g2po_bench.core.config import ConfigError
    from g2po_bench.runconfig import load_config

    with pytest.raises(ConfigError, match="estimator 'empg' needs the input.*entropies.*backend=local"):
        load_config(overrides=["algorithm.name=empg", "backend=openrlhf"])
