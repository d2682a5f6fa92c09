"""The WebShop CPU preset's contract on the real 1,000-product setting (``--preset webshop_cpu``).

Not yet a learning test: the preset's RL does not move the held-out goals within its budget
(docs/webshop-cpu.md has the runs and the failure phases: the warm start wins about 60 % of them
and 40-60 % of the training episodes at temperature 1.0, and G2PO's 16 iterations leave the panel
where it was). A learning test like ``tests/test_learning.py`` awaits a setting that learns. What the preset
promises, and a broken preset violates, is tested here instead:

- every expert demonstration fits the model's budgets with the preset's tokenizer: no expert
  response (``search[<instruction>]`` is up to about 90 tokens) is cut by
  ``train.max_response_tokens`` and at most 1 % of prompts are cut by ``train.max_prompt_tokens``
  (a 32-token response limit cut every search: 99-100 % invalid actions, issue 52);
- a shrunk run of the preset (its first 8 training goals, a tiny model, one RL iteration) runs to
  its summary on the real catalogue and records what the preset is made of: first-step
  demonstrations, product ids and option values as single tokens, success and score with their
  95 % intervals before and after RL.

The real data come from ``../shared/data/webshop`` (``G2PO_SHARED_DATA``): skipped with the reason
when missing, failed in CI.
"""

from __future__ import annotations

import json

import pytest
from conftest import require_shared

from g2po_bench.algorithms.backends.common import demonstration_tasks, load_task_splits
from g2po_bench.algorithms.backends.local.model import build_tiny_model, load_model_and_tokenizer
from g2po_bench.algorithms.backends.local.transformers_policy import LocalPolicy
from g2po_bench.benchmarks.demos import collect_demonstrations
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.runconfig import load_config
from g2po_bench.runtime.workers import EnvPool
from g2po_bench.train import run_train

pytestmark = pytest.mark.shared_data

TINY = ["model.hidden_size=32", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=64",
        "model.vocab_size=512", "env.num_workers=1", "progress=false", "record_graphs=false"]


def test_expert_demonstrations_fit_the_presets_prompt_and_response_budgets(tmp_path):
    """Replays the instruction expert on every 24th of the preset's 2,400 demonstration goals and on
    every 2nd goal of its held-out panel, builds a tokenizer as the warm start does (a BPE of
    ``model.vocab_size`` on the demonstrations, the catalogue's ids and option values added) and
    counts tokens as the policy does (chat template, EOS after the response)."""
    data = require_shared("webshop")
    cfg = load_config(None, [f"env.data_dir={data}", "env.num_workers=1"], preset="webshop_cpu")
    bench = get_benchmark("webshop")
    train_tasks, panel = load_task_splits(cfg, bench)
    with EnvPool(bench, cfg.env, 1) as pool:
        demos = {name: collect_demonstrations(pool, bench, tasks, max_steps=cfg.env.max_steps,
                                              history_length=cfg.env.history_length, prompt_style=cfg.env.prompt)[0]
                 for name, tasks in (("training", demonstration_tasks(cfg, train_tasks)[::24]), ("held-out", panel[::2]))}
    corpus = [d.prompt for d in demos["training"]] + [d.response for d in demos["training"]]
    build_tiny_model(tmp_path / "m", corpus, vocab_size=cfg.model.vocab_size, hidden_size=32, num_layers=1,
                     num_heads=2, intermediate_size=64, words=bench.tokenizer_words(cfg.env))
    model, tok = load_model_and_tokenizer(tmp_path / "m", device="cpu")
    policy = LocalPolicy(model, tok, max_prompt_tokens=10 ** 6)
    for name, ds in demos.items():
        assert len(ds) >= 400, (name, len(ds))  # about 5 steps a goal
        responses = [len(tok(d.response, add_special_tokens=False)["input_ids"]) + 1 for d in ds]
        prompts = [len(policy.encode_prompt(d.prompt)) for d in ds]
        assert max(responses) <= cfg.train.max_response_tokens, (name, max(responses))
        cut = sum(p > cfg.train.max_prompt_tokens for p in prompts)
        assert cut <= 0.01 * len(ds), (name, cut, max(prompts))
        assert max(prompts) + cfg.train.max_response_tokens <= cfg.model.max_position_embeddings
        searches = [r for d, r in zip(ds, responses) if d.response.startswith("<think></think><action>search[")]
        assert max(searches) > 60  # the instruction copied whole: longer than the former 32-token limit


def test_a_shrunk_preset_run_reaches_its_summary_on_the_real_catalogue(tmp_path):
    data = require_shared("webshop")
    cfg = load_config(None, [
        f"env.data_dir={data}", *TINY, "env.max_train_tasks=8", "train.sft_max_tasks=4",
        "train.sft_first_step_tasks=4", "train.sft_epochs=1", "train.iterations=1", "train.groups_per_batch=2",
        "train.group_size=2", "eval.num_tasks=4", f"output_dir={tmp_path / 'runs'}",
        f"train.warm_start_cache={tmp_path / 'ws'}"], preset="webshop_cpu")
    assert (cfg.env.prompt, cfg.env.webshop_expert, cfg.env.eval_split, cfg.algorithm.name) == \
        ("compact", "instruction", "test", "g2po")
    root = run_train(cfg).root
    setup = json.loads((root / "setup.json").read_text())
    assert setup["demo/tasks"] == 4 and setup["demo/first_steps"] == 4  # the other 4 training goals' searches
    ev = json.loads((root / "eval.json").read_text())
    for when in ("before", "final"):
        e = ev[when]
        assert e["num_episodes"] == 4 and len(e["episode_scores"]) == 4
        lo, hi = e["score_ci"]
        assert lo <= e["score"] <= hi and e["score"] == pytest.approx(sum(e["episode_scores"]) / 4)
        assert e["success_ci"][0] <= e["success_rate"] <= e["success_ci"][1]
    assert json.loads((root / "status.json").read_text())["state"] == "done"
    _, tok = load_model_and_tokenizer(root / "checkpoints" / "latest" / "policy", device="cpu")
    asin = get_benchmark("webshop").tokenizer_words(cfg.env)[0]
    assert asin in tok.convert_ids_to_tokens(tok(f"click[{asin}]", add_special_tokens=False)["input_ids"])
