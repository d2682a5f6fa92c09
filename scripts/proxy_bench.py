"""Does RL learn on the CPU default? `g2po train` (no arguments) over several seeds, measured.

What it does (issue "RL that measurably learns on a CPU"):

1. prints the machine's load (``uptime``): these machines are shared, figures depend on it;
2. runs ``g2po train seed=S`` for the first seed with *cold* caches (the generated games and the
   warm start are built into a fresh folder) and measures its wall time and each phase's seconds
   (``timing.json`` of the run);
3. runs the other seeds (warm-start cache now warm: every seed starts RL from the same policy),
   one at a time by default (each run's model uses every usable CPU, ``model.num_threads=0``);
   with ``--parallel N`` N at a time, each with ``model.num_threads`` = CPUs // N (two runs of two
   threads each on two cores oversubscribe them). On 2 cores this is no faster in total: two runs
   side by side took 19-27 s per RL iteration each, one run alone 12 s (2-core AMD EPYC VM, AVX-512);
4. prints and writes (``bench.json``, ``bench.md`` in ``--out``) per seed the held-out success
   after the warm start (before RL) and after RL with 95 % bootstrap CIs, and over seeds the
   mean improvement with a paired two-level bootstrap CI (:func:`g2po_bench.core.stats.paired_improvement_ci`),
   plus the pass/fail of the targets: improvement >= 15 points with the CI above 0, wall time of
   the cold run <= 15 minutes;
5. reports the improvement on the same panel at the runs' *training* temperature too
   (low-temperature evaluation can hide what RL learned): from the runs' own records
   (``eval.json`` ``at_train_temperature``, the CPU default writes them), or, for runs without
   them, by re-evaluating the warm start and every run (``scripts/proxy_temperature.py``; into
   ``--out/temperature``; ``--no-temperature-eval`` skips that).

Only ``seed``, ``output_dir``, ``env.generated_dir`` and ``train.warm_start_cache`` are set (the
last two point the caches at the benchmark's own folder, so the first run is cold); everything else
is the embedded default. Extra ``key=value`` arguments are passed to every run (e.g. to try a
setting).

Usage::

    python scripts/proxy_bench.py                          # seeds 0 1 2 -> results/proxy/bench
    python scripts/proxy_bench.py --seeds 0 1 2 3 4
    python scripts/proxy_bench.py --summarize results/proxy/bench   # figures of finished runs only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import proxy_temperature  # noqa: E402  (scripts/, next to this file)

from g2po_bench.core.rundir import code_version, machine_info, machine_label  # noqa: E402
from g2po_bench.core.stats import paired_improvement_ci  # noqa: E402

TARGET_POINTS = 15.0
TARGET_WALL_S = 15 * 60


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "uptime unavailable"


def _train(seed: int, out: Path, extra: list[str]) -> tuple[int, float, Path]:
    log = out / "logs" / f"seed{seed}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "g2po_bench.cli", "train", f"seed={seed}", f"output_dir={out / 'runs'}",
            f"run_id=seed{seed}", f"env.generated_dir={out / 'cache' / 'games'}",
            f"train.warm_start_cache={out / 'cache' / 'warm_start'}", *extra]
    t0 = time.time()
    with open(log, "w") as fh:
        fh.write(" ".join(args[1:]) + "\n")
        fh.flush()
        rc = subprocess.run(args, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.time() - t0
    (out / "runs" / f"seed{seed}").mkdir(parents=True, exist_ok=True)
    (out / "runs" / f"seed{seed}" / "wall.json").write_text(json.dumps({"wall_s": wall, "returncode": rc}))
    return rc, wall, log


def summarize(out: Path) -> dict:
    """Figures of the finished runs under ``out/runs`` (see the module docstring)."""
    rows, before, after = [], [], []
    for run in sorted((out / "runs").glob("seed*")):
        ev_path = run / "eval.json"
        if not ev_path.exists():
            continue
        ev = json.loads(ev_path.read_text())
        if not ev.get("before") or not ev.get("final") or ev["final"]["iteration"] == 0:
            continue
        timing = json.loads((run / "timing.json").read_text()) if (run / "timing.json").exists() else {}
        wall = json.loads((run / "wall.json").read_text()) if (run / "wall.json").exists() else {}
        b, f = ev["before"], ev["final"]
        rows.append({"run": run.name, "before": b["success_rate"], "before_ci": b.get("success_ci"),
                     "final": f["success_rate"], "final_ci": f.get("success_ci"),
                     "best": ev["best"]["success_rate"], "best_iteration": ev["best"]["iteration"],
                     "episodes": b["num_episodes"], "wall_s": wall.get("wall_s"),
                     "phases_s": timing.get("seconds", {}),
                     "per_task_type_before": b.get("per_task_type"), "per_task_type_final": f.get("per_task_type")})
        before.append([e[1] for e in b["episodes"]])
        after.append([e[1] for e in f["episodes"]])
    res: dict = {"runs": rows, "uptime": _uptime(), "code": code_version(), "runs_code": _runs_code(out),
                 "machine": machine_info(), "runs_machine": _runs_machine(out)}
    if rows:
        d, lo, hi = paired_improvement_ci(before, after, n_boot=10_000, seed=0)
        cold = next((r for r in rows if r["run"] == "seed0"), rows[0])
        res.update({
            "seeds": len(rows), "improvement_points": 100 * d, "ci_points": [100 * lo, 100 * hi],
            "mean_before": 100 * float(np.mean([r["before"] for r in rows])),
            "mean_final": 100 * float(np.mean([r["final"] for r in rows])),
            "cold_run": cold["run"], "cold_wall_s": cold["wall_s"], "cold_phases_s": cold["phases_s"],
        })
        res["pass_improvement"] = _passes(res["improvement_points"], 100 * lo)
        res["pass_wall"] = bool(cold["wall_s"] is not None and cold["wall_s"] <= TARGET_WALL_S)
    own = _own_train_temperature(out)
    if own is not None:
        res["at_train_temperature"] = own
    elif (out / "temperature" / "evals").is_dir():
        res["at_train_temperature"] = proxy_temperature.summarize(out / "temperature")
    return res


def _passes(improvement_points: float, ci_low_points: float) -> bool:
    """The issue's target: a mean improvement of at least ``TARGET_POINTS`` with the CI above 0."""
    return bool(improvement_points >= TARGET_POINTS and ci_low_points > 0)


