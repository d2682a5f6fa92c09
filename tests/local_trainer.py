"""A LocalTrainer set up on a given model folder without environments, and a RolloutBatch of
real samples from a LocalPolicy, for the tests of the trainer's update path (precision,
sampling, memory) that need no rollout engine."""

from __future__ import annotations

import numpy as np

from g2po_bench.algorithms.backends.local.model import build_tiny_model, load_model_and_tokenizer
from g2po_bench.algorithms.backends.local.trainer import LocalTrainer
from g2po_bench.algorithms.backends.local.transformers_policy import LocalPolicy
from g2po_bench.benchmarks.rollout import RolloutBatch
from g2po_bench.runconfig import load_config

CORPUS = ["You are in room 0 of 5. <think>go on</think><action>go east</action>",
          "On the countertop 1, you see a apple 2. <think>take it</think><action>take apple 2 from countertop 1</action>"] * 10
PROMPTS = ["You are in room 0 of 5.", "On the countertop 1, you see", "go east", "take apple 2 from countertop 1",
           "You are in room 3", "you see a apple"]


def tiny_model_dir(root, **dims) -> str:
    """A tiny Llama model folder (byte-level BPE on CORPUS) under ``root``."""
    kw = dict(vocab_size=300, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
    kw.update(dims)
    return str(build_tiny_model(root / "tiny", CORPUS, **kw))


def make_trainer(tmp_path, model_dir: str, *overrides: str) -> LocalTrainer:
    """A LocalTrainer on ``model_dir`` (CPU) after ``_prepare_training``: float32 master weights,
    the frozen reference, the sampler, the optimizer (and the critic for ppo)."""
    cfg = load_config(None, ["env.name=toy", f"output_dir={tmp_path / 'runs'}", f"model.path={model_dir}",
                             "model.device=cpu", "progress=false", "train.sft_epochs=0", *overrides])
    tr = LocalTrainer(cfg)
    tr.model, tr.tokenizer = load_model_and_tokenizer(model_dir, dtype="float32", device="cpu")
    tr.ref_model = tr._frozen_reference()
    tr._prepare_training()
    return tr


def sample_batch(policy: LocalPolicy, *, max_new_tokens: int = 8, seed: int = 0, temperature: float = 1.0
                 ) -> tuple[RolloutBatch, np.ndarray]:
    """A RolloutBatch of one sampled response per prompt of PROMPTS (no environment: ``steps`` is
    None, which the update path does not read) and fixed nonzero advantages (B,)."""
    gens = policy.generate(PROMPTS, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    rb = RolloutBatch(steps=None, prompt_ids=[g.prompt_ids for g in gens],
                      response_ids=[g.response_ids for g in gens], responses=[g.text for g in gens],
                      state_texts=[""] * len(gens), sampler_logprobs=[g.logprobs for g in gens])
    adv = np.linspace(-1.0, 1.0, len(gens))
    return rb, adv
