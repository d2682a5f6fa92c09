"""Update-direction accuracy (analysis/credit/gradients.py, alignment.py and the study's gradient
phase): the loss gradient the instrument uses is the trainer's, an estimator equal to the truth
aligns exactly (synthetic, and on the toy corridor with exact A* through the study), the sketch
keeps inner products, normalization moves the gradient where it leaves the within-group rank
alone, the batch cosine does not depend on the study's size, and its interval covers it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from credit_support import scripted_model_policy
from local_trainer import tiny_model_dir

from g2po_bench.algorithms import losses
from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer
from g2po_bench.algorithms.backends.local.sampling import SamplingParams
from g2po_bench.algorithms.backends.local.transformers_policy import (
    pack_sequences,
    response_logprobs,
)
from g2po_bench.algorithms.backends.progress import RunProgress
from g2po_bench.analysis.credit.alignment import alignment_table
from g2po_bench.analysis.credit.gradients import (
    GradientSketch,
    alignment_scores,
    group_vectors,
    row_gradients,
    row_weights,
)
from g2po_bench.analysis.credit.scoring import group_stats
from g2po_bench.analysis.credit.study import (
    CreditSettings,
    _gradient_phase,
    choose_tasks,
    run_study,
)
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.core.config import LOSS_AGG_MODES
from g2po_bench.runconfig import load_config
from g2po_bench.runtime.workers import EnvPool

TOY = get_benchmark("toy")


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


# ------------------------------------------------------------------ in the study
def _toy_cfg(*overrides: str):
    return load_config(None, ["env.name=toy", "env.max_steps=6", "env.stop_after_refusals=2", *overrides])


@pytest.fixture(scope="module")
def model_study(tmp_path_factory):
    """An exact-mode study of the toy corridor whose scripted policy has a tiny model (so the
    study takes loss gradients): 4 groups in blocks of 2, exact gradients."""
    policy = scripted_model_policy(tmp_path_factory.mktemp("scripted-model"))
    cfg = _toy_cfg()
    tasks = choose_tasks(TOY.load_tasks(cfg.env, "train"), 4, 0)
    settings = CreditSettings(groups=4, group_size=4, continuations=0, exact=True, n_boot=200, batch_groups=2,
                              sketch_dim=0)
    with EnvPool(get_benchmark("toy"), cfg.env, 2, max_episodes=0) as pool:
        study = run_study(cfg, policy, pool, TOY, tasks, settings)
    return cfg, policy, tasks, settings, study


def test_on_the_toy_with_exact_truth_an_estimator_equal_to_the_truth_aligns_exactly(model_study):
    cfg, policy, _, settings, st = model_study
    a = st.truth.a_star
    assert np.isfinite(a).all() and np.ptp(a) > 0.1  # exact A*, not constant
    no_truth = np.zeros(len(a), dtype=bool)
    wrong = np.random.default_rng(0).normal(size=len(a))
    gg, note = _gradient_phase(cfg, policy, st.rollouts, {"exact": a.copy(), "twice": 2 * a, "opposite": -a,
                                                          "noise": wrong}, st.truth, no_truth, settings, 0,
                               RunProgress(None))
    assert "exact gradients" in note and gg.batch == 2 and list(gg.block) == [0, 0, 1, 1]
    tab = alignment_table(gg, ["exact", "twice", "opposite", "noise"], "a_star", n_boot=100)
    rows = tab["rows"]
    assert rows["exact"]["cosine"] == pytest.approx(1.0, abs=1e-9)
    assert rows["exact"]["ci"] == pytest.approx([1.0, 1.0], abs=1e-9)
    assert rows["twice"]["cosine"] == pytest.approx(1.0, abs=1e-9)  # the direction, not the size
    assert rows["opposite"]["cosine"] == pytest.approx(-1.0, abs=1e-9)
    assert abs(rows["noise"]["cosine"]) < 0.9
    assert tab["truth"]["reliability"] == pytest.approx(1.0, abs=1e-9)  # exact: both halves equal
    # the study itself scored every registered row's gradient, on every group
    grad = st.scores["a_star"]["gradient"]
    assert grad["groups"] == 4 and grad["batch"] == 2
    assert set(grad["rows"]) == {v.name for v in st.variants}
    assert all(-1 - 1e-9 <= r["cosine"] <= 1 + 1e-9 for r in grad["rows"].values())


def test_the_study_gradient_is_the_trainers_loss_gradient_of_each_block(model_study):
    """The inner products the study keeps are those of the trainer's loss gradient (autograd of
    ppo_step_loss on the block's rows as one batch) under the row's advantages."""
    cfg, policy, _, settings, st = model_study
    rb = st.rollouts
    adv = st.advantages["g2po"]
    truth = st.truth.a_star
    for block in (0, 1):
        rows = np.flatnonzero(rb.steps.group_id // 2 == block)
        prompts = [rb.prompt_ids[i] for i in rows]
        responses = [rb.response_ids[i] for i in rows]
        sampling = SamplingParams(temperature=cfg.train.temperature, top_p=cfg.train.top_p)
        groups = rb.steps.group_id[rows] - 2 * block
        per_group = []
        for x in (adv, truth):
            vecs = []
            for g in (0, 1):
                a = np.where(groups == g, x[rows], 0.0)
                vecs.append(-_autograd_trainer_loss(policy.model, policy.tokenizer, prompts, responses, a,
                                                    cfg.train.loss_agg_mode, sampling))
            per_group.append(np.stack(vecs))
        want = per_group[0] @ per_group[1].T  # <v_g^g2po, v_h^truth> for the block's groups
        got = st.gradients.pairs["g2po|a_star"][2 * block: 2 * block + 2, :2]
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6 * np.abs(want).max())


def test_normalization_changes_the_gradient_alignment_where_the_within_group_rank_stays(model_study):
    """GRPO with mean-only and with mean-and-std normalization give every group's rows the same
    order (std_g > 0 rescales a group), so their within-group Spearman is equal group by group;
    the update feels the groups' sizes, and the gradient alignment differs."""
    _, _, _, _, st = model_study
    for target in ("a_star", "a_star_pool"):
        a, b = st.group_stats[target]["grpo"], st.group_stats[target]["grpo mean_norm"]
        np.testing.assert_array_equal(np.isfinite(a.spearman), np.isfinite(b.spearman))
        np.testing.assert_allclose(a.spearman[np.isfinite(a.spearman)], b.spearman[np.isfinite(b.spearman)])
    grad = st.scores["a_star"]["gradient"]["rows"]
    assert abs(grad["grpo"]["cosine"] - grad["grpo mean_norm"]["cosine"]) > 1e-3


