"""Policy-gradient losses (PyTorch): clipped PPO surrogate, KL estimators, entropy, value loss.

Source: ALGORITHMS.md "G2PO" step 8 (the step's scalar advantage is given to every response
token of the step; clipped PPO loss per step) and "Training loop facts" (clip 0.2, KL loss
coefficient 0.01 with the low-variance k3 estimator, entropy 0.001); PPO (Schulman et al.,
2017, arXiv 1707.06347, Eq. 7); KL estimators k1/k2/k3 (J. Schulman, "Approximating KL
divergence", 2020), as in verl's ``kl_penalty`` / ``compute_policy_loss`` / ``agg_loss``
("token-mean").

Shapes: B = step samples in the micro-batch, L = response length (padded), V = vocabulary.
``logprobs`` / ``old_logprobs`` / ``ref_logprobs``: (B, L) float32 token log-probabilities of
the sampled response tokens; ``mask``: (B, L) bool (True on real response tokens);
``advantages``: (B,) float (one scalar per step, broadcast to its tokens) or (B, L).
Losses are aggregated with the token mean over the mask (sum of masked values / number of
masked tokens; 0 when the mask is empty). Every function returns tensors that keep the graph;
metrics are detached Python floats.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "KL_ESTIMATORS",
    "broadcast_step_advantages",
    "masked_token_mean",
    "kl_divergence",
    "entropy_from_logits",
    "policy_loss",
    "value_loss",
    "ppo_step_loss",
]

KL_ESTIMATORS = ("k1", "k2", "k3")


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"shape mismatch: {shapes}")


def broadcast_step_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Give every response token of a step its step's scalar advantage (ALGORITHMS.md G2PO 8).

    Args:
        advantages: (B,) or (B, L) float.
        mask: (B, L) bool.

    Returns:
        (B, L) tensor of the mask's float dtype (float32 unless advantages are float64), zero
        where the mask is False.

    Raises:
        ValueError: incompatible shapes.
    """
    if advantages.dim() == 1:
        if advantages.shape[0] != mask.shape[0]:
            raise ValueError(
                f"advantages has {advantages.shape[0]} steps but mask has {mask.shape[0]} rows"
            )
        adv = advantages[:, None].expand(mask.shape)
    elif advantages.shape == mask.shape:
        adv = advantages
    else:
        raise ValueError(f"advantages shape {tuple(advantages.shape)} vs mask {tuple(mask.shape)}")
    return adv * mask.to(adv.dtype)