def _own_train_temperature(out: Path) -> dict | None:
    """The runs' own evaluations at the training temperature (``eval.json`` ``at_train_temperature``,
    written by ``eval.at_train_temperature``), in :func:`proxy_temperature.summarize`'s layout;
    None unless every finished run has one with per-episode successes."""
    before, after, seeds, temps = [], [], [], set()
    for run in sorted((out / "runs").glob("seed*")):
        if not (run / "eval.json").is_file():
            continue
        ev = json.loads((run / "eval.json").read_text())
        rec = ev.get("at_train_temperature") or {}
        if not ev.get("final") or ev["final"]["iteration"] == 0:
            continue
        if not (rec.get("before") or {}).get("episodes") or not (rec.get("final") or {}).get("episodes"):
            return None
        before.append([e[1] for e in sorted(rec["before"]["episodes"], key=lambda e: e[0])])
        after.append([e[1] for e in sorted(rec["final"]["episodes"], key=lambda e: e[0])])
        seeds.append(int(run.name.removeprefix("seed")))
        temps.add(float(rec["temperature"]))
    if not before or len(temps) != 1:
        return None
    b, a = np.array(before, float), np.array(after, float)
    d, lo, hi = paired_improvement_ci(b, a, n_boot=10_000, seed=0)
    return {"temperature": temps.pop(), "source": "runs' eval.json at_train_temperature", "methods": {"G2PO": {
        "seeds": seeds, "episodes_per_seed": int(b.shape[1]), "before_pct": round(100 * b.mean(), 1),
        "after_pct": round(100 * a.mean(), 1), "after_per_seed_pct": [round(100 * x, 1) for x in a.mean(axis=1)],
        "improvement_points": round(100 * d, 1), "ci95_points": [round(100 * lo, 1), round(100 * hi, 1)]}}}


def _runs_code(out: Path) -> list[str]:
    """The commits the runs recorded (``status.json`` ``code``; runs older than that field: none)."""
    found = set()
    for status in (out / "runs").glob("*/status.json"):
        code = json.loads(status.read_text()).get("code") or {}
        if code.get("commit"):
            found.add(code["commit"][:7] + ("+changes" if code.get("dirty") else ""))
    return sorted(found)


def _runs_machine(out: Path) -> list[str]:
    """The machines the runs recorded (``status.json`` ``machine``: CPU, torch's kernel set)."""
    found = set()
    for status in (out / "runs").glob("*/status.json"):
        m = json.loads(status.read_text()).get("machine") or {}
        if m:
            found.add(machine_label(m))
    return sorted(found)


def _train_temperature(out: Path) -> float:
    import yaml

    cfg = yaml.safe_load(next((out / "runs").glob("*/config.yaml")).read_text())
    return float(cfg["train"]["temperature"])


def _pct(x, ci=None) -> str:
    s = f"{100 * x:.1f}"
    return s + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")


def _source(rec: dict) -> str:
    if rec.get("source"):
        return "the runs' own evaluations, `eval.json` `at_train_temperature`"
    return "`scripts/proxy_temperature.py`, files in `temperature/`"


