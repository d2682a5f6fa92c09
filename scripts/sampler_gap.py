"""How large is ``train/sampler_logprob_gap`` from rounding alone, and with a sampler one update behind?

The figures behind ``STALE_SAMPLER_GAP`` (``algorithms/backends/common.py``). A tiny model of
the CPU default's size (hidden 128, 2 layers, 4 heads, vocabulary 1024; byte-level BPE on a small
corpus) samples 6 prompts x ``--tokens`` tokens; the local trainer then updates on them
(``train.old_logprobs=recompute``: the old log-probs come from a forward pass of the trainer's
weights), which measures the gap of a sampler on the same weights (rounding noise), and updates on
the same samples once more, which measures the gap of a sampler one update behind. Four batches
per setting, for float32 and bfloat16 and the learning rates of the CPU default (3e-4) and of
the reference (1e-6).

Usage::

    python scripts/sampler_gap.py [--out DIR] [--batches 4] [--tokens 24]

Prints one line per (dtype, lr): the mean gap per batch, same weights and one update behind.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

CORPUS = ["You are in room 0 of 5. <think>go on</think><action>go east</action>",
          "On the countertop 1, you see a apple 2. <think>take it</think><action>take apple 2 from countertop 1</action>"
          ] * 10
PROMPTS = ["You are in room 0 of 5.", "On the countertop 1, you see", "go east", "take apple 2 from countertop 1",
           "You are in room 3", "you see a apple"]


def _trainer(root: Path, model_dir: str, dtype: str, lr: str):
    from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer
    from g2po_bench.algorithms.backends.local.trainer import LocalTrainer
    from g2po_bench.runconfig import load_config

    cfg = load_config(None, ["env.name=toy", f"output_dir={root / 'runs'}", f"model.path={model_dir}",
                             "model.device=cpu", "progress=false", "train.sft_epochs=0", f"model.dtype={dtype}",
                             "train.old_logprobs=recompute", f"train.lr={lr}", "train.micro_batch_size=8"])
    tr = LocalTrainer(cfg)
    tr.model, tr.tokenizer = load_model_and_tokenizer(model_dir, dtype="float32", device="cpu")
    tr.ref_model = tr._frozen_reference()
    tr._prepare_training()
    return tr


def main(argv: list[str] | None = None) -> int:
    """Run the measurement (module docstring); returns 0."""
    from g2po_bench.algorithms.backends.local.model import build_tiny_model
    from g2po_bench.benchmarks.rollout import RolloutBatch

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None, help="work folder (default: a temporary one)")
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--tokens", type=int, default=24)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        model_dir = str(build_tiny_model(root / "tiny", CORPUS, vocab_size=1024, hidden_size=128, num_layers=2,
                                         num_heads=4, intermediate_size=256))
        for dtype in ("float32", "bfloat16"):
            for lr in ("3e-4", "1e-6"):
                tr = _trainer(root / f"{dtype}-{lr}", model_dir, dtype, lr)
                same, behind = [], []
                for seed in range(args.batches):
                    gens = tr.policy.generate(PROMPTS, temperature=1.0, max_new_tokens=args.tokens, seed=seed)
                    rb = RolloutBatch(steps=None, prompt_ids=[g.prompt_ids for g in gens],
                                      response_ids=[g.response_ids for g in gens], responses=[g.text for g in gens],
                                      state_texts=[""] * len(gens), sampler_logprobs=[g.logprobs for g in gens])
                    adv = np.linspace(-1.0, 1.0, len(gens))
                    same.append(tr._update(rb, adv)["train/sampler_logprob_gap"])
                    behind.append(tr._update(rb, adv)["train/sampler_logprob_gap"])  # sampled before the update
                print(f"{dtype:9} lr {lr}: same weights {' '.join(f'{g:.2g}' for g in same)}; "
                      f"one update behind {' '.join(f'{g:.2g}' for g in behind)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
