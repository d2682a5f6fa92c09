"""The warm start: expert demonstrations + supervised fine-tuning, cached on disk by its config.

RL in the papers starts from an instruct model that already follows the response format. The
CPU default starts from a tiny model built from scratch, so it is first trained by maximum
likelihood on the expert walkthroughs of the *training* tasks (never the evaluation panel);
RL then starts from that policy, which is also the KL reference.

The warm start depends only on the settings listed by :func:`warm_start_settings` (the
environment's tasks and prompt, the model, the SFT settings and ``train.warm_start_seed``),
never on the run's ``seed`` or estimator. It is built once into
``<train.warm_start_cache>/<key>/`` and reused by every run with the same settings, so the runs
of an estimator comparison all start from the very same policy and differ only in RL
(issue: "the comparison isolates the estimator, not the SFT noise"). Concurrent runs (a sweep
on a local cluster) serialise on an exclusive ``flock``: one builds, the others wait and reuse.
The folder is written to a temporary sibling and renamed into place, so a killed build leaves
no half-written cache.

Layout of a cache entry::

    <cache>/<key>/policy/          model + tokenizer after SFT (loadable with from_pretrained)
    <cache>/<key>/warm_start.json  {"key", "settings", "stats": {demo/..., sft/..., seconds}}
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from g2po_bench.algorithms.backends.common import demonstration_tasks, first_step_tasks
from g2po_bench.algorithms.backends.local import sft
from g2po_bench.algorithms.backends.local.model import (
    build_tiny_model,
    load_model_and_tokenizer,
)
from g2po_bench.algorithms.backends.local.transformers_policy import LocalPolicy
from g2po_bench.algorithms.backends.progress import RunProgress
from g2po_bench.benchmarks.demos import collect_demonstrations
from g2po_bench.core.config import config_to_dict
from g2po_bench.runtime.shutdown import check_stop

__all__ = ["WarmStart", "warm_start_settings", "warm_start_key", "ensure_warm_start"]

#: bump when the warm start built for the same settings changes (invalidates caches).
WARM_START_VERSION = 1
#: benchmarks whose demonstrations changed since version 1, and their revision (in the key, so
#: their cached warm starts are rebuilt and the others' kept): 2 = the prompts' action history
#: shows the action as the agent reads it from the response, as in a rollout (WebShop lowercases
#: it; the other benchmarks' expert actions read back unchanged)
DEMO_REVISIONS = {"webshop": 2}


class WarmStart:
    """A built (or reused) warm start.

    Attributes:
        model_dir: folder of the starting policy (model + tokenizer).
        stats: ``demo/steps``, ``demo/replay_success``, ``demo/seconds``, ``sft/loss_first``,
            ``sft/loss_last``, ``sft/seconds``, ... (empty when there is no warm start).
        key: the cache key ("" when nothing was built).
        reused: True when the cache already held it.
    """

    def __init__(self, model_dir: Path, stats: dict[str, Any], key: str = "", reused: bool = False):
        self.model_dir = Path(model_dir)
        self.stats = stats
        self.key = key
        self.reused = reused


#: env keys that do not change the warm start: the evaluation split, where the generated games
#: are cached (their content is a function of the generation settings), worker processes, the
#: state key (the estimator's, resolved per run), the refusal stop (the expert is never refused),
#: the reward RL trains on (demonstrations are imitated, never rewarded)
_NOT_WARM_START_ENV = ("eval_split", "num_workers", "worker_max_episodes", "generated_dir",
                       "generated_eval_games", "generated_eval_scenes", "state_key", "stop_after_refusals",
                       "webshop_train_reward")
#: SFT options added after warm starts were cached: at these (neutral) values they change nothing,
#: so they stay out of the key and the caches built before them remain valid
_NEUTRAL_SFT = {"sft_stall_prob": 0.0, "sft_recovery_prob": 0.0, "sft_detour_open_prob": 0.0,
                "sft_micro_batch_size": 0, "sft_first_step_tasks": 0}
#: env options added after warm starts were cached, left out of the key at these neutral values
_NEUTRAL_ENV = {"max_train_tasks": 0}
#: model options added after warm starts were cached, left out of the key at these neutral values
_NEUTRAL_MODEL = {"item_tokens": False}
#: settings of one benchmark (``<name>_...``) do not change another benchmark's warm start
_BENCHMARK_PREFIXES = ("webshop", "appworld", "alfworld")


def warm_start_settings(cfg) -> dict[str, Any]:
    """The part of a RunConfig that determines the warm start (and so its cache key).

    Everything about the training tasks, their prompts and the demonstrations (``env`` minus
    evaluation, cache-location and worker settings and other benchmarks' keys), the model (``model`` minus device/threads), the SFT settings
    (``train.sft_*``, ``train.max_prompt_tokens``, ``train.warm_start_seed``). Not the run's
    ``seed``, the estimator, the RL settings or the evaluation panel.
    """

    d = config_to_dict(cfg)
    name = d["env"]["name"]
    env = {k: v for k, v in d["env"].items()
           if k not in _NOT_WARM_START_ENV and not (k in _NEUTRAL_ENV and v == _NEUTRAL_ENV[k])
           and not any(k.startswith(f"{other}_") for other in _BENCHMARK_PREFIXES if other != name)}
    model = {k: v for k, v in d["model"].items()
             if k not in ("device", "num_threads") and not (k in _NEUTRAL_MODEL and v == _NEUTRAL_MODEL[k])}
    train = {k: v for k, v in d["train"].items()
             if (k.startswith("sft_") or k in ("max_prompt_tokens", "warm_start_seed"))
             and not (k in _NEUTRAL_SFT and v == _NEUTRAL_SFT[k])}
    out = {"version": WARM_START_VERSION, "env": env, "model": model, "train": train}
    if name in DEMO_REVISIONS:
        out["demos"] = DEMO_REVISIONS[name]
    return out


def warm_start_key(cfg) -> str:
    """A short stable hash of :func:`warm_start_settings` (12 hex characters)."""
    blob = json.dumps(warm_start_settings(cfg), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def ensure_warm_start(cfg, pool, bench, train_tasks, *, run_root: Path, progress=None) -> WarmStart:
    """The starting policy of ``cfg``: built once per warm-start settings, reused afterwards.

    Args:
        cfg: the RunConfig.
        pool: an :class:`g2po_bench.runtime.workers.EnvPool` for the expert replays.
        bench: the benchmark module.
        train_tasks: the training tasks (demonstrations come from at most
            ``train.sft_max_tasks`` of them, evenly spread).
        run_root: the run folder (holds the warm start when ``train.warm_start_cache`` is "").
        progress: the run's :class:`g2po_bench.algorithms.backends.progress.RunProgress` (phase lines,
            bars and timings; None = silent).

    Returns:
        :class:`WarmStart`. Without SFT and with ``model.path`` set, the model folder itself.

    Raises:
        ValueError: no demonstrations could be collected (the message says why).
    """

    progress = progress or RunProgress(None)
    log = progress.log
    need_sft = cfg.train.sft_epochs > 0
    if cfg.model.path is not None and not need_sft:
        return WarmStart(Path(cfg.model.path), {})
    key = warm_start_key(cfg)
    root = Path(cfg.train.warm_start_cache) if cfg.train.warm_start_cache else run_root / "warm_start"
    target = root / key
    if (target / "warm_start.json").exists():
        return _reuse(target, key, log)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if (target / "warm_start.json").exists():  # built by a concurrent run meanwhile
            return _reuse(target, key, log)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
        try:
            stats = _build(cfg, pool, bench, train_tasks, staging / "policy", progress)
            (staging / "warm_start.json").write_text(json.dumps(
                {"key": key, "settings": warm_start_settings(cfg), "stats": stats}, indent=1))
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    log(f"warm start saved to {target} (reused by every run with the same warm-start settings)")
    return WarmStart(target / "policy", stats, key=key, reused=False)


def _reuse(target: Path, key: str, log) -> WarmStart:
    meta = json.loads((target / "warm_start.json").read_text())
    stats = meta.get("stats", {})
    log(f"warm start reused from {target} (SFT loss {stats.get('sft/loss_first', float('nan')):.3f} -> "
        f"{stats.get('sft/loss_last', float('nan')):.3f}, {stats.get('demo/steps', 0)} expert steps)")
    return WarmStart(target / "policy", stats, key=key, reused=True)


def _build(cfg, pool, bench, train_tasks, out: Path, progress) -> dict[str, Any]:
    import torch

    log = progress.log
    stats: dict[str, Any] = {}
    t0 = time.time()
    demo_tasks = demonstration_tasks(cfg, train_tasks)
    with progress.phase(f"expert replay of {len(demo_tasks)} training tasks", total=len(demo_tasks),
                        key="expert replay") as h:
        demos, replay_win = collect_demonstrations(
            pool, bench, demo_tasks, max_steps=cfg.env.max_steps, history_length=cfg.env.history_length,
            prompt_style=cfg.env.prompt, on_progress=lambda done, total: h.update(done, "tasks done"),
            detour_prob=cfg.train.sft_detour_prob, detour_open_prob=cfg.train.sft_detour_open_prob,
            stall_prob=cfg.train.sft_stall_prob,
            recovery_prob=cfg.train.sft_recovery_prob, seed=cfg.train.warm_start_seed,
        )
    if not demos:
        raise ValueError(f"no expert demonstrations from {len(demo_tasks)} training tasks: the warm start "
                         "needs tasks whose expert walkthrough replays; check env.data_dir/env.train_split")
    stats.update({"demo/steps": len(demos), "demo/tasks": len(demo_tasks), "demo/replay_success": replay_win})
    log(f"expert replay: {len(demos)} steps from {len(demo_tasks)} tasks (replay success {replay_win:.0%}) "
        f"in {time.time() - t0:.0f} s")
    first_tasks = first_step_tasks(cfg, train_tasks)
    if first_tasks:
        with progress.phase(f"expert first steps of {len(first_tasks)} more training tasks", total=len(first_tasks),
                            key="expert replay") as h:
            firsts, _ = collect_demonstrations(
                pool, bench, first_tasks, max_steps=1, history_length=cfg.env.history_length,
                prompt_style=cfg.env.prompt, on_progress=lambda done, total: h.update(done, "tasks done"))
        demos += firsts
        stats["demo/first_steps"] = len(firsts)
        log(f"expert first steps: {len(firsts)} steps from {len(first_tasks)} more training tasks "
            "(train.sft_first_step_tasks)")
    stats["demo/seconds"] = time.time() - t0
    torch.manual_seed(cfg.train.warm_start_seed)
    if cfg.model.path is None:
        corpus = [d.prompt for d in demos] + [d.response for d in demos]
        m = cfg.model
        words = bench.tokenizer_words(cfg.env) if m.item_tokens else []
        build_tiny_model(out, corpus, vocab_size=m.vocab_size, hidden_size=m.hidden_size,
                         num_layers=m.num_layers, num_heads=m.num_heads, intermediate_size=m.intermediate_size,
                         max_position_embeddings=m.max_position_embeddings, seed=cfg.train.warm_start_seed,
                         words=words)
        if words:
            log(f"tokenizer: {len(words)} item ids of {cfg.env.name} as single tokens (model.item_tokens)")
        model_path = out
    else:
        model_path = Path(cfg.model.path)
    # float32 master weights whatever model.dtype says (issue: bf16 weights do not move at small lr)
    model, tok = load_model_and_tokenizer(model_path, dtype="float32", device=cfg.model.device)
    policy = LocalPolicy(model, tok, max_prompt_tokens=cfg.train.max_prompt_tokens)
    p_ids = [policy.encode_prompt(d.prompt) for d in demos]
    eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
    r_ids = [tok(d.response, add_special_tokens=False)["input_ids"] + eos for d in demos]
    if cfg.train.sft_epochs > 0:
        t1 = time.time()
        steps = -(-len(demos) // cfg.train.sft_batch_size) * cfg.train.sft_epochs
        with progress.phase(f"warm start: SFT, {cfg.train.sft_epochs} epoch(s) on {len(demos)} expert steps",
                            total=steps, key="warm start (SFT)") as h:
            def on_batch(done: int, total: int, loss: float) -> None:
                h.update(done, f"optimizer steps, loss {loss:.3f}")
                check_stop()  # a stop request ends SFT here (the staging folder is removed)

            stats.update(sft.supervised_finetune(
                model, tok, p_ids, r_ids, epochs=cfg.train.sft_epochs, lr=cfg.train.sft_lr,
                batch_size=cfg.train.sft_batch_size, seed=cfg.train.warm_start_seed, progress=on_batch,
                micro_batch_size=cfg.train.sft_micro_batch_size))
        stats["sft/seconds"] = time.time() - t1
        epochs = ", ".join(f"{v:.3f}" for v in stats["sft/loss_epochs"])
        log(f"warm start: SFT {cfg.train.sft_epochs} epoch(s) on {len(demos)} steps, loss "
            f"{stats['sft/loss_first']:.3f} (first step) -> {stats['sft/loss_last']:.3f} (last step); "
            f"epoch means {epochs}; {stats['sft/seconds']:.0f} s")
    else:
        log("warm start: no SFT (train.sft_epochs=0): RL starts from the untrained tiny model")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    marker = model_path / "g2po_tiny.json"
    if marker.exists() and model_path != out:
        (out / "g2po_tiny.json").write_text(marker.read_text())
    stats["seconds"] = time.time() - t0
    return stats
