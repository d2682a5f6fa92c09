"""WebShop on a CPU (``--preset webshop_cpu``, the real 1,000-product setting): RL learns, and the
preset keeps its contract.

**The learning test.** The preset's RL (G2PO, 16 iterations of 8 groups x 8, lr 1e-4) starts from
the preset's hasty warm start, committed in ``results/webshop_cpu/warm_start`` (building it takes
607 s on 2 idle cores): half of its demonstrations bought before their last option click,
so it misses a value the instruction names and wins about 4 % of the 200 held-out goals at 0.4.
RL must unlearn that habit on the training goals and raise held-out success, paired by goal
(:func:`learning_verdict`): at least +5 points, a one-sided paired z of at least 2.33 (1 %).
Measured on the 2-core AMD EPYC VM, held-out success before -> after RL, the change with its
paired 95 % bootstrap interval (seeds 1 and 2, and GRPO: docs/webshop-cpu.md):

==========================  ===========================================================
run                         held-out success, score
==========================  ===========================================================
this test, AVX-512 kernels  3.5 -> 17.5 % (+14.0 [+9.0, +19.0]), score 71.0 -> 63.9
this test, AVX2 kernels     the same evaluations, episode by episode (its losses differ
                            by up to 6e-8: other kernels, the same samples)
==========================  ===========================================================

(commit ``fe75a3a``, 2 torch threads; AVX2: ``ATEN_CPU_CAPABILITY=avx2`` on the same machine.)
Without learning (``train.lr=1e-12``) the final evaluation equals the first (the evaluation is
seeded), the rise is 0 and the test fails; check with
``G2PO_TEST_LEARNING_OVERRIDES="train.lr=1e-12" python -m pytest tests/test_learning_webshop.py``.
Cost: 16 iterations and two evaluations of 200 goals (152 s and 21 s in a fresh run of the preset
on the idle 2-core VM; docs/webshop-cpu.md).

**The contract.** What the preset promises, and a broken preset violates:

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
import math
import os
from pathlib import Path

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


WARM_START = Path(__file__).resolve().parents[1] / "results" / "webshop_cpu" / "warm_start" / "policy"
MIN_RISE = 0.05  # held-out success after RL minus before, paired by goal, in success-rate units
MIN_Z = 2.33  # one-sided 1 % for the paired rise
MAX_BEFORE = 0.25  # the hasty warm start leaves room


def learning_verdict(before: dict[str, int], final: dict[str, int]) -> list[str]:
    """What keeps one run's held-out evaluations from showing that RL raised success; empty when
    they show it.

    Args:
        before, final: success (0 or 1) of each held-out goal, by task id, before and after RL
            (the same goals).

    The rise is the mean of the per-goal differences ``d = final - before``; its standard error the
    paired one, ``sd(d) / sqrt(n)`` (``sd`` with ``n - 1``). Needs before-RL success at most
    :data:`MAX_BEFORE`, a rise of at least :data:`MIN_RISE` and ``z = rise / se`` of at least
    :data:`MIN_Z`.
    """
    assert before.keys() == final.keys(), "the evaluations before and after RL played other goals"
    d = [final[t] - before[t] for t in before]
    n = len(d)
    rise = sum(d) / n
    sd = math.sqrt(sum((x - rise) ** 2 for x in d) / (n - 1))
    z = rise / (sd / math.sqrt(n)) if sd > 0 else (math.inf if rise > 0 else 0.0)
    p0, p1 = sum(before.values()) / n, sum(final.values()) / n
    where = f"({n} held-out goals: {p0:.3f} -> {p1:.3f})"
    out = []
    if p0 > MAX_BEFORE:
        out.append(f"the warm start leaves no room: {p0:.3f} > {MAX_BEFORE} before RL {where}")
    if rise < MIN_RISE or z < MIN_Z:
        out.append(f"held-out success rose by {rise:+.3f} (paired z = {z:.2f}); needs >= {MIN_RISE} and z >= {MIN_Z} "
                   f"{where}")
    return out


def test_rl_raises_held_out_success_from_the_presets_hasty_warm_start(tmp_path):
    data = require_shared("webshop")
    extra = os.environ.get("G2PO_TEST_LEARNING_OVERRIDES", "").split()  # e.g. train.lr=1e-12: must fail
    cfg = load_config(None, [f"env.data_dir={data}", f"model.path={WARM_START}", "model.item_tokens=false", "train.sft_epochs=0",
                             f"output_dir={tmp_path / 'runs'}", "progress=false", "record_graphs=false", *extra],
                      preset="webshop_cpu")
    assert (cfg.algorithm.name, cfg.train.iterations, cfg.eval.num_tasks) == ("g2po", 16, 200)
    ev = json.loads((run_train(cfg).root / "eval.json").read_text())
    before, final = ({task: ok for task, ok in ev[when]["episodes"]} for when in ("before", "final"))
    assert len(before) == 200
    assert learning_verdict(before, final) == []


def test_the_verdict_accepts_a_paired_rise_and_rejects_no_learning_and_churn():
    """Hand-computed on 200 goals, goals 0-9 won before RL. After: goals 4-34 won (31, as seed 1 of
    the table): 4 lost, 25 gained, rise 21/200 = 0.105, sd(d) = sqrt((25 * 0.895^2 + 4 * 1.105^2 +
    171 * 0.105^2) / 199) = 0.36694, se = 0.025947, z = 4.047. Churn, goals 10-29 won after: 10 lost,
    20 gained, rise 0.05 but sd(d) = sqrt((20 * 0.95^2 + 10 * 1.05^2 + 170 * 0.05^2) / 199) = 0.38502,
    z = 1.837: rejected. No learning: the same successes before and after."""
    goals = [f"webshop/goal_{i:05d}" for i in range(200)]

    def won(lo, hi):
        return {g: int(lo <= i < hi) for i, g in enumerate(goals)}

    before = won(0, 10)
    assert learning_verdict(before, won(4, 35)) == []
    assert learning_verdict(before, won(10, 30)) == [
        "held-out success rose by +0.050 (paired z = 1.84); needs >= 0.05 and z >= 2.33 (200 held-out goals: "
        "0.050 -> 0.100)"]
    assert learning_verdict(before, dict(before))[0].startswith("held-out success rose by +0.000 (paired z = 0.00)")
    assert "leaves no room" in learning_verdict(won(0, 60), won(0, 100))[0]
