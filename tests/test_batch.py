"""StepBatch validation and helpers (g2po_bench/core/batch.py; docs/design-notes.md "The
StepBatch")."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from g2po_bench.algorithms.synthetic import batch_from_trajectories, random_step_batch
from g2po_bench.core.batch import StepBatch, hash_state_key, hash_state_keys


def fields(**over):
    # two trajectories of group 0: traj 0 has steps 0,1; traj 1 has step 0
    base = dict(
        group_id=np.array([0, 0, 0]),
        traj_id=np.array([0, 0, 1]),
        step=np.array([0, 1, 0]),
        state_key=np.array([5, 6, 5]),
        reward=np.array([0.0, 10.0, 0.0]),
        success=np.array([True, True, False]),
        action_valid=np.array([True, False, True]),
    )
    base.update(over)
    return base


def test_valid_batch_and_dtypes():
    b = StepBatch(**fields())
    assert len(b) == 3
    assert b.num_trajectories == 2 and b.num_groups == 1
    assert b.group_id.dtype == np.int64 and b.reward.dtype == np.float64
    assert b.success.dtype == bool and b.action_valid.dtype == bool
    assert not b.reward.flags.writeable
    assert set(b.to_dict()) == {"group_id", "traj_id", "step", "state_key", "reward",
                                "success", "action_valid"}


def test_rows_in_any_order_are_accepted():
    f = fields()
    perm = np.array([2, 1, 0])
    StepBatch(**{k: v[perm] for k, v in f.items()})


def test_int_flags_coerced_and_uint64_keys_viewed():
    b = StepBatch(**fields(success=np.array([1, 1, 0]), state_key=np.array([2**64 - 1, 1, 2], dtype=np.uint64)))
    assert b.success.dtype == bool and list(b.success) == [True, True, False]
    assert b.state_key[0] == -1  # same 64 bits, viewed as int64


@pytest.mark.parametrize(
    "over, match",
    [
        (dict(reward=np.zeros((3, 1))), "one-dimensional"),
        (dict(step=np.array([0, 1])), "rows"),
        (dict(state_key=np.array([0.5, 1.0, 2.0])), "hash_state_keys"),
        (dict(state_key=np.array(["a", "b", "c"])), "integers"),
        (dict(reward=np.array([0.0, np.inf, 0.0])), "non-finite"),
        (dict(reward=np.array(["x", "y", "z"])), "numeric"),
        (dict(step=np.array([0, -1, 0])), ">= 0"),
        (dict(step=np.array([0, 2, 0])), "0..T-1"),  # gap
        (dict(step=np.array([0, 0, 0])), "0..T-1"),  # duplicate
        (dict(step=np.array([1, 2, 0])), "0..T-1"),  # does not start at 0
        (dict(group_id=np.array([0, 1, 0])), "more than one task group"),
        (dict(success=np.array([True, False, False])), "more than one success value"),
        (dict(action_valid=np.array([2, 0, 1])), "boolean"),
        (dict(success=np.array([0.5, 1.0, 1.0])), "boolean"),
    ],
)
def test_validation_errors(over, match):
    with pytest.raises(ValueError, match=match):
        StepBatch(**fields(**over))


def test_take_and_concat():
    b = StepBatch(**fields())
    sub = b.take(np.array([2]))
    assert len(sub) == 1 and sub.traj_id[0] == 1
    with pytest.raises(ValueError, match="0..T-1"):
        b.take(np.array([1, 2]))  # keeps step 1 of trajectory 0 without its step 0
    other = StepBatch(**fields(traj_id=np.array([7, 7, 8]), group_id=np.array([3, 3, 3])))
    both = StepBatch.concat([b, other])
    assert len(both) == 6 and both.num_groups == 2 and both.num_trajectories == 4
    with pytest.raises(ValueError, match="at least one"):
        StepBatch.concat([])


def test_hash_state_key_is_stable_blake2b():
    # independent computation: 8-byte BLAKE2b digest read as little-endian signed int
    digest = hashlib.blake2b(b"You are in the kitchen.", digest_size=8).digest()
    expected = int.from_bytes(digest, "little", signed=True)
    assert hash_state_key("You are in the kitchen.") == expected
    keys = hash_state_keys(["a", "b", "a"])
    assert keys.dtype == np.int64 and keys[0] == keys[2] != keys[1]


def test_synthetic_generators_make_valid_batches():
    rng = np.random.default_rng(0)
    b = random_step_batch(rng, num_groups=3, group_size=4, max_steps=7, num_states=5, shuffle=True)
    assert b.num_groups == 3 and b.num_trajectories == 12
    assert b.step.max() <= 6
    # rewards only on the last step of a success
    assert set(np.unique(b.reward)) <= {0.0, 10.0}
    assert (b.reward > 0).sum() == len(np.unique(b.traj_id[b.success]))
    # the same seed gives the same batch
    b2 = random_step_batch(np.random.default_rng(0), num_groups=3, group_size=4, max_steps=7,
                           num_states=5, shuffle=True)
    assert all(np.array_equal(x, y) for x, y in zip(b.to_dict().values(), b2.to_dict().values()))
    with pytest.raises(ValueError, match="p_invalid"):
        random_step_batch(rng, p_invalid=1.5)
    with pytest.raises(ValueError, match="num_groups"):
        random_step_batch(rng, num_groups=0)


def test_batch_from_trajectories():
    b = batch_from_trajectories(
        [{"keys": ["s", "t"], "success": True, "invalid": [1]}, {"keys": [3], "group": 2, "traj": 9}]
    )
    assert list(b.traj_id) == [0, 0, 9] and list(b.group_id) == [0, 0, 2]
    assert list(b.reward) == [0.0, 10.0, 0.0]
    assert list(b.action_valid) == [True, False, True]
    assert b.state_key[0] == hash_state_key("s") and b.state_key[2] == 3
    with pytest.raises(ValueError, match="rewards"):
        batch_from_trajectories([{"keys": [1, 2], "rewards": [1.0]}])
