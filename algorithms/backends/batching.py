"""How an iteration's step samples are cut into mini-batches (one optimizer step each).

An iteration of a multi-turn rollout yields a varying number of step samples (the CPU default,
G2PO seed 0: 700-1,037 rows per iteration over 54 iterations; ``python scripts/mini_batch_split.py
results/proxy/sweep/runs/alfworld-g2po-s0-1acd082ae3``: "fixed" would end 6 of its iterations
with a mini-batch under 16 rows (12, 13, 1, 15, 14 and 9 rows at iterations 2, 4, 16, 25, 40, 53)
and 32 under 64, and cut 52 of the 54 differently from "balanced", the run's rule, from
iteration 1 on). Cut into consecutive chunks of
``train.mini_batch_size`` rows, the last chunk holds the remainder, which can be a single row:
129 rows and a size of 128 give [128, 1], and the one-row step moves the weights about as far as
a full one (Adam normalises the gradient's scale).

Rules (``train.mini_batch_split``):

- ``"fixed"`` (the reference's cut; the reference presets and ``backend=openrlhf`` use it):
  chunks of ``mini_batch_size`` in the shuffled order, the last one holds the remainder (any size
  from 1 row).
- ``"balanced"`` (``backend=local``'s default, ``train.mini_batch_split=auto``): the fewest mini-batches of at most ``mini_batch_size`` rows,
  k = ceil(n / mini_batch_size), with sizes that differ by at most one row (the first n mod k
  mini-batches get one row more). No mini-batch exceeds ``mini_batch_size`` and, when n >=
  ``mini_batch_size``, none has fewer than ``mini_batch_size // 2`` rows (n / k > size / 2
  because k < n / size + 1 <= 2 n / size). 129 rows and a size of 128 give [65, 64].

The reference (verl-agent, as the G2PO repository ships it: ``agent_system/multi_turn_rollout/
utils.py`` ``adjust_batch``, then verl's ``dp_actor`` ``batch.split(ppo_mini_batch_size)``) pads
the batch instead: it duplicates randomly chosen step samples until the row count is a multiple of
the least common multiple of the log-prob and update micro-batch sizes times the number of GPUs,
then cuts fixed chunks of ``ppo_mini_batch_size``; its last mini-batch can still be smaller (down
to one micro-batch per GPU), and the duplicated rows count twice in the loss. The project does not
duplicate rows; the reference presets keep ``"fixed"``, the reference's own cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from g2po_bench.core.config import MINI_BATCH_RULES

__all__ = ["MINI_BATCH_RULES", "mini_batch_sizes", "split_mini_batches"]

# MINI_BATCH_RULES: the rules of ``train.mini_batch_split`` (module docstring), from the config schema

T = TypeVar("T")


def mini_batch_sizes(n: int, size: int, rule: str = "fixed") -> list[int]:
    """The row counts of the mini-batches of ``n`` rows under ``rule`` (module docstring).

    Args:
        n: rows (>= 0); size: ``train.mini_batch_size`` (>= 1); rule: one of :data:`MINI_BATCH_RULES`.

    Returns:
        Positive ints summing to ``n``, in the order the mini-batches are taken ([] for n = 0).

    Raises:
        ValueError: ``n < 0``, ``size < 1`` or an unknown rule (the message lists the rules).
    """
    if n < 0 or size < 1:
        raise ValueError(f"need n >= 0 rows and a mini-batch size >= 1, got n={n}, size={size}")
    if rule not in MINI_BATCH_RULES:
        raise ValueError(f"unknown mini-batch split {rule!r}; choose one of {', '.join(MINI_BATCH_RULES)} "
                         "(train.mini_batch_split)")
    if n == 0:
        return []
    if rule == "fixed":
        return [size] * (n // size) + ([n % size] if n % size else [])
    k = -(-n // size)
    base, extra = divmod(n, k)
    return [base + 1] * extra + [base] * (k - extra)


def split_mini_batches(rows: Sequence[T], size: int, rule: str = "fixed") -> list[list[T]]:
    """Cut ``rows`` (already in the order they are taken, e.g. shuffled) into consecutive
    mini-batches of :func:`mini_batch_sizes`.

    Raises:
        ValueError: as :func:`mini_batch_sizes`.
    """
    out: list[list[T]] = []
    start = 0
    for k in mini_batch_sizes(len(rows), size, rule):
        out.append(list(rows[start:start + k]))
        start += k
    return out
