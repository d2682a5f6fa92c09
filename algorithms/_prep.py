"""Shared preprocessing of a :class:`~g2po_bench.core.batch.StepBatch` for the vectorized estimators.

The estimators work in a *canonical row order*: rows sorted by (group_id, traj_id, step), so
that every trajectory is a contiguous run of rows in step order and every task group is a
contiguous run of trajectories. :func:`prepare` computes that order in O(B log B) (one sort of
the trajectory ids, then a counting sort of the rows; no sort at all when the batch already
comes in that order) together with the per-row quantities every estimator needs. Results are
computed in canonical order and scattered back with :meth:`Prepared.to_original`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from g2po_bench.algorithms.normalize import factorize
from g2po_bench.core.batch import StepBatch

__all__ = ["Prepared", "prepare", "reverse_linear_scan"]


@dataclass(frozen=True)
class Prepared:
    """A StepBatch in canonical order (sorted by group, trajectory, step).

    All row arrays have shape (B,) and are in canonical order:

    - ``group`` int64: dense task-group index in ``0..num_groups-1``.
    - ``traj`` int64: dense trajectory index in ``0..num_traj-1`` (ordered like the rows).
    - ``step`` int64: t; ``length`` int64: T of the row's trajectory.
    - ``is_first`` / ``is_last`` bool: t == 0 / t == T-1.
    - ``state_key`` int64, ``reward`` float64, ``success`` bool, ``invalid`` float64 (1.0 for
      an invalid action, else 0.0).
    - ``episode_return`` float64: R_tau, the sum of the trajectory's rewards.

    ``order`` maps canonical position -> original row (None when the batch was already in
    canonical order). ``traj_group`` (num_traj,) is the group of each trajectory.
    """

    n: int
    order: np.ndarray | None
    group: np.ndarray
    num_groups: int
    traj: np.ndarray
    num_traj: int
    traj_group: np.ndarray
    step: np.ndarray
    length: np.ndarray
    is_first: np.ndarray
    is_last: np.ndarray
    state_key: np.ndarray
    reward: np.ndarray
    success: np.ndarray
    invalid: np.ndarray
    episode_return: np.ndarray

    def to_original(self, x: np.ndarray) -> np.ndarray:
        """Scatter a canonical-order row array (B,) back to the batch's row order."""
        if self.order is None:
            return x
        out = np.empty_like(x)
        out[self.order] = x
        return out

    def from_original(self, x: np.ndarray) -> np.ndarray:
        """Gather a batch-order row array (B,) into canonical order."""
        if self.order is None:
            return np.asarray(x)
        return np.asarray(x)[self.order]


def _is_canonical(g: np.ndarray, t: np.ndarray, s: np.ndarray) -> bool:
    if g.shape[0] < 2:
        return True
    g0, g1, t0, t1, s0, s1 = g[:-1], g[1:], t[:-1], t[1:], s[:-1], s[1:]
    ok = (g1 > g0) | ((g1 == g0) & ((t1 > t0) | ((t1 == t0) & (s1 > s0))))
    return bool(ok.all())


def _run_ids(x: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids of the runs of equal consecutive values of x (x in canonical order)."""
    n = x.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    new = np.empty(n, dtype=np.int64)
    new[0] = 0
    np.not_equal(x[1:], x[:-1], out=new[1:])
    ids = np.cumsum(new)
    return ids, int(ids[-1]) + 1


def prepare(batch: StepBatch) -> Prepared:
    """Sort a validated StepBatch into canonical order and derive per-row quantities.

    Args:
        batch: a validated :class:`StepBatch` (steps 0..T-1 per trajectory, one group and one
            success value per trajectory: guaranteed by its constructor).

    Returns:
        :class:`Prepared`.
    """
    n = len(batch)
    g, t, s = batch.group_id, batch.traj_id, batch.step
    if _is_canonical(g, t, s):
        order = None
    else:
        # Counting sort: trajectories ordered by (group_id, traj_id); a row's position is the
        # offset of its trajectory plus its step (steps are 0..T-1 without gaps).
        tid, num_traj = factorize(t)  # ordered like traj_id values
        traj_gid = np.empty(num_traj, dtype=np.int64)
        traj_gid[tid] = g
        traj_rank_order = np.argsort(traj_gid, kind="stable")  # (group_id, traj_id) order
        lengths = np.bincount(tid, minlength=num_traj)
        offsets_sorted = np.zeros(num_traj, dtype=np.int64)
        np.cumsum(lengths[traj_rank_order][:-1], out=offsets_sorted[1:])
        offsets = np.empty(num_traj, dtype=np.int64)
        offsets[traj_rank_order] = offsets_sorted
        pos = offsets[tid] + s
        order = np.empty(n, dtype=np.int64)
        order[pos] = np.arange(n, dtype=np.int64)

    def take(a: np.ndarray) -> np.ndarray:
        return a if order is None else a[order]

    gid = take(g)
    traj_ids = take(t)
    step = take(s)
    group, num_groups = _run_ids(gid)
    traj, num_traj = _run_ids(traj_ids)
    lengths = np.bincount(traj, minlength=num_traj).astype(np.int64)
    length = lengths[traj]
    is_first = step == 0
    is_last = step == length - 1
    reward = take(batch.reward)
    success = take(batch.success)
    invalid = (~take(batch.action_valid)).astype(np.float64)
    ret = np.bincount(traj, weights=reward, minlength=num_traj).astype(np.float64)
    traj_group = np.zeros(num_traj, dtype=np.int64)
    traj_group[traj] = group
    return Prepared(
        n=n,
        order=order,
        group=group,
        num_groups=num_groups,
        traj=traj,
        num_traj=num_traj,
        traj_group=traj_group,
        step=step,
        length=length,
        is_first=is_first,
        is_last=is_last,
        state_key=take(batch.state_key),
        reward=reward,
        success=success,
        invalid=invalid,
        episode_return=ret[traj],
    )


def reverse_linear_scan(b: np.ndarray, a: np.ndarray, is_last: np.ndarray) -> np.ndarray:
    """Solve ``y_i = b_i + a_i * y_{i+1}`` backwards inside each trajectory, vectorized.

    Rows are in canonical order (a trajectory is a contiguous run in step order); at the last
    row of a trajectory ``y_i = b_i``. Used for discounted returns (a = gamma, b = r) and GAE
    (a = gamma * lambda, b = delta). Pointer jumping (a parallel prefix scan): ceil(log2 T_max)
    rounds of O(B) numpy work, no loop over rows.

    Args:
        b, a: (B,) float64; is_last: (B,) bool.

    Returns:
        (B,) float64.
    """
    n = b.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    # sentinel row n: y = 0, a = 0, next = n
    y = np.append(np.asarray(b, dtype=np.float64), 0.0)
    coef = np.append(np.where(is_last, 0.0, a).astype(np.float64), 0.0)
    nxt = np.append(np.arange(1, n + 1, dtype=np.int64), n)
    nxt[:n][is_last] = n
    while True:
        active = nxt[:n] != n
        if not active.any():
            break
        y = y + coef * y[nxt]
        coef = coef * coef[nxt]
        nxt = nxt[nxt]
    return y[:n]
