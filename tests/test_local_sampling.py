"""One sampling definition for the local sampler and the trainer's log-probs.

A model whose ``generation_config.json`` sets a repetition penalty (as Qwen2.5-Instruct's
does) must not have it applied while sampling, since the trainer rescores raw logits / T:
the sampler's own log-probs equal the trainer's old log-probs for the same tokens.
"""

import json
from pathlib import Path

import pytest
import torch
from local_trainer import PROMPTS, make_trainer, sample_batch, tiny_model_dir
from transformers import GenerationConfig

from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer
from g2po_bench.algorithms.backends.local.sampling import SamplingParams, model_generation_overrides
from g2po_bench.algorithms.backends.local.transformers_policy import (
    LocalPolicy,
    pack_sequences,
    plan_batches,
)
from g2po_bench.core.config import ConfigError
from g2po_bench.runconfig import load_config

QWEN_LIKE = {"do_sample": True, "repetition_penalty": 1.1, "temperature": 0.7, "top_p": 0.8, "top_k": 20}


@pytest.fixture(scope="module")
def penalised_dir(tmp_path_factory):
    """A tiny model whose generation_config.json carries Qwen2.5-Instruct's sampling overrides,
    with its LM head scaled up so that the repetition penalty visibly changes probabilities."""
    path = Path(tiny_model_dir(tmp_path_factory.mktemp("samp")))
    model, tok = load_model_and_tokenizer(path, device="cpu")
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(20.0)
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id, **QWEN_LIKE)
    model.save_pretrained(path)
    assert json.loads((path / "generation_config.json").read_text())["repetition_penalty"] == 1.1
    return path


def test_sampler_logprobs_equal_trainer_old_logprobs_despite_generation_config(tmp_path, penalised_dir):
    tr = make_trainer(tmp_path, penalised_dir, "train.temperature=1.0", "train.micro_batch_size=4")
    assert model_generation_overrides(tr.model)["repetition_penalty"] == 1.1
    rb, adv = sample_batch(tr.policy, max_new_tokens=12, seed=3)
    assert sum(len(r) for r in rb.response_ids) > 30
    # the trainer's own old log-probs (what _update uses), compared token by token
    packed = pack_sequences(rb.prompt_ids, rb.response_ids, tr.tokenizer.pad_token_id, tr.device)
    with torch.no_grad():
        old, _ = tr._logprobs(tr.model, packed)
    for i, lp in enumerate(rb.sampler_logprobs):
        assert lp is not None and len(lp) == len(rb.response_ids[i])
        torch.testing.assert_close(torch.tensor(lp), old[i, : len(lp)], atol=1e-4, rtol=0)
    # and the gap the update reports every iteration
    stats = tr._update(rb, adv)
    assert stats["train/sampler_logprob_gap_max"] < 1e-4
    # the run records the sampling definition and the ignored model overrides
    rec = json.loads((tr.run.root / "sampling.json").read_text())
    assert rec["train"]["temperature"] == 1.0 and rec["train"]["repetition_penalty"] == 1.0
    assert rec["model_generation_config_ignored"]["repetition_penalty"] == 1.1


def test_plain_generate_applies_the_penalty_the_trainer_does_not_see(penalised_dir):
    """The old path (generate with only temperature/top_p/top_k overridden) samples from a
    penalised distribution: its log-probs differ from raw logits / T."""
    model, tok = load_model_and_tokenizer(penalised_dir, device="cpu")
    pol = LocalPolicy(model, tok)
    ids = [pol.encode_prompt(p) for p in PROMPTS[:2]]
    torch.manual_seed(0)
    x = torch.tensor([ids[0]])
    out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=True, temperature=1.0,
                         top_p=1.0, top_k=0, max_new_tokens=10, output_scores=True, return_dict_in_generate=True,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    resp = out.sequences[0, x.shape[1]:].tolist()
    sampled = torch.stack([torch.log_softmax(s[0].float(), -1)[t] for s, t in zip(out.scores, resp)])
    packed = pack_sequences([ids[0]], [resp], tok.pad_token_id, "cpu")
    from g2po_bench.algorithms.backends.local.transformers_policy import response_logprobs

    with torch.no_grad():
        rescored, _ = response_logprobs(model, packed, temperature=1.0)
    assert (sampled - rescored[0, : len(resp)]).abs().max() > 1e-2


def test_generation_config_without_neutral_value_is_refused(penalised_dir):
    model, tok = load_model_and_tokenizer(penalised_dir, device="cpu")
    model.generation_config.suppress_tokens = [5]
    with pytest.raises(ValueError, match="suppress_tokens"):
        LocalPolicy(model, tok).generate(["go east"], temperature=1.0, max_new_tokens=2, seed=0)


