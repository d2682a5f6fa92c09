#!/usr/bin/env python3
"""Prepared check of the local backend on one GPU: Qwen2.5-1.5B-sized model, reference batch.

Builds a randomly initialised causal LM with Qwen2.5-1.5B's configuration (Qwen2, 28 layers,
hidden 1536, 12 attention heads, 2 KV heads, intermediate 8960, vocabulary 151936, tied
embeddings, RoPE theta 1e6; 1.54 B parameters) and a byte-level BPE tokenizer trained locally
(a deliberately small vocabulary, so ALFWorld prompts are long in tokens; the mean prompt
length and the count of prompts truncated at 2048 tokens are printed), then
runs ``train.iterations`` (2) iterations of the local backend (``g2po train``'s own training
loop with ``LocalTrainer``) on ALFWorld games generated offline from the ``alfworld`` wheel, at the
reference batch: 16 tasks x 8 rollouts, prompts up to 2048 tokens, responses up to 512,
mini-batch 256, micro-batch 8, bf16 autocast over float32 master weights, gradient
checkpointing, and a small ``env.max_steps`` (2) so that it finishes. Needs only torch and
transformers (no vLLM, no download).

It prints one line per phase as it happens (model build, setup, evaluation, and per
iteration: rollout with prompt and generated tokens per second, advantages, old+reference
log-probs, policy update, peak GPU memory of rollout and update, then the checkpoint), and a
summary. A random model almost never samples EOS, so every response runs to 512 tokens: the
rollout figures are the worst case for this batch. Target: under 8 minutes on one H100-class
GPU (80 GB).

Usage::

    python scripts/gpu_check.py                      # one CUDA GPU, the full-size check
    python scripts/gpu_check.py --device cpu --tiny  # the same code path at toy sizes (< 1 CPU-minute, CI)
    python scripts/gpu_check.py --max-steps 1 --iterations 1 train.micro_batch_size=4

Extra ``key=value`` arguments override the run config (``g2po config`` lists the keys).
Exit code 0 when every iteration ran. The run folder is kept under ``--out``.

Status: written without access to a GPU; the full-size check has not run on a GPU yet (see
the README, "Which backend at which scale").
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Qwen2.5-1.5B(-Instruct) config.json: the architecture facts the check reproduces
QWEN25_1_5B = dict(num_hidden_layers=28, hidden_size=1536, num_attention_heads=12, num_key_value_heads=2,
                   intermediate_size=8960, vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6,
                   rms_norm_eps=1e-6, tie_word_embeddings=True)
# toy sizes for --tiny (same architecture class and code path)
TINY = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, vocab_size=None, max_position_embeddings=4096, rope_theta=1e6,
            rms_norm_eps=1e-6, tie_word_embeddings=True)

# tokenizer corpus: ALFWorld-style text and the response format (what the prompts contain)
CORPUS = [
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, "
    "a drawer 2, a fridge 1, a microwave 1, a sinkbasin 1, a stoveburner 3, and a toaster 1.",
    "Your task is to: put a clean apple in fridge. You arrive at countertop 1. On the countertop 1, you see "
    "a apple 2, a knife 1, and a mug 3. Nothing happens. You pick up the apple 2 from the countertop 1.",
    "<think>I need to find the apple first.</think><action>go to countertop 1</action>",
    "Your admissible actions of the current situation are: [go to cabinet 1, open fridge 1, take apple 2 "
    "from countertop 1, clean apple 2 with sinkbasin 1, heat mug 3 with microwave 1, look, inventory]",
]


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Two iterations of the local backend with a randomly initialised Qwen2.5-1.5B-sized model "
                    "on generated ALFWorld games at the reference batch (16 tasks x 8 rollouts, prompts 2048 and "
                    "responses 512 tokens); prints seconds per phase, tokens per second and peak GPU memory.",
        epilog="Extra key=value arguments override the run config. Needs only torch and transformers.")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="where to run (default cuda)")
    ap.add_argument("--tiny", action="store_true",
                    help="toy sizes (2 layers, hidden 64, 2 tasks x 2 rollouts, 16 response tokens): the same code "
                         "path in under a minute of CPU time")
    ap.add_argument("--iterations", type=int, default=2, help="training iterations (default 2)")
    ap.add_argument("--max-steps", type=int, default=2, help="env.max_steps per episode (default 2)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"],
                    help="compute dtype (model.dtype; master weights stay float32)")
    ap.add_argument("--tokenizer-vocab", type=int, default=400,
                    help="BPE vocabulary of the local tokenizer (small: long prompts in tokens)")
    ap.add_argument("--out", default=str(ROOT / "results" / "runs" / "gpu-check"),
                    help="output folder (model, games, run)")
    ap.add_argument("--keep-model", action="store_true", help="keep the model folder after the run")
    ap.add_argument("overrides", nargs="*", help="extra key=value config overrides")
    return ap.parse_args(argv)


def _say(msg: str) -> None:
    print(f"[gpu_check] {msg}", flush=True)


def build_model(out: Path, *, tiny: bool, device: str, tokenizer_vocab: int, seed: int = 0) -> tuple[Path, int]:
    """Save a randomly initialised Qwen2 causal LM (Qwen2.5-1.5B's configuration, or toy sizes
    with ``tiny``) and a locally trained byte-level BPE tokenizer to ``out``.

    The weights are initialised on ``device`` (fast for 1.5 B parameters) and saved in
    bfloat16 (the trainer loads float32 master weights from them). Returns (``out``, number
    of parameters).
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from g2po_bench.algorithms.backends.local.model import train_tokenizer

    tok = train_tokenizer(CORPUS * 4, tokenizer_vocab)
    dims = dict(TINY if tiny else QWEN25_1_5B)
    if dims["vocab_size"] is None:
        dims["vocab_size"] = len(tok)
    config = Qwen2Config(**dims, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    if out.exists():
        shutil.rmtree(out)
    model.to(torch.bfloat16).save_pretrained(out)
    tok.save_pretrained(out)
    # the project's tokenizer marker: load with PreTrainedTokenizerFast (AutoTokenizer would swap
    # the pre-tokenizer for a Qwen2 config; see algorithms/backends/local/model.py)
    (out / "g2po_tiny.json").write_text(json.dumps({"built_by": "scripts/gpu_check.py", "seed": seed}))
    n = sum(p.numel() for p in model.parameters())
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out, n


def run_config(a: argparse.Namespace, model_dir: Path, out: Path):
    """The run config of the check (reference batch, or toy sizes with ``--tiny``)."""
    from g2po_bench.runconfig import load_config

    if a.tiny:
        sizes = ["train.groups_per_batch=2", "train.group_size=2", "train.max_prompt_tokens=256",
                 "train.max_response_tokens=16", "train.mini_batch_size=8", "train.micro_batch_size=2",
                 "env.generated_train_games=2", "env.generated_eval_games=1", "train.logprob_chunk_tokens=8",
                 "env.num_workers=1"]
    else:
        sizes = ["train.groups_per_batch=16", "train.group_size=8", "train.max_prompt_tokens=2048",
                 "train.max_response_tokens=512", "train.mini_batch_size=256", "train.micro_batch_size=8",
                 "env.generated_train_games=16", "env.generated_eval_games=1"]
    return load_config(None, [
        "env.name=alfworld", f"env.generated_dir={out / 'games'}", f"env.max_steps={a.max_steps}",
        f"model.path={model_dir}", f"model.dtype={a.dtype}", f"model.device={a.device}",
        f"train.iterations={a.iterations}", "train.sft_epochs=0", "train.lr=1e-6", "train.gradient_checkpointing=true",
        "eval.num_tasks=1", "eval.every=0", "progress=false", f"output_dir={out / 'runs'}", "run_id=gpu-check",
        *sizes, *a.overrides])


def main(argv: list[str] | None = None) -> int:
    """Build the model, run the iterations with per-phase lines, print a summary; exit code."""
    a = _args(argv)
    import torch

    from g2po_bench.algorithms.backends.local.trainer import LocalTrainer
    from g2po_bench.algorithms.backends.loop import TrainingLoop

    if a.device == "cuda" and not torch.cuda.is_available():
        _say("no CUDA device visible; run with --device cpu --tiny for the CPU dry run")
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    gpu = torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu"
    _say(f"device {gpu}; torch {torch.__version__}; {'tiny' if a.tiny else 'Qwen2.5-1.5B'} sizes; "
         f"compute {a.dtype} over float32 master weights")

    t0 = time.time()
    model_dir, n_params = build_model(out / "model", tiny=a.tiny, device=a.device, tokenizer_vocab=a.tokenizer_vocab)
    _say(f"phase model-build: {time.time() - t0:.1f} s ({n_params / 1e9:.3f} B parameters, random init)")
    cfg = run_config(a, model_dir, out)
    t = cfg.train
    _say(f"batch: {t.groups_per_batch} tasks x {t.group_size} rollouts, prompts <= {t.max_prompt_tokens} tokens, "
         f"responses <= {t.max_response_tokens} tokens, max_steps {cfg.env.max_steps}, mini-batch "
         f"{t.mini_batch_size}, micro-batch {t.micro_batch_size}, gradient checkpointing {t.gradient_checkpointing}")
    records: list[dict] = []

    class TimedTrainer(LocalTrainer):
        """LocalTrainer whose phases print a line when they end (no change to what they do)."""

        def _setup_model(self, pool, train_tasks, resume_from):
            t1 = time.time()
            stats = super()._setup_model(pool, train_tasks, resume_from)
            _say(f"phase setup (load policy as float32 master weights, reference copy): {time.time() - t1:.1f} s")
            return stats

        def save(self, staging, iteration, trainer_state):
            t1 = time.time()
            super().save(staging, iteration, trainer_state)
            _say(f"phase checkpoint (iteration {iteration}): {time.time() - t1:.1f} s")

    class TimedLoop(TrainingLoop):
        """The training loop whose evaluations and iterations print lines when they end."""

        def evaluate(self, pool, panel, iteration):
            t1 = time.time()
            ev = super().evaluate(pool, panel, iteration)
            _say(f"phase eval (iteration {iteration}, {ev['num_episodes']} episode(s)): {time.time() - t1:.1f} s")
            return ev

        def _iteration(self, pool, train_tasks, it, **kwargs):
            rec = super()._iteration(pool, train_tasks, it, **kwargs)
            records.append(rec)
            _print_iteration(rec)
            return rec

    t0 = time.time()
    _say(f"games: ALFWorld generated offline into {cfg.env.generated_dir} (reused when present)")
    run = TimedLoop(cfg, TimedTrainer(cfg)).run()
    _say(f"phase training run (setup, evaluations, {len(records)} iterations, checkpoint): {time.time() - t0:.1f} s")
    if a.device == "cuda":
        _say(f"peak GPU memory allocated over the run: {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB "
             f"(reserved {torch.cuda.max_memory_reserved() / 2**30:.1f} GiB)")
    total = time.time() - t_start
    _say(f"total {total:.0f} s ({total / 60:.1f} min); run folder {run.root}")
    if not a.keep_model:
        shutil.rmtree(model_dir, ignore_errors=True)
    ok = len(records) == a.iterations
    _say("OK" if ok else f"FAILED: {len(records)} of {a.iterations} iterations ran")
    return 0 if ok else 1


def _print_iteration(rec: dict) -> None:
    it = rec["iteration"]
    mean_prompt = rec["rollout/prompt_tokens"] / max(rec["train/steps"], 1)
    _say(f"iteration {it} phase rollout: {rec['rollout_s']:.1f} s ({rec['train/steps']} step samples, mean prompt "
         f"{mean_prompt:.0f} tokens, {rec.get('train/truncated_prompts', 0)} prompts truncated so far; "
         f"generate {rec['rollout/generate_s']:.1f} s: {rec['rollout/prompt_tokens']} prompt tokens at "
         f"{rec['rollout/prompt_tokens_per_s']:.0f} tok/s, {rec['rollout/generated_tokens']} generated tokens at "
         f"{rec['rollout/generated_tokens_per_s']:.0f} tok/s)")
    _say(f"iteration {it} phase advantages: {rec['adv_s']:.2f} s")
    lp = rec.get("logprob_s", 0.0)
    _say(f"iteration {it} phase old+reference log-probs: {lp:.1f} s")
    _say(f"iteration {it} phase update (policy{' + critic' if 'loss/value' in rec else ''}): "
         f"{rec['update_s'] - lp:.1f} s (loss {rec.get('loss/loss', float('nan')):.4f}, grad norm "
         f"{rec.get('loss/grad_norm', float('nan')):.3g}, sampler/trainer log-prob gap "
         f"{rec.get('train/sampler_logprob_gap', float('nan')):.2g})")
    if "memory/rollout_peak_gb" in rec:
        _say(f"iteration {it} peak GPU memory: rollout {rec['memory/rollout_peak_gb']:.1f} GiB, "
             f"update {rec['memory/update_peak_gb']:.1f} GiB")
    _say(f"iteration {it} total: {rec['iter_s']:.1f} s")


if __name__ == "__main__":
    raise SystemExit(main())