def render(res: dict) -> str:
    """The benchmark's figures as Markdown."""
    lines = ["| run | before RL (%) [95 % CI] | after RL (%) [95 % CI] | best (%) @ iteration | episodes | wall (s) |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in res["runs"]:
        wall = f"{r['wall_s']:.0f}" if r["wall_s"] is not None else "n/a"
        lines.append(f"| {r['run']} | {_pct(r['before'], r['before_ci'])} | {_pct(r['final'], r['final_ci'])} | "
                     f"{100 * r['best']:.1f} @ {r['best_iteration']} | {r['episodes']} | {wall} |")
    if res.get("seeds"):
        lo, hi = res["ci_points"]
        lines += ["", f"Mean over {res['seeds']} seeds: before RL {res['mean_before']:.1f} %, after RL "
                  f"{res['mean_final']:.1f} %, improvement **{res['improvement_points']:+.1f} points** "
                  f"(95 % paired bootstrap CI [{lo:+.1f}, {hi:+.1f}]; target >= {TARGET_POINTS:.0f} with the CI "
                  f"above 0: {'PASS' if res['pass_improvement'] else 'FAIL'}).",
                  f"Cold run ({res['cold_run']}: games, expert replay and warm start built from scratch): "
                  f"{res['cold_wall_s'] or float('nan'):.0f} s wall (target <= {TARGET_WALL_S} s: "
                  f"{'PASS' if res['pass_wall'] else 'FAIL'}); phases: "
                  + ", ".join(f"{k} {v:.0f} s" for k, v in res["cold_phases_s"].items()) + "."]
    for method, r in (res.get("at_train_temperature") or {}).get("methods", {}).items():
        lo, hi = r["ci95_points"]
        lines += ["", f"At the training temperature ({res['at_train_temperature']['temperature']:.1f}), same panel "
                  f"({_source(res['at_train_temperature'])}): {method} before RL {r['before_pct']:.1f} %, "
                  f"after RL {r['after_pct']:.1f} %, improvement **{r['improvement_points']:+.1f} points** "
                  f"(95 % paired CI [{lo:+.1f}, {hi:+.1f}], {len(r['seeds'])} seeds; target >= {TARGET_POINTS:.0f} "
                  f"with the CI above 0: {'PASS' if _passes(r['improvement_points'], lo) else 'FAIL'})."]
    code = res.get("code") or {}
    ran = res.get("runs_code")
    lines += ["", "The runs ran on commit " + (", ".join(f"`{c}`" for c in ran) if ran else
                                               "(not recorded: runs older than status.json's `code`)") + "."]
    m = res.get("machine") or {}
    machines = res.get("runs_machine") or []
    lines += ["Machine: " + ("; ".join(machines) if machines else
                             (machine_label(m) or "not recorded") + "; the summarising process's, the runs did not record theirs") + "."]
    lines += [f"Load when summarised: `{res['uptime']}`; code: "
              + (f"commit `{code['commit'][:7]}`{' with uncommitted changes' if code['dirty'] else ''}."
                 if code else "not a git checkout.")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--parallel", type=int, default=1,
                    help="seeds after the first run at a time (default 1; N > 1 splits the CPUs between them)")
    ap.add_argument("--out", default=str(ROOT / "results" / "proxy" / "bench"))
    ap.add_argument("--summarize", metavar="DIR", help="only summarise the finished runs of an earlier --out")
    ap.add_argument("--keep", action="store_true",
                    help="empty only --out/runs first: the game and warm-start caches stay warm")
    ap.add_argument("--no-temperature-eval", action="store_true",
                    help="skip step 5 (the evaluations at the training temperature)")
    ap.add_argument("overrides", nargs="*", metavar="key=value")
    args = ap.parse_args(argv)
    if args.summarize:
        out = Path(args.summarize)
    else:
        out = Path(args.out)
        if out.exists() and not args.keep:
            shutil.rmtree(out)
        elif args.keep:  # the caches stay; the runs start afresh (g2po train refuses to overwrite a finished run)
            shutil.rmtree(out / "runs", ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        print(f"load before: {_uptime()}", flush=True)
        first, rest = args.seeds[0], args.seeds[1:]
        rc, wall, log = _train(first, out, args.overrides)
        print(f"seed {first} (cold caches): exit {rc}, {wall:.0f} s wall; log {log}", flush=True)
        if rc != 0:
            print(open(log).read()[-3000:], file=sys.stderr)
            return 1
        extra = list(args.overrides)
        if args.parallel > 1 and not any(o.startswith("model.num_threads=") for o in extra):
            from g2po_bench.runtime.cpus import usable_cpus

            extra.append(f"model.num_threads={max(1, usable_cpus() // args.parallel)}")
        with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as ex:
            for seed, (rc, wall, log) in zip(rest, ex.map(lambda s: _train(s, out, extra), rest)):
                print(f"seed {seed}: exit {rc}, {wall:.0f} s wall; log {log}", flush=True)
        if not args.no_temperature_eval and _own_train_temperature(out) is None:
            proxy_temperature.evaluate(out / "runs", out / "temperature", _train_temperature(out), args.parallel)
    res = summarize(out)
    if not res["runs"]:
        print(f"no finished run under {out / 'runs'}", file=sys.stderr)
        return 1
    text = render(res)
    print(text)
    (out / "bench.json").write_text(json.dumps(res, indent=1))
    (out / "bench.md").write_text(text)
    os.sync()
    return 0


if __name__ == "__main__":
    sys.exit(main())
