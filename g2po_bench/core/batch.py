"""The ``StepBatch``: one row per agent step, the input of every advantage estimator.

Source: the G2PO paper's setting (arXiv 2606.22995) and the verl-agent data layout (rows keyed by a
task-group uid, a trajectory uid and the anchor observation); docs/design-notes.md "The StepBatch".
A training batch holds, for each of G tasks, a *task group* of N rollouts started from the same
task instance; every row is one step of one trajectory.

The batch is columnar (one numpy array per field) and validated on construction, so an
estimator can trust it without re-checking. Token tensors used for training do not live
here: the rollout engine keeps them beside the batch, row-aligned with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["StepBatch", "hash_state_key", "hash_state_keys"]


def hash_state_key(key: str) -> int:
    """Hash a state-key string to a stable signed 64-bit integer.

    Stable across processes and Python versions (BLAKE2b, 8-byte digest), unlike ``hash()``.
    Collisions are possible in principle (probability about n^2 / 2^65 for n distinct keys).

    Args:
        key: the state key text (see docs/design-notes.md "State keys").

    Returns:
        int in [-2^63, 2^63).
    """
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def hash_state_keys(keys: Iterable[str]) -> np.ndarray:
    """Hash many state-key strings; returns an int64 array of shape (len(keys),)."""
    return np.fromiter((hash_state_key(k) for k in keys), dtype=np.int64)


_INT_FIELDS = ("group_id", "traj_id", "step", "state_key")
_FLOAT_FIELDS = ("reward",)
_BOOL_FIELDS = ("success", "action_valid")


@dataclass(frozen=True, eq=False)
class StepBatch:
    """A columnar batch of agent steps, one row per step (docs/design-notes.md "The StepBatch").

    Every field is a numpy array of shape (B,), B = number of step rows:

    - ``group_id`` int64: the task group (the N rollouts of one task instance).
    - ``traj_id`` int64: the trajectory; unique across the whole batch (a trajectory belongs
      to exactly one group).
    - ``step`` int64: 0-based step index t inside the trajectory; every trajectory has the
      contiguous steps 0..T-1 (rows may come in any order).
    - ``state_key`` int64: the hashed key of the state the action was taken *from* (the
      anchor); see :func:`hash_state_key`.
    - ``reward`` float64: environment reward after the step (10 at the final step of a
      successful episode in the reference setting, else 0).
    - ``success`` bool: whether the trajectory succeeded; the same value on all its rows.
    - ``action_valid`` bool: whether the model output parsed to a valid action.

    Integer and boolean inputs are converted to the dtypes above when lossless; anything
    else raises.

    Raises:
        ValueError: a field is not one-dimensional, lengths differ, a value has the wrong
            dtype or is not finite, steps are not 0..T-1 per trajectory, a trajectory spans
            two groups, or ``success`` differs between the rows of one trajectory. The message
            names the field and the first offending trajectory.
    """

    group_id: np.ndarray
    traj_id: np.ndarray
    step: np.ndarray
    state_key: np.ndarray
    reward: np.ndarray
    success: np.ndarray
    action_valid: np.ndarray
    extras: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = None
        for name in _INT_FIELDS + _FLOAT_FIELDS + _BOOL_FIELDS:
            arr = np.asarray(getattr(self, name))
            if arr.ndim != 1:
                raise ValueError(f"StepBatch.{name} must be one-dimensional, got shape {arr.shape}")
            if n is None:
                n = arr.shape[0]
            elif arr.shape[0] != n:
                raise ValueError(
                    f"StepBatch.{name} has {arr.shape[0]} rows but group_id has {n}; "
                    "every field needs one value per step row"
                )
            arr = _coerce(name, arr)
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        self._check_structure()

    # ------------------------------------------------------------------ validation
    def _check_structure(self) -> None:
        b = len(self)
        if b == 0:
            return
        if not np.all(np.isfinite(self.reward)):
            bad = int(np.flatnonzero(~np.isfinite(self.reward))[0])
            raise ValueError(f"StepBatch.reward has a non-finite value at row {bad}")
        if np.any(self.step < 0):
            bad = int(np.flatnonzero(self.step < 0)[0])
            raise ValueError(f"StepBatch.step must be >= 0; row {bad} has {self.step[bad]}")
        order = np.lexsort((self.step, self.traj_id))
        tid = self.traj_id[order]
        st = self.step[order]
        starts = np.ones(b, dtype=bool)
        starts[1:] = tid[1:] != tid[:-1]
        start_idx = np.flatnonzero(starts)
        # expected step = position inside the trajectory run
        run_start = np.repeat(start_idx, np.diff(np.append(start_idx, b)))
        expected = np.arange(b) - run_start
        if not np.array_equal(st, expected):
            bad = int(np.flatnonzero(st != expected)[0])
            raise ValueError(
                f"StepBatch.step must be 0..T-1 without gaps or duplicates in every trajectory; "
                f"trajectory {int(tid[bad])} has step {int(st[bad])} where {int(expected[bad])} "
                "was expected"
            )
        for name in ("group_id", "success"):
            col = getattr(self, name)[order]
            first = np.repeat(col[start_idx], np.diff(np.append(start_idx, b)))
            if not np.array_equal(col, first):
                bad = int(np.flatnonzero(col != first)[0])
                what = "task group" if name == "group_id" else "success value"
                raise ValueError(
                    f"StepBatch.{name}: trajectory {int(tid[bad])} has more than one {what}; "
                    f"all rows of a trajectory must share one {name}"
                )

    # ------------------------------------------------------------------ helpers
    def __len__(self) -> int:
        return int(self.group_id.shape[0])

    @property
    def num_trajectories(self) -> int:
        """Number of distinct trajectories."""
        return int(np.unique(self.traj_id).size)

    @property
    def num_groups(self) -> int:
        """Number of distinct task groups."""
        return int(np.unique(self.group_id).size)

    def take(self, index: np.ndarray) -> StepBatch:
        """Rows selected by ``index`` (int array or boolean mask), as a new validated batch.

        Selecting part of a trajectory breaks the 0..T-1 rule and raises ValueError.
        """
        return StepBatch(
            **{name: getattr(self, name)[index] for name in _INT_FIELDS + _FLOAT_FIELDS + _BOOL_FIELDS},
            extras=dict(self.extras),
        )

    @staticmethod
    def concat(batches: Iterable[StepBatch]) -> StepBatch:
        """Concatenate batches row-wise (ids must already be distinct across batches)."""
        batches = list(batches)
        if not batches:
            raise ValueError("StepBatch.concat needs at least one batch")
        return StepBatch(
            **{
                name: np.concatenate([getattr(b, name) for b in batches])
                for name in _INT_FIELDS + _FLOAT_FIELDS + _BOOL_FIELDS
            }
        )

    def to_dict(self) -> dict[str, np.ndarray]:
        """The fields as a dict of arrays (no copy)."""
        return {name: getattr(self, name) for name in _INT_FIELDS + _FLOAT_FIELDS + _BOOL_FIELDS}


def _coerce(name: str, arr: np.ndarray) -> np.ndarray:
    if name in _INT_FIELDS:
        if arr.size == 0:
            return arr.astype(np.int64)
        if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and name == "state_key":
            return arr.view(np.int64).copy()
        if arr.dtype.kind not in "iub":
            raise ValueError(
                f"StepBatch.{name} must hold integers, got dtype {arr.dtype}"
                + ("; hash string keys with g2po_bench.core.batch.hash_state_keys" if name == "state_key" else "")
            )
        return arr.astype(np.int64)
    if name in _FLOAT_FIELDS:
        if arr.size and arr.dtype.kind not in "iuf":
            raise ValueError(f"StepBatch.{name} must be numeric, got dtype {arr.dtype}")
        return arr.astype(np.float64)
    if arr.size and arr.dtype.kind != "b":
        if arr.dtype.kind in "iu" and np.isin(arr, (0, 1)).all():
            return arr.astype(bool)
        raise ValueError(f"StepBatch.{name} must be boolean, got dtype {arr.dtype}")
    return arr.astype(bool)
