"""Synthetic step batches for tests and the advantage benchmark.

The generator imitates the statistics of an ALFWorld-style rollout batch (docs/design-notes.md
"Training-loop facts"): G task groups of N rollouts, each a walk over a small per-task state
space that starts in the task's initial state, with revisits, self-loops ("Nothing happens"),
invalid actions, successes that end early with reward ``success_reward`` on the last step and
failures that mostly run to the step limit (truncation). Vectorized: generating 10^6 rows
takes a fraction of a second.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from g2po_bench.core.batch import StepBatch, hash_state_key

__all__ = ["random_step_batch", "reference_batch", "batch_with_rows", "batch_from_trajectories", "next_state_keys",
           "trajectory_next_keys", "synthetic_inputs"]


def random_step_batch(
    rng: np.random.Generator,
    num_groups: int = 16,
    group_size: int = 8,
    max_steps: int = 50,
    num_states: int = 40,
    p_invalid: float = 0.05,
    p_success: float = 0.4,
    *,
    p_self_loop: float = 0.1,
    p_truncate: float = 0.8,
    success_reward: float = 10.0,
    shared_states: bool = False,
    shuffle: bool = False,
) -> StepBatch:
    """A random, realistic StepBatch.

    Args:
        rng: numpy Generator (the batch is a deterministic function of its state).
        num_groups: G task groups; group ids are 0..G-1.
        group_size: N rollouts per group; trajectory ids are unique over the batch.
        max_steps: step limit; trajectory lengths are in 1..max_steps.
        num_states: distinct states per task; state 0 is the initial state. States are drawn
            from a Zipf-like distribution so that some are visited by many trajectories.
        p_invalid: probability that a step's action is invalid.
        p_success: probability that a trajectory succeeds (its length is then uniform in
            1..max_steps and its last step gets ``success_reward``).
        p_self_loop: probability that a step stays in the previous state (a self-loop).
        p_truncate: probability that a failed trajectory runs to the step limit (else it
            stops earlier, uniform length).
        success_reward: reward of the final step of a success.
        shared_states: if True, state keys are shared between task groups (state k has the
            same key in every group); else each group has its own keys.
        shuffle: if True, rows come in random order (estimators must not care).

    Returns:
        StepBatch with B = sum of the trajectory lengths rows.

    Raises:
        ValueError: a count < 1 or a probability outside [0, 1].
    """
    for name, val in (("num_groups", num_groups), ("group_size", group_size),
                      ("max_steps", max_steps), ("num_states", num_states)):
        if val < 1:
            raise ValueError(f"random_step_batch: {name} must be >= 1, got {val}")
    for name, val in (("p_invalid", p_invalid), ("p_success", p_success),
                      ("p_self_loop", p_self_loop), ("p_truncate", p_truncate)):
        if not 0.0 <= val <= 1.0:
            raise ValueError(f"random_step_batch: {name} must be in [0, 1], got {val}")
    num_traj = num_groups * group_size
    success = rng.random(num_traj) < p_success
    truncated = ~success & (rng.random(num_traj) < p_truncate)
    lengths = rng.integers(1, max_steps + 1, size=num_traj)
    lengths[truncated] = max_steps
    b = int(lengths.sum())
    traj = np.repeat(np.arange(num_traj, dtype=np.int64), lengths)
    starts = np.zeros(num_traj, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    step = np.arange(b, dtype=np.int64) - np.repeat(starts, lengths)
    group = traj // group_size
    # states: Zipf-like draw, step 0 in the initial state, self-loops copy the previous state
    weights = 1.0 / np.arange(1, num_states + 1)
    state = rng.choice(num_states, size=b, p=weights / weights.sum())
    first = step == 0
    state[first] = 0
    self_loop = (rng.random(b) < p_self_loop) & ~first
    src = np.where(self_loop, 0, np.arange(b))
    np.maximum.accumulate(src, out=src)
    state = state[src]
    if shared_states:
        key = state.astype(np.int64) * 1_000_003 + 7
    else:
        key = (group * num_states + state).astype(np.int64) * 1_000_003 + 7
    last = np.zeros(b, dtype=bool)
    last[starts + lengths - 1] = True
    succ_row = np.repeat(success, lengths)
    reward = np.where(last & succ_row, success_reward, 0.0)
    valid = rng.random(b) >= p_invalid
    fields = dict(
        group_id=group,
        traj_id=traj,
        step=step,
        state_key=key,
        reward=reward,
        success=succ_row,
        action_valid=valid,
    )
    if shuffle:
        perm = rng.permutation(b)
        fields = {k: v[perm] for k, v in fields.items()}
    return StepBatch(**fields)


def reference_batch(rng: np.random.Generator, **kwargs) -> StepBatch:
    """The reference batch of the papers: 16 task groups x 8 rollouts x up to 50 steps
    (ALFWorld settings of verl-agent's ``run_alfworld.sh``;
    docs/design-notes.md "Training-loop facts"). kwargs go to random_step_batch."""
    params = dict(num_groups=16, group_size=8, max_steps=50)
    params.update(kwargs)
    return random_step_batch(rng, **params)


def batch_with_rows(rng: np.random.Generator, rows: int, **kwargs) -> StepBatch:
    """A batch of about ``rows`` rows made of whole task groups with reference settings
    (8 rollouts, up to 50 steps); at least one group. kwargs go to random_step_batch."""
    params = dict(group_size=8, max_steps=50)
    params.update(kwargs)
    probe = random_step_batch(np.random.default_rng(12345), num_groups=64, **params)
    per_group = len(probe) / 64
    groups = max(1, int(round(rows / per_group)))
    return random_step_batch(rng, num_groups=groups, **params)


def batch_from_trajectories(
    trajectories: Sequence[Mapping[str, Any]], *, success_reward: float = 10.0
) -> StepBatch:
    """A StepBatch from readable per-trajectory descriptions (tests, examples, notebooks).

    Each trajectory is a mapping with:

    - ``"keys"``: the state key of every step (ints, or strings hashed with
      :func:`g2po_bench.core.batch.hash_state_key`); its length is T.
    - ``"group"``: task group id (default 0).
    - ``"success"``: bool (default False).
    - ``"rewards"``: T rewards (default: ``success_reward`` on the last step of a success,
      else 0).
    - ``"invalid"``: the step indices whose action was invalid (default none).
    - ``"traj"``: trajectory id (default: its position in the list).

    Rows are emitted trajectory by trajectory in step order.

    Raises:
        ValueError: a trajectory without keys or with rewards of the wrong length, and the
            StepBatch validation errors.
    """
    cols: dict[str, list] = {k: [] for k in ("group_id", "traj_id", "step", "state_key",
                                             "reward", "success", "action_valid")}
    for pos, tr in enumerate(trajectories):
        keys = list(tr["keys"])
        if not keys:
            raise ValueError(f"trajectory {pos} has no steps")
        success = bool(tr.get("success", False))
        rewards = tr.get("rewards")
        if rewards is None:
            rewards = [0.0] * len(keys)
            if success:
                rewards[-1] = success_reward
        if len(rewards) != len(keys):
            raise ValueError(f"trajectory {pos}: {len(rewards)} rewards for {len(keys)} steps")
        invalid = set(tr.get("invalid", ()))
        for t, key in enumerate(keys):
            cols["group_id"].append(int(tr.get("group", 0)))
            cols["traj_id"].append(int(tr.get("traj", pos)))
            cols["step"].append(t)
            cols["state_key"].append(hash_state_key(key) if isinstance(key, str) else int(key))
            cols["reward"].append(float(rewards[t]))
            cols["success"].append(success)
            cols["action_valid"].append(t not in invalid)
    return StepBatch(
        group_id=np.asarray(cols["group_id"], dtype=np.int64),
        traj_id=np.asarray(cols["traj_id"], dtype=np.int64),
        step=np.asarray(cols["step"], dtype=np.int64),
        state_key=np.asarray(cols["state_key"], dtype=np.int64),
        reward=np.asarray(cols["reward"], dtype=np.float64),
        success=np.asarray(cols["success"], dtype=bool),
        action_valid=np.asarray(cols["action_valid"], dtype=bool),
    )


def trajectory_next_keys(trajectories: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """The input ``next_state_key`` of :func:`batch_from_trajectories`' batch, same row order.

    Inside a trajectory, step t leads to the key of step t + 1; after the last step, to the
    trajectory's ``"end"`` key (the observation the episode ended on: an int, or a string hashed
    with :func:`g2po_bench.core.batch.hash_state_key`), by default a key seen nowhere else.

    Returns:
        (B,) int64 hashed keys.
    """
    out: list[int] = []
    for pos, tr in enumerate(trajectories):
        keys = [hash_state_key(k) if isinstance(k, str) else int(k) for k in tr["keys"]]
        end = tr.get("end", f"end of trajectory {pos}")
        out += keys[1:] + [hash_state_key(end) if isinstance(end, str) else int(end)]
    return np.asarray(out, dtype=np.int64)


def synthetic_inputs(batch: StepBatch, names: Iterable[str], rng: np.random.Generator, *,
                     num_actions: int = 3) -> dict[str, np.ndarray]:
    """Random estimator inputs (:data:`g2po_bench.algorithms.registry.INPUTS`) for a batch:
    what tests and the benchmark feed an estimator that declares inputs.

    - ``values``: (B,) float64, normal(2, 2) (critic values in return units);
    - ``entropies``: (B,) float64 >= 0, gamma(2, 0.5) nats;
    - ``state_texts``: (B,) str, ``"state <key>"`` (one text per state key);
    - ``action_texts``: (B,) str, ``"action <a>"`` with a uniform in 0..num_actions-1 (so
      anchors see several distinct actions, as in a real group);
    - ``next_state_key``: (B,) int64, the next row's ``state_key`` inside a trajectory; after a
      trajectory's last step, the key of a state drawn uniformly from the batch's state keys
      and one state seen nowhere else (so a failed episode's last observation is sometimes a
      known state, as in a real group).

    Args:
        batch: the StepBatch (B rows).
        names: the inputs wanted (any subset of the vocabulary).
        rng: numpy Generator.
        num_actions: distinct action texts.

    Returns:
        name -> array; text inputs are fixed-width ``U`` arrays (fast to factorize).

    Raises:
        ValueError: a name outside the vocabulary.
    """
    n = len(batch)
    out: dict[str, np.ndarray] = {}
    for name in names:
        if name == "values":
            out[name] = rng.normal(2.0, 2.0, size=n)
        elif name == "entropies":
            out[name] = rng.gamma(2.0, 0.5, size=n)
        elif name == "state_texts":
            out[name] = np.char.add("state ", batch.state_key.astype(str))
        elif name == "action_texts":
            out[name] = np.char.add("action ", rng.integers(0, num_actions, size=n).astype(str))
        elif name == "next_state_key":
            out[name] = next_state_keys(batch, rng)
        else:
            raise ValueError(f"synthetic_inputs: unknown input {name!r}")
    return out


def next_state_keys(batch: StepBatch, rng: np.random.Generator) -> np.ndarray:
    """A random but consistent ``next_state_key`` input for a batch (the registry's input
    vocabulary): what the rollout engine records, drawn for tests and benchmarks.

    Inside a trajectory the key of step t is the ``state_key`` of step t + 1; after a
    trajectory's last step it is, with probability 1/2, the key of a state of the same task
    group (a known state: a failed episode that ends where another rollout has been) and
    otherwise a key seen nowhere else in the batch.

    Args:
        batch: the StepBatch (B rows, any order).
        rng: numpy Generator.

    Returns:
        (B,) int64 hashed state keys, in the batch's row order.
    """
    n = len(batch)
    out = np.empty(n, dtype=np.int64)
    if not n:
        return out
    order = np.lexsort((batch.step, batch.traj_id))
    tid = batch.traj_id[order]
    last = np.ones(n, dtype=bool)
    last[:-1] = tid[1:] != tid[:-1]
    out[order[:-1]] = batch.state_key[order[1:]]
    ends = order[last]
    by_group = np.argsort(batch.group_id, kind="stable")
    groups, first, count = np.unique(batch.group_id[by_group], return_index=True, return_counts=True)
    g = np.searchsorted(groups, batch.group_id[ends])
    pick = by_group[first[g] + (rng.random(ends.size) * count[g]).astype(np.int64)]
    known = rng.random(ends.size) < 0.5
    fresh = np.fromiter((hash_state_key(f"end of trajectory {int(t)}") for t in batch.traj_id[ends]),
                        dtype=np.int64, count=ends.size)
    out[ends] = np.where(known, batch.state_key[pick], fresh)
    return out
