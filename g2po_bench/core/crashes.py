"""When an iteration counts as crashed-heavy: the one definition the trainers and ``g2po report`` share.

An iteration is *crashed-heavy* when most of its training episodes crashed (their environment
or worker process failed): ``train/crashed > CRASHED_HEAVY_FRACTION * train/episodes``. Such an
iteration measures the environment, not the policy. The trainers never record one (they retry
it after restarting the workers, then fail the run with the reason); ``g2po_bench.analysis.load`` flags any
run whose ``metrics.jsonl`` holds one (written by older code, or by a run that was interrupted
by signals before the signal policy of :mod:`g2po_bench.runtime.shutdown` existed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["CRASHED_HEAVY_FRACTION", "crashed_fraction", "is_crashed_heavy", "crashed_heavy_iterations"]

#: More than this fraction of an iteration's episodes crashed: the iteration is crashed-heavy.
CRASHED_HEAVY_FRACTION = 0.5


def crashed_fraction(crashed: int, episodes: int) -> float:
    """``crashed / episodes`` (0 when there are no episodes).

    Raises:
        ValueError: negative counts, or more crashed episodes than episodes.
    """
    if crashed < 0 or episodes < 0 or crashed > episodes:
        raise ValueError(f"crashed={crashed}, episodes={episodes}: need 0 <= crashed <= episodes")
    return crashed / episodes if episodes else 0.0


def is_crashed_heavy(crashed: int, episodes: int) -> bool:
    """Whether more than :data:`CRASHED_HEAVY_FRACTION` of ``episodes`` crashed."""
    return episodes > 0 and crashed_fraction(crashed, episodes) > CRASHED_HEAVY_FRACTION


def crashed_heavy_iterations(records: Iterable[Mapping[str, Any]], episodes: int | None = None) -> list[int]:
    """Iterations of ``metrics.jsonl`` records that are crashed-heavy.

    Args:
        records: metric records (``iteration``, ``train/crashed``, ``train/episodes``).
        episodes: episodes per iteration for records without ``train/episodes`` (older runs:
            ``train.groups_per_batch * train.group_size`` of the config); None: such a record
            counts as crashed-heavy only when it has crashed episodes and no step at all.

    Returns:
        The iterations (sorted as in ``records``).
    """
    out = []
    for rec in records:
        crashed = rec.get("train/crashed")
        if not isinstance(crashed, (int, float)) or crashed <= 0:
            continue
        n = rec.get("train/episodes", episodes)
        if isinstance(n, (int, float)) and n > 0:
            heavy = crashed > CRASHED_HEAVY_FRACTION * n
        else:
            heavy = rec.get("train/steps") == 0
        if heavy:
            out.append(int(rec.get("iteration", -1)))
    return out
