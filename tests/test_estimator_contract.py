"""The contract every registered estimator keeps (parametrised from the registry: a new
estimator, in-tree or from a package, is covered with no edit here).

- output: (B,) float64, finite, in the batch's row order; diagnostics finite floats;
- invariance to the row order and to renumbering the task groups and trajectories;
- a task group whose rollouts are all equal: equal advantages step for step, and exactly 0
  (to 1e-12) for group-relative estimators (``zero_on_uniform_group``);
- declared inputs: names from the vocabulary, and a clear error naming the estimator and the
  input when one is missing;
- where an oracle is registered: the vectorized estimator equals it on random batches
  (hypothesis; any ids, rewards, row order).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_advantage_properties import step_batches

from g2po_bench.algorithms.registry import (
    INPUTS,
    available_estimators,
    estimate,
    estimator_inputs,
    estimator_spec,
    oracle_estimate,
)
from g2po_bench.algorithms.synthetic import next_state_keys, random_step_batch, synthetic_inputs
from g2po_bench.core.batch import StepBatch

NAMES = available_estimators()
ORACLES = [n for n in NAMES if estimator_spec(n).oracle is not None]
TOL = dict(rtol=1e-9, atol=1e-9)


def _batch(seed: int = 0) -> StepBatch:
    return random_step_batch(np.random.default_rng(seed), num_groups=4, group_size=5, max_steps=7,
                             num_states=5, p_invalid=0.2, p_success=0.5, shuffle=True)


def _inputs(name: str, batch: StepBatch, seed: int = 1) -> dict:
    return synthetic_inputs(batch, estimator_inputs(name), np.random.default_rng(seed))


def _permuted(batch: StepBatch, inputs: dict, perm: np.ndarray):
    return StepBatch(**{k: v[perm] for k, v in batch.to_dict().items()}), {k: v[perm] for k, v in inputs.items()}


@pytest.mark.parametrize("name", NAMES)
def test_output_shape_dtype_and_finite(name):
    for seed in range(3):
        b = _batch(seed)
        res = estimate(name, b, inputs=_inputs(name, b, seed))
        assert res.advantages.shape == (len(b),) and res.advantages.dtype == np.float64
        assert np.isfinite(res.advantages).all()
        assert all(isinstance(v, float) and np.isfinite(v) for v in res.diagnostics.values())
        assert res.advantages.std() > 0  # a random batch gives the estimator something to say
        for key, term in res.row_terms.items():
            assert term.shape == (len(b),) and np.isfinite(term).all(), key


@pytest.mark.parametrize("name", NAMES)
def test_row_order_does_not_matter(name):
    b = _batch(3)
    inputs = _inputs(name, b)
    perm = np.random.default_rng(4).permutation(len(b))
    a = estimate(name, b, inputs=inputs).advantages
    pb, pin = _permuted(b, inputs, perm)
    np.testing.assert_allclose(estimate(name, pb, inputs=pin).advantages, a[perm], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_renumbering_groups_and_trajectories_does_not_matter(name):
    b = _batch(5)
    inputs = _inputs(name, b)
    rng = np.random.default_rng(6)
    d = b.to_dict()
    new = {}
    for field in ("group_id", "traj_id"):
        uniq = np.unique(d[field])
        # distinct labels in a shuffled order, negative ones included
        labels = rng.permutation(len(uniq)).astype(np.int64) * 1_000_003 - 10**9
        new[field] = labels[np.searchsorted(uniq, d[field])]
    relabelled = StepBatch(**{**d, **new})
    np.testing.assert_allclose(estimate(name, relabelled, inputs=inputs).advantages,
                               estimate(name, b, inputs=inputs).advantages, rtol=0, atol=1e-9)


def _uniform_groups_batch():
    """Three task groups of identical rollouts (group 10: four one-step successes; group 11:
    four three-step failures with rewards 0, all actions valid, ending in the same state;
    group 12: four three-step successes) among random groups; every input of a row depends
    only on its step, so the members are identical in every input too.
    Returns (batch, inputs by name, mask of the uniform rows, their (group, step) labels)."""
    rand = random_step_batch(np.random.default_rng(7), num_groups=3, group_size=4, max_steps=5,
                             num_states=4, p_invalid=0.2, p_success=0.5)
    cols = {k: list(v) for k, v in rand.to_dict().items()}
    uniform = [False] * len(rand)
    traj = int(rand.traj_id.max()) + 1
    for group, keys, success in ((10, [101], True), (11, [201, 202, 203], False), (12, [301, 302, 303], True)):
        for _ in range(4):
            for t, key in enumerate(keys):
                cols["group_id"].append(group)
                cols["traj_id"].append(traj)
                cols["step"].append(t)
                cols["state_key"].append(key)
                cols["reward"].append(10.0 if success and t == len(keys) - 1 else 0.0)
                cols["success"].append(success)
                cols["action_valid"].append(True)
                uniform.append(True)
            traj += 1
    batch = StepBatch(**{k: np.asarray(v) for k, v in cols.items()})
    rng = np.random.default_rng(8)
    step_part = {"values": rng.normal(size=8), "entropies": rng.gamma(2.0, 0.5, size=8)}
    inputs = {
        "values": np.where(uniform, step_part["values"][batch.step], rng.normal(size=len(batch))),
        "entropies": np.where(uniform, step_part["entropies"][batch.step], rng.gamma(2.0, 0.5, size=len(batch))),
        "state_texts": np.char.add("state ", batch.state_key.astype(str)),
        "action_texts": np.where(uniform, np.char.add("act ", batch.step.astype(str)),
                                 np.char.add("act ", rng.integers(0, 3, size=len(batch)).astype(str))),
        # the members of a uniform group end in one state (the key after their last step)
        "next_state_key": np.where(uniform, np.r_[batch.state_key[1:], 0], next_state_keys(batch, rng)),
    }
    last = np.r_[batch.traj_id[1:] != batch.traj_id[:-1], True]
    inputs["next_state_key"][uniform & last] = batch.group_id[uniform & last] * 1000 + 999
    return batch, inputs, np.asarray(uniform), batch.group_id * 100 + batch.step


@pytest.mark.parametrize("name", NAMES)
def test_a_group_of_equal_rollouts(name):
    batch, all_inputs, uniform, label = _uniform_groups_batch()
    inputs = {k: all_inputs[k] for k in estimator_inputs(name)}
    adv = estimate(name, batch, inputs=inputs).advantages
    for lab in np.unique(label[uniform]):  # equal members, equal advantages, step for step
        sel = uniform & (label == lab)
        np.testing.assert_allclose(adv[sel], adv[sel][0], rtol=0, atol=1e-12)
    if estimator_spec(name).zero_on_uniform_group:
        assert np.abs(adv[uniform]).max() <= 1e-12, adv[uniform]
    else:  # the declaration is not stronger than needed: some uniform group gets a nonzero advantage
        assert np.abs(adv[uniform]).max() > 1e-6, f"{name} gives identical rollouts 0: declare zero_on_uniform_group"


@pytest.mark.parametrize("name", NAMES)
def test_declared_inputs_come_from_the_vocabulary_and_are_required(name):
    needed = estimator_inputs(name)
    assert set(needed) <= set(INPUTS)
    b = _batch(9)
    for key in needed:
        inputs = _inputs(name, b)
        del inputs[key]
        with pytest.raises(ValueError, match=rf"estimator '{name}' needs input '{key}'"):
            estimate(name, b, inputs=inputs)
        bad = _inputs(name, b)
        bad[key] = bad[key][:-1]
        with pytest.raises(ValueError, match=key):
            estimate(name, b, inputs=bad)


@pytest.mark.parametrize("name", ORACLES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_path_equals_its_oracle(name, data):
    batch = data.draw(step_batches())
    mode = data.draw(st.sampled_from(["mean_std_norm", "mean_norm"]))
    seed = data.draw(st.integers(0, 2**31 - 1))
    inputs = _inputs(name, batch, seed)
    res = estimate(name, batch, inputs=inputs, mode=mode)
    adv, ret = oracle_estimate(name, batch, inputs=inputs, mode=mode)
    np.testing.assert_allclose(res.advantages, adv, **TOL)
    if ret is not None:
        np.testing.assert_allclose(res.returns, ret, **TOL)
