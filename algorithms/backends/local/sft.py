"""Supervised warm start: fine-tune the policy on expert (prompt, response) pairs.

The RL papers start from an instruct model that already follows the response format. A tiny
model built from scratch does not, so the CPU default first trains it by maximum likelihood
on the expert walkthroughs of the *training* tasks (never the evaluation panel); RL then
starts from that policy, which is also the KL reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from g2po_bench.algorithms.backends.local.transformers_policy import (
    pack_sequences,
    response_logprobs,
)

__all__ = ["supervised_finetune"]


def supervised_finetune(
    model,
    tokenizer,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    max_grad_norm: float = 1.0,
    progress=None,
    micro_batch_size: int = 0,
) -> dict[str, float]:
    """Minimise the token-mean negative log-likelihood of the responses given the prompts.

    Args:
        model: causal LM in training precision.
        tokenizer: its tokenizer (for the pad id).
        prompt_ids, response_ids: S token-id lists each (responses end with EOS).
        epochs, lr, batch_size: AdamW settings (cosine decay to 10 % of ``lr``).
        seed: shuffling seed.
        progress: optional callable ``progress(done_batches, total_batches, loss)``.
        micro_batch_size: 0 (default) scores each batch in one forward pass, padded to its
            longest sample; > 0 sorts the batch's samples by length and scores them in
            micro-batches of at most this many, accumulating the gradient of the same loss
            (the batch's token-mean: each micro-batch's summed log-likelihood over the
            batch's response tokens). Same optimizer steps, the same loss up to float
            rounding, less padding where sample lengths differ a lot (WebShop's results
            pages beside its search page: ``train.sft_micro_batch_size``).

    Returns:
        ``{"sft/loss_first"`` (loss of the first optimizer step), ``"sft/loss_last"`` (of the last
        step), ``"sft/loss_epochs"`` (list: mean loss of each epoch), ``"sft/steps"``,
        ``"sft/samples", "sft/epochs"}``; losses are token-mean negative log-likelihoods (nats).
    """
    n = len(prompt_ids)
    if n == 0 or epochs <= 0:
        return {"sft/samples": n, "sft/epochs": 0}
    device = next(model.parameters()).device
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    steps_per_epoch = math.ceil(n / batch_size)
    total = steps_per_epoch * epochs
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(k, total) / total))
    )
    model.train()
    losses: list[float] = []
    done = 0
    for _ in range(epochs):
        order = rng.permutation(n)
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            opt.zero_grad(set_to_none=True)
            if micro_batch_size > 0:
                loss = _accumulate(model, tokenizer, prompt_ids, response_ids, idx, micro_batch_size, device)
            else:
                packed = pack_sequences([prompt_ids[i] for i in idx], [response_ids[i] for i in idx],
                                        tokenizer.pad_token_id, device)
                logp, _ = response_logprobs(model, packed)
                mask = packed["response_mask"]
                loss = -(logp * mask).sum() / mask.sum().clamp(min=1)
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            done += 1
            if progress is not None:
                progress(done, total, losses[-1])
    model.eval()
    k = max(1, steps_per_epoch)
    return {
        "sft/loss_first": losses[0],
        "sft/loss_last": losses[-1],
        "sft/loss_epochs": [float(np.mean(losses[e:e + k])) for e in range(0, len(losses), k)],
        "sft/steps": len(losses),
        "sft/samples": n,
        "sft/epochs": epochs,
    }


def _accumulate(model, tokenizer, prompt_ids, response_ids, idx, micro_batch_size: int, device) -> torch.Tensor:
    """Backward of one batch's token-mean loss in length-sorted micro-batches (see
    :func:`supervised_finetune` ``micro_batch_size``); returns the batch's loss (detached)."""
    rows = sorted((int(i) for i in idx), key=lambda i: (len(prompt_ids[i]) + len(response_ids[i]), i))
    tokens = max(sum(len(response_ids[i]) for i in rows), 1)  # the batch's response tokens
    total = torch.zeros((), device=device)
    for m in range(0, len(rows), micro_batch_size):
        micro = rows[m:m + micro_batch_size]
        packed = pack_sequences([prompt_ids[i] for i in micro], [response_ids[i] for i in micro],
                                tokenizer.pad_token_id, device)
        logp, _ = response_logprobs(model, packed)
        part = -(logp * packed["response_mask"]).sum() / tokens
        part.backward()
        total = total + part.detach()
    return total
