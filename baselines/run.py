"""Run a prompting baseline on the evaluation panel and write a run folder.

``run_baseline(cfg, bcfg)`` writes ``<output_dir>/<run_id>/`` (:mod:`g2po_bench.core.rundir` layout), which
:func:`g2po_bench.analysis.load.load_runs` turns into a table row (``kind`` "baseline", method from
``baseline.name``, model size from ``model.path``):

- ``config.yaml``: the RunConfig keys + ``kind: baseline`` + the ``baseline`` section
  (+ ``tags.model_size`` for a remote model); ``g2po eval --config <it>`` reruns the run;
- ``eval.json``: ``{"env", "panel", "baseline", "model", "history": [EVAL], "before", "final",
  "best", "few_shot", "few_shot_split", "throughput"}``; EVAL adds ``tokens_per_second``,
  ``response_tokens``, ``generation_seconds``, ``wall_seconds`` (and for Reflexion
  ``success_by_trial``, ``trials``, ``max_trials``);
- ``policy.json``: the backend's settings, the sampling parameters, the seed and its rule, the
  throughput, and one record per generate call (prompts, temperature, top-p, max tokens,
  seed, tokens, seconds);
- ``trajectories.jsonl``: one line per episode (trial) as it finishes (responses, actions,
  observations); ``reflections.jsonl`` (Reflexion): one line per reflection;
  ``progress.jsonl``: one line per generate call as it completes (the ``policy.json`` call record
  plus a timestamp), so a killed run keeps its throughput figures;
- ``status.json``: running -> done (or failed with the error);
- with a tracker in ``logging.backends`` (``tensorboard``, ``wandb``): the evaluation and the
  config as a tracker run (:func:`g2po_bench.core.tracking.track_evaluation`, W&B job type
  ``baseline``), files in ``tensorboard/``, ``wandb/`` and ``tracking.json``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from g2po_bench.baselines.agents import run_direct, run_react, run_reflexion, stop_strings
from g2po_bench.baselines.config import (
    BaselineConfig,
    baseline_run_dict,
    baseline_run_id,
    load_baseline_config,
)
from g2po_bench.baselines.fewshot import Transcript, select_examples
from g2po_bench.baselines.policies import make_policy
from g2po_bench.baselines.smollm2 import smollm2_folder
from g2po_bench.benchmarks.evaluation import select_panel
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.core.config import RunConfig
from g2po_bench.core.rundir import RunDir, append_jsonl, atomic_write_json, atomic_write_text
from g2po_bench.core.tracking import run_info, track_evaluation
from g2po_bench.runtime.policies.meter import MeteredPolicy
from g2po_bench.runtime.policy_protocol import Policy
from g2po_bench.runtime.workers import EnvPool

__all__ = ["run_baseline", "run_baseline_cli", "build_policy", "load_examples"]


def build_policy(cfg: RunConfig, b: BaselineConfig) -> Policy:
    """The policy backend of a baseline run (``baseline.policy``), with ReAct's stop string."""
    stop = stop_strings(cfg.env.name) if b.name in ("react", "reflexion") else None
    chat = b.prompt_style == "chat"
    if b.policy == "local":
        return make_policy("local", path=cfg.model.path, dtype=cfg.model.dtype, device=cfg.model.device,
                           max_prompt_tokens=cfg.train.max_prompt_tokens, batch_size=b.batch_size, stop=stop,
                           use_chat_template=chat)
    if b.policy == "vllm":
        return make_policy("vllm", path=cfg.model.path, dtype=cfg.model.dtype,
                           max_prompt_tokens=cfg.train.max_prompt_tokens, stop=stop, seed=cfg.seed,
                           use_chat_template=chat)
    return make_policy("openai", base_url=b.base_url, model=b.api_model, api_key_env=b.api_key_env or None,
                       timeout=b.request_timeout, max_retries=b.max_retries, max_concurrency=b.max_concurrency,
                       stop=stop)


