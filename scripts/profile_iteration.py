"""Profile the RL iterations of a local training run, and nothing else (setup, warm start and
evaluations run unprofiled).

Runs ``g2po train`` with the given overrides under :mod:`cProfile` switched on only inside
``TrainingLoop._iteration`` (:mod:`g2po_bench.algorithms.backends.loop`), writes the profile and
prints the functions with the most time (own time, and cumulative time of the project's own functions). To see what a CPU's kernel set
costs, run it twice with and without ``ATEN_CPU_CAPABILITY`` (e.g. ``avx2`` on an AVX-512 machine)
on an otherwise idle machine: on a loaded one the timings of the two runs are not comparable.

Usage::

    ATEN_CPU_CAPABILITY=avx2 python scripts/profile_iteration.py --out /tmp/it.prof -- \\
        train.iterations=1 eval.num_tasks=4 eval.every=0 eval.at_train_temperature=false

Everything after ``--`` is passed to ``g2po train``. The run folder goes under ``output_dir``
(set it to keep results/runs clean).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys


def main(argv: list[str] | None = None) -> int:
    """Train with the iterations profiled (module docstring); returns ``g2po train``'s exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    own, train_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="iteration.prof", help="where to write the profile (pstats format)")
    p.add_argument("--top", type=int, default=25, help="functions to print")
    args = p.parse_args(own)

    from g2po_bench.algorithms.backends.loop import TrainingLoop
    from g2po_bench.cli import main as g2po_main

    profile = cProfile.Profile()
    iteration = TrainingLoop._iteration

    def profiled(self, *a, **k):
        profile.enable()
        try:
            return iteration(self, *a, **k)
        finally:
            profile.disable()

    TrainingLoop._iteration = profiled
    try:
        rc = g2po_main(["train", *train_args])
    finally:
        TrainingLoop._iteration = iteration
    profile.dump_stats(args.out)
    for order, pattern in (("tottime", None), ("cumulative", "g2po_bench|algorithms|benchmarks")):
        s = io.StringIO()
        stats = pstats.Stats(profile, stream=s).sort_stats(order)
        stats.print_stats(*([pattern] if pattern else []), args.top)
        print(s.getvalue())
    print(f"profile: {args.out}")
    return int(rc)


if __name__ == "__main__":
    raise SystemExit(main())
