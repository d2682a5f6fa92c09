"""Policy-gradient losses (PyTorch): clipped PPO surrogate, KL estimators, entropy, value loss.

Source: the reference code (the step's scalar advantage is given to every response token of the
step, tiled over the response mask in verl-agent's ``gigpo/core_gigpo.py``; clipped PPO loss per
step) and its settings (clip 0.2, KL loss coefficient 0.01 with the low-variance k3 estimator,
entropy 0.001: verl-agent's ``examples/gigpo_trainer/run_*.sh`` and verl's ``ppo_trainer.yaml``;
docs/design-notes.md "Training-loop facts"); PPO (Schulman et al.,
2017, arXiv 1707.06347, Eq. 7); KL estimators k1/k2/k3 (J. Schulman, "Approximating KL
divergence", 2020), as in verl's ``kl_penalty`` / ``compute_policy_loss`` / ``agg_loss``
("token-mean").

Reference defaults (verl's ``core_algos.py`` and ``ppo_trainer.yaml`` as the G2PO repository
ships them): dual-clip PPO for negative advantages with ``clip_ratio_c = 3``
(:func:`clipped_surrogate`; Ye et al., 2020, arXiv 1912.09729); the k3 ("low_var_kl")
estimate clamped to [-10, 10] per token (:func:`kl_divergence`); loss aggregation
``token-mean`` with the alternatives ``seq-mean-token-sum``, ``seq-mean-token-mean`` and
``seq-mean-token-sum-norm`` (:func:`aggregate`); gradient accumulation over micro-batches as
the mean of the per-micro-batch aggregated losses (:func:`ppo_step_loss`).

Shapes: B = step samples in the micro-batch, L = response length (padded), V = vocabulary.
``logprobs`` / ``old_logprobs`` / ``ref_logprobs``: (B, L) float32 token log-probabilities of
the sampled response tokens; ``mask``: (B, L) bool (True on real response tokens);
``advantages``: (B,) float (one scalar per step, broadcast to its tokens) or (B, L).
Every function returns tensors that keep the graph; metrics are detached Python floats.
"""

from __future__ import annotations

from typing import Any

import torch

from g2po_bench.core.config import LOSS_AGG_MODES

__all__ = [
    "KL_ESTIMATORS",
    "LOSS_AGG_MODES",
    "broadcast_step_advantages",
    "masked_token_mean",
    "aggregate",
    "clipped_surrogate",
    "kl_divergence",
    "entropy_from_logits",
    "policy_loss",
    "value_loss",
    "ppo_step_loss",
]

KL_ESTIMATORS = ("k1", "k2", "k3")
# LOSS_AGG_MODES: verl's ``agg_loss`` modes ("token-mean" is the reference default), from the config schema


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"shape mismatch: {shapes}")


def broadcast_step_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Give every response token of a step its step's scalar advantage (as the reference tiles it
    over the response mask: verl-agent ``gigpo/core_gigpo.py``; docs/design-notes.md "The
    StepBatch").

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


