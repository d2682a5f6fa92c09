"""Which credit instrument predicts learning: each estimator's credit figures beside its end-to-end gain.

Reads one credit study (``credit.json`` and its ``gradients.npz``, written by ``g2po credit``) and
the run folders of an end-to-end comparison (by default the committed CPU proxy,
``results/proxy/sweep/runs``, read with :func:`g2po_bench.analysis.load.load_runs`), and prints,
per estimator present in both (matched by the table label, e.g. ``gigpo`` at ALFWorld's
``mean_std_norm`` is "GiGPO w/ std"):

- the **end-to-end improvement**: held-out success after RL minus before it (the warm start), in
  points, at the evaluation temperature (``--at-train-temperature``: at the training one), mean
  over seeds and panel episodes;
- the **within-group Spearman** correlation with A* (the study's shared groups) and the
  **gradient alignment** (cosine of the policy gradient with the true one in a training batch; a
  study of version 1, before the gradient alignment, has the Spearman correlation only);

then, for each instrument, the rank correlation (Spearman, average ranks) across the estimators
between the instrument and the end-to-end improvement, with a 95 % bootstrap CI. One draw
resamples the study's task groups (the Spearman: the shared groups with replacement; the gradient
alignment: its own draws within blocks, :func:`g2po_bench.analysis.credit.alignment.alignment_table`)
and, independently, the end-to-end seeds and, within each drawn seed, the panel episodes (the same
draws for every estimator: they share seeds and panel, as in
:func:`g2po_bench.core.stats.paired_improvement_ci`), and recomputes the correlation. The interval
is the measurement noise of both sides for these estimators; the estimators themselves are not a
sample (another set of estimators could correlate otherwise), and with a handful of them the
correlation takes few values.

Usage::

    python scripts/credit_vs_end_to_end.py results/credit/g2po54-h15-g208
    python scripts/credit_vs_end_to_end.py STUDY --runs results/proxy/sweep/runs --at-train-temperature
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from g2po_bench.analysis.credit.alignment import alignment_table
from g2po_bench.analysis.credit.pool import GroupData, shared_groups
from g2po_bench.analysis.credit.record import read_gradients, read_record
from g2po_bench.analysis.credit.scoring import ORACLE, GroupStats, rank_average
from g2po_bench.analysis.load import load_runs
from g2po_bench.analysis.naming import method_name

__all__ = ["instrument_draws", "end_to_end_draws", "rank_correlation", "compare", "render", "main"]


def rank_correlation(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman correlation of two equally long vectors (average ranks; NaN when either is constant
    or shorter than 3)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        return math.nan
    rx, ry = rank_average(x) - (len(x) + 1) / 2, rank_average(y) - (len(y) + 1) / 2
    return float((rx * ry).sum() / math.sqrt((rx * rx).sum() * (ry * ry).sum()))


def instrument_draws(record: Mapping, gradients, names: Sequence[str], *, n_boot: int, seed: int
                     ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per instrument, (the (E,) values of the rows ``names``, their (n_boot, E) bootstrap draws).

    ``"spearman"``: the mean within-group Spearman with A* over the study's shared groups, the draws
    resampling those groups (the same draws for every row); ``"gradient"`` (a study with gradients):
    the gradient alignment and its bootstrap draws.
    """
    stats = _spearman_stats(record)
    main = [v["name"] for v in record["variants"] if not v.get("axis")]
    shared = shared_groups(stats, [*main, ORACLE])
    s = np.stack([stats[n].spearman[shared] for n in names], axis=1)  # (G', E), finite
    rng = np.random.default_rng([seed, 0x5EA])
    idx = rng.integers(0, len(s), size=(n_boot, len(s)))
    out = {"spearman": (s.mean(axis=0), s[idx].mean(axis=1))}
    if gradients is not None:
        tab = alignment_table(gradients, list(names), "a_star", n_boot=n_boot, seed=seed, draws=True, check=False)
        out["gradient"] = (np.array([tab["rows"][n]["cosine"] for n in names]),
                           np.stack([tab["draws"][n] for n in names], axis=1))
    return out


