"""Property tests of the advantage estimators (hypothesis) and fast path == per-row oracle.

Properties (of the equations in each estimator's module docstring): the row order and the labels of
groups, trajectories and state keys do not matter; w = 0 turns G2PO into GRPO; GiGPO without
repeated states is GRPO; no NaN/inf for any input (one-row groups, constant rewards included); the
vectorized estimators equal the per-row oracle registered beside each estimator to 1e-9 for every
estimator and every ablation setting.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from g2po_bench.algorithms import estimate
from g2po_bench.algorithms.registry import oracle_estimate
from g2po_bench.algorithms.synthetic import random_step_batch
from g2po_bench.core.batch import StepBatch

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOL = dict(rtol=1e-9, atol=1e-9)

MODES = ("mean_std_norm", "mean_norm")
G2PO_SETTINGS = [
    dict(aggregation=agg, graph_scope=gs, edge_norm_scope=es, components=comp,
         node_reference_set=nrs, episode_stat=epi)
    for agg, gs, es, comp, nrs, epi in itertools.product(
        (True, False), ("group", "batch"), ("group", "batch", "node"),
        ("ep", "ep+nc", "ep+nc+agg", "full"), ("visits", "successors"), ("steps", "trajectories"))
    if not (comp == "ep+nc+agg" and not agg)
]


# ------------------------------------------------------------------------ strategies
@st.composite
def step_batches(draw, max_groups=3, max_traj=4, max_len=6, num_keys=4):
    """Random batches: any ids (negative, huge), shared or private keys, any row order,
    one-row groups, constant rewards, arbitrary intermediate rewards."""
    n_groups = draw(st.integers(1, max_groups))
    group_ids = draw(st.lists(st.integers(-(2**40), 2**40), min_size=n_groups,
                              max_size=n_groups, unique=True))
    constant = draw(st.booleans()) and draw(st.booleans())  # ~1/4: one reward value everywhere
    const_value = draw(st.sampled_from([0.0, 10.0, 1.0]))
    cols = {k: [] for k in ("group_id", "traj_id", "step", "state_key", "reward", "success",
                            "action_valid")}
    n_traj_total = 0
    for g in group_ids:
        for _ in range(draw(st.integers(1, max_traj))):
            length = draw(st.integers(1, max_len))
            keys = draw(st.lists(st.integers(0, num_keys - 1), min_size=length, max_size=length))
            success = draw(st.booleans())
            valid = draw(st.lists(st.booleans(), min_size=length, max_size=length))
            for t in range(length):
                if constant:
                    r = const_value
                elif t == length - 1:
                    r = 10.0 if success else draw(st.sampled_from([0.0, 0.0, 1.0]))
                else:
                    r = draw(st.sampled_from([0.0, 0.0, 0.0, 0.5, -1.0]))
                cols["group_id"].append(g)
                cols["traj_id"].append(n_traj_total)
                cols["step"].append(t)
                cols["state_key"].append(keys[t])
                cols["reward"].append(r)
                cols["success"].append(success)
                cols["action_valid"].append(valid[t])
            n_traj_total += 1
    traj_labels = draw(st.lists(st.integers(-(2**50), 2**50), min_size=n_traj_total,
                                max_size=n_traj_total, unique=True))
    cols["traj_id"] = [traj_labels[i] for i in cols["traj_id"]]
    perm = draw(st.permutations(range(len(cols["step"]))))
    arrays = {k: np.asarray(v)[list(perm)] for k, v in cols.items()}
    return StepBatch(**arrays)


def _common(draw):
    return dict(
        mode=draw(st.sampled_from(MODES)),
        invalid_penalty=draw(st.sampled_from([0.0, 0.1, 0.5])),
    )


@st.composite
def estimator_and_options(draw, n_rows, names=("grpo", "rloo", "gigpo", "g2po", "ppo")):
    name = draw(st.sampled_from(names))
    opts = _common(draw)
    if name == "grpo":
        opts["episode_stat"] = draw(st.sampled_from(["steps", "trajectories"]))
    elif name == "rloo":
        opts["episode_stat"] = draw(st.sampled_from(["steps", "trajectories"]))
    elif name == "gigpo":
        opts.update(episode_stat=draw(st.sampled_from(["steps", "trajectories"])),
                    gamma=draw(st.sampled_from([0.0, 0.5, 0.95, 1.0])),
                    step_weight=draw(st.sampled_from([0.0, 0.3, 1.0])))
    elif name == "g2po":
        opts.update(draw(st.sampled_from(G2PO_SETTINGS)))
        opts.update(gamma=draw(st.sampled_from([0.0, 0.5, 0.95, 1.0])),
                    step_weight=draw(st.sampled_from([0.0, 0.8, 1.0, 1.2])),
                    success_reward=draw(st.sampled_from([10.0, 1.0])))
    else:
        opts.update(convention=draw(st.sampled_from(["reference", "turn_gae"])),
                    whiten=draw(st.booleans()),
                    gamma=draw(st.sampled_from([0.5, 0.95, 1.0])),
                    lam=draw(st.sampled_from([0.0, 0.95, 1.0])))
        opts["values"] = np.asarray(draw(st.lists(
            st.floats(-10, 10, allow_nan=False), min_size=n_rows, max_size=n_rows)))
    return name, opts


def _permute(batch: StepBatch, perm: np.ndarray) -> StepBatch:
    return StepBatch(**{k: v[perm] for k, v in batch.to_dict().items()})


def _permute_opts(opts, perm):
    return {k: (v[perm] if k == "values" else v) for k, v in opts.items()}


# ------------------------------------------------------------------------ properties
@SETTINGS
@given(st.data())
def test_fast_path_equals_oracle(data):
    batch = data.draw(step_batches())
    name, opts = data.draw(estimator_and_options(len(batch)))
    res = estimate(name, batch, **opts)
    adv, ret = oracle_estimate(name, batch, **opts)
    np.testing.assert_allclose(res.advantages, adv, **TOL)
    if ret is not None:
        np.testing.assert_allclose(res.returns, ret, **TOL)


@SETTINGS
@given(st.data())
def test_row_order_does_not_matter(data):
    batch = data.draw(step_batches())
    name, opts = data.draw(estimator_and_options(len(batch)))
    perm = np.asarray(data.draw(st.permutations(range(len(batch)))))
    a = estimate(name, batch, **opts)
    b = estimate(name, _permute(batch, perm), **_permute_opts(opts, perm))
    np.testing.assert_allclose(b.advantages, a.advantages[perm], rtol=0, atol=1e-12)
    if a.returns is not None:
        np.testing.assert_allclose(b.returns, a.returns[perm], rtol=0, atol=1e-12)
    for key, value in a.diagnostics.items():
        assert b.diagnostics[key] == pytest.approx(value, rel=1e-9, abs=1e-9)


@SETTINGS
@given(st.data())
def test_relabelling_ids_and_keys_does_not_matter(data):
    batch = data.draw(step_batches())
    name, opts = data.draw(estimator_and_options(len(batch)))
    d = batch.to_dict()
    new = {}
    for field in ("group_id", "traj_id", "state_key"):
        uniq = np.unique(d[field])
        labels = np.asarray(data.draw(st.lists(st.integers(-(2**62), 2**62), min_size=len(uniq),
                                               max_size=len(uniq), unique=True)), dtype=np.int64)
        new[field] = labels[np.searchsorted(uniq, d[field])]
    relabelled = StepBatch(**{**d, **new})
    a = estimate(name, batch, **opts)
    b = estimate(name, relabelled, **opts)
    np.testing.assert_allclose(b.advantages, a.advantages, **TOL)


@SETTINGS
@given(st.data())
def test_zero_step_weight_is_grpo(data):
    batch = data.draw(step_batches())
    mode = data.draw(st.sampled_from(MODES))
    episode_stat = data.draw(st.sampled_from(["steps", "trajectories"]))
    p = data.draw(st.sampled_from([0.0, 0.1]))
    grpo = estimate("grpo", batch, mode=mode, episode_stat=episode_stat, invalid_penalty=p).advantages
    g2po_opts = data.draw(st.sampled_from(G2PO_SETTINGS))
    g2po_opts["episode_stat"] = episode_stat
    g2po = estimate("g2po", batch, mode=mode, invalid_penalty=p, step_weight=0.0, **g2po_opts)
    np.testing.assert_array_equal(g2po.advantages, grpo)
    gigpo = estimate("gigpo", batch, mode=mode, invalid_penalty=p, step_weight=0.0,
                     episode_stat=episode_stat)
    np.testing.assert_array_equal(gigpo.advantages, grpo)


@SETTINGS
@given(st.data())
def test_gigpo_without_repeated_states_is_grpo(data):
    batch = data.draw(step_batches())
    d = batch.to_dict()
    distinct = StepBatch(**{**d, "state_key": np.arange(len(batch), dtype=np.int64)})
    mode = data.draw(st.sampled_from(MODES))
    grpo = estimate("grpo", distinct, mode=mode).advantages
    res = estimate("gigpo", distinct, mode=mode)
    np.testing.assert_array_equal(res.advantages, grpo)
    assert res.diagnostics["singleton_frac"] == 1.0
    # G2PO's node-centric term vanishes too: "ep+nc+agg" is GRPO
    np.testing.assert_array_equal(
        estimate("g2po", distinct, mode=mode, components="ep+nc+agg").advantages, grpo)


@SETTINGS
@given(st.data())
def test_no_nan_or_inf(data):
    batch = data.draw(step_batches(max_groups=2, max_traj=3, max_len=3, num_keys=2))
    name, opts = data.draw(estimator_and_options(len(batch)))
    res = estimate(name, batch, **opts)  # estimate() itself rejects non-finite advantages
    assert np.isfinite(res.advantages).all()
    assert all(np.isfinite(v) for v in res.diagnostics.values())


# ------------------------------------------------------------------------ exhaustive
@pytest.fixture(scope="module")
def small_batches():
    rng = np.random.default_rng(11)
    return [
        random_step_batch(rng, num_groups=3, group_size=4, max_steps=6, num_states=4,
                          p_invalid=0.2, p_success=0.5, shuffle=True),
        random_step_batch(rng, num_groups=2, group_size=3, max_steps=5, num_states=3,
                          p_invalid=0.3, p_success=0.5, shared_states=True, shuffle=True),
        random_step_batch(rng, num_groups=4, group_size=1, max_steps=3, num_states=2,
                          p_invalid=0.5, p_success=0.3, shared_states=True),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_every_g2po_setting_matches_oracle(small_batches, mode):
    for batch in small_batches:
        for opts in G2PO_SETTINGS:
            res = estimate("g2po", batch, mode=mode, **opts)
            np.testing.assert_allclose(
                res.advantages, oracle_estimate("g2po", batch, mode=mode, **opts)[0], **TOL,
                err_msg=str(opts))


def test_every_other_setting_matches_oracle(small_batches):
    for batch in small_batches:
        values = np.random.default_rng(len(batch)).normal(size=len(batch))
        cases = [("grpo", dict(mode=m, episode_stat=e)) for m in MODES
                 for e in ("steps", "trajectories")]
        cases += [("rloo", dict(episode_stat=e)) for e in ("steps", "trajectories")]
        cases += [("gigpo", dict(mode=m, episode_stat=e)) for m in MODES
                  for e in ("steps", "trajectories")]
        cases += [("ppo", dict(values=values, convention=c, whiten=w))
                  for c in ("reference", "turn_gae") for w in (False, True)]
        for name, opts in cases:
            res = estimate(name, batch, **opts)
            adv, ret = oracle_estimate(name, batch, **opts)
            np.testing.assert_allclose(res.advantages, adv, **TOL, err_msg=f"{name} {opts}")
            if ret is not None:
                np.testing.assert_allclose(res.returns, ret, **TOL)


def test_similarity_grouping_matches_oracle(small_batches):
    words = ["kitchen", "fridge", "drawer", "table", "nothing happens", "you open it"]
    for batch in small_batches:
        rng = np.random.default_rng(len(batch))
        texts = [f"you are at the {words[int(k) % len(words)]}" + ("" if rng.random() < 0.6 else "!")
                 for k in batch.state_key]
        for threshold in (0.5, 0.9, 0.97, 1.0):
            opts = dict(grouping="similarity", state_texts=texts, similarity_threshold=threshold)
            np.testing.assert_allclose(
                estimate("gigpo", batch, **opts).advantages,
                oracle_estimate("gigpo", batch, **opts)[0], **TOL)
