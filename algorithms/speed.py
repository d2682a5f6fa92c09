"""Advantage-estimator speed (``g2po bench advantages``): every registered estimator, next to its per-row oracle.

Source: the reference batch (16 task groups x 8 rollouts, ALFWorld's 50-step limit: verl-agent
``examples/gigpo_trainer/run_alfworld.sh``) and the G2PO paper's compute per training step
(arXiv 2606.22995: the reference advantage step costs about 1 s per iteration, in pure-Python
loops; ``results/reference/other_published.csv``); docs/design-notes.md "Training-loop facts".
Run::

    python -m g2po_bench.algorithms.speed                      # reference batch, 1e5 and 1e6 rows
    python -m g2po_bench.algorithms.speed --sizes reference 100000 --repeats 5 --json out.json

For every registered estimator (built-in, installed, or imported with ``--module``) and batch
size it reports rows/s and ms per batch of the vectorized estimator (median wall time of at
least ``repeats`` runs after one warm-up, the minimum, and the median CPU time of the process,
which a busy shared machine inflates less) and of its per-row oracle (registered beside the
estimator; one run), and the speed-up. An estimator without an oracle is timed alone (oracle
column "none"). When the oracle would take longer than ``oracle_time_limit`` seconds
(predicted from its rate on the previous size) it is not run and its time is extrapolated
linearly from that rate (marked "extrapolated"). Batches come from
:func:`g2po_bench.algorithms.synthetic.random_step_batch`; the inputs an estimator declares
(critic values, entropies, texts) from :func:`g2po_bench.algorithms.synthetic.synthetic_inputs`.
Everything runs in this process on one core (numpy's sort and bincount are single-threaded).
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from g2po_bench.algorithms.registry import (
    available_estimators,
    estimate,
    estimator_inputs,
    estimator_spec,
    import_estimator_module,
    oracle_estimate,
)
from g2po_bench.algorithms.synthetic import batch_with_rows, reference_batch, synthetic_inputs
from g2po_bench.core.arguments import ArgumentParser

__all__ = ["run_advantage_benchmark", "format_table", "main"]

REFERENCE = "reference"


def _make_batch(size: int | str, seed: int):
    rng = np.random.default_rng(seed)
    if size == REFERENCE:
        return reference_batch(rng)
    return batch_with_rows(rng, int(size))


def _inputs(name: str, batch, seed: int) -> dict[str, Any]:
    return synthetic_inputs(batch, estimator_inputs(name), np.random.default_rng(seed + 1))


def run_advantage_benchmark(
    sizes: Sequence[int | str] = (REFERENCE, 10**5, 10**6),
    estimators: Sequence[str] | None = None,
    repeats: int = 5,
    *,
    oracle: bool = True,
    oracle_time_limit: float = 60.0,
    min_time: float = 0.25,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Time every estimator on batches of the given sizes, next to its per-row oracle.

    Args:
        sizes: ``"reference"`` (16 groups x 8 rollouts x up to 50 steps) or a row count (the
            batch is made of whole reference-style task groups, so the count is approximate).
        estimators: registered names (default: all).
        repeats: timed runs of the vectorized estimator (median reported), >= 1; more runs
            are made until they add up to ``min_time`` seconds (at most 1000), which steadies
            the figures of small batches.
        oracle: also time the per-row oracle (of the estimators that register one).
        oracle_time_limit: seconds; a longer predicted oracle run is extrapolated instead.
        seed: batch seed.

    Returns:
        One dict per (size, estimator): ``estimator``, ``size`` (label), ``rows``, ``fast_ms``
        (median wall time), ``fast_ms_min``, ``fast_cpu_ms`` (median CPU time of this process,
        robust to other load on a shared machine), ``fast_runs``, ``fast_rows_per_s`` (from the median), ``oracle_ms``, ``oracle_rows_per_s``, ``speedup`` (oracle / fast;
        None without oracle), ``oracle`` ("measured" | "extrapolated" | "skipped" | "none": the
        estimator registers no oracle).

    Raises:
        ValueError: repeats < 1 or an unknown estimator.
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    names = list(estimators) if estimators is not None else available_estimators()
    for name in names:
        if name not in available_estimators():
            raise ValueError(f"unknown estimator {name!r}; known: {available_estimators()}")
    oracle_rate: dict[str, float] = {}  # rows per second measured on the last size
    rows_out: list[dict[str, Any]] = []
    for size in sizes:
        batch = _make_batch(size, seed)
        n = len(batch)
        for name in names:
            opts = {"inputs": _inputs(name, batch, seed)}
            estimate(name, batch, **opts)  # warm-up
            times: list[float] = []
            cpu: list[float] = []
            while len(times) < repeats or (sum(times) < min_time and len(times) < 1000):
                c0 = time.process_time()
                t0 = time.perf_counter()
                estimate(name, batch, **opts)
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            fast = statistics.median(times)
            row: dict[str, Any] = {
                "estimator": name,
                "size": str(size),
                "rows": n,
                "fast_ms": fast * 1e3,
                "fast_ms_min": min(times) * 1e3,
                "fast_cpu_ms": statistics.median(cpu) * 1e3,
                "fast_runs": len(times),
                "fast_rows_per_s": n / fast if fast > 0 else float("inf"),
                "oracle_ms": None,
                "oracle_rows_per_s": None,
                "speedup": None,
                "oracle": "skipped",
            }
            if oracle and estimator_spec(name).oracle is None:
                row["oracle"] = "none"
            elif oracle:
                predicted = n / oracle_rate[name] if name in oracle_rate else 0.0
                if predicted > oracle_time_limit:
                    slow = predicted
                    row["oracle"] = "extrapolated"
                else:
                    t0 = time.perf_counter()
                    oracle_estimate(name, batch, **opts)
                    slow = time.perf_counter() - t0
                    oracle_rate[name] = n / slow if slow > 0 else float("inf")
                    row["oracle"] = "measured"
                row["oracle_ms"] = slow * 1e3
                row["oracle_rows_per_s"] = n / slow if slow > 0 else float("inf")
                row["speedup"] = slow / fast if fast > 0 else float("inf")
            rows_out.append(row)
    return rows_out


def format_table(rows: list[dict[str, Any]]) -> str:
    """The benchmark rows as a fixed-width text table."""
    head = (
        f"{'estimator':<9} {'size':>9} {'rows':>9} {'fast ms':>10} {'min ms':>9} {'cpu ms':>9} "
        f"{'fast rows/s':>12} "
        f"{'oracle ms':>11} {'oracle rows/s':>13} {'speed-up':>9}  oracle"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        o_ms = f"{r['oracle_ms']:.1f}" if r["oracle_ms"] is not None else "-"
        o_rate = f"{r['oracle_rows_per_s']:.3g}" if r["oracle_rows_per_s"] is not None else "-"
        sp = f"{r['speedup']:.0f}x" if r["speedup"] is not None else "-"
        lines.append(
            f"{r['estimator']:<9} {r['size']:>9} {r['rows']:>9} {r['fast_ms']:>10.2f} "
            f"{r['fast_ms_min']:>9.2f} {r['fast_cpu_ms']:>9.2f} "
            f"{r['fast_rows_per_s']:>12.3g} {o_ms:>11} {o_rate:>13} {sp:>9}  {r['oracle']}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m g2po_bench.algorithms.speed [--sizes ...] [--estimators ...]``."""
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=[REFERENCE, "100000", "1000000"],
                        help="'reference' and/or row counts")
    parser.add_argument("--estimators", nargs="+", default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-oracle", action="store_true")
    parser.add_argument("--oracle-time-limit", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument("--module", action="append", default=[],
                        help="import this module first (its estimators join the benchmark); repeatable")
    args = parser.parse_args(argv)
    for module in args.module:
        import_estimator_module(module)
    sizes: list[int | str] = [s if s == REFERENCE else int(float(s)) for s in args.sizes]
    rows = run_advantage_benchmark(
        sizes,
        args.estimators,
        args.repeats,
        oracle=not args.no_oracle,
        oracle_time_limit=args.oracle_time_limit,
        seed=args.seed,
    )
    print(f"advantage estimators, numpy {np.__version__}, Python {platform.python_version()}, "
          f"{platform.machine()}; fast = median of >= {args.repeats} runs (>= 0.25 s), "
          "oracle = one run")
    print(format_table(rows))
    if any(r["oracle"] == "extrapolated" for r in rows):
        print(f"'extrapolated': the per-row oracle would take more than {args.oracle_time_limit:.0f} s; "
              "its time is extrapolated linearly from its rate on the previous size.")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
