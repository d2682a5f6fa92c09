"""Test support: synthetic run folders with known numbers (the analysis and signal tests).

Writes the layout of :mod:`g2po_bench.core.rundir` (with its atomic writers): ``config.yaml``,
``metrics.jsonl``, ``eval.json``, ``status.json``. The config holds only the keys the
analysis reads (``env.name``, ``algorithm.name``/``mode``/``step_weight``/``options``,
``model.path``, ``seed``, ``train.iterations``); values you pass are written verbatim.

Example::

    from synthetic_runs import write_synthetic_run, write_demo_results
    write_synthetic_run("out/runs/a", env="alfworld", algorithm="g2po", seed=0,
                        final={"success_rate": 0.5, "per_task_type": {...}})
    write_demo_results("out/runs")   # a small, complete set of runs for a demo report
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from g2po_bench.analysis.naming import ALFWORLD_TASK_TYPES
from g2po_bench.core.rundir import RunDir, atomic_write_json, atomic_write_text

__all__ = ["make_eval", "write_synthetic_run", "write_run_with_config", "panel_episodes", "write_demo_results"]


def make_eval(
    iteration: int,
    success_rate: float,
    per_task_type: dict[str, float] | None = None,
    *,
    score: float | None = None,
    num_episodes: int = 24,
    mean_steps: float = 10.0,
) -> dict[str, Any]:
    """One EVAL record of ``eval.json`` (see :mod:`g2po_bench.core.rundir`)."""
    return {
        "iteration": int(iteration),
        "success_rate": float(success_rate),
        "per_task_type": dict(per_task_type or {}),
        "num_episodes": int(num_episodes),
        "score": None if score is None else float(score),
        "mean_steps": float(mean_steps),
    }


def write_synthetic_run(
    root: str | os.PathLike,
    *,
    env: str = "alfworld",
    algorithm: str = "g2po",
    mode: str = "mean_std_norm",
    step_weight: float = 1.0,
    options: dict[str, Any] | None = None,
    model_path: str | None = None,
    seed: int = 0,
    iterations: int = 4,
    history: list[dict[str, Any]] | None = None,
    before: dict[str, Any] | None = None,
    final: dict[str, Any] | None = None,
    best: dict[str, Any] | None = None,
    state: str = "done",
    metrics: list[dict[str, Any]] | None = None,
    extra_config: dict[str, Any] | None = None,
    write_eval: bool = True,
    error: str | None = None,
) -> RunDir:
    """Write one run folder; returns its :class:`~g2po_bench.core.rundir.RunDir`.

    ``final``/``best``/``before`` None are left out of ``eval.json`` (``history`` defaults to
    ``[final]`` when ``final`` is given). ``metrics`` None writes one line per iteration with
    ``iteration`` and ``time_s``. ``state`` "running" writes ``status.iteration`` as the last
    metrics iteration. ``write_eval`` False writes no ``eval.json`` at all.
    """
    rd = RunDir(root).create()
    cfg: dict[str, Any] = {
        "seed": seed,
        "env": {"name": env},
        "algorithm": {
            "name": algorithm,
            "mode": mode,
            "step_weight": step_weight,
            "options": dict(options or {}),
        },
        "model": {"path": model_path},
        "train": {"iterations": iterations},
    }
    for k, v in (extra_config or {}).items():
        cfg[k] = v
    atomic_write_text(rd.config_path, yaml.safe_dump(cfg, sort_keys=False))
    if metrics is None:
        metrics = [{"iteration": i, "time_s": float(i)} for i in range(1, iterations + 1)]
    for rec in metrics:
        rd.log_metrics(rec)
    if write_eval:
        ev: dict[str, Any] = {"env": env, "panel": "synthetic"}
        hist = history if history is not None else ([final] if final is not None else [])
        ev["history"] = hist
        if before is not None:
            ev["before"] = before
        if final is not None:
            ev["final"] = final
        if best is not None:
            ev["best"] = best
        atomic_write_json(rd.eval_path, ev)
    last = max((int(r.get("iteration", 0)) for r in metrics), default=0)
    rd.write_status(state, last if state == "running" else iterations, iterations, error)
    return rd


def panel_episodes(successes: list[float], prefix: str = "task") -> list[list[Any]]:
    """``eval.json`` ``episodes`` of a panel: ``[[task id, success], ...]`` (what the paired
    differences match by task)."""
    return [[f"{prefix}-{i}", float(v)] for i, v in enumerate(successes)]


def write_run_with_config(root: str | os.PathLike, config: dict[str, Any], *, final: dict[str, Any],
                          before: dict[str, Any] | None = None) -> RunDir:
    """A finished run folder whose ``config.yaml`` is ``config`` verbatim (e.g. a sweep's planned
    ``config_yaml``, or a committed run's), with ``eval.json`` ``final`` (and ``before``), one
    metrics line per iteration and ``status.json`` done."""
    rd = RunDir(root).create()
    atomic_write_text(rd.config_path, yaml.safe_dump(config, sort_keys=False))
    iterations = int((config.get("train") or {}).get("iterations", 1))
    for i in range(1, iterations + 1):
        rd.log_metrics({"iteration": i, "time_s": float(i)})
    ev: dict[str, Any] = {"env": (config.get("env") or {}).get("name"), "history": [final], "final": final}
    if before is not None:
        ev["before"] = before
    atomic_write_json(rd.eval_path, ev)
    rd.write_status("done", iterations, iterations)
    return rd


def write_demo_results(out: str | os.PathLike, *, seeds: int = 3, iterations: int = 12, rng_seed: int = 0) -> Path:
    """A small, plausible, fully synthetic set of runs under ``out`` (for trying the report).

    GRPO, GiGPO w/ std and G2PO on ALFWorld and WebShop with the tiny model, ``seeds`` seeds,
    learning curves, estimator diagnostics, a G2PO w sweep and a two-step ablation ladder on
    ALFWorld, and one G2PO run still in progress. Numbers are random, not results.
    """
    rng = np.random.default_rng(rng_seed)
    out = Path(out)
    level = {"grpo": 0.45, "gigpo": 0.55, "g2po": 0.62}

    def curve(final_level: float) -> list[float]:
        xs = np.linspace(0.1, final_level, iterations // 4 + 1)
        return [float(np.clip(x + rng.normal(0, 0.03), 0, 1)) for x in xs]

    def one(env: str, algo: str, seed: int, *, w: float = 1.0, options: dict[str, Any] | None = None, state: str = "done", bump: float = 0.0) -> None:
        mode = "mean_norm" if env == "webshop" else "mean_std_norm"
        vals = curve(level[algo] + bump)
        its = [i * 4 for i in range(len(vals))]
        evs = []
        for it, v in zip(its, vals):
            per = (
                {t: float(np.clip(v + rng.normal(0, 0.08), 0, 1)) for t in ALFWORLD_TASK_TYPES}
                if env == "alfworld"
                else {"webshop": v}
            )
            evs.append(make_eval(it, v, per, score=(100 * min(1.0, v + 0.15) if env == "webshop" else None)))
        n_it = iterations if state == "done" else iterations // 2
        evs_done = [e for e in evs if e["iteration"] <= n_it]
        metrics = []
        for i in range(1, n_it + 1):
            rec: dict[str, Any] = {"iteration": i, "time_s": 10.0 * i, "train/success_rate": float(np.clip(0.1 + i * 0.04 + rng.normal(0, 0.05), 0, 1))}
            if algo in ("gigpo", "g2po"):
                rec["adv/singleton_frac"] = float(np.clip(0.1 + rng.normal(0, 0.02), 0, 1))
                rec["adv/node_size_mean"] = float(5 + rng.normal(0, 0.5))
                rec["adv/node_size_max"] = float(12 + rng.integers(0, 5))
            metrics.append(rec)
        tag = f"-w{w:g}" if w != 1.0 else ""
        tag += "-" + "-".join(f"{k}{v}" for k, v in sorted((options or {}).items())) if options else ""
        write_synthetic_run(
            out / f"{env}-{algo}{tag}-s{seed}" if state == "done" else out / f"{env}-{algo}{tag}-s{seed}-running",
            env=env,
            algorithm=algo,
            mode=mode,
            step_weight=w,
            options=options,
            seed=seed,
            iterations=iterations,
            history=evs_done[1:],
            before=evs_done[0],
            final=evs_done[-1] if state == "done" else None,
            state=state,
            metrics=metrics,
        )

    for env in ("alfworld", "webshop"):
        for algo in ("grpo", "gigpo", "g2po"):
            for s in range(seeds):
                one(env, algo, s)
    for w in (0.2, 0.5, 0.8, 1.2):
        for s in range(seeds):
            one("webshop", "g2po", s, w=w, bump=-0.1 * abs(w - 0.8))
    for s in range(seeds):
        one("alfworld", "g2po", s, options={"edge_term": False}, bump=-0.08)
    one("alfworld", "g2po", seeds, state="running")
    return out