def aggregate(x: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean") -> torch.Tensor:
    """Aggregate a per-token loss matrix into a scalar, as verl's ``agg_loss``.

    With m = mask as 0/1 floats and B rows:

    - ``"token-mean"``: sum(x m) / sum(m) (the reference default);
    - ``"seq-mean-token-sum"``: mean over rows of sum_t x m;
    - ``"seq-mean-token-mean"``: mean over rows of (sum_t x m) / (sum_t m);
    - ``"seq-mean-token-sum-norm"``: sum(x m) / L, L = the padded width ``mask.shape[-1]``
      (Dr. GRPO's constant normaliser; the reference divides by the same width).

    Deviation: a denominator of masked tokens is clamped to >= 1 (an empty mask or row gives
    0, where the reference would give NaN; the trainers never feed empty rows).

    Args:
        x: (B, L) float; mask: (B, L) bool; mode: one of :data:`LOSS_AGG_MODES`.

    Returns:
        0-dim tensor.

    Raises:
        ValueError: unknown mode.
    """
    m = mask.to(x.dtype)
    if mode == "token-mean":
        return (x * m).sum() / m.sum().clamp_min(1.0)
    if mode == "seq-mean-token-sum":
        return (x * m).sum(dim=-1).mean()
    if mode == "seq-mean-token-mean":
        return ((x * m).sum(dim=-1) / m.sum(dim=-1).clamp_min(1.0)).mean()
    if mode == "seq-mean-token-sum-norm":
        return (x * m).sum() / mask.shape[-1]
    raise ValueError(f"unknown loss aggregation mode {mode!r}; choose one of {', '.join(LOSS_AGG_MODES)}")


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_ratio: float = 0.2,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float | None = 3.0,
) -> dict[str, torch.Tensor]:
    """The per-token clipped PPO surrogate with dual clip (the one implementation every loss
    path of the project uses; verl ``compute_policy_loss``)::

        ratio = exp(logp - old_logp)
        l1    = max(-A ratio, -A clip(ratio, 1 - c_low, 1 + c_high))      (PPO Eq. 7)
        loss  = min(l1, -A c)  where A < 0,  l1 elsewhere                  (dual clip)

    The dual clip bounds the loss of a negative-advantage token by ``-A c = |A| c`` however
    large the ratio grows (Ye et al., 2020, arXiv 1912.09729, Eq. 5; reference c = 3).

    Args:
        logprobs: (B, L) float, current policy; old_logprobs: (B, L) float, rollout policy.
        advantages: (B, L) float (already broadcast).
        clip_ratio: c_low (0.2); clip_ratio_high: c_high (default c_low).
        clip_ratio_c: the dual-clip bound c (> 1), or None for the plain PPO surrogate.

    Returns:
        dict of (B, L) tensors: ``loss`` (per token, keeps the graph), and detached
        ``log_ratio``, ``ratio``, ``clipped`` (bool: the clip term is the larger one),
        ``dual_clipped`` (bool: the dual-clip bound is active, A < 0).

    Raises:
        ValueError: shape mismatch or ``clip_ratio_c <= 1``.
    """
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages)
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c (the dual-clip bound) must be > 1, got {clip_ratio_c}")
    high = clip_ratio if clip_ratio_high is None else clip_ratio_high
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + high)
    l1 = torch.maximum(unclipped, clipped)
    if clip_ratio_c is None:
        loss = l1
        dual = torch.zeros_like(l1, dtype=torch.bool)
    else:
        bound = -advantages * clip_ratio_c
        negative = advantages < 0
        loss = torch.where(negative, torch.minimum(l1, bound), l1)
        dual = (l1 > bound) & negative
    return {"loss": loss, "log_ratio": log_ratio.detach(), "ratio": ratio.detach(),
            "clipped": (clipped > unclipped).detach(), "dual_clipped": dual.detach()}


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
    clip_ratio_c: float | None = 3.0,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped PPO surrogate with dual clip (:func:`clipped_surrogate`), aggregated over
    the mask (:func:`aggregate`).

    Args:
        logprobs: (B, L) float, current policy (requires grad).
        old_logprobs: (B, L) float, the rollout policy.
        advantages: (B,) (one per step, broadcast to its tokens) or (B, L).
        mask: (B, L) bool.
        clip_ratio: c_low (0.2); clip_ratio_high: c_high (default c_low).
        clip_ratio_c: dual-clip bound (3.0; None: off).
        loss_agg_mode: one of :data:`LOSS_AGG_MODES`.

    Returns:
        ``(loss, metrics)``: loss 0-dim tensor; metrics ``pg_loss``, ``clip_frac`` (token
        mean of the clip term being active), ``clip_frac_lower`` (token mean of the dual clip
        being active), ``approx_kl`` (token mean of old_logp - logp, verl's ppo_kl),
        ``ratio_mean``.

    Raises:
        ValueError: shape mismatch, ``clip_ratio_c <= 1``, unknown aggregation mode.
    """
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, mask=mask)
    adv = broadcast_step_advantages(advantages.to(logprobs.dtype), mask)
    sur = clipped_surrogate(logprobs, old_logprobs, adv, clip_ratio=clip_ratio,
                            clip_ratio_high=clip_ratio_high, clip_ratio_c=clip_ratio_c)
    loss = aggregate(sur["loss"], mask, loss_agg_mode)
    with torch.no_grad():
        metrics = {"pg_loss": float(loss.detach()), **_surrogate_stats(sur, mask)}
    return loss, metrics


def _surrogate_stats(sur: dict[str, torch.Tensor], mask: torch.Tensor) -> dict[str, float]:
    dtype = sur["ratio"].dtype
    return {
        "clip_frac": float(masked_token_mean(sur["clipped"].to(dtype), mask)),
        "clip_frac_lower": float(masked_token_mean(sur["dual_clipped"].to(dtype), mask)),
        "approx_kl": float(masked_token_mean(-sur["log_ratio"], mask)),
        "ratio_mean": float(masked_token_mean(sur["ratio"], mask)),
    }


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    value_clip: float | None = 0.5,
    clip: float | None = None,
    loss_agg_mode: str = "token-mean",
    return_metrics: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, dict[str, float]]:
    """The clipped value loss of the reference critic (verl's ``compute_value_loss`` as the G2PO
    repository ships it, ``verl/trainer/ppo/core_algos.py``; the critic aggregates with the
    actor's ``loss_agg_mode``)::

        v_clip = min(max(v, old_v - value_clip), old_v + value_clip)   (verl ``clip_by_value``)
        loss   = aggregate( max((v - R)^2, (v_clip - R)^2), mask, loss_agg_mode )

    There is no factor 1/2 (that reference has none). ``v_clip`` is ``v`` itself wherever ``v`` is
    inside the range (not ``old_v + clamp(v - old_v)``, which can differ from ``v`` by a rounding
    error), so the clip fraction counts only values that were really clipped.

    Args:
        values: (B, L) per-token critic values, or (B,) one per step (taken as (B, 1)), float.
        old_values: same shape, the critic at rollout time.
        returns: same shape, the targets (e.g. ``AdvantageResult.returns``).
        mask: same shape bool, or None (every entry counts).
        value_clip: clip range (reference ``critic.cliprange_value`` 0.5; None: unclipped (v - R)^2).
        clip: alias of ``value_clip`` (the trainer's keyword); wins when given.
        loss_agg_mode: one of :data:`LOSS_AGG_MODES` (:func:`aggregate`).
        return_metrics: also return the metrics dict.

    Returns:
        The 0-dim loss tensor, or ``(loss, metrics)`` with ``return_metrics=True``; metrics:
        ``vf_loss``, ``vf_clip_frac`` (masked token mean of ``(v_clip - R)^2 > (v - R)^2``, the
        reference's ``vf_clipfrac``), ``value_mean`` (masked token mean of v).

    Raises:
        ValueError: shape mismatch or unknown aggregation mode.
    """
    if clip is not None:
        value_clip = clip
    _check_same_shape(values=values, old_values=old_values, returns=returns)
    if mask is None:
        mask = torch.ones_like(values, dtype=torch.bool)
    _check_same_shape(values=values, mask=mask)
    if values.dim() == 1:
        values, old_values, returns, mask = (x[:, None] for x in (values, old_values, returns, mask))
    err = (values - returns).square()
    if value_clip is None:
        per = err
        clip_active = torch.zeros_like(err, dtype=torch.bool)
    else:
        v_clip = torch.minimum(torch.maximum(values, old_values - value_clip), old_values + value_clip)
        err_clip = (v_clip - returns).square()
        per = torch.maximum(err, err_clip)
        clip_active = err_clip > err
    loss = aggregate(per, mask, loss_agg_mode)
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
    clip_ratio_c: float | None = 3.0,
    kl_coef: float = 0.01,
    entropy_coef: float = 0.001,
    kl_estimator: str = "k3",
    kl_clamp: float | None = 10.0,
    loss_agg_mode: str = "token-mean",
    num_micro_batches: int | None = None,
    num_tokens: int | None = None,
) -> dict[str, Any]:
    """The actor objective of the reference runs for one micro-batch of step samples
    (clip 0.2, KL loss 0.01 with k3, entropy 0.001: docs/design-notes.md "Training-loop facts";
    verl ``dp_actor.update_policy``)::

        per_token = surrogate (dual clip, :func:`clipped_surrogate`)
                    + kl_coef * KL_k(pi || pi_ref) - entropy_coef * H
        loss      = aggregate(per_token, mask, loss_agg_mode) / num_micro_batches

    (the three terms are each aggregated with the same mode in the reference; aggregation is
    linear, so aggregating their weighted sum is the same.) Summing the losses of the
    ``num_micro_batches`` micro-batches of a mini-batch before the optimizer step (gradient
    accumulation) gives the reference's mini-batch loss: the mean over micro-batches of the
    per-micro-batch aggregated losses. ``num_tokens`` (legacy, token-mean only) instead
    divides the masked token sum by the token count of the whole mini-batch (the exact token
    mean over the mini-batch, which differs when micro-batches hold different token counts).

    Args:
        logprobs: (B, L) float, current policy (requires grad).
        old_logprobs: (B, L) float, rollout policy.
        ref_logprobs: (B, L) float reference policy, or None (no KL term).
        advantages: (B,) one scalar per step (broadcast to its tokens) or (B, L).
        entropy: (B, L) per-token entropy (:func:`entropy_from_logits`), or None.
        mask: (B, L) bool, True on response tokens.
        clip_ratio, clip_ratio_high: PPO clip range (high defaults to low).
        clip_ratio_c: dual-clip bound (3.0; None: off).
        kl_coef, entropy_coef: coefficients; kl_estimator: "k1" | "k2" | "k3";
        kl_clamp: the k3 clamp (10.0; None: off).
        loss_agg_mode: one of :data:`LOSS_AGG_MODES`.
        num_micro_batches: micro-batches in the mini-batch (>= 1), or None (= 1).
        num_tokens: legacy normaliser (> 0), only with token-mean and without num_micro_batches.

    Returns:
        ``{"loss": 0-dim tensor, "stats": dict[str, float]}``; stats are token means over this
        micro-batch's mask: ``pg_loss``, ``clip_frac``, ``clip_frac_lower``, ``approx_kl``
        (mean old_logp - logp), ``ratio_mean``, ``kl`` (when ref_logprobs is given),
        ``entropy`` (when given), ``loss`` (the same objective as a token mean).

    Raises:
        ValueError: shape mismatch, unknown KL estimator or aggregation mode,
        ``clip_ratio_c <= 1``, ``num_tokens <= 0``, ``num_micro_batches < 1``, or
        ``num_tokens`` combined with another mode or with ``num_micro_batches``.
    """
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, mask=mask)
    if num_tokens is not None:
        if num_tokens <= 0:
            raise ValueError(f"num_tokens must be > 0, got {num_tokens}")
        if loss_agg_mode != "token-mean" or num_micro_batches is not None:
            raise ValueError("num_tokens works only with loss_agg_mode='token-mean' and no num_micro_batches")
    if num_micro_batches is not None and num_micro_batches < 1:
        raise ValueError(f"num_micro_batches must be >= 1, got {num_micro_batches}")
    adv = broadcast_step_advantages(advantages.to(logprobs.dtype), mask)
    sur = clipped_surrogate(logprobs, old_logprobs, adv, clip_ratio=clip_ratio,
                            clip_ratio_high=clip_ratio_high, clip_ratio_c=clip_ratio_c)
    per_token = sur["loss"]
    kl = None
    if ref_logprobs is not None:
        _check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
        kl = kl_divergence(logprobs, ref_logprobs, kl_estimator, clamp=kl_clamp)
        per_token = per_token + kl_coef * kl
    if entropy is not None:
        _check_same_shape(logprobs=logprobs, entropy=entropy)
        per_token = per_token - entropy_coef * entropy
    if num_tokens is not None:
        loss = (per_token * mask.to(per_token.dtype)).sum() / float(num_tokens)
    else:
        loss = aggregate(per_token, mask, loss_agg_mode) / float(num_micro_batches or 1)
    with torch.no_grad():
        stats = {
            "pg_loss": float(masked_token_mean(sur["loss"].detach(), mask)),
            **_surrogate_stats(sur, mask),
            "loss": float(masked_token_mean(per_token.detach(), mask)),
        }
        if kl is not None:
            stats["kl"] = float(masked_token_mean(kl.detach(), mask))
        if entropy is not None:
            stats["entropy"] = float(masked_token_mean(entropy.detach(), mask))
    return {"loss": loss, "stats": stats}