def _spearman_stats(record: Mapping) -> dict[str, GroupStats]:
    """Row set -> per-group figures against A* (a version 1 record keeps the per-group Spearman
    correlations only, under its scores)."""
    if "per_group" in record:
        return GroupData.from_record(record["per_group"]).stats["a_star"]
    out = {}
    for name, d in record["scores"]["a_star"]["per_group"].items():
        s = np.array([math.nan if v is None else v for v in d["spearman"]], dtype=float)
        zero = np.zeros(len(s))
        out[name] = GroupStats(groups=np.asarray(d["groups"]), spearman=s, pearson=s.copy(), decisive=zero,
                               agree=zero, mass_decisive=zero, mass=zero, rows=zero)
    return out


def end_to_end_draws(before: np.ndarray, final: np.ndarray, *, n_boot: int, seed: int) -> tuple[np.ndarray,
                                                                                                 np.ndarray]:
    """The improvement (points) of each estimator and its two-level bootstrap draws.

    Args:
        before, final: (E, S, T) per-episode success of E estimators over S common seeds and the T
            panel tasks (the same tasks in the same order for every estimator and seed).

    Returns:
        ((E,) mean of final - before in points, (n_boot, E) draws: seeds, then tasks within each
        seed, the same indices for every estimator).
    """
    d = 100.0 * (np.asarray(final, dtype=float) - np.asarray(before, dtype=float))
    _, s, t = d.shape
    rng = np.random.default_rng([seed, 0xE2E])
    seeds = rng.integers(0, s, size=(n_boot, s))
    tasks = rng.integers(0, t, size=(n_boot, s, t))
    draws = d[:, seeds[:, :, None], tasks].mean(axis=(2, 3)).T  # (n_boot, E)
    return d.mean(axis=(1, 2)), draws


def _episodes(path: str, at_train_temperature: bool) -> tuple[dict[str, float], dict[str, float]] | None:
    try:
        ev = json.loads((Path(path) / "eval.json").read_text())
        if at_train_temperature:
            ev = ev["at_train_temperature"]
        return ({str(e[0]): float(e[1]) for e in ev["before"]["episodes"]},
                {str(e[0]): float(e[1]) for e in ev["final"]["episodes"]})
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def load_end_to_end(runs_dir: str | Path, *, at_train_temperature: bool = False
                    ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], list[int]]:
    """label -> ((S, T) before, (S, T) final) per-episode successes on the seeds every method has,
    tasks sorted by id; and those seeds.

    Raises:
        ValueError: no run with per-episode evaluations.
    """
    runs = load_runs(runs_dir).runs
    runs = runs[runs["kind"] == "train"] if "kind" in runs else runs
    per: dict[str, dict[int, tuple[dict, dict]]] = {}
    for label, seed, path in zip(runs["method_label"], runs["seed"], runs["path"]):
        eps = _episodes(path, at_train_temperature)
        if eps is not None and seed == seed:
            per.setdefault(str(label), {})[int(seed)] = eps
    if not per:
        raise ValueError(f"no run under {runs_dir} has per-episode evaluations before and after RL")
    seeds = sorted(set.intersection(*(set(v) for v in per.values())))
    out = {}
    for label, by_seed in per.items():
        tasks = sorted(by_seed[seeds[0]][0])
        out[label] = (np.array([[by_seed[s][0][t] for t in tasks] for s in seeds]),
                      np.array([[by_seed[s][1][t] for t in tasks] for s in seeds]))
    return out, seeds


def _labels(record: Mapping) -> dict[str, str]:
    """Main credit row -> the end-to-end table label of the same estimator at the study's options."""
    mode = record["config"]["algorithm"]["mode"]
    return {v["name"]: method_name({"algorithm": {"name": v["estimator"], "mode": mode, "options": {}}})
            for v in record["variants"] if not v.get("axis")}


