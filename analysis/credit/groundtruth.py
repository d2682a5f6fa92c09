"""Monte-Carlo ground truth of step advantages from continuations of the same policy.

Source: the suite's method (docs/credit.md; docs/design-notes.md "Credit-assignment ground truth"),
with Monte-Carlo values from continuations of the policy as in VinePPO (Kazemnejad et al., 2024,
arXiv 2410.01679). With a fixed policy pi and a deterministic environment, the state after an
action prefix is reproducible, so for a sampled step row i (trajectory tau, step t, action a_t,
history h_t):

- ``V(h) = P(success | h, then pi)``, estimated by the mean outcome of K continuations of pi
  started from the replayed prefix h (the step limit counts from the episode's start);
  ``V(h_T)`` of a terminal history is its outcome (success 1, failure, truncation or a refusal
  stop 0), known without continuations;
- transitions are deterministic, so ``Q(h_t, a_t) = V(h_{t+1})`` and the success-probability
  advantage is ``A*(i) = V(h_{t+1}) - V(h_t)``;
- the discounted one under gamma (in units of the success reward):
  ``A*_gamma(i) = r_t + gamma V_gamma(h_{t+1}) - V_gamma(h_t)`` with ``r_t`` = 1 if step t won,
  ``V_gamma(h) = E[gamma^(T' - 1 - t) * success]`` over continuations of length T' (steps from
  the reset) and ``V_gamma`` = 0 after the last step (the GiGPO step return, divided by R);
- the standard error of ``A*`` is that of the mean of the paired differences
  ``d_k = o_k(h_{t+1}) - o_k(h_t)`` over the continuations k (valid whether continuation k of
  the two prefixes shares its random numbers or not, see :mod:`g2po_bench.analysis.credit.study`);
- **split halves**: continuations k < K/2 (half A) and k >= K/2 (half B) give two independent
  estimates of every advantage (the reliability of ``A*`` and the oracle row,
  :mod:`g2po_bench.analysis.credit.scoring`);
- **pooled by first action** (a plug-in estimate with a small bias; not more reliable than the
  plain A*: with common random numbers a continuation from h_t whose first action is a_t is the
  continuation of the same k from h_{t+1}, so it counts twice in ``Q(a_t)``; its split-half
  reliability was lower in every committed study): every
  continuation from h_t also records its first action a'. Continuations from h_t whose first
  action is a_t pass through h_{t+1}, so ``Q(a_t)`` pools them with the continuations from
  h_{t+1}; with ``p`` the empirical frequency of a_t among the first actions at h_t and
  ``Q(other)`` the mean outcome of the others,
  ``A*_pool(i) = (1 - p) (Q(a_t) - Q(other))`` (0 when p = 1).

Pure numpy: no policy, no environment. Continuations that crashed are left out of every mean
(their count is reported).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["StudyRows", "Prefix", "Continuations", "GroundTruth", "index_prefixes", "ground_truth", "TARGETS",
           "TARGET_LABELS"]


@dataclass(frozen=True)
class Prefix:
    """One distinct, non-terminal history: a task and the actions taken from its reset.

    Attributes:
        task_index: index into the study's task list.
        actions: the t actions (environment texts) of steps 0..t-1.
        observations: the t + 1 recorded observation texts of states 0..t (the replay check).
        valid: the t recorded ``action_valid`` flags.
    """

    task_index: int
    actions: tuple[str, ...]
    observations: tuple[str, ...]
    valid: tuple[bool, ...]

    @property
    def step(self) -> int:
        """t, the step the policy takes over at."""
        return len(self.actions)


@dataclass
class StudyRows:
    """The sampled step rows and the prefixes their values need (:func:`index_prefixes`).

    All arrays have shape (B,), in the row order of the sampled RolloutBatch:
    ``group_id``, ``traj_id``, ``step`` int64; ``task_index`` int64; ``action`` object (str);
    ``won`` bool (the step ended the episode in success: ``r_t`` = 1); ``prefix`` int64 (index of
    h_t in ``prefixes``); ``next_prefix`` int64 (index of h_{t+1}, -1 when h_{t+1} is terminal);
    ``next_outcome`` float64 (the outcome of a terminal h_{t+1}: 1.0 success, 0.0 failure; NaN
    where h_{t+1} is not terminal).
    """

    group_id: np.ndarray
    traj_id: np.ndarray
    step: np.ndarray
    task_index: np.ndarray
    action: np.ndarray
    won: np.ndarray
    prefix: np.ndarray
    next_prefix: np.ndarray
    next_outcome: np.ndarray
    prefixes: list[Prefix] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.step.shape[0])


def index_prefixes(group_id: Sequence[int], traj_id: Sequence[int], step: Sequence[int],
                   task_index: Sequence[int], actions: Sequence[str], observations: Sequence[str],
                   valid: Sequence[bool], won: Sequence[bool], success: Sequence[bool]) -> StudyRows:
    """The distinct histories h_t of the sampled rows and which rows need which.

    Args (all (B,), the rows of a RolloutBatch, any row order; every trajectory complete):
        group_id, traj_id, step: the StepBatch columns.
        task_index: the index of each row's task in the study's task list.
        actions: the environment action of each row (``RolloutBatch.actions``).
        observations: the observation text of the state each row's action was taken from
            (``RolloutBatch.observations``).
        valid: ``action_valid``.
        won: the row's step won the episode (reward > 0).
        success: the trajectory succeeded.

    Returns:
        :class:`StudyRows`; two rows share a prefix when their task and action history are
        equal (the same history, since the environment is deterministic).

    Raises:
        ValueError: inputs of different lengths, or a trajectory with missing steps.
    """
    n = len(step)
    cols = (group_id, traj_id, task_index, actions, observations, valid, won, success)
    if any(len(c) != n for c in cols):
        raise ValueError("index_prefixes: every column needs one value per row")
    step = np.asarray(step, dtype=np.int64)
    traj = np.asarray(traj_id, dtype=np.int64)
    order = np.lexsort((step, traj))
    by_traj: dict[int, list[int]] = {}
    for r in order:
        by_traj.setdefault(int(traj[r]), []).append(int(r))
    prefix_of: dict[tuple[int, tuple[str, ...]], int] = {}
    prefixes: list[Prefix] = []
    cur = np.full(n, -1, dtype=np.int64)
    nxt = np.full(n, -1, dtype=np.int64)
    outcome = np.full(n, np.nan)
    for tid, rows in by_traj.items():
        if [int(step[r]) for r in rows] != list(range(len(rows))):
            raise ValueError(f"trajectory {tid} does not have the steps 0..T-1")
        acts = tuple(str(actions[r]) for r in rows)
        obs = tuple(str(observations[r]) for r in rows)
        flags = tuple(bool(valid[r]) for r in rows)
        task = int(task_index[rows[0]])
        for t, r in enumerate(rows):
            key = (task, acts[:t])
            if key not in prefix_of:
                prefix_of[key] = len(prefixes)
                prefixes.append(Prefix(task, acts[:t], obs[: t + 1], flags[:t]))
            cur[r] = prefix_of[key]
        for t, r in enumerate(rows[:-1]):
            nxt[r] = cur[rows[t + 1]]
        outcome[rows[-1]] = 1.0 if bool(success[rows[-1]]) else 0.0
    return StudyRows(
        group_id=np.asarray(group_id, dtype=np.int64), traj_id=traj, step=step,
        task_index=np.asarray(task_index, dtype=np.int64), action=np.asarray(list(actions), dtype=object),
        won=np.asarray(won, dtype=bool), prefix=cur, next_prefix=nxt, next_outcome=outcome, prefixes=prefixes,
    )


@dataclass
class Continuations:
    """The K continuations of every prefix, (P, K) arrays:

    - ``success`` bool: continuation k from prefix p succeeded;
    - ``length`` int64: its total number of steps from the reset (T');
    - ``first_action`` object (str): the action it took at the prefix's step t;
    - ``ok`` bool: it did not crash (crashed ones are left out of every mean);
    - ``merged`` bool or None: its end was taken from an earlier continuation with the same
      history and random numbers (:func:`g2po_bench.analysis.credit.study.run_continuations`).
    """

    success: np.ndarray
    length: np.ndarray
    first_action: np.ndarray
    ok: np.ndarray
    merged: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.success.shape)  # type: ignore[return-value]


@dataclass
class GroundTruth:
    """Per-row ground truth (every array (B,) float64 in row order, NaN where undefined).

    - ``v``: V(h_t); ``v_next``: V(h_{t+1}) (the outcome for a terminal h_{t+1});
    - ``a_star``: success-probability advantage; ``a_star_se``: its standard error;
    - ``a_star_disc``: the discounted advantage under ``gamma``;
    - ``a_star_pool``: the pooled-by-first-action estimate;
    - ``halves``: ``{"a_star", "a_star_disc", "a_star_pool"} -> (2, B)``: half A, half B;
    - ``gamma``: the discount used; ``continuations``: K; ``crashed``: continuations left out.
    """

    v: np.ndarray
    v_next: np.ndarray
    a_star: np.ndarray
    a_star_se: np.ndarray
    a_star_disc: np.ndarray
    a_star_pool: np.ndarray
    halves: dict[str, np.ndarray]
    gamma: float
    continuations: int
    crashed: int = 0

    def target(self, name: str) -> np.ndarray:
        """The (B,) column ``name`` ("a_star", "a_star_disc" or "a_star_pool").

        Raises:
            KeyError: another name.
        """
        if name not in TARGETS:
            raise KeyError(f"unknown ground-truth target {name!r}; choose one of {', '.join(TARGETS)}")
        return getattr(self, name)


#: the ground-truth columns estimators are scored against
TARGETS = ("a_star", "a_star_pool", "a_star_disc")
#: their names in tables and figures
TARGET_LABELS = {"a_star": "A* (success probability)", "a_star_pool": "A* pooled by first action",
                 "a_star_disc": "A* discounted"}


def _estimates(rows: StudyRows, cont: Continuations, cols: np.ndarray, gamma: float) -> dict[str, np.ndarray]:
    """Every row estimate from the continuation columns ``cols`` (bool (K,))."""
    ok = cont.ok & cols[None, :]
    n_ok = ok.sum(axis=1)
    succ = np.where(ok, cont.success, False).astype(float)
    t = np.array([p.step for p in rows.prefixes], dtype=np.int64)
    disc = np.where(ok, cont.success * gamma ** np.maximum(cont.length - 1 - t[:, None], 0), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        v_p = np.where(n_ok > 0, succ.sum(axis=1) / n_ok, np.nan)
        vd_p = np.where(n_ok > 0, disc.sum(axis=1) / n_ok, np.nan)
    cur, nxt = rows.prefix, rows.next_prefix
    term = nxt < 0
    v = v_p[cur]
    v_next = np.where(term, rows.next_outcome, v_p[np.maximum(nxt, 0)])
    vd_next = np.where(term, 0.0, vd_p[np.maximum(nxt, 0)])
    a_disc = rows.won.astype(float) + gamma * vd_next - vd_p[cur]
    # pooled by first action
    ok_cur = ok[cur]
    match = ok_cur & (cont.first_action[cur] == rows.action[:, None])
    other = ok_cur & ~match
    m = match.sum(axis=1)
    n_cur = ok_cur.sum(axis=1)
    succ_cur = succ[cur]
    sum_match = (succ_cur * match).sum(axis=1)
    sum_other = (succ_cur * other).sum(axis=1)
    n_next = np.where(term, 0, n_ok[np.maximum(nxt, 0)])
    sum_next = np.where(term, 0.0, succ.sum(axis=1)[np.maximum(nxt, 0)])
    with np.errstate(invalid="ignore", divide="ignore"):
        q_a = np.where(term, rows.next_outcome, (sum_next + sum_match) / (n_next + m))
        q_other = np.where(n_cur - m > 0, sum_other / np.maximum(n_cur - m, 1), 0.0)
        p = np.where(n_cur > 0, m / np.maximum(n_cur, 1), np.nan)
    pool = (1.0 - p) * (q_a - q_other)
    pool = np.where(p == 1.0, 0.0, pool)
    # paired differences for the standard error
    o_cur = np.where(ok_cur, cont.success[cur], np.nan).astype(float)
    o_next = np.where(term[:, None], rows.next_outcome[:, None],
                      np.where(ok[np.maximum(nxt, 0)], cont.success[np.maximum(nxt, 0)], np.nan).astype(float))
    d = o_next - o_cur
    n_d = np.isfinite(d).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_d = np.nansum(d, axis=1) / n_d
        var_d = np.nansum((d - mean_d[:, None]) ** 2, axis=1) / (n_d - 1)
        se = np.where(n_d >= 2, np.sqrt(var_d / n_d), np.nan)
    return {"v": v, "v_next": v_next, "a_star": v_next - v, "a_star_se": se, "a_star_disc": a_disc,
            "a_star_pool": pool}


def ground_truth(rows: StudyRows, cont: Continuations, *, gamma: float) -> GroundTruth:
    """Every row's ground truth from the continuations (module docstring for the formulas).

    Args:
        rows: :func:`index_prefixes` of the sampled rows (B rows, P prefixes).
        cont: the K continuations of each of the P prefixes (K >= 2).
        gamma: discount of ``a_star_disc`` (the estimators' ``gamma``).

    Returns:
        :class:`GroundTruth`.

    Raises:
        ValueError: ``cont`` does not have P rows, or K < 2.
    """
    p, k = cont.shape
    if p != len(rows.prefixes):
        raise ValueError(f"continuations for {p} prefixes, but the rows need {len(rows.prefixes)}")
    if k < 2:
        raise ValueError(f"need at least 2 continuations per prefix (two halves), got {k}")
    full = _estimates(rows, cont, np.ones(k, dtype=bool), gamma)
    half_a = np.arange(k) < k // 2
    a = _estimates(rows, cont, half_a, gamma)
    b = _estimates(rows, cont, ~half_a, gamma)
    halves = {name: np.stack([a[name], b[name]]) for name in TARGETS}
    return GroundTruth(v=full["v"], v_next=full["v_next"], a_star=full["a_star"], a_star_se=full["a_star_se"],
                       a_star_disc=full["a_star_disc"], a_star_pool=full["a_star_pool"], halves=halves,
                       gamma=float(gamma), continuations=int(k), crashed=int((~cont.ok).sum()))
