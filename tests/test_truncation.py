"""Truncation is recorded where it happens (issue 15, items 13 and 14): prompts cut to
``train.max_prompt_tokens`` and responses cut at ``max_response_tokens`` are flagged per step
in the RolloutBatch (from ``Generation.info``) and counted per iteration in the metrics, for
training and evaluation separately, with a warning the first time prompts are cut."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

from g2po_bench.algorithms.backends.common import (
    PromptTruncationWarning,
    TruncationWarnings,
    eval_metrics,
    rollout_metrics,
)
from g2po_bench.algorithms.backends.local.model import build_tiny_model, load_model_and_tokenizer
from g2po_bench.algorithms.backends.local.transformers_policy import LocalPolicy
from g2po_bench.benchmarks.evaluation import evaluate
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.rollout import collect_rollouts
from g2po_bench.core.rundir import read_jsonl
from g2po_bench.runconfig import load_config
from g2po_bench.runtime.policy_protocol import Generation, response_was_cut
from g2po_bench.runtime.workers import EnvPool
from g2po_bench.train import run_train

TOY = get_benchmark("toy")
GOOD = "<think>t</think><action>go east</action>"
CUT = "<think>I will walk east and then"


class CuttingPolicy:
    """Seeded choice between a complete response and one cut at the token limit; the cut one
    says so in ``info`` as the real policies do (``finished`` False); every third prompt of a
    call is reported as truncated."""

    def generate(self, prompts, *, temperature, max_new_tokens, top_p=1.0, seed=None):
        rng = random.Random(seed)
        out = []
        for k, _ in enumerate(prompts):
            cut = rng.random() < 0.5
            out.append(Generation(text=CUT if cut else GOOD,
                                  info={"finished": not cut, "prompt_truncated": k % 3 == 0}))
        return out


def test_response_was_cut_reads_finish_reason_then_finished():
    assert response_was_cut(Generation("x", info={"finish_reason": "length", "finished": False}))
    assert not response_was_cut(Generation("x", info={"finish_reason": "stop", "finished": True}))
    # a finish reason other than "length" (e.g. a content filter) is not a cut at the token limit
    assert not response_was_cut(Generation("x", info={"finish_reason": "content_filter", "finished": False}))
    assert response_was_cut(Generation("x", info={"finished": False}))  # local transformers: no EOS
    assert not response_was_cut(Generation("x"))  # nothing reported: not counted


def test_rollout_flags_cut_prompts_and_responses_per_step():
    tasks = TOY.load_tasks(None, "train")[:2]
    with EnvPool(get_benchmark("toy"), None, 1) as pool:
        rb = collect_rollouts(CuttingPolicy(), pool, TOY, tasks, group_size=3, max_steps=4,
                              temperature=1.0, max_new_tokens=8, seed=1)
    n = len(rb.steps)
    assert rb.response_truncated.shape == (n,) and rb.response_truncated.dtype == bool
    assert rb.prompt_truncated.shape == (n,) and rb.prompt_truncated.dtype == bool
    # a cut response never parses to an action: the flag is exactly the invalid steps here
    np.testing.assert_array_equal(rb.response_truncated, ~rb.steps.action_valid)
    np.testing.assert_array_equal(rb.response_truncated, [r == CUT for r in rb.responses])
    assert 0 < rb.response_truncated.sum() < n
    # per trajectory: the number of its steps whose response was cut
    for t in rb.trajectories:
        rows = rb.steps.traj_id == t["traj_id"]
        assert t["truncated_responses"] == int(rb.response_truncated[rows].sum())
    m = rollout_metrics(rb)
    assert m["train/truncated_responses"] == pytest.approx(rb.response_truncated.sum() / n)
    assert m["train/truncated_prompts"] == int(rb.prompt_truncated.sum()) > 0


def test_evaluation_record_counts_cut_prompts_and_responses():
    panel = TOY.load_tasks(None, "eval")[:3]
    with EnvPool(get_benchmark("toy"), None, 1) as pool:
        ev = evaluate(CuttingPolicy(), pool, TOY, panel, iteration=0, max_steps=4, temperature=0.4,
                      max_new_tokens=8, seed=5)
        rb = collect_rollouts(CuttingPolicy(), pool, TOY, panel, group_size=1, max_steps=4,
                              temperature=0.4, max_new_tokens=8, seed=5)  # the same episodes
    assert ev["truncated_prompts"] == int(rb.prompt_truncated.sum())
    assert ev["truncated_responses"] == pytest.approx(rb.response_truncated.mean())
    m = eval_metrics(ev)
    assert m["eval/truncated_prompts"] == ev["truncated_prompts"]
    assert m["eval/truncated_responses"] == ev["truncated_responses"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    corpus = ["You are in room 0 of 5. <think>go on</think><action>go east</action>"] * 20
    path = build_tiny_model(tmp_path_factory.mktemp("m") / "tiny", corpus, vocab_size=300, hidden_size=32,
                            num_layers=2, num_heads=2, intermediate_size=64)
    return load_model_and_tokenizer(path, device="cpu")


def test_local_policy_reports_which_prompts_and_responses_were_cut(tiny):
    model, tok = tiny
    pol = LocalPolicy(model, tok, max_prompt_tokens=5)
    long, short = "You are in room 0 of 5. go east go west look", "go"
    gens = pol.generate([long, short, long], temperature=1.0, max_new_tokens=2, seed=0)
    assert [g.info["prompt_truncated"] for g in gens] == [True, False, True]
    assert [len(g.prompt_ids) for g in gens] == [5, 2, 5]
    for g in gens:  # cut at 2 tokens unless EOS was sampled
        assert response_was_cut(g) == (g.response_ids[-1] != tok.eos_token_id)


def test_warning_is_issued_once_per_phase():
    seen = []
    tw = TruncationWarnings(32, log=seen.append)
    assert tw.observe({"train/truncated_prompts": 0}, 1) == []
    assert len(tw.observe({"train/truncated_prompts": 4, "eval/truncated_prompts": 2}, 2)) == 2
    assert tw.observe({"train/truncated_prompts": 9, "eval/truncated_prompts": 9}, 3) == []
    assert len(seen) == 2 and "4 training prompt(s) at iteration 2" in seen[0]
    assert "train.max_prompt_tokens=32" in seen[0] and "evaluation" in seen[1]
    with pytest.warns(PromptTruncationWarning, match="1 evaluation prompt"):
        TruncationWarnings(32).observe({"eval/truncated_prompts": 1}, 0)


TOY_RUN = [
    "env.name=toy", "env.max_steps=4", "env.num_workers=1", "train.iterations=3",
    "train.groups_per_batch=2", "train.group_size=3", "train.sft_epochs=1", "train.sft_batch_size=8",
    "train.max_response_tokens=6", "train.max_prompt_tokens=16", "model.hidden_size=32",
    "model.intermediate_size=64", "model.num_heads=2", "model.vocab_size=300", "eval.num_tasks=3",
    "eval.every=1", "progress=false",
    # phases are told apart by temperature below: no extra evaluation at the training temperature
    "eval.at_train_temperature=false",
]


def test_training_counts_truncation_per_iteration_and_warns_once(tmp_path, monkeypatch):
    """``train.max_prompt_tokens=16`` on the toy environment cuts every prompt: the metrics
    count this iteration's training steps (not a running total that also holds evaluation
    prompts), evaluation has its own count, and each phase warns once."""
    calls: list[tuple[float, list[Generation]]] = []
    original = LocalPolicy.generate

    def recording(self, prompts, **kw):
        gens = original(self, prompts, **kw)
        calls.append((kw["temperature"], gens))
        return gens

    monkeypatch.setattr(LocalPolicy, "generate", recording)
    cfg = load_config(None, [*TOY_RUN, f"output_dir={tmp_path / 'runs'}", f"train.warm_start_cache={tmp_path / 'ws'}"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = run_train(cfg)
    trunc = [w for w in caught if issubclass(w.category, PromptTruncationWarning)]
    assert len(trunc) == 2  # once for evaluation (before RL), once for training
    assert "evaluation prompt(s) at iteration 0" in str(trunc[0].message)
    assert "training prompt(s) at iteration 1" in str(trunc[1].message)

    # the generate calls, split into phases: eval(0), then per iteration: train..., eval
    phases: list[tuple[str, list[Generation]]] = []
    for temp, gens in calls:
        kind = "train" if temp == cfg.train.temperature else "eval"
        if phases and phases[-1][0] == kind:
            phases[-1][1].extend(gens)
        else:
            phases.append((kind, list(gens)))
    assert [k for k, _ in phases] == ["eval", "train", "eval", "train", "eval", "train", "eval"]
    metrics = read_jsonl(run.metrics_path)
    assert [m["iteration"] for m in metrics] == [1, 2, 3]
    for i, m in enumerate(metrics):
        train_gens, eval_gens = phases[1 + 2 * i][1], phases[2 + 2 * i][1]
        assert m["train/truncated_prompts"] == m["train/steps"] == len(train_gens)  # every prompt cut
        assert m["eval/truncated_prompts"] == len(eval_gens)
        assert m["train/truncated_responses"] == pytest.approx(np.mean([response_was_cut(g) for g in train_gens]))
        assert m["eval/truncated_responses"] == pytest.approx(np.mean([response_was_cut(g) for g in eval_gens]))
