"""Losses (algorithms/losses.py): hand-computed PPO clip, KL estimators, entropy, value loss."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from g2po_bench.algorithms import losses  # noqa: E402


def t(x, **kw):
    return torch.tensor(x, dtype=torch.float32, **kw)


def test_broadcast_step_advantages():
    mask = torch.tensor([[True, True, False], [True, False, False]])
    out = losses.broadcast_step_advantages(t([2.0, -1.0]), mask)
    assert out.tolist() == [[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]]
    with pytest.raises(ValueError):
        losses.broadcast_step_advantages(t([1.0, 2.0, 3.0]), mask)


def test_masked_token_mean_ignores_padding_and_empty_mask():
    x = t([[1.0, 3.0, 100.0]])
    assert float(losses.masked_token_mean(x, torch.tensor([[True, True, False]]))) == 2.0
    assert float(losses.masked_token_mean(x, torch.zeros(1, 3, dtype=torch.bool))) == 0.0


def test_policy_loss_clipping_positive_advantage():
    # token 0: ratio 1.5 -> unclipped -2*1.5 = -3, clipped -2*1.2 = -2.4 -> -2.4 (clip active)
    # token 1: ratio 0.5 -> unclipped -1, clipped -2*0.8 = -1.6 -> -1 (unclipped)
    # token 2: padding. loss = (-2.4 - 1) / 2 = -1.7
    old = t([[0.0, 0.0, 0.0]])
    logp = t([[math.log(1.5), math.log(0.5), 5.0]], requires_grad=True)
    mask = torch.tensor([[True, True, False]])
    loss, m = losses.policy_loss(logp, old, t([2.0]), mask, clip_ratio=0.2)
    assert float(loss.detach()) == pytest.approx(-1.7, abs=1e-6)
    assert m["clip_frac"] == pytest.approx(0.5)
    # approx_kl = mean(old - logp) = (-log 1.5 - log 0.5) / 2
    assert m["approx_kl"] == pytest.approx((-math.log(1.5) - math.log(0.5)) / 2, abs=1e-6)
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    loss.backward()
    # d/dlogp of (-A ratio)/2 on token 1 = -2 * 0.5 / 2 = -0.5; clipped token and padding: 0
    assert logp.grad.tolist()[0] == pytest.approx([0.0, -0.5, 0.0], abs=1e-6)


def test_policy_loss_clipping_negative_advantage():
    # A = -1. token 0 ratio 1.5: unclipped 1.5, clipped 1.2 -> 1.5 (unclipped);
    # token 1 ratio 0.5: unclipped 0.5, clipped 0.8 -> 0.8 (clip active). mean 1.15
    old = t([[0.0, 0.0]])
    logp = t([[math.log(1.5), math.log(0.5)]])
    loss, m = losses.policy_loss(logp, old, t([[-1.0, -1.0]]), torch.ones(1, 2, dtype=torch.bool))
    assert float(loss) == pytest.approx(1.15, abs=1e-6)
    assert m["clip_frac"] == pytest.approx(0.5)


def test_kl_estimators():
    logp = t([[math.log(0.5)]])
    ref = t([[math.log(0.25)]])
    lr = math.log(2.0)  # logp - ref
    assert float(losses.kl_divergence(logp, ref, "k1")) == pytest.approx(lr, abs=1e-6)
    assert float(losses.kl_divergence(logp, ref, "k2")) == pytest.approx(0.5 * lr**2, abs=1e-6)
    # k3 = exp(ref - logp) - (ref - logp) - 1 = 0.5 + log 2 - 1
    assert float(losses.kl_divergence(logp, ref, "k3")) == pytest.approx(0.5 + lr - 1, abs=1e-6)
    assert float(losses.kl_divergence(ref, ref, "k3")) == 0.0
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 7, generator=g), torch.randn(4, 7, generator=g)
    assert (losses.kl_divergence(a, b, "k3") >= 0).all()
    with pytest.raises(ValueError, match="k4"):
        losses.kl_divergence(a, b, "k4")


def test_entropy_from_logits():
    logits = torch.zeros(2, 3, 4)
    assert torch.allclose(losses.entropy_from_logits(logits), torch.full((2, 3), math.log(4)))
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 5, 11, generator=g)
    expected = torch.distributions.Categorical(logits=logits).entropy()
    assert torch.allclose(losses.entropy_from_logits(logits), expected, atol=1e-5)


def test_value_loss_clipped():
    # the reference critic's loss (verl compute_value_loss as G2PO ships it): no factor 1/2
    # entry 0: err (1-2)^2 = 1; v_clip = 0 + 0.2 -> (0.2-2)^2 = 3.24 -> 3.24 (clip active)
    # entry 1: err 0; v_clip = v = 3.0 (inside [2.7, 3.1]) -> 0. loss = (3.24 + 0) / 2 = 1.62
    v, old, ret = t([1.0, 3.0]), t([0.0, 2.9]), t([2.0, 3.0])
    loss, m = losses.value_loss(v, old, ret, value_clip=0.2, return_metrics=True)
    assert float(loss) == pytest.approx(1.62, abs=1e-6)
    assert m["vf_clip_frac"] == pytest.approx(0.5)
    assert float(losses.value_loss(v, old, ret, clip=0.2)) == pytest.approx(1.62, abs=1e-6)
    # unclipped: (1 + 0) / 2
    assert float(losses.value_loss(v, old, ret, value_clip=None)) == pytest.approx(0.5, abs=1e-6)
    # mask drops entry 0
    assert float(losses.value_loss(v, old, ret, torch.tensor([False, True]))) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="shape"):
        losses.value_loss(v, old, t([1.0]))


@pytest.mark.parametrize("mode,expected", [
    # per-token loss: row 0 = 2.25 on 3 tokens (clipped), row 1 = 1.06^2 = 1.1236 on 1 token
    ("token-mean", (3 * 2.25 + 1.1236) / 4),
    ("seq-mean-token-sum", (3 * 2.25 + 1.1236) / 2),
    ("seq-mean-token-mean", (2.25 + 1.1236) / 2),
    ("seq-mean-token-sum-norm", (3 * 2.25 + 1.1236) / 3),  # / the padded width 3
])
def test_value_loss_aggregates_with_each_mode_on_hand_computed_values(mode, expected):
    """Issue 39, item 4: the reference critic's loss aggregates with the actor's loss_agg_mode.
    Row 0 (3 tokens): v = 1, old = 0, R = 2, clip 0.5 -> v_clip = 0.5, max(1, 2.25) = 2.25, clipped.
    Row 1 (1 token): v = 0.06, old = 0.36, R = -1 -> inside the range, (0.06 + 1)^2 = 1.1236, not
    clipped: in float32 old + (v - old) = v + 3.7e-9, so computing the clipped value that way made
    (v_clip - R)^2 exceed (v - R)^2 and counted the row as clipped (clip fraction 1.0, not 0.75)."""
    v = torch.tensor([[1.0, 1.0, 1.0], [0.06, 0.0, 0.0]])
    old = torch.tensor([[0.0, 0.0, 0.0], [0.36, 0.0, 0.0]])
    ret = torch.tensor([[2.0, 2.0, 2.0], [-1.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    assert (old[1, 0] + torch.clamp(v[1, 0] - old[1, 0], -0.5, 0.5)) != v[1, 0]  # the rounding residue
    loss, m = losses.value_loss(v, old, ret, mask, value_clip=0.5, loss_agg_mode=mode, return_metrics=True)
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert m["vf_clip_frac"] == pytest.approx(0.75)
    assert m["value_mean"] == pytest.approx((3.0 + 0.06) / 4)


def test_ppo_step_loss_combines_terms_and_accumulates():
    g = torch.Generator().manual_seed(2)
    logp = torch.randn(4, 6, generator=g) - 2
    old = logp + 0.1 * torch.randn(4, 6, generator=g)
    ref = logp + 0.1 * torch.randn(4, 6, generator=g)
    ent = torch.rand(4, 6, generator=g)
    adv = torch.randn(4, generator=g)
    mask = torch.rand(4, 6, generator=g) > 0.3
    kw = dict(clip_ratio=0.2, kl_coef=0.01, entropy_coef=0.001, kl_estimator="k3")
    out = losses.ppo_step_loss(logp, old, ref, adv, ent, mask, **kw)
    pg, _ = losses.policy_loss(logp, old, adv, mask, clip_ratio=0.2)
    kl = losses.masked_token_mean(losses.kl_divergence(logp, ref, "k3"), mask)
    h = losses.masked_token_mean(ent, mask)
    assert float(out["loss"]) == pytest.approx(float(pg + 0.01 * kl - 0.001 * h), abs=1e-6)
    assert set(out["stats"]) >= {"pg_loss", "clip_frac", "approx_kl", "kl", "entropy", "loss"}
    # two micro-batches normalized by the mini-batch token count sum to the full token mean
    n_tok = int(mask.sum())
    parts = [losses.ppo_step_loss(logp[s], old[s], ref[s], adv[s], ent[s], mask[s],
                                  num_tokens=n_tok, **kw)["loss"] for s in (slice(0, 2), slice(2, 4))]
    assert float(sum(parts)) == pytest.approx(float(out["loss"]), abs=1e-6)
    # without reference policy and entropy it is the clipped surrogate alone
    alone = losses.ppo_step_loss(logp, old, None, adv, None, mask)
    assert float(alone["loss"]) == pytest.approx(float(pg), abs=1e-6)
    assert "kl" not in alone["stats"] and "entropy" not in alone["stats"]
    with pytest.raises(ValueError, match="num_tokens"):
        losses.ppo_step_loss(logp, old, None, adv, None, mask, num_tokens=0)