def test_rescore_applies_the_same_warpers():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 40)
    sp = SamplingParams(temperature=0.7, top_p=0.9, top_k=10)
    got = sp.rescore(logits)
    flat = logits.reshape(-1, 40)
    for proc in sp.logits_processors():
        flat = proc(None, flat)
    torch.testing.assert_close(got, torch.log_softmax(flat, -1).reshape(3, 5, 40))
    torch.testing.assert_close(SamplingParams(temperature=2.0).rescore(logits), torch.log_softmax(logits / 2.0, -1))
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)


def test_plan_batches_respects_the_token_budget_and_buckets_by_length():
    lengths = [50, 10, 30, 10, 200, 40, 20]
    batches = plan_batches(lengths, 10, max_tokens=150)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) == 1 or len(b) * (max(lengths[i] for i in b) + 10) <= 150
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(flat)  # length-bucketed
    assert plan_batches(lengths, 10) == [sorted(range(7), key=lambda i: (lengths[i], i))]  # no budget: one batch
    assert [len(b) for b in plan_batches(lengths, 10, max_rows=3)] == [3, 3, 1]


def test_generation_with_a_budget_keeps_prompt_order_and_counts_tokens(tmp_path):
    path = tiny_model_dir(tmp_path)
    model, tok = load_model_and_tokenizer(path, device="cpu")
    pol = LocalPolicy(model, tok, max_batch_tokens=60)
    gens = pol.generate(PROMPTS, temperature=1.0, max_new_tokens=5, seed=0)
    assert [g.prompt_ids for g in gens] == [pol.encode_prompt(p) for p in PROMPTS]
    assert pol.stats["batches"] > 1
    assert pol.stats["prompt_tokens"] == sum(len(g.prompt_ids) for g in gens)
    assert pol.stats["generated_tokens"] == sum(len(g.response_ids) for g in gens)
    assert pol.stats["generate_s"] > 0


def test_old_logprobs_from_the_sampler_update_the_policy_as_recomputed_ones(tmp_path, penalised_dir):
    """``train.old_logprobs=sampler`` (the float32 default) skips the policy's forward pass before
    the update; the update is the same as with the recomputed old log-probs, up to rounding."""
    assert load_config(None, ["env.name=toy"]).train.old_logprobs == "sampler"  # auto, float32 local
    assert load_config(None, ["env.name=toy", "model.dtype=bfloat16"]).train.old_logprobs == "recompute"
    weights, stats = {}, {}
    for mode in ("recompute", "sampler"):
        tr = make_trainer(tmp_path / mode, penalised_dir, f"train.old_logprobs={mode}", "train.micro_batch_size=4",
                          "train.mini_batch_size=4", "train.lr=1e-2")
        rb, adv = sample_batch(tr.policy, max_new_tokens=12, seed=3)
        stats[mode] = tr._update(rb, adv)
        weights[mode] = torch.cat([p.detach().flatten() for p in tr.model.parameters()])
    assert stats["sampler"]["train/sampler_logprob_gap_max"] < 1e-4
    for key in ("loss/pg_loss", "loss/kl", "loss/clip_frac", "loss/grad_norm"):
        assert stats["sampler"][key] == pytest.approx(stats["recompute"][key], abs=1e-4), key
    assert (weights["sampler"] - weights["recompute"]).abs().max() < 1e-4
    moved = load_model_and_tokenizer(penalised_dir, dtype="float32", device="cpu")[0]
    assert (torch.cat([p.flatten() for p in moved.parameters()]) - weights["sampler"]).abs().max() > 1e-3


def test_sampler_old_logprobs_are_refused_on_openrlhf():
    with pytest.raises(ConfigError, match="train.old_logprobs"):
        load_config(None, ["backend=openrlhf", "train.old_logprobs=sampler"])
    assert load_config(None, ["backend=openrlhf"]).train.old_logprobs == "recompute"


def test_sampler_gap_monitor_warns_once_naming_the_iteration():
    """Issue 39, item 7: above the compute dtype's threshold (STALE_SAMPLER_GAP: over the measured
    rounding noise) the first time only; rounding-noise gaps never warn."""
    from g2po_bench.algorithms.backends.common import STALE_SAMPLER_GAP, SamplerGapMonitor

    lines: list[str] = []
    f32 = SamplerGapMonitor("float32", log=lines.append)
    assert f32.observe({"train/sampler_logprob_gap": 4e-8}, 1) is None  # float32 noise
    assert f32.observe({"loss/pg_loss": 0.1}, 2) is None  # no gap measured
    msg = f32.observe({"train/sampler_logprob_gap": 1e-2}, 3)  # one update behind (TRL issue 5312)
    assert msg is not None and "at iteration 3" in msg and "0.01 > 0.0001" in msg and lines == [msg]
    assert f32.record == {"iteration": 3, "gap": 1e-2, "threshold": STALE_SAMPLER_GAP["float32"],
                          "compute_dtype": "float32"}
    assert f32.observe({"train/sampler_logprob_gap": 2e-2}, 4) is None and len(lines) == 1  # once per run
    bf16 = SamplerGapMonitor("bfloat16", log=lines.append)
    assert bf16.observe({"train/sampler_logprob_gap": 7.1e-4}, 1) is None  # the largest bf16 noise measured
    assert bf16.observe({"train/sampler_logprob_gap": 4.1e-2}, 2) is not None
    resumed = SamplerGapMonitor("float32", log=lines.append, warned=f32.record)
    assert resumed.observe({"train/sampler_logprob_gap": 1.0}, 5) is None  # warned before the resume


