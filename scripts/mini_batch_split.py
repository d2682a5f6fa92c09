"""Which iterations of a recorded run would another ``train.mini_batch_split`` cut differently?

Reads a run folder's ``metrics.jsonl`` (``train/steps`` per iteration) and ``config.yaml``
(``train.mini_batch_size``) and prints, per rule of :mod:`g2po_bench.algorithms.backends.batching`,
the mini-batch sizes of every iteration, how many iterations end with a mini-batch under 16 rows
and under ``mini_batch_size // 2``, and how many iterations the rule cuts differently from the
run's own rule. No training: the row counts are those the run recorded (every step sample whose
response has at least one token enters the update; the local sampler keeps the end-of-sequence
token, so every response has one).

An iteration cut differently takes other optimizer steps, so from the first such iteration on the
weights, and with them every later episode, differ from the recorded run's.

Usage::

    python scripts/mini_batch_split.py results/proxy/sweep/runs/alfworld-g2po-s0-1acd082ae3 [--rule fixed] [-v]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml


def main(argv: list[str] | None = None) -> int:
    """Print the comparison (module docstring); returns 0, or 2 for a folder without the records."""
    from g2po_bench.algorithms.backends.batching import MINI_BATCH_RULES, mini_batch_sizes

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a training run folder (metrics.jsonl, config.yaml)")
    p.add_argument("--rule", choices=MINI_BATCH_RULES, default="balanced", help="the rule to compare with")
    p.add_argument("-v", "--verbose", action="store_true", help="print every iteration's sizes")
    args = p.parse_args(argv)
    metrics, config = args.run / "metrics.jsonl", args.run / "config.yaml"
    if not metrics.is_file() or not config.is_file():
        print(f"{args.run}: no metrics.jsonl or config.yaml; give a training run's folder")
        return 2
    train = (yaml.safe_load(config.read_text()) or {}).get("train", {})
    size = int(train.get("mini_batch_size", 128))
    own = str(train.get("mini_batch_split", "fixed"))
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    steps = [(int(r["iteration"]), int(r["train/steps"])) for r in rows if "train/steps" in r]
    changed = []
    for rule in (own, args.rule) if args.rule != own else (own,):
        small = [(it, n) for it, n in steps if min(mini_batch_sizes(n, size, rule)) < 16]
        half = [(it, n) for it, n in steps if min(mini_batch_sizes(n, size, rule)) < size // 2]
        print(f"{rule:9} ({size} rows per mini-batch): {len(steps)} iterations, {min(n for _, n in steps)}-"
              f"{max(n for _, n in steps)} rows; ending with a mini-batch under 16 rows: {len(small)} "
              f"(iterations {', '.join(f'{it} ({mini_batch_sizes(n, size, rule)[-1]} of {n})' for it, n in small)}); "
              f"under {size // 2} rows: {len(half)}")
        if args.verbose:
            for it, n in steps:
                print(f"  iteration {it}: {n} rows -> {mini_batch_sizes(n, size, rule)}")
    if args.rule != own:
        changed = [it for it, n in steps if mini_batch_sizes(n, size, own) != mini_batch_sizes(n, size, args.rule)]
        first = f", the first at iteration {changed[0]}" if changed else ""
        print(f"{args.rule} cuts {len(changed)} of {len(steps)} iterations differently from {own}{first}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