def load_examples(bench, cfg: RunConfig, b: BaselineConfig, panel_ids: list[str]
                  ) -> tuple[dict[str, list[Transcript]], str | None]:
    """Few-shot transcripts per task type and the split they come from (module docstring of
    :mod:`g2po_bench.baselines.fewshot`). Without ``baseline.examples_split`` the training split is used,
    or ``valid_train`` (ALFWorld's sample of training games) when the data has no training split."""
    if b.name == "direct" or b.num_examples <= 0:
        return {}, None
    if b.examples_split:
        candidates = [b.examples_split]
    else:
        candidates = [s for s in dict.fromkeys([cfg.env.train_split, "valid_train"]) if s != cfg.env.eval_split]
    last: Exception | None = None
    for split in candidates:
        try:
            ex = select_examples(bench, cfg.env.name, cfg.env, split, per_type=b.num_examples,
                                 task_types=list(bench.task_types), max_steps=cfg.env.max_steps,
                                 exclude_ids=panel_ids, eval_split=cfg.env.eval_split)
        except ValueError:
            raise
        except Exception as exc:  # split missing in this data folder: try the next one
            if b.examples_split:
                raise
            last = exc
            continue
        return ex, split
    raise RuntimeError(f"no training split for few-shot examples among {candidates}: {last}")


def _model_name(cfg: RunConfig, b: BaselineConfig) -> str:
    if b.policy == "openai":
        return f"{b.api_model} @ {b.base_url}"
    return str(cfg.model.path)


