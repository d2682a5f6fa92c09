"""Memory of the local backend: gradient checkpointing, chunked response-only log-probs, the
reference placement, and the critic built on the policy's trunk."""

import pytest
import torch
from local_trainer import make_trainer, tiny_model_dir

from g2po_bench.algorithms import losses
from g2po_bench.algorithms.backends.local.memory import enable_checkpointing, is_checkpointing
from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer
from g2po_bench.algorithms.backends.local.transformers_policy import (
    pack_sequences,
    response_logprobs,
)
from g2po_bench.algorithms.backends.local.value import ValueModel

PROMPTS = [[1, 5, 6, 7, 8, 9], [1, 10], [1, 20, 21, 22]]
RESPONSES = [[11, 12, 2], [13, 14, 15, 16], [30, 2]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("mem"))


def _loss_and_grads(model, chunk_tokens=1024):
    model.zero_grad(set_to_none=True)
    packed = pack_sequences(PROMPTS, RESPONSES, 0, "cpu")
    mask = packed["response_mask"]
    logp, ent = response_logprobs(model, packed, temperature=0.8, with_entropy=True, chunk_tokens=chunk_tokens)
    old = logp.detach() - 0.05 * mask  # a ratio away from 1, so the clipped surrogate has a gradient
    adv = torch.tensor([1.0, -0.5, 2.0])[:, None].expand_as(logp)
    out = losses.ppo_step_loss(logp, old, old + 0.1 * mask, adv, ent, mask, clip_ratio=0.2, kl_coef=0.01,
                               entropy_coef=0.001, kl_estimator="k3", num_tokens=int(mask.sum()))
    out["loss"].backward()
    return out["loss"].detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def test_gradient_checkpointing_gives_the_same_loss_and_gradients(model_dir):
    model, _ = load_model_and_tokenizer(model_dir, device="cpu")
    model.train()
    loss0, g0 = _loss_and_grads(model)
    assert not is_checkpointing(model)
    enable_checkpointing(model)  # what the trainer calls for train.gradient_checkpointing=true
    assert is_checkpointing(model) and model.training
    loss1, g1 = _loss_and_grads(model)
    torch.testing.assert_close(loss1, loss0, atol=1e-5, rtol=0)
    assert g0.keys() == g1.keys()
    assert any(g.abs().max() > 1e-4 for g in g0.values())
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], atol=1e-5, rtol=0, msg=n)


def test_chunked_logprobs_equal_one_chunk_values_and_gradients(model_dir):
    model, _ = load_model_and_tokenizer(model_dir, device="cpu")
    loss0, g0 = _loss_and_grads(model, chunk_tokens=1024)
    for chunk in (1, 3):
        loss1, g1 = _loss_and_grads(model, chunk_tokens=chunk)
        torch.testing.assert_close(loss1, loss0, atol=1e-6, rtol=0)
        for n in g0:
            torch.testing.assert_close(g1[n], g0[n], atol=1e-6, rtol=1e-5, msg=n)
    with pytest.raises(ValueError, match="chunk_tokens"):
        response_logprobs(model, pack_sequences(PROMPTS, RESPONSES, 0, "cpu"), chunk_tokens=0)


def test_trainer_switches_on_checkpointing_and_freezes_a_bf16_reference(tmp_path, model_dir):
    tr = make_trainer(tmp_path, model_dir, "train.gradient_checkpointing=true", "model.dtype=bfloat16",
                      "train.ref_device=cpu", "algorithm.name=ppo")
    assert is_checkpointing(tr.model)
    ref = list(tr.ref_model.parameters())
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad and p.device.type == "cpu" for p in ref)
    assert all(p.dtype == torch.float32 for p in tr.model.parameters())
    # the critic: the policy's trunk (no LM head) with a value head, lr train.value_lr
    critic = tr.critic
    assert is_checkpointing(critic.backbone)
    n_trunk = sum(p.numel() for p in tr.model.base_model.parameters())
    assert sum(p.numel() for p in critic.backbone.parameters()) == n_trunk
    assert critic.optimizer.param_groups[0]["lr"] == tr.cfg.train.value_lr


def test_critic_trunk_values_and_fit(model_dir):
    model, tok = load_model_and_tokenizer(model_dir, device="cpu")
    critic = ValueModel.from_policy(model, lr=1e-2)
    assert critic.optimizer.param_groups[0]["lr"] == 1e-2
    assert ValueModel.from_policy(model).optimizer.param_groups[0]["lr"] == 1e-5  # the reference critic lr
    assert not any(n.startswith("lm_head") for n, _ in critic.backbone.named_parameters())
    prompts = PROMPTS
    v0 = critic.predict(prompts, tok.pad_token_id)
    assert v0.shape == (3,) and (v0 == 0).all()  # zero-initialised head
    returns = torch.tensor([1.0, -1.0, 0.5]).numpy()
    before = ((v0 - returns) ** 2).mean()
    stats = critic.fit(prompts, returns, v0, tok.pad_token_id, clip=10.0, mini_batch_size=3, micro_batch_size=3,
                       epochs=20)
    after = ((critic.predict(prompts, tok.pad_token_id) - returns) ** 2).mean()
    assert after < 0.5 * before
    assert set(stats) == {"loss/value", "loss/value_clip_frac", "loss/value_grad_norm"}
    # one AdamW step per mini-batch (the reference critic), the micro-batches accumulate: 20 epochs
    # of one mini-batch of 3 rows, then 2 epochs of 2 mini-batches ([2, 1] fixed) in micro-batches of 1
    head = critic.head.weight
    assert int(critic.optimizer.state[head]["step"]) == 20
    critic.fit(prompts, returns, v0, tok.pad_token_id, clip=0.5, mini_batch_size=2, micro_batch_size=1, epochs=2,
               response_lengths=[3, 1, 2], loss_agg_mode="seq-mean-token-mean")
    assert int(critic.optimizer.state[head]["step"]) == 24
    # the policy itself is untouched by critic training (a copy of the trunk)
    assert critic.backbone is not model.base_model
