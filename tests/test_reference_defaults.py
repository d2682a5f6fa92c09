"""The training loop's reference defaults (verl ``ppo_trainer.yaml`` and ``core_algos.py`` as
the G2PO repository ships them) on hand-computed values: dual-clip PPO bound, k3 KL clamp,
each loss aggregation mode, the micro-batch accumulation, and AdamW weight decay applied."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from g2po_bench.algorithms import losses  # noqa: E402
from g2po_bench.core.config import ConfigError, TrainConfig  # noqa: E402
from g2po_bench.runconfig import load_config  # noqa: E402

REFERENCE = {"weight_decay": 0.01, "value_lr": 1e-5, "value_weight_decay": 0.01, "clip_ratio_c": 3.0,
             "kl_clamp": 10.0, "loss_agg_mode": "token-mean", "clip_ratio": 0.2, "kl_estimator": "k3",
             "value_clip": 0.5, "max_grad_norm": 1.0, "entropy_coef": 0.001, "ppo_epochs": 1}


def t(x, **kw):
    return torch.tensor(x, dtype=torch.float32, **kw)


# --------------------------------------------------------------------------- config
def test_dataclass_defaults_and_reference_presets_hold_the_reference_values():
    defaults = TrainConfig()
    for key, value in REFERENCE.items():
        assert getattr(defaults, key) == value, key
    for preset in ("alfworld_1.5b", "alfworld_7b", "webshop_1.5b", "webshop_7b"):
        cfg = load_config(preset=preset, overrides=["model.path=.", "env.data_dir=."])
        for key, value in REFERENCE.items():
            assert getattr(cfg.train, key) == value, (preset, key)
        assert cfg.train.old_logprobs == "recompute", preset  # verl recomputes them with the actor


def test_bad_reference_keys_are_config_errors():
    with pytest.raises(ConfigError, match="train.clip_ratio_c.*> 1"):
        load_config(overrides=["train.clip_ratio_c=1.0"])
    with pytest.raises(ConfigError, match="train.loss_agg_mode.*seq-mean-token-sum-norm"):
        load_config(overrides=["train.loss_agg_mode=seq-sum"])
    with pytest.raises(ConfigError, match="train.kl_clamp"):
        load_config(overrides=["train.kl_clamp=0"])
    off = load_config(overrides=["train.clip_ratio_c=null", "train.kl_clamp=null"])
    assert off.train.clip_ratio_c is None and off.train.kl_clamp is None


def test_openrlhf_refuses_what_it_cannot_do():
    from g2po_bench.algorithms.backends.openrlhf.args import OpenRLHFArgsError, build_argv
    from g2po_bench.algorithms.backends.openrlhf.settings import OpenRLHFSettings

    settings = OpenRLHFSettings(num_nodes=1, gpus_per_node=1).resolved()
    argv = build_argv(load_config(overrides=["backend=openrlhf"]), settings, model_path="/m", ckpt_path="/c")
    assert argv[argv.index("--actor.dual_clip") + 1] == "3.0"
    assert argv[argv.index("--actor.adam.weight_decay") + 1] == "0.01"
    ok = build_argv(load_config(overrides=["backend=openrlhf", "train.loss_agg_mode=seq-mean-token-mean",
                                           "train.clip_ratio_c=null"]), settings, model_path="/m", ckpt_path="/c")
    assert "--actor.dual_clip" not in ok and ok[ok.index("--actor.loss_agg_mode") + 1] == "seq-mean-token-mean"
    with pytest.raises(OpenRLHFArgsError, match="seq-mean-token-sum"):
        build_argv(load_config(overrides=["backend=openrlhf", "train.loss_agg_mode=seq-mean-token-sum"]),
                   settings, model_path="/m", ckpt_path="/c")
    with pytest.raises(OpenRLHFArgsError, match="kl_clamp"):
        build_argv(load_config(overrides=["backend=openrlhf", "train.kl_clamp=5"]),
                   settings, model_path="/m", ckpt_path="/c")


# --------------------------------------------------------------------------- dual clip
def test_dual_clip_bounds_negative_advantage_tokens():
    # token 0: A = -1, ratio 5: PPO term max(-A r, -A clip(r)) = max(5, 1.2) = 5 > bound -A c = 3 -> 3
    # token 1: A = -2, ratio 4: max(8, 2.4) = 8 > 6 -> 6
    # token 2: A = -1, ratio 2: max(2, 1.2) = 2 < 3 -> 2 (bound inactive)
    # token 3: A = +1, ratio 5: max(-5, -1.2) = -1.2 (positive advantages are never dual-clipped)
    old = t([[0.0, 0.0, 0.0, 0.0]])
    logp = t([[math.log(5.0), math.log(4.0), math.log(2.0), math.log(5.0)]], requires_grad=True)
    adv = t([[-1.0, -2.0, -1.0, 1.0]])
    sur = losses.clipped_surrogate(logp, old, adv, clip_ratio=0.2, clip_ratio_c=3.0)
    assert sur["loss"].tolist()[0] == pytest.approx([3.0, 6.0, 2.0, -1.2], abs=1e-5)
    assert sur["dual_clipped"].tolist()[0] == [True, True, False, False]
    # without dual clip: the plain PPO surrogate
    plain = losses.clipped_surrogate(logp, old, adv, clip_ratio=0.2, clip_ratio_c=None)
    assert plain["loss"].tolist()[0] == pytest.approx([5.0, 8.0, 2.0, -1.2], abs=1e-5)
    # the bound is constant: no gradient through dual-clipped (and clipped) tokens; token 2
    # d(-A r)/dlogp = -A r = 2
    mask = torch.ones(1, 4, dtype=torch.bool)
    loss, m = losses.policy_loss(logp, old, adv, mask, clip_ratio=0.2, clip_ratio_c=3.0)
    assert float(loss.detach()) == pytest.approx((3.0 + 6.0 + 2.0 - 1.2) / 4, abs=1e-5)
    assert m["clip_frac_lower"] == pytest.approx(0.5)
    loss.backward()
    assert logp.grad.tolist()[0] == pytest.approx([0.0, 0.0, 2.0 / 4, 0.0], abs=1e-6)
    with pytest.raises(ValueError, match="> 1"):
        losses.clipped_surrogate(logp, old, adv, clip_ratio_c=1.0)


def test_both_loss_paths_share_the_dual_clipped_surrogate():
    old = t([[0.0, 0.0]])
    logp = t([[math.log(5.0), math.log(0.5)]])
    adv = t([-1.0])
    mask = torch.ones(1, 2, dtype=torch.bool)
    # token 0: min(max(5, 1.2), 3) = 3; token 1: max(0.5, 0.8) = 0.8 -> mean 1.9
    pg, _ = losses.policy_loss(logp, old, adv, mask)
    step = losses.ppo_step_loss(logp, old, None, adv, None, mask)
    assert float(pg) == pytest.approx(1.9, abs=1e-6) and float(step["loss"]) == pytest.approx(1.9, abs=1e-6)


# --------------------------------------------------------------------------- KL clamp
def test_k3_is_clamped_to_ten_per_token():
    # log_ratio = logp - ref. k3 = exp(-lr) + lr - 1:
    #   lr = -20 -> e^20 - 21 = 4.85e8 -> 10;  lr = 3 -> e^-3 + 2 = 2.049787 (inside the clamp)
    logp = t([[-20.0, 3.0]], requires_grad=True)
    ref = t([[0.0, 0.0]])
    kl = losses.kl_divergence(logp, ref, "k3")
    assert kl.tolist()[0] == pytest.approx([10.0, math.exp(-3) + 2.0], abs=1e-5)
    assert float(losses.kl_divergence(logp.detach(), ref, "k3", clamp=None)[0, 0]) == pytest.approx(math.exp(20) - 21, rel=1e-5)
    kl.sum().backward()
    # the clamped token gives no gradient; d k3 / d lr = 1 - exp(-lr) at lr = 3
    assert logp.grad.tolist()[0] == pytest.approx([0.0, 1 - math.exp(-3)], abs=1e-6)
    # the trainer's path: ppo_step_loss(kl_clamp=...) with kl_coef 1, no policy term (A = 0)
    mask = torch.ones(1, 2, dtype=torch.bool)
    out = losses.ppo_step_loss(logp.detach(), logp.detach(), ref, t([0.0]), None, mask, kl_coef=1.0)
    assert float(out["loss"]) == pytest.approx((10.0 + math.exp(-3) + 2.0) / 2, abs=1e-5)


# --------------------------------------------------------------------------- aggregation
def test_each_aggregation_mode_on_a_hand_computed_matrix():
    # rows: [1, 2, (3), (0)] and [4, (5), (6), (0)]; masked tokens 1, 2 | 4; L = 4
    x = t([[1.0, 2.0, 3.0, 0.0], [4.0, 5.0, 6.0, 0.0]])
    mask = torch.tensor([[True, True, False, False], [True, False, False, False]])
    expected = {
        "token-mean": 7 / 3,                   # (1 + 2 + 4) / 3 tokens
        "seq-mean-token-sum": (3 + 4) / 2,     # row sums 3 and 4, averaged
        "seq-mean-token-mean": (1.5 + 4) / 2,  # row means 1.5 and 4, averaged
        "seq-mean-token-sum-norm": 7 / 4,      # total 7 / padded width 4
    }
    assert set(expected) == set(losses.LOSS_AGG_MODES)
    for mode, value in expected.items():
        assert float(losses.aggregate(x, mask, mode)) == pytest.approx(value, abs=1e-6), mode
        # the policy loss with A = -x and ratio 1 (no clip active) aggregates exactly x
        zero = torch.zeros_like(x)
        pg, _ = losses.policy_loss(zero, zero, -x, mask, loss_agg_mode=mode, clip_ratio_c=None)
        assert float(pg) == pytest.approx(value, abs=1e-6), mode
    with pytest.raises(ValueError, match="token-mean"):
        losses.aggregate(x, mask, "sum")


def test_micro_batch_accumulation_is_the_mean_of_micro_batch_losses():
    # ratio 1 and no KL/entropy: per-token loss = -A. Micro-batch 1: one token with A = 1 ->
    # token mean -1; micro-batch 2: three tokens with A = 2 -> -2. Reference accumulation:
    # (-1 + -2) / 2 = -1.5 (the global token mean would be (-1 - 6) / 4 = -1.75).
    m1 = torch.tensor([[True, False, False]])
    m2 = torch.tensor([[True, True, True]])
    z = torch.zeros(1, 3)
    parts = [losses.ppo_step_loss(z, z, None, t([a]), None, m, num_micro_batches=2)["loss"]
             for a, m in ((1.0, m1), (2.0, m2))]
    assert float(sum(parts)) == pytest.approx(-1.5, abs=1e-6)
    legacy = [losses.ppo_step_loss(z, z, None, t([a]), None, m, num_tokens=4)["loss"]
              for a, m in ((1.0, m1), (2.0, m2))]
    assert float(sum(legacy)) == pytest.approx(-1.75, abs=1e-6)
    with pytest.raises(ValueError, match="num_tokens"):
        losses.ppo_step_loss(z, z, None, t([1.0]), None, m1, num_tokens=4, loss_agg_mode="seq-mean-token-sum")


# --------------------------------------------------------------------------- weight decay
def test_critic_adamw_weight_decay_is_applied():
    from transformers import LlamaConfig, LlamaForCausalLM

    from g2po_bench.algorithms.backends.local.value import ValueModel

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, vocab_size=32, max_position_embeddings=16)
    critic = ValueModel(LlamaForCausalLM(cfg))
    group = critic.optimizer.param_groups[0]
    assert group["lr"] == 1e-5 and group["weight_decay"] == 0.01  # the reference critic optimiser
    # one AdamW step with a zero gradient: the Adam update is 0 / (0 + eps) = 0 and the
    # decoupled decay scales every weight by (1 - lr * wd); lr 0.1 makes it 0.999
    critic = ValueModel(LlamaForCausalLM(cfg), lr=0.1, weight_decay=0.01)
    before = [p.detach().clone() for p in critic.parameters()]
    for p in critic.parameters():
        p.grad = torch.zeros_like(p)
    critic.optimizer.step()
    for b, p in zip(before, critic.parameters()):
        assert torch.allclose(p, b * 0.999, rtol=1e-6, atol=0)
    assert any(float(b.abs().max()) > 0.01 for b in before)  # the decay is visible
