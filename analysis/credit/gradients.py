"""Update-direction accuracy: the policy gradient an estimator's advantages make, against A*'s.

Source: the suite's method (docs/credit.md "Update-direction accuracy"). Within-group rank
correlation cannot see what the policy update feels: the size of advantages across task groups
(group vs batch statistics, mean-only vs std normalization, how groups are weighted) and their
size across the steps of a group. The update is the gradient of the trainer's policy loss; this
module scores the direction of that gradient.

**The loss gradient.** At ratio 1 (on-policy: the clipped surrogate's clipping is inactive), with
the KL and entropy terms off, the trainer's policy loss (:func:`g2po_bench.algorithms.losses.ppo_step_loss`)
over a batch of B step rows with advantages A (one scalar per row, given to every response token
of the row) is ``L(A) = -sum_i A_i sum_t w_{i,t} log pi(y_{i,t} | x_i, y_{i,<t})``, the token
weights w coming from the loss aggregation mode (``train.loss_agg_mode``; :func:`row_weights`)
over the whole batch taken as one mini-batch. Its gradient is linear in A::

    grad L(A) = -sum_i A_i J_i,        J_i = w_i grad sum_t log pi(y_{i,t})     (w per row)

The instrument computes every row's J_i once (one backward pass per row, :func:`row_gradients`),
then the gradient of any advantage vector is a weighted sum, with no further model call.

**Compression.** J_i has as many entries as the model has parameters; it is kept as a CountSketch
(:class:`GradientSketch`; Charikar et al., 2002): entry j goes to bucket h(j) with sign s(j), both
seeded, so inner products are unbiased, ``E[<S x, S y>] = <x, y>``, with a variance of at most
``(|x|^2 |y|^2 + <x, y>^2) / d`` for d buckets (``dim=0`` keeps the exact gradient).

**The cosine, unattenuated.** The ground truth comes from two independent halves of the
Monte-Carlo continuations (:mod:`g2po_bench.analysis.credit.groundtruth`), A*_1 and A*_2, giving
gradients g*_1 and g*_2 with the same expectation g*. With g_e the estimator's gradient::

    cos(g_e, g*) ~ (<g_e, g*_1> + <g_e, g*_2>) / 2 / (|g_e| sqrt(<g*_1, g*_2>))

since E<g_e, g*_k> = <g_e, g*> and E<g*_1, g*_2> = |g*|^2 for independent halves (the noise of
A* does not shrink it, as it would the plain cosine with the mean of the halves). It is a ratio
estimate: consistent, with a small bias when <g*_1, g*_2> is small; undefined (NaN) when
<g*_1, g*_2> <= 0 (the ground truth's gradient is lost in its noise). The gradients are those of
the whole sampled batch, sum_g of the task groups' gradients; the CI resamples task groups
(percentile bootstrap: every inner product is a quadratic form c' M c of the resampled groups'
counts c in the G x G matrix M of group-gradient inner products, :func:`alignment_scores`).

What it assumes: the halves' A* are independent given the sampled rows (disjoint continuations);
the direction of the first update step is what decides learning (one step, no curvature: PPO
epochs and mini-batch cuts are left out, the batch is one mini-batch); rows without ground truth
(crashed episodes) get advantage 0 in every gradient.

torch for the backward passes, numpy for the rest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from g2po_bench.algorithms.backends.local.sampling import SamplingParams
from g2po_bench.algorithms.backends.local.transformers_policy import (
    pack_sequences,
    response_logprobs,
)
from g2po_bench.core.config import LOSS_AGG_MODES

__all__ = ["row_weights", "GradientSketch", "row_gradients", "group_vectors", "alignment_scores",
           "GradientAlignment"]


def row_weights(lengths: Sequence[int], mode: str = "token-mean") -> np.ndarray:
    """The token weight w_i of each row in the aggregated policy loss over the whole batch
    (:func:`g2po_bench.algorithms.losses.aggregate`), every token of a row weighing the same.

    With B rows that have response tokens (the trainer leaves rows without tokens out; they
    weigh 0), n_i tokens in row i and L the longest response (the padded width):

    - ``"token-mean"``: 1 / sum_i n_i;
    - ``"seq-mean-token-sum"``: 1 / B;
    - ``"seq-mean-token-mean"``: 1 / (B n_i);
    - ``"seq-mean-token-sum-norm"``: 1 / L (the padded width as the constant normaliser).

    Args:
        lengths: (B,) response lengths in tokens.
        mode: one of :data:`g2po_bench.core.config.LOSS_AGG_MODES`.

    Returns:
        (B,) float64 weights (0 for an empty row).

    Raises:
        ValueError: an unknown mode or a negative length.
    """
    n = np.asarray(lengths, dtype=np.float64)
    if n.size and n.min() < 0:
        raise ValueError("row_weights: response lengths must be >= 0")
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"row_weights: unknown loss aggregation mode {mode!r}; one of {', '.join(LOSS_AGG_MODES)}")
    b = max(int((n > 0).sum()), 1)
    if mode == "token-mean":
        w = np.full(n.shape, 1.0 / max(n.sum(), 1.0))
    elif mode == "seq-mean-token-sum":
        w = np.full(n.shape, 1.0 / b)
    elif mode == "seq-mean-token-mean":
        w = 1.0 / (b * np.maximum(n, 1.0))
    else:  # seq-mean-token-sum-norm: the padded width as the constant normaliser
        w = np.full(n.shape, 1.0 / max(float(n.max(initial=0.0)), 1.0))
    return np.where(n > 0, w, 0.0)


class GradientSketch:
    """A CountSketch of the gradient of a model's trainable parameters (module docstring).

    Args:
        params: the parameters (their ``.grad`` is read by :meth:`sketch`).
        dim: d buckets (>= 1), or 0 for the exact gradient (all entries, concatenated).
        seed: seed of the bucket and sign hashes.

    Raises:
        ValueError: ``dim`` < 0.
    """

    def __init__(self, params: Sequence[torch.nn.Parameter], dim: int = 8192, seed: int = 0):
        if dim < 0:
            raise ValueError(f"GradientSketch dim must be >= 0 (0 = exact), got {dim}")
        self.params = [p for p in params if p.requires_grad]
        self.num_params = int(sum(p.numel() for p in self.params))
        self.dim = dim if dim > 0 else self.num_params
        self.exact = dim == 0
        self._buckets: list[torch.Tensor] = []
        self._signs: list[torch.Tensor] = []
        if not self.exact:
            gen = torch.Generator().manual_seed(int(seed))
            for p in self.params:
                self._buckets.append(torch.randint(0, dim, (p.numel(),), generator=gen))
                self._signs.append(torch.randint(0, 2, (p.numel(),), generator=gen).float() * 2.0 - 1.0)

    def sketch(self) -> torch.Tensor:
        """The sketch of the parameters' current ``.grad`` (absent grads count as 0):
        (d,) float32 on the CPU."""
        if self.exact:
            return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).float()
                              .cpu() for p in self.params])
        out = torch.zeros(self.dim, dtype=torch.float32)
        for p, bucket, sign in zip(self.params, self._buckets, self._signs):
            if p.grad is not None:
                out.index_add_(0, bucket, p.grad.detach().reshape(-1).float().cpu() * sign)
        return out


def row_gradients(model, prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]],
                  weights: np.ndarray, sketch: GradientSketch, *, pad_token_id: int,
                  sampling: SamplingParams | None = None, chunk_tokens: int = 1024) -> np.ndarray:
    """J_i = w_i grad sum_t log pi(y_{i,t}), sketched, for every row (module docstring).

    One backward pass per row, the log-probabilities as the trainer scores them
    (:func:`g2po_bench.algorithms.backends.local.transformers_policy.response_logprobs` under ``sampling``).

    Args:
        model: the policy (a causal LM; its trainable parameters are those of ``sketch``).
        prompt_ids, response_ids: B token-id lists.
        weights: (B,) float, :func:`row_weights`.
        sketch: the :class:`GradientSketch` of ``model``'s parameters.
        pad_token_id: the tokenizer's pad id.
        sampling: the sampling definition the responses were drawn from.
        chunk_tokens: LM-head chunk size.

    Returns:
        (B, d) float32; rows without response tokens or weight are 0.

    Raises:
        ValueError: lengths differ.
    """
    b = len(prompt_ids)
    if len(response_ids) != b or len(weights) != b:
        raise ValueError(f"row_gradients: {b} prompts, {len(response_ids)} responses, {len(weights)} weights")
    device = next(model.parameters()).device
    out = np.zeros((b, sketch.dim), dtype=np.float32)
    was_training = model.training
    model.eval()  # no dropout: the gradient of the policy that sampled
    try:
        for i in range(b):
            if not response_ids[i] or weights[i] == 0:
                continue
            model.zero_grad(set_to_none=True)
            packed = pack_sequences([prompt_ids[i]], [response_ids[i]], pad_token_id, device)
            logp, _ = response_logprobs(model, packed, sampling=sampling, chunk_tokens=chunk_tokens)
            (logp.sum() * float(weights[i])).backward()
            out[i] = sketch.sketch().numpy()
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return out


def group_vectors(row_grads: np.ndarray, group_index: np.ndarray, num_groups: int,
                  advantages: np.ndarray) -> np.ndarray:
    """The (negated) loss gradient of every task group, sum_{i in g} A_i J_i.

    Args:
        row_grads: (B, d) J rows; group_index: (B,) int in 0..G-1; num_groups: G;
        advantages: (B,) float (NaN rows count as 0).

    Returns:
        (G, d) float64.
    """
    a = np.nan_to_num(np.asarray(advantages, dtype=np.float64))
    out = np.zeros((num_groups, row_grads.shape[1]), dtype=np.float64)
    np.add.at(out, np.asarray(group_index, dtype=np.int64), row_grads.astype(np.float64) * a[:, None])
    return out


@dataclass
class GradientAlignment:
    """The gradient alignment of one advantage vector with the ground truth's.

    Attributes:
        cosine: the unattenuated cosine estimate (module docstring), NaN when undefined.
        ci: its (low, high) percentile-bootstrap CI over task groups.
        naive: the plain cosine with the gradient of the halves' mean A* (attenuated by noise).
        groups: task groups in the batch.
    """

    cosine: float
    ci: tuple[float, float]
    naive: float
    groups: int


def _cos(e_e: np.ndarray, e_1: np.ndarray, e_2: np.ndarray, s_12: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        den = np.sqrt(np.maximum(e_e, 0.0)) * np.sqrt(s_12)
        return np.where((s_12 > 0) & (e_e > 0), 0.5 * (e_1 + e_2) / den, np.nan)


def alignment_scores(vectors: Mapping[str, np.ndarray], half_1: np.ndarray, half_2: np.ndarray, *,
                     n_boot: int = 2000, seed: int = 0, confidence: float = 0.95,
                     pairs: Sequence[tuple[str, str]] = ()) -> dict[str, dict]:
    """Gradient alignment of every row set (module docstring), with CIs over task groups.

    Args:
        vectors: name -> (G, d) group vectors of the estimator's advantages (:func:`group_vectors`).
        half_1, half_2: (G, d) group vectors of A* from the two halves of the continuations.
        n_boot, seed, confidence: the percentile bootstrap over the G groups.
        pairs: (a, b) names whose paired difference cos_a - cos_b is wanted (same resamples).

    Returns:
        ``{"rows": {name: GradientAlignment}, "pairs": {"a - b": {"diff", "ci"}},
        "truth": {"reliability": <g*_1, g*_2> / (|g*_1| |g*_2|), "ci": ...}}``.
    """
    g = half_1.shape[0]
    rng = np.random.default_rng([seed, 0x6AD])
    counts = rng.multinomial(g, np.full(g, 1.0 / g), size=n_boot).astype(np.float64) if g else np.zeros((n_boot, 0))
    ones = np.ones(g)

    def quad(x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        m = x @ y.T  # (G, G) inner products of group vectors
        return float(ones @ m @ ones), np.einsum("bg,gh,bh->b", counts, m, counts)

    s12, s12_b = quad(half_1, half_2)
    s11, _ = quad(half_1, half_1)
    s22, _ = quad(half_2, half_2)
    lo_q, hi_q = (1 - confidence) / 2, 1 - (1 - confidence) / 2
    mean_half = 0.5 * (half_1 + half_2)
    rows: dict[str, GradientAlignment] = {}
    boots: dict[str, np.ndarray] = {}
    for name, v in vectors.items():
        ee, ee_b = quad(v, v)
        e1, e1_b = quad(v, half_1)
        e2, e2_b = quad(v, half_2)
        mm, _ = quad(mean_half, mean_half)
        em, _ = quad(v, mean_half)
        cos = float(_cos(np.array(ee), np.array(e1), np.array(e2), np.array(s12)))
        boots[name] = _cos(ee_b, e1_b, e2_b, s12_b)
        ci = _percentiles(boots[name], lo_q, hi_q)
        naive = em / math.sqrt(ee * mm) if ee > 0 and mm > 0 else math.nan
        rows[name] = GradientAlignment(cosine=cos, ci=ci, naive=float(naive), groups=g)
    out_pairs = {}
    for a, b in pairs:
        d = boots[a] - boots[b]
        out_pairs[f"{a} - {b}"] = {"diff": rows[a].cosine - rows[b].cosine, "ci": _percentiles(d, lo_q, hi_q)}
    rel = s12 / math.sqrt(s11 * s22) if s11 > 0 and s22 > 0 else math.nan
    return {"rows": rows, "pairs": out_pairs, "truth": {"reliability": float(rel), "inner_12": s12}}


def _percentiles(x: np.ndarray, lo: float, hi: float) -> tuple[float, float]:
    x = x[np.isfinite(x)]
    if not x.size:
        return (math.nan, math.nan)
    return (float(np.quantile(x, lo)), float(np.quantile(x, hi)))
