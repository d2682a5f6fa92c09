"""Do two training runs play the same episodes? Compare their records, evaluation by evaluation.

A run of the CPU default is exactly reproducible on one machine (same commit, config, seed and
CPU kernels: ``status.json`` ``machine``). This checks that claim for two run folders, e.g. a
sweep's run against the benchmark's run of the same config, before one is used for the other:

- every evaluation in ``eval.json`` (``before``, each ``history`` entry, ``final``, and
  ``at_train_temperature`` ``before``/``final``): the per-episode outcomes ``episodes``
  (``[[task, success], ...]``), compared as lists (same tasks, order and outcomes);
- every line of ``metrics.jsonl``, every key but the timings (keys ending in ``_s`` or
  ``_per_s``, and ``record/bytes``), compared for exact equality.

Usage::

    python scripts/compare_runs.py RUN_A RUN_B      # exit 0 when identical, 1 when not, 2 on bad input

Prints one line per evaluation (``same`` / ``DIFFERENT`` with both success counts), then the
number of metric values that differ, and the first few of them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _is_timing(key: str) -> bool:
    return key.endswith("_s") or key == "record/bytes"


def _order(name: str) -> tuple:
    """before, iter<K> by K, final, then the training-temperature ones."""
    rank = {"before": 0, "final": 2, "T_before": 3, "T_final": 4}
    if name.startswith("iter") and name[4:].isdigit():
        return (1, int(name[4:]))
    return (rank.get(name, 5), 0)


def evaluations(eval_json: dict[str, Any]) -> dict[str, list]:
    """The per-episode outcomes of every evaluation of one ``eval.json``.

    Returns:
        ``{name: [[task, success], ...]}`` with names ``before``, ``iter<K>`` (``history``),
        ``final``, ``T_before`` and ``T_final`` (``at_train_temperature``, when recorded).
    """
    out: dict[str, list] = {}
    for name in ("before", "final"):
        if isinstance(eval_json.get(name), dict):
            out[name] = eval_json[name].get("episodes") or []
    for record in eval_json.get("history") or []:
        out[f"iter{record.get('iteration')}"] = record.get("episodes") or []
    at_t = eval_json.get("at_train_temperature") or {}
    for name in ("before", "final"):
        if isinstance(at_t.get(name), dict):
            out[f"T_{name}"] = at_t[name].get("episodes") or []
    return out


def compare_runs(a: Path, b: Path) -> dict[str, Any]:
    """Compare two run folders' ``eval.json`` and ``metrics.jsonl``.

    Returns:
        ``{"evaluations": {name: (same: bool, successes_a: int, successes_b: int)},
        "metric_diffs": [(line, key, value_a, value_b), ...], "lines": (n_a, n_b),
        "identical": bool}``. An evaluation only one run has, or one without per-episode
        records (nothing to compare), counts as different.

    Raises:
        FileNotFoundError: a folder lacks ``eval.json`` or ``metrics.jsonl``.
        ValueError (json.JSONDecodeError): a record is not valid JSON.
    """
    ev_a = evaluations(json.loads((a / "eval.json").read_text(encoding="utf-8")))
    ev_b = evaluations(json.loads((b / "eval.json").read_text(encoding="utf-8")))
    evals = {}
    for name in sorted(set(ev_a) | set(ev_b), key=_order):
        ea, eb = ev_a.get(name), ev_b.get(name)
        evals[name] = (bool(ea) and ea == eb, sum(int(s) for _, s in ea or []),
                       sum(int(s) for _, s in eb or []))
    ma = [json.loads(line) for line in (a / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    mb = [json.loads(line) for line in (b / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    diffs = []
    for i, (ra, rb) in enumerate(zip(ma, mb)):
        for key in sorted(set(ra) | set(rb)):
            if not _is_timing(key) and ra.get(key) != rb.get(key):
                diffs.append((i + 1, key, ra.get(key), rb.get(key)))
    identical = all(same for same, _, _ in evals.values()) and not diffs and len(ma) == len(mb)
    return {"evaluations": evals, "metric_diffs": diffs, "lines": (len(ma), len(mb)), "identical": identical}


def main(argv: list[str] | None = None) -> int:
    """Print the comparison; exit 0 when the runs are identical, 1 when not, 2 on bad input."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="exit status: 0 identical, 1 not identical, 2 bad input")
    parser.add_argument("run_a", type=Path, help="a training run's folder (eval.json, metrics.jsonl)")
    parser.add_argument("run_b", type=Path, help="the run to compare it with")
    args = parser.parse_args(argv)
    for run in (args.run_a, args.run_b):
        if not run.is_dir():
            print(f"{run}: no such folder: give a training run's folder (results/runs/<run_id>)", file=sys.stderr)
            return 2
        missing = [f for f in ("eval.json", "metrics.jsonl") if not (run / f).is_file()]
        if missing:
            print(f"{run}: no {', '.join(missing)}: give a training run's folder (results/runs/<run_id>)",
                  file=sys.stderr)
            return 2
    try:
        res = compare_runs(args.run_a, args.run_b)
    except ValueError as exc:  # json.JSONDecodeError
        print(f"a record does not parse as JSON ({exc}): is a run still writing it?", file=sys.stderr)
        return 2
    for name, (same, sa, sb) in res["evaluations"].items():
        print(f"{name:>10}: {'same' if same else 'DIFFERENT'} ({sa} and {sb} successes)")
    n_a, n_b = res["lines"]
    print(f"metrics.jsonl: {n_a} and {n_b} lines; {len(res['metric_diffs'])} non-timing values differ")
    for line, key, va, vb in res["metric_diffs"][:10]:
        print(f"  line {line} {key}: {va!r} != {vb!r}")
    print("identical" if res["identical"] else "NOT identical")
    return 0 if res["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
