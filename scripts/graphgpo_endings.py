"""Where GraphGPO's failed episodes end: the state after a failed episode's last step, read from
a run's step tables (the ``next_state_key`` column GraphGPO runs record).

For every failed trajectory of the tables: whether its last observation is a state some rollout
of the same task group acted from (a known node of the group graph), whether that state's label
starts with "Nothing happens." (ALFWorld's reply to a refused command; raw-observation keys make
every such reply one node), and the distance to "success" the estimator gave it
(``next_distance``, a row term of the table).

Usage::

    python scripts/graphgpo_endings.py results/proxy/sweep/runs/alfworld-graphgpo-s*   # every step table of the runs
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from g2po_bench.core.steptable import read_step_table, recorded_iterations


def endings(run: Path) -> Counter:
    """Counts of the failed trajectories of every step table of ``run``: ``failed``, ``known``
    (the last observation is an anchor of the group), ``nothing_happens`` (a known one whose label
    starts with "Nothing happens."), and ``d=<k>`` (the distance of the known last state)."""
    out: Counter = Counter()
    for it in recorded_iterations(run):
        frame = read_step_table(run, it).frame
        if "next_state_key" not in frame.columns:
            raise SystemExit(f"{run}: iteration {it}'s step table has no next_state_key column "
                             "(recorded before GraphGPO read the last observation)")
        for _, group in frame.groupby("group_id"):
            labels = dict(zip(group["state_key"], group["state_label"]))
            for _, traj in group.groupby("traj_id"):
                last = traj.sort_values("step").iloc[-1]
                if last["success"]:
                    continue
                out["failed"] += 1
                if last["next_state_key"] in labels:
                    out["known"] += 1
                    out["nothing_happens"] += str(labels[last["next_state_key"]]).startswith("Nothing happens")
                    out[f"d={int(last['next_distance'])}"] += 1
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the counts per run and in total."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="GraphGPO run folders with step tables")
    args = p.parse_args(argv)
    total: Counter = Counter()
    for run in args.runs:
        c = endings(run)
        total.update(c)
        print(f"{run.name}: {dict(sorted(c.items()))}")
    if total["failed"]:
        print(f"all: {total['failed']} failed trajectories; last observation a known state: "
              f"{total['known'] / total['failed']:.1%}; 'Nothing happens.': {total['nothing_happens'] / total['failed']:.1%}; "
              f"distances of the known ones: {dict(sorted((k, v) for k, v in total.items() if k.startswith('d=')))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