def test_a_sampler_one_update_behind_warns_and_status_records_it(tmp_path, monkeypatch):
    """A toy run whose sampler keeps the starting weights (never updated): iteration 1 samples with
    the trainer's weights (gap at rounding level), iteration 2 with weights one update behind; the
    run warns once, naming iteration 2, and status.json records it."""
    import copy

    from g2po_bench.algorithms.backends.common import StaleSamplerWarning
    from g2po_bench.algorithms.backends.local.trainer import LocalTrainer
    from g2po_bench.core.rundir import read_jsonl
    from g2po_bench.runconfig import load_config
    from g2po_bench.train import run_train

    prepare = LocalTrainer._prepare_training

    def stale_sampler(self):
        prepare(self)
        self.policy = LocalPolicy(copy.deepcopy(self.model), self.tokenizer,
                                  max_prompt_tokens=self.cfg.train.max_prompt_tokens)

    monkeypatch.setattr(LocalTrainer, "_prepare_training", stale_sampler)
    cfg = load_config(None, [
        "env.name=toy", "env.max_steps=4", "env.num_workers=1", "train.iterations=3", "train.groups_per_batch=2",
        "train.group_size=3", "train.sft_epochs=1", "train.max_response_tokens=12", "model.hidden_size=32",
        "model.intermediate_size=64", "model.num_heads=2", "model.vocab_size=300", "eval.num_tasks=2",
        "eval.every=0", "eval.at_train_temperature=false", "progress=false", f"output_dir={tmp_path / 'runs'}",
        f"train.warm_start_cache={tmp_path / 'warm_start'}"])
    with pytest.warns(StaleSamplerWarning) as rec:
        run = run_train(cfg)
    stale = [str(r.message) for r in rec if r.category is StaleSamplerWarning]
    assert len(stale) == 1 and "at iteration 2" in stale[0]
    gaps = [m["train/sampler_logprob_gap"] for m in read_jsonl(run.metrics_path)]
    assert gaps[0] < 1e-5 and gaps[1] > 1e-4 and gaps[2] > 1e-4
    status = json.loads(run.status_path.read_text())
    assert status["state"] == "done"
    assert status["warnings"]["stale_sampler"]["iteration"] == 2
    assert status["warnings"]["stale_sampler"]["gap"] == pytest.approx(gaps[1])


# ------------------------------------------------------------------ per-sample seeds
@pytest.fixture(scope="module")
def peaked_policy(tmp_path_factory):
    """A LocalPolicy on a tiny model whose LM head is scaled up: a few likely tokens per step."""
    path = Path(tiny_model_dir(tmp_path_factory.mktemp("seeds")))
    model, tok = load_model_and_tokenizer(path, device="cpu")
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(6.0)
    return LocalPolicy(model, tok)


def test_per_sample_seeds_give_each_response_independent_of_its_batch(peaked_policy):
    pol = peaked_policy
    seeds = [101, 202, 303, 404, 505, 606]
    together = pol.generate(PROMPTS, temperature=1.0, max_new_tokens=12, seeds=seeds)
    alone = [pol.generate([p], temperature=1.0, max_new_tokens=12, seeds=[s])[0] for p, s in zip(PROMPTS, seeds)]
    reordered = pol.generate(PROMPTS[::-1], temperature=1.0, max_new_tokens=12, seeds=seeds[::-1])[::-1]
    pol.max_batch_tokens = 40  # cut into several generate() batches
    chunked = pol.generate(PROMPTS, temperature=1.0, max_new_tokens=12, seeds=seeds)
    pol.max_batch_tokens = 0
    assert pol.stats["batches"] > 3
    for a, b, c, d in zip(together, alone, reordered, chunked):
        assert a.response_ids == b.response_ids == c.response_ids == d.response_ids
    assert len({tuple(g.response_ids) for g in together}) > 1
    # another seed, another sample; a batch seed does not change a seeded response
    other = pol.generate(PROMPTS, temperature=1.0, max_new_tokens=12, seeds=[s + 1 for s in seeds], seed=7)
    assert [g.response_ids for g in other] != [g.response_ids for g in together]
    with pytest.raises(ValueError, match="one seed per prompt"):
        pol.generate(PROMPTS, temperature=1.0, max_new_tokens=4, seeds=[1])


