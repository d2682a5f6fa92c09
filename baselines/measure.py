"""Measure ReAct and Reflexion (success, tokens per second, time) with SmolLM2-135M-Instruct on real ALFWorld and WebShop tasks.

::

    python -m g2po_bench.baselines.measure                        # 12 ALFWorld valid_seen games + 12 WebShop goals
    python -m g2po_bench.baselines.measure --envs webshop --methods react --num-tasks 4
    python -m g2po_bench.baselines.measure --model /models/Qwen2.5-1.5B-Instruct --set model.device=cuda

Defaults: the evaluation panels of the RL runs (``select_panel`` over ALFWorld ``valid_seen``,
round-robin over the six task types: 12 games = two per type; WebShop ``test`` goals), the
reference step limits (ALFWorld 50, WebShop 15), evaluation temperature 0.4, one few-shot
transcripts per prompt from training tasks of the task's type, the last 4 steps in full,
completion-style prompts (the model continues the transcript after ``<think>``), at most 96
new tokens per step, Reflexion with 2 trials, bfloat16 weights, one torch thread. Data come from
``--data`` (default ``$G2PO_SHARED_DATA`` or ``../shared/data``). Each run writes a normal run
folder under ``--output-dir``; the summary (success rates, tokens per second, times) is
printed and written to ``<output-dir>/bench_summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from g2po_bench.baselines.config import load_baseline_config
from g2po_bench.baselines.run import run_baseline
from g2po_bench.benchmarks.alfworld.games import SHORT_NAMES, TASK_TYPES

__all__ = ["main"]

STEP_LIMITS = {"alfworld": 50, "webshop": 15}
SPLITS = {"alfworld": "valid_seen", "webshop": "test"}


def _default_data() -> Path:
    root = os.environ.get("G2PO_SHARED_DATA")
    return Path(root) if root else Path(__file__).resolve().parents[1].parent / "shared" / "data"


def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``python -m g2po_bench.baselines.measure`` (environments, methods, panel size, output folder)."""
    p = argparse.ArgumentParser(prog="python -m g2po_bench.baselines.measure", description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", nargs="+", default=["alfworld", "webshop"], choices=["alfworld", "webshop", "toy"])
    p.add_argument("--methods", nargs="+", default=["react", "reflexion"], choices=["direct", "react", "reflexion"])
    p.add_argument("--num-tasks", type=int, default=12, help="panel size per environment")
    p.add_argument("--data", type=Path, default=None, help="folder holding alfworld/ and webshop/")
    p.add_argument("--model", default="smollm2", help="model folder, or smollm2 (cached SmolLM2-135M-Instruct)")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--num-examples", type=int, default=2, help="few-shot transcripts per prompt")
    p.add_argument("--max-trials", type=int, default=2, help="Reflexion trial budget")
    p.add_argument("--history-steps", type=int, default=4, help="past steps shown in full (0 = all that fit)")
    p.add_argument("--max-steps", type=int, default=0, help="override the reference step limits (0 = keep)")
    p.add_argument("--prompt-style", default="completion", choices=["chat", "completion"],
                   help="completion: the model continues the ReAct transcript (a 135M model follows it far "
                        "better than a chat instruction)")
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"],
                   help="model dtype; bfloat16 is 2-4x faster than float32 on CPUs with AMX/AVX512-BF16 "
                        "(slower on CPUs without them)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1 is much faster on a busy 2-core machine; 0 = torch's default)")
    p.add_argument("--output-dir", default="results/runs/bench-baselines")
    p.add_argument("--set", nargs="*", default=[], metavar="key=value", help="extra config overrides")
    p.add_argument("--summarize", nargs="+", default=None, metavar="DIR",
                   help="run nothing: print the table of the baseline runs found under these folders")
    return p


_ROW_KEYS = ("success_rate", "per_task_type", "score", "num_episodes", "mean_steps", "invalid_frac",
             "success_by_trial", "tokens_per_second", "response_tokens", "prompt_tokens", "generation_seconds",
             "wall_seconds")


def row_of(run: Path) -> dict:
    """The table row of one baseline run folder."""
    ev = json.loads((run / "eval.json").read_text())
    return {"env": ev["env"], "method": ev["baseline"], "run": str(run), "model": ev.get("model"),
            **{k: ev["final"].get(k) for k in _ROW_KEYS}}


