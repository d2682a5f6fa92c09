"""Update-direction accuracy (analysis/credit/gradients.py): the loss gradient the instrument
uses is the trainer's, an estimator equal to the truth aligns exactly, the sketch keeps inner
products, and normalization moves the gradient where it leaves the within-group rank alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from local_trainer import tiny_model_dir

from g2po_bench.algorithms import losses
from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer
from g2po_bench.algorithms.backends.local.sampling import SamplingParams
from g2po_bench.algorithms.backends.local.transformers_policy import (
    pack_sequences,
    response_logprobs,
)
from g2po_bench.analysis.credit.gradients import (
    GradientSketch,
    alignment_scores,
    group_vectors,
    row_gradients,
    row_weights,
)
from g2po_bench.analysis.credit.scoring import group_stats
from g2po_bench.core.config import LOSS_AGG_MODES


def test_row_weights_follow_the_aggregation_modes():
    n = [2, 0, 4]  # the empty row is left out of B and weighs 0
    np.testing.assert_allclose(row_weights(n, "token-mean"), [1 / 6, 0, 1 / 6])
    np.testing.assert_allclose(row_weights(n, "seq-mean-token-sum"), [1 / 2, 0, 1 / 2])
    np.testing.assert_allclose(row_weights(n, "seq-mean-token-mean"), [1 / 4, 0, 1 / 8])
    np.testing.assert_allclose(row_weights(n, "seq-mean-token-sum-norm"), [1 / 4, 0, 1 / 4])
    with pytest.raises(ValueError, match="unknown loss aggregation mode 'sum'"):
        row_weights(n, "sum")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model, tok = load_model_and_tokenizer(tiny_model_dir(tmp_path_factory.mktemp("grad")), dtype="float32",
                                          device="cpu")
    rng = np.random.default_rng(0)
    vocab = len(tok)
    prompts = [rng.integers(3, vocab, size=int(rng.integers(3, 9))).tolist() for _ in range(7)]
    responses = [rng.integers(3, vocab, size=int(rng.integers(1, 6))).tolist() for _ in range(7)]
    responses[3] = []  # a row without response tokens (the trainer leaves it out)
    return model, tok, prompts, responses


def _autograd_trainer_loss(model, tok, prompts, responses, adv, mode, sampling):
    """The trainer's loss (ppo_step_loss at ratio 1, KL and entropy off, the batch as one
    micro-batch) on the rows with response tokens, and its gradient by autograd."""
    rows = [i for i, r in enumerate(responses) if r]
    packed = pack_sequences([prompts[i] for i in rows], [responses[i] for i in rows], tok.pad_token_id, "cpu")
    model.zero_grad(set_to_none=True)
    logp, _ = response_logprobs(model, packed, sampling=sampling)
    a = torch.as_tensor(adv[rows], dtype=torch.float32)
    out = losses.ppo_step_loss(logp, logp.detach(), None, a, None, packed["response_mask"], kl_coef=0.0,
                               entropy_coef=0.0, loss_agg_mode=mode, num_micro_batches=1)
    out["loss"].backward()
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.requires_grad]).numpy().astype(np.float64)
    model.zero_grad(set_to_none=True)
    return grad


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_the_instrument_gradient_is_the_trainers_loss_gradient(tiny, mode):
    model, tok, prompts, responses = tiny
    sampling = SamplingParams(temperature=1.0)
    adv = np.array([1.5, -0.5, 0.25, 2.0, -1.0, 0.75, -2.0])
    sketch = GradientSketch(list(model.parameters()), dim=0)
    weights = row_weights([len(r) for r in responses], mode)
    j = row_gradients(model, prompts, responses, weights, sketch, pad_token_id=tok.pad_token_id, sampling=sampling)
    assert np.all(j[3] == 0)
    mine = -(adv[:, None] * j.astype(np.float64)).sum(0)  # grad L(A) = -sum_i A_i J_i
    want = _autograd_trainer_loss(model, tok, prompts, responses, adv, mode, sampling)
    np.testing.assert_allclose(mine, want, rtol=1e-4, atol=1e-7 * np.abs(want).max())


def test_an_estimator_equal_to_the_truth_aligns_exactly_and_the_sketch_keeps_inner_products(tiny):
    model, tok, prompts, responses = tiny
    weights = row_weights([len(r) for r in responses])
    exact = row_gradients(model, prompts, responses, weights, GradientSketch(list(model.parameters()), dim=0),
                          pad_token_id=tok.pad_token_id)
    group = np.array([0, 0, 0, 1, 1, 2, 2])
    truth = np.array([0.5, -0.5, 0.0, 0.3, -0.3, 1.0, -1.0])
    v = group_vectors(exact, group, 3, truth)
    scores = alignment_scores({"exact truth": v, "opposite": -v, "half": 0.5 * v}, v, v, n_boot=200)
    for name, want in (("exact truth", 1.0), ("opposite", -1.0), ("half", 1.0)):  # scale-free
        assert scores["rows"][name].cosine == pytest.approx(want, abs=1e-9)
    assert scores["truth"]["reliability"] == pytest.approx(1.0, abs=1e-12)
    # the CountSketch: inner products of two gradients within a few 1/sqrt(d) of the exact ones
    sketch = GradientSketch(list(model.parameters()), dim=4096, seed=3)
    sk = row_gradients(model, prompts, responses, weights, sketch, pad_token_id=tok.pad_token_id)
    x, y = exact[0].astype(np.float64), exact[5].astype(np.float64)
    bound = 4 * np.sqrt((x @ x) * (y @ y) / 4096)
    assert abs(sk[0].astype(np.float64) @ sk[5] - x @ y) < bound
    assert abs(sk[0].astype(np.float64) @ sk[0] - x @ x) < 4 * (x @ x) * np.sqrt(2 / 4096)


def test_normalization_moves_the_gradient_where_the_within_group_rank_does_not_change():
    # Two task groups with orthogonal row gradients (one direction per row). A* is large in group
    # 0 and small in group 1; dividing each group by its own std (mean_std_norm) makes both equally
    # loud, so the batch gradient turns away from the truth's, while within each group the
    # advantages keep the order of A* (Spearman 1 in both groups, for both normalizations).
    j = np.eye(6)
    group = np.array([0, 0, 0, 1, 1, 1])
    truth = np.array([3.0, 0.0, -3.0, 0.3, 0.0, -0.3])
    mean_norm = truth - np.repeat([truth[:3].mean(), truth[3:].mean()], 3)
    std = np.repeat([truth[:3].std(ddof=1), truth[3:].std(ddof=1)], 3)
    std_norm = mean_norm / std
    for adv in (mean_norm, std_norm):
        stats = group_stats(adv, truth, group)
        np.testing.assert_allclose(stats.spearman, [1.0, 1.0])
    half = group_vectors(j, group, 2, truth)
    scores = alignment_scores({"mean_norm": group_vectors(j, group, 2, mean_norm),
                               "mean_std_norm": group_vectors(j, group, 2, std_norm)}, half, half, n_boot=200)
    assert scores["rows"]["mean_norm"].cosine == pytest.approx(1.0)
    # cos = (3*3*2 + 0.3*3... ) with std_norm = (1, 0, -1, 1, 0, -1): <a, t> = 6 + 0.6, |a| = 2, |t| = sqrt(18.18)
    assert scores["rows"]["mean_std_norm"].cosine == pytest.approx(6.6 / (2 * np.sqrt(18.18)))
    assert scores["rows"]["mean_std_norm"].cosine < 0.8


def test_the_noise_of_the_truth_does_not_shrink_the_cosine():
    # 60 groups of 8 rows, random row gradients; the halves of A* are the true advantage plus
    # independent noise as large as the signal. The truth itself then scores ~1 (the CI holds 1),
    # while the plain cosine with the mean of the halves is attenuated well below.
    rng = np.random.default_rng(5)
    g, rows, d = 60, 8, 40
    group = np.repeat(np.arange(g), rows)
    j = rng.normal(size=(g * rows, d))
    true = rng.normal(size=g * rows)
    h1 = group_vectors(j, group, g, true + rng.normal(size=g * rows))
    h2 = group_vectors(j, group, g, true + rng.normal(size=g * rows))
    other = rng.normal(size=g * rows)
    res = alignment_scores({"truth": group_vectors(j, group, g, true), "mix": group_vectors(j, group, g, true + other)},
                           h1, h2, n_boot=1000, seed=1, pairs=[("truth", "mix")])
    truth = res["rows"]["truth"]
    assert truth.ci[0] < 1.0 < truth.ci[1] and abs(truth.cosine - 1.0) < 0.1
    assert truth.naive < 0.85  # attenuated: 1 / sqrt(1 + noise / 2) ~ 0.82 in expectation
    # an estimator that adds unit noise to the truth: cos ~ 1 / sqrt(2), inside its CI
    mix = res["rows"]["mix"]
    assert mix.ci[0] < 1 / np.sqrt(2) < mix.ci[1] and mix.ci[1] < truth.ci[1]
    assert res["pairs"]["truth - mix"]["ci"][0] > 0