def masked_token_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-mean of ``x`` over ``mask`` ("token-mean" aggregation).

    Args:
        x: (B, L) float; mask: (B, L) bool.

    Returns:
        0-dim tensor: sum(x * mask) / max(sum(mask), 1).
    """
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp_min(1.0)


def kl_divergence(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    estimator: str = "k3",
    *,
    clamp: float | None = 10.0,
) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi.

    With ``log_ratio = logprobs - ref_logprobs``:

    - ``"k1"``: log_ratio (unbiased, high variance, can be negative);
    - ``"k2"``: 0.5 * log_ratio^2 (biased, low variance);
    - ``"k3"``: exp(-log_ratio) - (-log_ratio) - 1 = exp(ref - logp) - (ref - logp) - 1
      (unbiased, low variance, >= 0; the reference "low_var_kl").

    Args:
        logprobs, ref_logprobs: (B, L) float.
        estimator: "k1" | "k2" | "k3".
        clamp: k3 is clamped to [-clamp, clamp] as in verl (None: no clamp).

    Returns:
        (B, L) tensor.

    Raises:
        ValueError: unknown estimator or shape mismatch.
    """
    _check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    log_ratio = logprobs - ref_logprobs
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    if estimator == "k3":
        kl = torch.exp(-log_ratio) + log_ratio - 1.0
        return kl.clamp(-clamp, clamp) if clamp is not None else kl
    raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {KL_ESTIMATORS}")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical distribution softmax(logits) at every position.

    Args:
        logits: (B, L, V) float.

    Returns:
        (B, L) tensor: logsumexp(logits) - sum(softmax(logits) * logits).
    """
    pd = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (pd * logits).sum(dim=-1)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_ratio: float = 0.2,
    clip_ratio_high: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped PPO surrogate, per token, token-mean over the mask (PPO Eq. 7)::

        ratio = exp(logp - old_logp)
        loss  = token_mean( max(-A * ratio, -A * clip(ratio, 1 - c_low, 1 + c_high)) )

    Args:
        logprobs: (B, L) float, current policy (requires grad).
        old_logprobs: (B, L) float, the rollout policy.
        advantages: (B,) (one per step, broadcast to its tokens) or (B, L).
        mask: (B, L) bool.
        clip_ratio: c_low (0.2); clip_ratio_high: c_high (default c_low).

    Returns:
        ``(loss, metrics)``: loss 0-dim tensor; metrics ``pg_loss``, ``clip_frac`` (fraction
        of tokens where the clipped term is active), ``approx_kl`` (token mean of
        old_logp - logp, verl's ppo_kl), ``ratio_mean``.

    Raises:
        ValueError: shape mismatch.
    """
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, mask=mask)
    high = clip_ratio if clip_ratio_high is None else clip_ratio_high
    adv = broadcast_step_advantages(advantages.to(logprobs.dtype), mask)
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + high)
    loss = masked_token_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        metrics = {
            "pg_loss": float(loss.detach()),
            "clip_frac": float(masked_token_mean((clipped > unclipped).to(logprobs.dtype), mask)),
            "approx_kl": float(masked_token_mean(-log_ratio.detach(), mask)),
            "ratio_mean": float(masked_token_mean(ratio.detach(), mask)),
        }
    return loss, metrics


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    value_clip: float | None = 0.2,
    clip: float | None = None,
    return_metrics: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss (PPO style)::

        v_clip = old_v + clip(v - old_v, -value_clip, value_clip)
        loss   = 0.5 * token_mean( max((v - R)^2, (v_clip - R)^2) )

    Args:
        values: (B,) per-step critic values (turn-level critic) or (B, L) per token, float.
        old_values: same shape, the critic at rollout time.
        returns: same shape, the targets (e.g. ``AdvantageResult.returns``).
        mask: same shape bool, or None (every entry counts).
        value_clip: clip range (None: unclipped loss 0.5 * (v - R)^2).
        clip: alias of ``value_clip`` (the trainer's keyword); wins when given.
        return_metrics: also return the metrics dict.

    Returns:
        The 0-dim loss tensor, or ``(loss, metrics)`` with ``return_metrics=True``; metrics:
        ``vf_loss``, ``vf_clip_frac`` (fraction of entries where the clipped error is the
        larger one), ``value_mean``.

    Raises:
        ValueError: shape mismatch.
    """
    if clip is not None:
        value_clip = clip
    _check_same_shape(values=values, old_values=old_values, returns=returns)
    if mask is None:
        mask = torch.ones_like(values, dtype=torch.bool)
    _check_same_shape(values=values, mask=mask)
    err = (values - returns).square()
    if value_clip is None:
        per = err
        clip_active = torch.zeros_like(err, dtype=torch.bool)
    else:
        v_clip = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
        err_clip = (v_clip - returns).square()
        per = torch.maximum(err, err_clip)
        clip_active = err_clip > err
    loss = 0.5 * masked_token_mean(per, mask)
    if not return_metrics:
        return loss
    with torch.no_grad():
        metrics = {
            "vf_loss": float(loss.detach()),
            "vf_clip_frac": float(masked_token_mean(clip_active.to(values.dtype), mask)),
            "value_mean": float(masked_token_mean(values.detach(), mask)),
        }
    return loss, metrics


def ppo_step_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    entropy: torch.Tensor | None,
    mask: torch.Tensor,
    *,
    clip_ratio: float = 0.2,
    clip_ratio_high: float | None = None,
    kl_coef: float = 0.01,
    entropy_coef: float = 0.001,
    kl_estimator: str = "k3",
    num_tokens: int | None = None,
) -> dict[str, Any]:
    """The actor objective of the reference runs for one micro-batch of step samples
    (ALGORITHMS.md "Training loop facts": clip 0.2, KL loss 0.01 with k3, entropy 0.001)::

        per_token = max(-A ratio, -A clip(ratio, 1 - c, 1 + c))
                    + kl_coef * KL_k(pi || pi_ref) - entropy_coef * H
        loss      = sum_{masked tokens} per_token / num_tokens

    With ``num_tokens`` = the number of response tokens of the whole mini-batch, summing the
    losses of its micro-batches (gradient accumulation) gives the token mean over the
    mini-batch; with ``num_tokens=None`` the loss is the token mean over this ``mask``.

    Args:
        logprobs: (B, L) float, current policy (requires grad).
        old_logprobs: (B, L) float, rollout policy.
        ref_logprobs: (B, L) float reference policy, or None (no KL term).
        advantages: (B,) one scalar per step (broadcast to its tokens) or (B, L).
        entropy: (B, L) per-token entropy (:func:`entropy_from_logits`), or None.
        mask: (B, L) bool, True on response tokens.
        clip_ratio, clip_ratio_high: PPO clip range (high defaults to low).
        kl_coef, entropy_coef: coefficients; kl_estimator: "k1" | "k2" | "k3".
        num_tokens: normalizer (> 0), or None.

    Returns:
        ``{"loss": 0-dim tensor, "stats": dict[str, float]}``; stats are token means over this
        micro-batch's mask: ``pg_loss``, ``clip_frac``, ``approx_kl`` (mean old_logp - logp),
        ``ratio_mean``, ``kl`` (when ref_logprobs is given), ``entropy`` (when given),
        ``loss`` (the same objective as a token mean over this micro-batch).

    Raises:
        ValueError: shape mismatch, unknown KL estimator, num_tokens <= 0.
    """
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, mask=mask)
    if num_tokens is not None and num_tokens <= 0:
        raise ValueError(f"num_tokens must be > 0, got {num_tokens}")
    high = clip_ratio if clip_ratio_high is None else clip_ratio_high
    m = mask.to(logprobs.dtype)
    adv = broadcast_step_advantages(advantages.to(logprobs.dtype), mask)
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + high)
    pg = torch.maximum(unclipped, clipped)
    per_token = pg
    kl = None
    if ref_logprobs is not None:
        _check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
        kl = kl_divergence(logprobs, ref_logprobs, kl_estimator)
        per_token = per_token + kl_coef * kl
    if entropy is not None:
        _check_same_shape(logprobs=logprobs, entropy=entropy)
        per_token = per_token - entropy_coef * entropy
    total = (per_token * m).sum()
    denom = float(num_tokens) if num_tokens is not None else m.sum().clamp_min(1.0)
    loss = total / denom
    with torch.no_grad():
        stats = {
            "pg_loss": float(masked_token_mean(pg.detach(), mask)),
            "clip_frac": float(masked_token_mean((clipped > unclipped).to(logprobs.dtype), mask)),
            "approx_kl": float(masked_token_mean(-log_ratio.detach(), mask)),
            "ratio_mean": float(masked_token_mean(ratio.detach(), mask)),
            "loss": float(masked_token_mean(per_token.detach(), mask)),
        }
        if kl is not None:
            stats["kl"] = float(masked_token_mean(kl.detach(), mask))
        if entropy is not None:
            stats["entropy"] = float(masked_token_mean(entropy.detach(), mask))
    return {"loss": loss, "stats": stats}