def test_the_batch_cosine_does_not_depend_on_how_many_groups_the_study_sampled():
    """The figure estimates the cosine of a training batch of B groups: a study of the same blocks
    twice over gives the same value (delta and omega are means), while the cosine of the whole
    sampled batch (B = G) moves with G."""
    rng = np.random.default_rng(3)
    g, rows, d, b = 8, 6, 30, 4
    group = np.repeat(np.arange(g), rows)
    j = rng.normal(size=(g * rows, d)) + 0.2
    true = rng.normal(size=g * rows)
    est = true + rng.normal(size=g * rows)
    h = group_vectors(j, group, g, true)
    e = group_vectors(j, group, g, est)
    block = np.arange(g) // b
    one = alignment_scores({"e": e}, h, h, block=block, batch=b, n_boot=50)["rows"]["e"].cosine
    two = alignment_scores({"e": np.vstack([e, e])}, np.vstack([h, h]), np.vstack([h, h]),
                           block=np.r_[block, block + 2], batch=b, n_boot=50)["rows"]["e"].cosine
    assert two == pytest.approx(one, abs=1e-12)
    whole = alignment_scores({"e": e}, h, h, n_boot=50)["rows"]["e"].cosine  # one batch of all 8
    assert abs(whole - one) > 1e-3


def test_the_bootstrap_interval_covers_the_batch_cosine():
    """Synthetic studies of 64 groups in blocks of 16 (row gradients with a shared mean
    direction, A* halves with noise as large as the signal, an estimator that adds as much again):
    the true batch cosine is 1/sqrt(2) in expectation; the 95 % intervals cover it in at least
    85 % of 40 studies, and their width is that of the estimate's spread across studies."""
    hits, widths, values = 0, [], []
    for s in range(40):
        rng = np.random.default_rng(100 + s)
        g, rows, d = 64, 8, 40
        group = np.repeat(np.arange(g), rows)
        j = rng.normal(size=(g * rows, d)) + 0.3
        true = rng.normal(size=g * rows)
        h1 = group_vectors(j, group, g, true + rng.normal(size=g * rows))
        h2 = group_vectors(j, group, g, true + rng.normal(size=g * rows))
        e = group_vectors(j, group, g, true + rng.normal(size=g * rows))
        r = alignment_scores({"e": e}, h1, h2, block=np.arange(g) // 16, batch=16, n_boot=300, seed=s)["rows"]["e"]
        hits += r.ci[0] <= 1 / np.sqrt(2) <= r.ci[1]
        widths.append(r.ci[1] - r.ci[0])
        values.append(r.cosine)
    assert hits >= 34
    spread = np.quantile(values, 0.975) - np.quantile(values, 0.025)
    assert 0.6 * spread < np.median(widths) < 1.6 * spread
