"""Cross-check a report's rliable estimates against rliable's own bootstrap (``rliable.library``).

``g2po report`` computes rliable's statistics (``rliable.metrics``) with the suite's seeded stratified
bootstrap (:func:`g2po_bench.core.stats.stratified_bootstrap_ci`), because ``rliable.library`` does
not import beside the suite's pandas 3 (rliable 1.2 pins ``arch < 8``; arch 7 fails to import with
pandas 3, arch 8 no longer takes rliable's ``random_state``). This script reads a report's score
arrays (``scores.csv``) and prints, side by side, the report's intervals (``aggregates.csv``,
``probability_of_improvement.csv``) and those of ``rliable.library.get_interval_estimates`` on the
same arrays. The point estimates must agree exactly; the intervals within bootstrap noise (the
two bootstraps draw different resamples).

It needs only numpy, pandas and rliable, in an interpreter where ``rliable.library`` imports, e.g.::

    python3 -m venv /tmp/venv-rl && /tmp/venv-rl/bin/pip install "pandas<3" rliable==1.2.0
    g2po report results/proxy/sweep/runs --out /tmp/report --no-figures
    /tmp/venv-rl/bin/python scripts/rliable_crosscheck.py /tmp/report
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from rliable import library as rly
from rliable import metrics as rly_metrics

AGGREGATES = {"iqm": rly_metrics.aggregate_iqm, "median": rly_metrics.aggregate_median,
              "mean": rly_metrics.aggregate_mean}


def score_arrays(report: Path) -> dict[tuple[str, str], dict[str, pd.DataFrame]]:
    """(env, model size) -> method -> ``(runs, tasks)`` frame, from the report's ``scores.csv``."""
    scores = pd.read_csv(report / "scores.csv")
    out: dict[tuple[str, str], dict[str, pd.DataFrame]] = {}
    for (env, size, label), grp in scores.groupby(["env", "model_size", "method_label"], sort=False):
        out.setdefault((str(env), str(size)), {})[str(label)] = grp.pivot(index="run_id", columns="task",
                                                                           values="score")
    return out


def compare_aggregates(report: Path, arrays: dict, reps: int, seed: int) -> None:
    """Print the report's IQM, median and mean (``aggregates.csv``, success in %) beside rliable's
    ``get_interval_estimates`` on the same runs x task-type score arrays (``arrays``: (env, size) ->
    method -> DataFrame of runs x task types), with both 95 % CIs (``reps`` stratified bootstrap
    resamples from numpy's global seed ``seed``; Agarwal et al. 2021)."""
    ours = pd.read_csv(report / "aggregates.csv").set_index(["env", "model_size", "method_label"])
    print(f"aggregate metrics (%): report vs rliable.library ({reps} resamples)")
    print(f"{'method':<16} {'metric':<7} {'report':>8} {'rliable':>8}   {'report CI':>16}   {'rliable CI':>16}")
    for (env, size), methods in arrays.items():
        score_dict = {m: f.to_numpy(dtype=float) for m, f in methods.items()}
        np.random.seed(seed)  # noqa: NPY002 (rliable's StratifiedBootstrap draws from numpy's global random state)
        points, cis = rly.get_interval_estimates(
            score_dict, lambda x: np.array([fn(x) for fn in AGGREGATES.values()]), reps=reps)
        for m in score_dict:
            row = ours.loc[(env, size, m)]
            for k, name in enumerate(AGGREGATES):
                ci = f"[{row[f'{name}_low']:.2f}, {row[f'{name}_high']:.2f}]"
                theirs = f"[{cis[m][0][k]:.2f}, {cis[m][1][k]:.2f}]"
                print(f"{m:<16} {name:<7} {row[name]:8.3f} {points[m][k]:8.3f}   {ci:>16}   {theirs:>16}")


def compare_probabilities(report: Path, arrays: dict, reps: int, seed: int) -> None:
    """Print the report's probability of improvement (``probability_of_improvement.csv``, in [0, 1])
    of each method over its baseline beside rliable's on the task types both have, with both 95 %
    CIs (``reps`` resamples, numpy seed ``seed``; Agarwal et al. 2021)."""
    ours = pd.read_csv(report / "probability_of_improvement.csv")
    print(f"\nprobability of improvement: report vs rliable.library ({reps} resamples)")
    print(f"{'method > baseline':<30} {'report':>7} {'rliable':>7}   {'report CI':>14}   {'rliable CI':>14}")
    for _, r in ours.iterrows():
        methods = arrays[(str(r["env"]), str(r["model_size"]))]
        x, y = methods[r["method_label"]], methods[r["baseline_label"]]
        tasks = [t for t in x.columns if t in y.columns]
        pair = (x[tasks].to_numpy(dtype=float), y[tasks].to_numpy(dtype=float))
        np.random.seed(seed)  # noqa: NPY002
        points, cis = rly.get_interval_estimates({"pair": pair}, rly_metrics.probability_of_improvement, reps=reps)
        low, high = np.ravel(cis["pair"])
        ci = f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        theirs = f"[{low:.3f}, {high:.3f}]"
        name = f"{r['method_label']} > {r['baseline_label']}"
        print(f"{name:<30} {r['probability']:7.3f} {float(points['pair']):7.3f}   {ci:>14}   {theirs:>14}")


def main() -> None:
    """The command line: a ``g2po report`` folder (its ``scores.csv``) cross-checked against rliable."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="a report folder of g2po report (with scores.csv)")
    parser.add_argument("--reps", type=int, default=10_000, help="rliable's resamples, aggregates (default 10000)")
    parser.add_argument("--reps-improvement", type=int, default=2_000,
                        help="rliable's resamples for each probability of improvement (default 2000: rliable's "
                             "function is a Python loop over tasks)")
    parser.add_argument("--seed", type=int, default=0, help="seed of numpy's global random state (default 0)")
    args = parser.parse_args()
    arrays = score_arrays(args.report)
    compare_aggregates(args.report, arrays, args.reps, args.seed)
    compare_probabilities(args.report, arrays, args.reps_improvement, args.seed)


if __name__ == "__main__":
    main()
