"""The ``report`` command's arguments and action, for wiring into the project CLI.

Wiring (in ``g2po_bench/cli.py``)::

    from g2po_bench.analysis.cli import add_report_arguments, run_report
    p = subparsers.add_parser("report", help="tables and figures from run folders")
    add_report_arguments(p)
    p.set_defaults(func=run_report)        # run_report(args) -> exit code

Usage: ``g2po report RESULTS_DIR --out DIR`` (also ``python -m g2po_bench.analysis RESULTS_DIR --out DIR``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from g2po_bench.analysis.credit.record import find_records
from g2po_bench.analysis.load import DuplicateRunsError, find_run_dirs

__all__ = ["add_report_arguments", "run_report", "main"]


def add_report_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the report arguments to ``parser`` and return it.

    Arguments: ``results_dir`` (positional, one or more folders read as one set of runs),
    ``--out`` (default ``RESULTS_DIR/report`` of the first), ``--which`` (final | best),
    ``--n-boot``, ``--seed``, ``--confidence``, ``--no-figures``, ``--min-iterations``,
    ``--methods``.
    """
    parser.add_argument("results_dir", nargs="+",
                        help="folder(s) with run folders (searched recursively), e.g. results/runs; several folders "
                             "are one set of runs (an ablation's runs beside a comparison's)")
    parser.add_argument("--out", default=None, help="output folder for report.md, tables and figures (default: RESULTS_DIR/report)")
    parser.add_argument("--methods", nargs="+", default=None, metavar="METHOD",
                        help="only the runs of these methods (row names such as G2PO, or algorithm names such as g2po), "
                             "their variants included")
    parser.add_argument("--which", choices=("final", "best"), default="final", help="which evaluation of each run to tabulate (default: final)")
    parser.add_argument("--n-boot", type=int, default=10_000, help="bootstrap resamples for the confidence intervals (default: 10000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default: 0)")
    parser.add_argument("--confidence", type=float, default=0.95, help="confidence level of the intervals (default: 0.95)")
    parser.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    parser.add_argument("--min-iterations", type=int, default=None,
                        help="a training run with fewer RL iterations, or fewer than the longest run of its environment "
                             "and model size in the report, is marked short (†) and listed (default: the CPU default's "
                             "train.iterations)")
    return parser


def run_report(args: argparse.Namespace) -> int:
    """Write the report for parsed ``args``; print where it is and a summary. Returns an exit code
    (0 ok, 2 the results folder does not exist or holds neither a run folder nor a credit study
    (``credit.json``), an argument is out of range, or two runs have the same method/size/env/seed).
    Evaluation-only folders are listed as skipped, one line each."""
    dirs = [Path(d) for d in (args.results_dir if isinstance(args.results_dir, list) else [args.results_dir])]
    results_dir = dirs[0]
    out = Path(args.out) if args.out else results_dir / "report"
    for folder in dirs:
        if not folder.is_dir():
            print(f"error: results folder {str(folder)!r} does not exist; pass a folder holding run folders, "
                  "e.g. results/runs", file=sys.stderr)
            return 2
    if args.n_boot < 1 or not 0 < args.confidence < 1:
        print("error: --n-boot must be >= 1 and --confidence in (0, 1)", file=sys.stderr)
        return 2
    if getattr(args, "min_iterations", None) is not None and args.min_iterations < 0:
        print("error: --min-iterations must be >= 0", file=sys.stderr)
        return 2
    # lazy: the report draws with matplotlib (about 1 s to import); `g2po --help` must not wait for it
    from g2po_bench.analysis.report import MethodSelectionError, build_report

    for folder in dirs:
        if not find_run_dirs(folder) and not find_records(folder):
            print(f"error: no run folder under {str(folder)!r} (a run folder holds the config.yaml and "
                  "metrics.jsonl that `g2po train` writes; a credit study its credit.json); pass a folder holding run "
                  "folders, e.g. results/runs", file=sys.stderr)
            return 2

    try:
        res = build_report(
            results_dir if len(dirs) == 1 else dirs,
            out,
            which=args.which,
            n_boot=args.n_boot,
            seed=args.seed,
            confidence=args.confidence,
            figures=not args.no_figures,
            min_iterations=getattr(args, "min_iterations", None),
            methods=getattr(args, "methods", None),
        )
    except (FileNotFoundError, DuplicateRunsError, MethodSelectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    runs = res.loaded.runs
    n_prog = int(runs["in_progress"].sum()) if len(runs) else 0
    drawn = sum(1 for p in res.figures.values() if p is not None)
    print(f"report: {res.report_path}")
    print(
        f"runs: {len(runs)} included ({n_prog} in progress), {len(res.loaded.skipped)} skipped; "
        f"figures: {drawn}"
    )
    for p in res.loaded.skipped:
        print(f"  skipped {p.run_id}: {p.reason}")
    for p in res.loaded.warnings:
        print(f"  warning {p.run_id}: {p.reason}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m g2po_bench.analysis RESULTS_DIR --out DIR [--which best] [--n-boot N] [--seed S]
    [--no-figures]``: :func:`run_report` on the parsed arguments; returns its exit code."""
    parser = argparse.ArgumentParser(prog="g2po report",
                                     description="Tables and figures from run folders, beside the published numbers.")
    add_report_arguments(parser)
    return run_report(parser.parse_args(list(argv) if argv is not None else None))