def test_a_shared_prefill_samples_what_a_plain_generate_samples(peaked_policy):
    """share_prefill (repeated prompts prefilled once, a preallocated cache on the CPU) gives the
    same responses as a plain generate, and their log-probs and entropies within float rounding,
    on left-padded batches of repeated and distinct prompts, cut into several batches or not."""
    from g2po_bench.algorithms.backends.local import transformers_policy as tp

    plain = peaked_policy
    shared = LocalPolicy(plain.model, plain.tokenizer, share_prefill=True)
    prompts = [p for p in PROMPTS for _ in range(3)] + [PROMPTS[0]]
    seeds = list(range(11, 11 + len(prompts)))
    calls = []
    real = tp.shared_prefill
    try:
        tp.shared_prefill = lambda *a, **k: calls.append(a[2].shape) or real(*a, **k)
        for budget in (0, 60):
            plain.max_batch_tokens = shared.max_batch_tokens = budget
            a = plain.generate(prompts, temperature=1.0, max_new_tokens=12, seeds=seeds)
            b = shared.generate(prompts, temperature=1.0, max_new_tokens=12, seeds=seeds)
            for x, y in zip(a, b):
                assert x.response_ids == y.response_ids and x.prompt_ids == y.prompt_ids
                torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5, rtol=0)
                torch.testing.assert_close(torch.tensor(x.entropies), torch.tensor(y.entropies), atol=1e-5, rtol=0)
            assert len({tuple(g.response_ids) for g in b}) > 3
    finally:
        tp.shared_prefill = real
        plain.max_batch_tokens = 0
    assert len(calls) > 2  # the plain policy never prefills apart; the shared one did, per batch


def test_a_shared_prefill_computes_each_distinct_prompt_once(peaked_policy):
    """The cache rows of repeated prompts are copies of one prefill row, and the CPU cache is
    preallocated for the prompt and the response budget."""
    from g2po_bench.algorithms.backends.local.transformers_policy import _left_pad, shared_prefill

    model, tok = peaked_policy.model, peaked_policy.tokenizer
    prompts = [[1, 5, 6, 7], [1, 8], [1, 5, 6, 7], [1, 8], [1, 8]]
    ids, mask = _left_pad(prompts, tok.pad_token_id, "cpu")
    seen = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, i, o: seen.append(i[0].shape))
    try:
        with torch.no_grad():
            kwargs = shared_prefill(model, prompts, ids, mask, max_new_tokens=6)
    finally:
        hook.remove()
    assert seen == [torch.Size([2, 3])]  # two distinct prompts, all but the last column
    (cache,) = kwargs.values()
    keys = cache.layers[0].keys
    assert keys.shape[0] == 5 and keys.shape[2] == 4 + 6
    assert torch.equal(keys[0], keys[2]) and torch.equal(keys[1], keys[3]) and torch.equal(keys[1], keys[4])
    assert not torch.equal(keys[0], keys[1])


def test_per_sample_seeds_sample_the_policy_distribution(peaked_policy):
    """First-token frequencies over 3000 seeds match softmax(logits / T) (within 4 standard errors),
    and the recorded sampler log-probs are the rescored ones."""
    pol = peaked_policy
    n = 3000
    prompt = PROMPTS[0]
    gens = pol.generate([prompt] * n, temperature=0.8, max_new_tokens=1, seeds=list(range(n)))
    ids = pol.encode_prompt(prompt)
    with torch.no_grad():
        logits = pol.model(input_ids=torch.tensor([ids])).logits[0, -1]
    p = torch.softmax(logits.float() / 0.8, -1)
    pad = pol.tokenizer.pad_token_id  # a sampled padding token is dropped from the response
    tokens = [g.response_ids[0] if g.response_ids else pad for g in gens]
    counts = torch.bincount(torch.tensor(tokens), minlength=p.numel()).double() / n
    likely = p > 0.02
    assert likely.sum() >= 3  # a distribution, not a point mass
    se = torch.sqrt(p * (1 - p) / n)
    assert torch.all((counts - p).abs()[likely] < 4 * se[likely])
    assert counts[p < 1e-4].sum() < 0.01
    kept = [g for g in gens[:60] if g.response_ids][:50]
    lp = torch.tensor([g.logprobs[0] for g in kept])
    torch.testing.assert_close(lp, torch.log(p)[[g.response_ids[0] for g in kept]].float(), atol=1e-4, rtol=0)