def format_rows(rows: list[dict], title: str) -> str:
    """A plain-text table of bench rows: success rate (successes/episodes), score, mean steps,
    invalid-action fraction, generated tokens per second of generation time (``tok/s``), prompt
    tokens per second of generation time (``prompt tok/s``, the prefill side that dominates on a
    CPU), generation and wall seconds, success per task type (ALFWorld short names) and by trial."""

    order = {t: i for i, t in enumerate(TASK_TYPES)}

    lines = [title, f"{'env':9} {'method':10} {'success':>14} {'score':>6} {'steps':>6} {'invalid':>7} {'tok/s':>6} "
                    f"{'prompt tok/s':>12} {'gen s':>7} {'wall s':>7}  per task type / by trial"]
    for r in rows:
        n = r["num_episodes"] or 0
        succ = f"{r['success_rate']:.3f} ({round(r['success_rate'] * n)}/{n})"
        gen_s = r["generation_seconds"] or 0.0
        prompt_tps = (r["prompt_tokens"] or 0) / gen_s if gen_s > 0 else 0.0
        per = ", ".join(f"{SHORT_NAMES.get(k, k)} {v:.2f}" for k, v in sorted((r["per_task_type"] or {}).items(),
                                                                         key=lambda kv: order.get(kv[0], len(order))))
        if r.get("success_by_trial"):
            per += "; by trial " + "/".join(f"{x:.3f}" for x in r["success_by_trial"])
        lines.append(f"{r['env']:9} {r['method']:10} {succ:>14} {r['score']:6.1f} {r['mean_steps']:6.1f} "
                     f"{r['invalid_frac']:7.2f} {r['tokens_per_second']:6.2f} {prompt_tps:12.1f} {gen_s:7.0f} "
                     f"{r['wall_seconds']:7.0f}  {per}")
    return "\n".join(lines)


def summarize(dirs: list[str]) -> list[dict]:
    """Rows of every finished baseline run (``eval.json`` with a ``baseline`` key) under ``dirs``."""
    rows = []
    for d in dirs:
        for ev in sorted(Path(d).rglob("eval.json")):
            try:
                if "baseline" in json.loads(ev.read_text()):
                    rows.append(row_of(ev.parent))
            except (json.JSONDecodeError, KeyError):
                continue
    return sorted(rows, key=lambda r: (r["env"], r["method"]))


def main(argv: list[str] | None = None) -> int:
    """Run the baseline benchmark; prints success rates and tokens per second. Returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.summarize:
        rows = summarize(args.summarize)
        print(format_rows(rows, f"Prompting baseline runs under {', '.join(args.summarize)}"))
        for r in rows:
            print(f"  {r['env']}/{r['method']}: {r['run']} ({r['model']})")
        return 0 if rows else 1
    from rich.console import Console

    console = Console(stderr=True)
    data = args.data or _default_data()
    rows = []
    started = time.perf_counter()
    for env in args.envs:
        env_over = [f"env={env}", f"env.num_workers={2 if env == 'alfworld' else 1}"]
        if env != "toy":
            env_over += [f"env.data_dir={data / env}", f"env.eval_split={SPLITS[env]}",
                         f"env.max_steps={args.max_steps or STEP_LIMITS[env]}"]
        for method in args.methods:
            overrides = [*env_over, f"baseline={method}", f"model.path={args.model}", "model.device=cpu",
                         f"model.dtype={args.dtype}",
                         f"eval.num_tasks={args.num_tasks}", f"output_dir={args.output_dir}",
                         f"baseline.max_new_tokens={args.max_new_tokens}",
                         f"baseline.num_examples={args.num_examples}", f"baseline.max_trials={args.max_trials}",
                         f"baseline.history_steps={args.history_steps}", f"baseline.torch_threads={args.threads}",
                         f"baseline.prompt_style={args.prompt_style}",
                         "baseline.reflection_tokens=64", "train.max_prompt_tokens=2048", *args.set]
            cfg, b = load_baseline_config(None, overrides)
            console.rule(f"{method} on {env}: {cfg.eval.num_tasks} tasks, {cfg.env.max_steps} steps max")
            out = run_baseline(cfg, b, console=console)
            rows.append(row_of(out))
    import torch

    summary = {"rows": rows, "model": args.model, "settings": vars(args) | {"data": str(data), "output_dir": args.output_dir},
               "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                           "loadavg_at_end": os.getloadavg(), "platform": platform.platform()},
               "total_seconds": round(time.perf_counter() - started, 1)}
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(args.output_dir) / "bench_summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(format_rows(rows, f"Prompting baselines with {Path(args.model).name} "
                            f"({summary['total_seconds']:.0f} s in all)"))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
