"""Held-out success at another sampling temperature: the warm start and every run, re-evaluated.

Why: the CPU proxy evaluates at temperature 0.4 (the reference evaluation setting) while RL samples
its rollouts at ``train.temperature`` (1.0). Low-temperature decoding already sharpens the warm
start towards its most likely actions, so an RL gain can be visible at the temperature RL trains at
and hidden at 0.4. This script measures it, on the same fixed held-out panel:

1. for every training run under ``RUNS`` (a sweep's run folders *with their checkpoints*, e.g.
   ``results/sweeps/cpu_proxy/runs``): ``g2po eval --run RUN eval.temperature=T --name t<T>``
   (the run's final checkpoint; skipped when that evaluation exists);
2. for every (warm start, seed) pair of those runs: the warm-start policy
   (``setup.json`` ``warm_start/dir``) with the run's own ``config.yaml`` and the same temperature
   and evaluation seed (``g2po eval --config RUN/config.yaml model.path=WARM_START ...``, written
   next to ``RUNS`` in ``warm_start_evals/``), so that the before/after pairs differ only by RL;
3. copies every evaluation record into ``--out/evals/`` (small JSON files, committed), then prints
   and writes (``temperature.md``, ``temperature.json``) per method: held-out success of the warm
   start and after RL (mean over seeds) and the mean improvement with its paired two-level 95 %
   bootstrap CI (:func:`g2po_bench.core.stats.paired_improvement_ci`, seeds then panel tasks).

Usage::

    python scripts/proxy_temperature.py results/sweeps/cpu_proxy/runs --out results/proxy/temperature
    python scripts/proxy_temperature.py --summarize results/proxy/temperature   # from the copied records

Evaluations run ``--parallel`` at a time (default 2). Prints ``uptime`` (shared machines).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from g2po_bench.analysis.naming import method_name, method_sort_key  # noqa: E402
from g2po_bench.core.rundir import code_version  # noqa: E402
from g2po_bench.core.stats import paired_improvement_ci  # noqa: E402


def _name(temperature: float) -> str:
    return f"t{temperature:g}"


def _g2po(job: tuple[list[str], list[str]]) -> None:
    """``g2po eval OPTIONS OVERRIDES progress=false`` (the key=value overrides in one block)."""
    options, overrides = job
    args = [*options, *overrides, "progress=false"]
    proc = subprocess.run([sys.executable, "-m", "g2po_bench.cli", "eval", *args], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"g2po eval {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")


def _training_runs(runs: Path) -> list[Path]:
    found = [p.parent for p in sorted(runs.glob("*/config.yaml"))
             if (p.parent / "checkpoints" / "latest" / "policy").is_dir() and (p.parent / "setup.json").is_file()]
    if not found:
        raise SystemExit(f"no training run with a checkpoint and setup.json under {runs}: point RUNS at the "
                         "sweep's own run folders (e.g. results/sweeps/cpu_proxy/runs), not the committed records")
    return found


def evaluate(runs: Path, out: Path, temperature: float, parallel: int) -> None:
    """Steps 1-3 of the module docstring: evaluations into ``out/evals``."""
    name = _name(temperature)
    jobs, warm = [], {}
    for run in _training_runs(runs):
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        setup = json.loads((run / "setup.json").read_text())
        if not (run / "evals" / name / "eval.json").is_file():
            jobs.append((["--run", str(run), "--name", name], [f"eval.temperature={temperature}"]))
        key = (setup["warm_start/key"], int(cfg["seed"]))
        warm.setdefault(key, (run, setup["warm_start/dir"]))
    ws_root = runs.parent / "warm_start_evals"  # next to the runs (local), not in --out
    for (key, seed), (run, ws_dir) in sorted(warm.items()):
        folder = f"ws-{key}-s{seed}-{name}"
        if not list(ws_root.glob(f"evals/*{folder}/eval.json")):
            jobs.append((["--config", str(run / "config.yaml"), "--name", folder],
                         [f"model.path={ws_dir}", f"seed={seed}", f"eval.temperature={temperature}",
                          f"output_dir={ws_root}"]))
    print(f"{len(jobs)} evaluation(s) to run at temperature {temperature:g}, {parallel} at a time")
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        list(pool.map(_g2po, jobs))
    dest = out / "evals"
    dest.mkdir(parents=True, exist_ok=True)
    for run in _training_runs(runs):
        _keep(run / "evals" / name / "eval.json", dest / f"{run.name}.json")
        shutil.copyfile(run / "config.yaml", dest / f"{run.name}.config.yaml")
    for (key, seed), _ in sorted(warm.items()):
        _keep(next(ws_root.glob(f"evals/*ws-{key}-s{seed}-{name}/eval.json")), dest / f"warm_start-{key}-s{seed}.json")


def _keep(src: Path, dest: Path) -> None:
    """The part of an evaluation record the table needs (its final evaluation with every episode)."""
    ev = json.loads(src.read_text())
    keep = {k: ev.get(k) for k in ("kind", "env", "model", "run", "checkpoint_iteration", "overrides", "final")}
    dest.write_text(json.dumps(keep, indent=1) + "\n")


def _successes(ev: dict) -> list[float]:
    """Per-episode successes of an evaluation, in panel order (task id, then episode)."""
    return [float(s) for _, s in sorted(ev["episodes"], key=lambda e: e[0])]


def summarize(out: Path) -> dict:
    """The per-method table from ``out/evals`` (see the module docstring)."""
    evals = out / "evals"
    rows: dict[str, list[tuple[int, list[float], list[float]]]] = defaultdict(list)
    temperature = None
    for cfg_path in sorted(evals.glob("*.config.yaml")):
        cfg = yaml.safe_load(cfg_path.read_text())
        run_id = cfg_path.name[: -len(".config.yaml")]
        after = json.loads((evals / f"{run_id}.json").read_text())
        ws = list(evals.glob(f"warm_start-*-s{cfg['seed']}.json"))
        if len(ws) != 1:
            raise SystemExit(f"{run_id}: expected one warm-start evaluation for seed {cfg['seed']}, found {len(ws)}")
        before = json.loads(ws[0].read_text())
        for o in after.get("overrides") or []:
            if o.startswith("eval.temperature="):
                temperature = float(o.split("=", 1)[1])
        rows[method_name(cfg)].append((int(cfg["seed"]), _successes(before["final"]), _successes(after["final"])))
    if not rows:
        raise SystemExit(f"no evaluation records under {evals}; run without --summarize first")
    table = {}
    for method, per_seed in sorted(rows.items(), key=lambda kv: method_sort_key(kv[0])):
        per_seed.sort()
        b = np.array([r[1] for r in per_seed])
        a = np.array([r[2] for r in per_seed])
        mean, lo, hi = paired_improvement_ci(b, a)
        table[method] = {"seeds": [r[0] for r in per_seed], "episodes_per_seed": int(b.shape[1]),
                         "before_pct": round(100 * b.mean(), 1), "after_pct": round(100 * a.mean(), 1),
                         "after_per_seed_pct": [round(100 * x, 1) for x in a.mean(axis=1)],
                         "improvement_points": round(100 * mean, 1),
                         "ci95_points": [round(100 * lo, 1), round(100 * hi, 1)]}
    return {"temperature": temperature, "methods": table}


def write(out: Path, summary: dict, header: str) -> str:
    """Write ``summary`` (:func:`summarize`) as ``out/temperature.md`` (a Markdown table: per method,
    seeds, before/after success in %, improvement in points with its 95 % CI, under ``header``) and
    ``out/temperature.json``; returns the Markdown text. Raises OSError if ``out`` is not writable."""
    lines = [f"# Held-out success at temperature {summary['temperature']}", "", header, "",
             "| method | seeds | before RL (%) | after RL (%) (per seed) | improvement (points) [95 % CI] |",
             "|---|---:|---:|---:|---:|"]
    for method, r in summary["methods"].items():
        lines.append(f"| {method} | {len(r['seeds'])} | {r['before_pct']} | {r['after_pct']} "
                     f"({', '.join(str(x) for x in r['after_per_seed_pct'])}) | "
                     f"{r['improvement_points']:+.1f} [{r['ci95_points'][0]:+.1f}, {r['ci95_points'][1]:+.1f}] |")
    text = "\n".join(lines) + "\n"
    (out / "temperature.md").write_text(text)
    (out / "temperature.json").write_text(json.dumps(summary, indent=2) + "\n")
    return text


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring): evaluate then summarize, or ``--summarize OUT`` only.
    Returns the exit status (0); bad arguments exit 2 (argparse), a wrong runs folder or a failed
    ``g2po eval`` exits with the reason (SystemExit)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="?", type=Path, help="run folders with checkpoints (a sweep's runs/)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "proxy" / "temperature",
                    help="where the copied records, temperature.md and temperature.json go "
                         "(default results/proxy/temperature)")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    ap.add_argument("--parallel", type=int, default=2, help="evaluations at a time (default 2)")
    ap.add_argument("--summarize", type=Path, default=None, help="only summarize this --out folder")
    args = ap.parse_args(argv)
    out = args.summarize or args.out
    uptime = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    print(f"load: {uptime}")
    if args.summarize is None:
        if args.runs is None:
            ap.error("give the runs folder (or --summarize OUT)")
        _training_runs(args.runs)  # refuse a wrong folder before creating anything
        out.mkdir(parents=True, exist_ok=True)
        evaluate(args.runs, out, args.temperature, args.parallel)
        (out / "provenance.json").write_text(json.dumps(
            {"runs": str(args.runs), "temperature": args.temperature, "code": code_version(), "uptime": uptime},
            indent=2) + "\n")
    prov = json.loads((out / "provenance.json").read_text()) if (out / "provenance.json").is_file() else {}
    code = (prov.get("code") or {}).get("commit", "unknown")[:7] + (
        " with uncommitted changes" if (prov.get("code") or {}).get("dirty") else "")
    header = (f"Warm start and final checkpoints of `{prov.get('runs', '?')}` re-evaluated on the fixed held-out "
              f"panel (commit `{code}`); regenerate the table with "
              f"`python scripts/proxy_temperature.py --summarize {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}`.")
    print(write(out, summarize(out), header))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
