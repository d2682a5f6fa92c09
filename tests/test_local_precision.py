"""Mixed precision of the local backend: float32 master weights and bf16 autocast.

One AdamW step at the reference actor lr (1e-6) with ``model.dtype=bfloat16`` moves the
weights as the float32 step does; stepping bfloat16 weights directly (the old scheme) leaves
most of them unchanged.
"""

import pytest
import torch
from local_trainer import make_trainer, sample_batch, tiny_model_dir

from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer
from g2po_bench.algorithms.backends.local.precision import (
    autocast,
    check_master_weights,
    compute_dtype,
)

STEP = ["train.lr=1e-6", "train.weight_decay=0.0", "train.max_grad_norm=1e9", "train.mini_batch_size=64",
        "train.micro_batch_size=2", "train.kl_coef=0.0"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("prec"), hidden_size=64, intermediate_size=128)


def _one_step(tmp_path, model_dir, dtype):
    tr = make_trainer(tmp_path / dtype, model_dir, f"model.dtype={dtype}", *STEP)
    w0 = {n: p.detach().clone() for n, p in tr.model.named_parameters()}
    # the same rollouts for both runs: sampled in float32 from the same weights
    sampler = make_trainer(tmp_path / f"s-{dtype}", model_dir, *STEP).policy
    rb, adv = sample_batch(sampler, max_new_tokens=8, seed=1)
    tr._update(rb, adv)
    return tr, w0


def test_bf16_adamw_step_moves_weights_like_the_fp32_step(tmp_path, model_dir):
    tr32, w0 = _one_step(tmp_path, model_dir, "float32")
    trbf, w0b = _one_step(tmp_path, model_dir, "bfloat16")
    # master weights, gradients and AdamW state are float32 under model.dtype=bfloat16
    for n, p in trbf.model.named_parameters():
        assert p.dtype == torch.float32, n
        assert p.grad is not None and p.grad.dtype == torch.float32, n
        assert trbf.optimizer.state[p]["exp_avg"].dtype == torch.float32, n
    assert next(trbf.ref_model.parameters()).dtype == torch.bfloat16  # frozen copy in the compute dtype
    changed32 = changedbf = moved = agree = same_bf16 = total = 0
    old_changed = 0
    for (n, p32), (_, pbf) in zip(tr32.model.named_parameters(), trbf.model.named_parameters()):
        torch.testing.assert_close(w0[n], w0b[n], rtol=0, atol=0)
        g = p32.grad
        live = g.abs() > 1e-6  # elements the fp32 step moves by about lr (AdamW's first step)
        d32 = (p32.detach() - w0[n])[live]
        dbf = (pbf.detach() - w0[n])[live]
        total += int(live.sum())
        changed32 += int((d32 != 0).sum())
        changedbf += int((dbf != 0).sum())
        moved += int((dbf.abs() > 0.5e-6).sum())
        agree += int((torch.sign(d32) == torch.sign(dbf)).sum())
        same_bf16 += int((p32.detach().bfloat16() == pbf.detach().bfloat16()).sum())
        # the old scheme: bf16 weights stepped by AdamW directly with the same gradient
        wb = w0[n].bfloat16().clone().requires_grad_(True)
        wb.grad = g.bfloat16()
        torch.optim.AdamW([wb], lr=1e-6, weight_decay=0.0).step()
        old_changed += int((wb.detach() != w0[n].bfloat16())[live].sum())
    n_all = sum(p.numel() for p in tr32.model.parameters())
    assert total > 0.5 * n_all  # most weights get a gradient in this batch
    assert changed32 / total > 0.99
    assert changedbf / total > 0.99 and moved / total > 0.98  # bf16 compute moves ~every weight by ~lr
    assert agree / total > 0.97  # in the same direction as the fp32 step
    assert same_bf16 / n_all > 0.999  # equal to the fp32 result up to bf16 rounding
    assert old_changed / total < 0.2  # stepping bf16 weights directly: most do not move


def test_autocast_is_a_no_op_for_float32_and_bf16_otherwise():
    lin = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with autocast("cpu", torch.float32):
        assert lin(x).dtype == torch.float32
    with autocast("cpu", compute_dtype("bfloat16")):
        assert lin(x).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        compute_dtype("float16")


def test_master_weight_check_names_the_bf16_parameter(model_dir):
    model, _ = load_model_and_tokenizer(model_dir, dtype="bfloat16", device="cpu")
    with pytest.raises(TypeError, match="float32 master weights.*torch.bfloat16"):
        check_master_weights(model)