def compare(record: Mapping, gradients, e2e: Mapping[str, tuple[np.ndarray, np.ndarray]], *, n_boot: int = 2000,
            seed: int = 0, confidence: float = 0.95) -> dict:
    """Per estimator in both: its end-to-end improvement and instrument values; per instrument: the
    rank correlation with the end-to-end improvement and its bootstrap CI.

    Returns:
        ``{"estimators": [{"row", "label", "end_to_end": {"mean", "ci"}, <instrument>: value}],
        "correlations": {instrument: {"rho", "ci", "draws_defined"}}}``.

    Raises:
        ValueError: fewer than 3 estimators in both.
    """
    labels = _labels(record)
    names = [n for n, lab in labels.items() if lab in e2e]
    if len(names) < 3:
        raise ValueError(f"only {len(names)} estimators are in both the study and the runs; a rank correlation "
                         "needs 3 or more")
    before = np.stack([e2e[labels[n]][0] for n in names])
    final = np.stack([e2e[labels[n]][1] for n in names])
    gain, gain_draws = end_to_end_draws(before, final, n_boot=n_boot, seed=seed)
    inst = instrument_draws(record, gradients, names, n_boot=n_boot, seed=seed)
    q = [(1 - confidence) / 2, 1 - (1 - confidence) / 2]
    rows = []
    for i, n in enumerate(names):
        row = {"row": n, "label": labels[n], "end_to_end": {"mean": float(gain[i]),
                                                            "ci": np.quantile(gain_draws[:, i], q).tolist()}}
        row.update({k: float(v[0][i]) for k, v in inst.items()})
        rows.append(row)
    corr = {}
    for k, (value, draws) in inst.items():
        rho = np.array([rank_correlation(draws[b], gain_draws[b]) for b in range(n_boot)])
        ok = np.isfinite(rho)
        corr[k] = {"rho": rank_correlation(value, gain),
                   "ci": np.quantile(rho[ok], q).tolist() if ok.sum() >= 2 else [math.nan, math.nan],
                   "draws_defined": int(ok.sum())}
    return {"estimators": rows, "correlations": corr}


def render(result: Mapping, *, temperature: str = "the evaluation temperature") -> str:
    """The Markdown tables of :func:`compare`."""
    inst = [k for k in ("spearman", "gradient") if k in result["correlations"]]
    title = {"spearman": "Spearman with A*", "gradient": "gradient alignment"}
    lines = ["| estimator | end-to-end improvement (points) [95 % CI] | " + " | ".join(title[k] for k in inst) + " |",
             "|---|---|" + "---|" * len(inst)]
    for r in sorted(result["estimators"], key=lambda r: -r["end_to_end"]["mean"]):
        e = r["end_to_end"]
        lines.append(f"| {r['label']} | {e['mean']:+.1f} [{e['ci'][0]:+.1f}, {e['ci'][1]:+.1f}] | "
                     + " | ".join(f"{r[k]:.3f}" for k in inst) + " |")
    lines += ["", f"Rank correlation across the {len(result['estimators'])} estimators with the end-to-end "
              f"improvement at {temperature} [95 % bootstrap CI]:", "", "| instrument | Spearman rho | 95 % CI |",
              "|---|---|---|"]
    for k in inst:
        c = result["correlations"][k]
        lines.append(f"| {title[k]} | {c['rho']:+.2f} | [{c['ci'][0]:+.2f}, {c['ci'][1]:+.2f}] |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the comparison (module docstring); returns 0, or 2 on unreadable inputs."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("study", type=Path, help="a credit study folder (credit.json, gradients.npz)")
    p.add_argument("--runs", type=Path, default=Path("results/proxy/sweep/runs"),
                   help="the end-to-end runs (default results/proxy/sweep/runs)")
    p.add_argument("--at-train-temperature", action="store_true",
                   help="the evaluations at the training temperature (eval.at_train_temperature)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap draws (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    try:
        record = read_record(args.study)
        gradients = read_gradients(args.study, record)
        e2e, seeds = load_end_to_end(args.runs, at_train_temperature=args.at_train_temperature)
        result = compare(record, gradients, e2e, n_boot=args.n_boot, seed=args.seed)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}")
        return 2
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    temp = "the training temperature" if args.at_train_temperature else "the evaluation temperature"
    print(f"study: {args.study} ({len(record['tasks'])} groups); runs: {args.runs} (seeds {seeds})\n")
    print(render(result, temperature=temp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