def run_baseline(cfg: RunConfig, b: BaselineConfig, *, console=None, policy: Policy | None = None) -> Path:
    """Run baseline ``b.name`` on the evaluation panel of ``cfg`` and write its run folder.

    Args:
        cfg, b: the validated configs (:func:`g2po_bench.baselines.config.load_baseline_config`).
        console: a rich console for progress lines (optional).
        policy: use this policy instead of building ``b.policy`` (tests, a shared engine).

    Returns:
        The run folder.
    """
    start = time.perf_counter()

    def say(text: str) -> None:  # the start-up phases take minutes on real data: say each one
        if console is not None and cfg.progress:
            console.print(f"  [{time.perf_counter() - start:6.1f} s] {text}", highlight=False, markup=False)

    bench = get_benchmark(cfg.env.name)
    say(f"{b.name} on {cfg.env.name}: loading the {cfg.env.eval_split} tasks")
    panel = select_panel(bench.load_tasks(cfg.env, cfg.env.eval_split), cfg.eval.num_tasks)
    panel_ids = [t.task_id for t in panel]
    say(f"panel: {len(panel)} task(s) x {cfg.eval.episodes_per_task} episode(s), at most {cfg.env.max_steps} steps each")
    if b.name != "direct" and b.num_examples > 0:
        say(f"few-shot examples: {b.num_examples} expert transcript(s) per task type, played from training tasks")
    examples, ex_split = load_examples(bench, cfg, b, panel_ids)
    run = RunDir(Path(cfg.output_dir) / baseline_run_id(cfg, b)).create()
    atomic_write_text(run.config_path, yaml.safe_dump(baseline_run_dict(cfg, b), sort_keys=False))
    run.write_status("running", 0, 0)
    for name in ("trajectories.jsonl", "reflections.jsonl", "progress.jsonl"):
        (run.root / name).unlink(missing_ok=True)
    built = None
    try:
        if b.torch_threads:
            import torch

            torch.set_num_threads(b.torch_threads)
        if policy is None:
            say(f"loading the policy ({b.policy}: {_model_name(cfg, b)})")
        built = build_policy(cfg, b) if policy is None else None
        metered = MeteredPolicy(policy if policy is not None else built,
                                on_call=lambda rec: append_jsonl(run.root / "progress.jsonl", {**rec, "time": time.time()}))
        max_new = b.max_new_tokens or cfg.train.max_response_tokens
        seed = cfg.seed + 7919  # the evaluation seed of g2po eval / the trainer
        common: dict[str, Any] = dict(max_steps=cfg.env.max_steps, temperature=cfg.eval.temperature,
                                      max_new_tokens=max_new, seed=seed,
                                      episodes_per_task=cfg.eval.episodes_per_task,
                                      stop_after_refusals=cfg.env.stop_after_refusals)
        prompt_options = {"history_steps": b.history_steps, "style": b.prompt_style,
                          "max_chars": b.max_prompt_chars or int(2.5 * cfg.train.max_prompt_tokens)}

        def on_episode(rec: dict[str, Any]) -> None:
            append_jsonl(run.root / "trajectories.jsonl", rec)
            if console is not None and cfg.progress:
                console.print(f"  {b.name} trial {rec['trial'] + 1} {rec['task_id']}: "
                              f"{'success' if rec['success'] else 'fail'} in {rec['num_steps']} steps")

        def on_step(t: int, n: int) -> None:
            if console is not None and cfg.progress and (t % 5 == 0):
                console.print(f"  step {t + 1}/{cfg.env.max_steps}: {n} active "
                              f"({metered.tokens_per_second:.1f} tok/s so far)")

        say(f"starting the environment workers; run folder {run.root}")
        with EnvPool(bench, cfg.env, cfg.env.num_workers) as pool:
            say(f"playing {len(panel)} task(s)")
            if b.name == "direct":
                ev = run_direct(metered, pool, bench, panel, history_length=cfg.env.history_length, **common)
            elif b.name == "react":
                ev = run_react(metered, pool, cfg.env.name, panel, examples=examples,
                               prompt_options=prompt_options, on_episode=on_episode, on_step=on_step, **common)
            else:
                ev = run_reflexion(metered, pool, cfg.env.name, panel, examples=examples,
                                   prompt_options=prompt_options, max_trials=b.max_trials,
                                   max_reflections=b.max_reflections, reflection_tokens=b.reflection_tokens,
                                   on_episode=on_episode, on_step=on_step,
                                   on_reflection=lambda r: append_jsonl(run.root / "reflections.jsonl", r),
                                   **common)
        stats = metered.stats()
        ev.update({"tokens_per_second": stats["response_tokens_per_second"],
                   "response_tokens": stats["response_tokens"], "prompt_tokens": stats["prompt_tokens"],
                   "generation_seconds": stats["generation_seconds"],
                   "truncated_prompts": int(getattr(metered, "truncated_prompts", 0) or 0),
                   "wall_seconds": round(time.perf_counter() - start, 2)})
        atomic_write_json(run.root / "policy.json", {
            "policy": metered.describe(),
            "sampling": {"temperature": cfg.eval.temperature, "top_p": 1.0, "max_new_tokens": max_new,
                         "reflection_tokens": b.reflection_tokens if b.name == "reflexion" else None,
                         "stop": stop_strings(cfg.env.name) if b.name != "direct" else None,
                         "prompt_style": b.prompt_style},
            "seed": seed, "config_seed": cfg.seed,
            "seed_rule": ("evaluate(): seed + batch start, step t samples with seed*1000+t" if b.name == "direct"
                          else "step t of trial k samples with seed*1000 + 100000*k + t; reflections after trial k "
                               "with seed*1000 + 100000*k + 999"),
            "throughput": stats, "calls": metered.calls,
        })
        atomic_write_json(run.eval_path, {
            "env": cfg.env.name, "panel": panel_ids, "baseline": b.name, "model": _model_name(cfg, b),
            "history": [ev], "before": ev, "final": ev, "best": ev,
            "few_shot": {k: [t.task_id for t in v] for k, v in examples.items()}, "few_shot_split": ex_split,
            "throughput": stats,
        })
        run.write_status("done", 0, 0)
        config = baseline_run_dict(cfg, b)
        track_evaluation(run.root, cfg.logging, name=run.run_id, ev=ev, step=0, config=config, kind="baseline",
                         config_yaml=yaml.safe_dump(config, sort_keys=False),
                         info=run_info(run.run_id, kind="baseline", baseline=b.name, model=_model_name(cfg, b)),
                         log=console.print if console is not None else None)
    except BaseException as exc:
        run.write_status("failed", 0, 0, error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        closer = getattr(built, "close", None)  # only a policy built here is closed here
        if callable(closer):
            closer()
    if console is not None:
        extra = f"; by trial {ev['success_by_trial']}" if "success_by_trial" in ev else ""
        console.print(f"{b.name}: success {ev['success_rate']:.1%} on {ev['num_episodes']} episodes "
                      f"(score {ev['score']:.1f}); per type {ev['per_task_type']}{extra}; "
                      f"{ev['tokens_per_second']:.1f} tok/s")
    return run.root


def run_baseline_cli(config_file: str | None, overrides: list[str] | None, *, preset: str | None = None,
                     console=None) -> Path:
    """``g2po eval baseline.name=... [key=value ...]``: load the configs, then :func:`run_baseline`."""
    if console is not None and not smollm2_folder()[1] and any(
            item.partition("=")[0].strip() in ("model", "model.path")
            and item.partition("=")[2].strip().lower() in ("smollm2", "smollm2-135m-instruct") for item in overrides or []):
        console.print(f"converting SmolLM2-135M-Instruct into {smollm2_folder()[0]} (once; about a minute)")
    cfg, b = load_baseline_config(config_file, overrides, preset=preset)
    return run_baseline(cfg, b, console=console)
