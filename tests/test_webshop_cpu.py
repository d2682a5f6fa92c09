"""The parts of the WebShop CPU preset (``--preset webshop_cpu``, docs/webshop-cpu.md): the compact
prompt, the instruction expert, the warm start's first-step demonstrations, length-sorted SFT
micro-batches, the tokenizer's item ids, refused actions, and the preset itself."""

from __future__ import annotations

import pytest
import torch
from conftest import require_shared

import g2po_bench.benchmarks.webshop as ws
from g2po_bench.algorithms.backends.common import demonstration_tasks, first_step_tasks
from g2po_bench.algorithms.backends.local import sft
from g2po_bench.algorithms.backends.local.model import (
    build_tiny_model,
    load_model_and_tokenizer,
    train_tokenizer,
)
from g2po_bench.benchmarks.parsing import parse_response
from g2po_bench.benchmarks.webshop.catalog import default_cache_root, get_catalog
from g2po_bench.benchmarks.webshop.expert import _clean_query, play_expert
from g2po_bench.benchmarks.webshop.prompt import build_compact_prompt, page_text
from g2po_bench.core.config import ConfigError, EnvConfig
from g2po_bench.core.protocol import Observation
from g2po_bench.runconfig import load_config

RESULTS = ("Instruction: [SEP] buy a red hat [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > "
           "[SEP] B07XTK3P89 [SEP] Red Wool Hat [SEP] $9.99 [SEP] B000000001 [SEP] Blue Cap [SEP] $5.00")
ITEM = ("Instruction: [SEP] buy a red hat [SEP] Back to Search [SEP] < Prev [SEP] color [SEP] red [SEP] blue "
        "[SEP] Red Wool Hat [SEP] Price: $9.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews "
        "[SEP] Buy Now")


def _obs(text, page, instruction="buy a red hat"):
    return Observation(text=text, instruction=instruction, admissible_actions=[], state_key="", info={"page": page})


# --------------------------------------------------------------------------- compact prompt
def test_compact_prompt_is_the_instruction_the_last_actions_and_the_page():
    start = _obs("WebShop [SEP] Instruction: [SEP] buy a red hat [SEP] Search", "start")
    assert ws.build_prompt(start, [], 0, 4, style="compact") == "Instruction: buy a red hat\nPage: Search\n>"
    history = [("WebShop [SEP] Instruction: [SEP] buy a red hat [SEP] Search", "search[buy a red hat]"),
               (RESULTS, "click[b07xtk3p89]"), (ITEM, "click[red]")]
    item = _obs(ITEM, "item")
    assert ws.build_prompt(item, history, 3, 4, style="compact") == (
        "Instruction: buy a red hat\n"
        "Actions: search[buy a red hat] | click[b07xtk3p89] | click[red]\n"
        "Page: Back to Search [SEP] < Prev [SEP] color [SEP] red [SEP] blue [SEP] Red Wool Hat [SEP] Price: $9.99 "
        "[SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now\n>")
    # older actions left out are marked; history_length 0 shows none
    assert "Actions: ... | click[b07xtk3p89] | click[red]\n" in build_compact_prompt(item, history, 3, 2)
    assert "Actions" not in build_compact_prompt(item, history, 3, 0)
    # a text_rich observation (the instruction is not one of its parts) is shown whole
    assert page_text("WebShop\nInstruction: \nbuy a red hat\n", "buy a red hat") == "WebShop\nInstruction: \nbuy a red hat\n"
    with pytest.raises(ValueError, match="history has 3 entries but only 2"):
        build_compact_prompt(item, history, 2)
    with pytest.raises(ValueError, match="unknown WebShop prompt style 'short'"):
        ws.build_prompt(item, history, 3, style="short")


def test_compact_expert_response_copies_the_product_id_as_the_page_shows_it():
    text = ws.expert_response("click[b07xtk3p89]", _obs(RESULTS, "results"), style="compact")
    assert text == "<think></think><action>click[B07XTK3P89]</action>"
    parsed = parse_response(text, projection="webshop")
    assert parsed.valid and parsed.action == "click[b07xtk3p89]"  # what the environment receives
    assert ws.expert_response("click[red]", _obs(ITEM, "item"), style="compact") == \
        "<think></think><action>click[red]</action>"
    assert ws.expert_response("click[b07xtk3p89]", _obs(RESULTS, "results")).startswith(
        "<think>This result matches the instruction best, so I open it.</think>")  # the reference style is unchanged


# --------------------------------------------------------------------------- instruction expert
@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    return EnvConfig(name="webshop", generated_dir=str(tmp_path_factory.mktemp("c") / "alfworld_generated"),
                     webshop_expert="instruction")


def test_instruction_expert_searches_the_instruction_and_wins_the_synthetic_goals(synthetic):
    tasks = ws.load_tasks(synthetic, "test")
    assert all(t.payload["expert"] == "instruction" for t in tasks)
    env = ws.make_env(synthetic)
    for t in tasks[:20]:
        r = play_expert(env, t, "instruction")
        assert r.won, r.failure
        assert r.actions[0] == f"search[{_clean_query(t.payload['instruction_text'])}]"
        assert ws.expert_actions(t) == r.actions  # the payload's expert
    reference = EnvConfig(name="webshop", generated_dir=synthetic.generated_dir)
    assert "expert" not in ws.load_tasks(reference, "test")[0].payload  # reference payloads as before
    with pytest.raises(ValueError, match="unknown WebShop expert 'oracle'"):
        play_expert(env, tasks[0], "oracle")
    with pytest.raises(ConfigError, match="env.webshop_expert"):
        load_config(None, ["env.name=webshop", "env.webshop_expert=oracle"])


@pytest.mark.shared_data
def test_instruction_expert_on_the_real_1k_goals():
    """Measured on the first 200 test goals (spaCy nouns, the reference reward): 178 won, 159 of
    them by opening the target itself; the others bought a best product of the first page that
    still misses a requirement (rewards 0.04-0.90)."""
    cfg = EnvConfig(name="webshop", data_dir=str(require_shared("webshop")), webshop_expert="instruction")
    tasks = ws.load_tasks(cfg, "test")[:200]
    env = ws.make_env(cfg)
    results = [play_expert(env, t, "instruction") for t in tasks]
    assert sum(r.won for r in results) == 178
    assert sum(r.won and r.page == 1 for r in results) == 159
    assert all(r.actions[0] == f"search[{_clean_query(t.payload['instruction_text'])}]"
               for r, t in zip(results, tasks))
    assert max(len(r.actions) for r in results) == 6
    assert all(r.failure.startswith("bought with reward") for r in results if not r.won)


# --------------------------------------------------------------------------- training reward
def test_the_training_reward_is_the_success_or_the_graded_score(synthetic):
    """``env.webshop_train_reward``: the reference pays 10 (``algorithm.success_reward``) for a
    purchase that scores 1 and 0 otherwise; ``score`` pays 10 x the purchase reward. Buying the
    target without its options scores below 1 on a goal that names option values."""
    from dataclasses import replace

    from g2po_bench.algorithms.backends.local.warm_start import warm_start_key

    bench = ws.BENCHMARK
    tasks = [t for t in ws.load_tasks(synthetic, "test") if t.payload["goal_options"]][:5]
    assert tasks
    for mode in ("success", "score"):
        env = ws.make_env(replace(synthetic, webshop_train_reward=mode))
        for t in tasks:
            plan = play_expert(env, t, "instruction").actions  # search, click the product, options, buy
            assert plan[-1] == "click[buy now]"
            env.reset(t)
            steps = [env.step(a) for a in [*plan[:2], plan[-1]]]  # the options left out
            bought = steps[-1]
            assert bought.done and 0.0 < bought.reward < 1.0 and not bought.won
            assert [bench.step_reward(o, 10.0) for o in steps[:-1]] == [0.0, 0.0]
            assert bench.step_reward(bought, 10.0) == (pytest.approx(10.0 * bought.reward) if mode == "score" else 0.0)
            env.reset(t)
            won = [env.step(a) for a in plan][-1]
            assert won.won and bench.step_reward(won, 10.0) == 10.0
    # the reference reward of an observation without the field (older workers): 10 for a win
    assert bench.step_reward(Observation(text="", instruction="", admissible_actions=[], state_key="", reward=1.0,
                                         done=True, won=True), 10.0) == 10.0
    with pytest.raises(ConfigError, match="env.webshop_train_reward.*choose success or score"):
        load_config(None, ["env.name=webshop", "env.webshop_train_reward=partial"])
    with pytest.raises(ValueError, match="unknown WebShop training reward 'partial'"):
        ws.WebShopEnv(train_reward="partial")
    # RL's reward is not the warm start's business: one cached warm start serves both
    base = load_config(None, ["env.name=webshop"])
    assert warm_start_key(base) == warm_start_key(load_config(None, ["env.name=webshop", "env.webshop_train_reward=score"]))


# --------------------------------------------------------------------------- refused actions
def test_an_invalid_action_is_refused_and_the_gpu_presets_never_stop_on_refusals(synthetic):
    env = ws.make_env(synthetic)
    obs = env.reset(ws.load_tasks(synthetic, "test")[0])
    assert obs.info["refused"] is False
    bad = env.step("click[no such button]")
    assert bad.info["valid"] is False and bad.info["refused"] is True and bad.text == obs.text
    assert env.step("search[hat]").info["refused"] is False
    for preset in ("webshop_1.5b", "webshop_7b"):
        cfg = load_config(None, ["model.path=/", "env.data_dir=/"], preset=preset)
        assert cfg.env.stop_after_refusals == 0


# --------------------------------------------------------------------------- warm start
def test_first_step_tasks_are_evenly_spread_and_left_out_of_the_whole_demonstrations(synthetic):
    cfg = load_config(None, ["env.name=webshop", "train.sft_max_tasks=10", "train.sft_first_step_tasks=25"])
    tasks = ws.load_tasks(synthetic, "train")[:100]
    whole = {t.task_id for t in demonstration_tasks(cfg, tasks)}
    firsts = first_step_tasks(cfg, tasks)
    assert len(whole) == 10 and len(firsts) == 25 and not whole & {t.task_id for t in firsts}
    assert [t.task_id for t in firsts] == [t.task_id for t in first_step_tasks(cfg, tasks)]  # deterministic
    cfg.train.sft_first_step_tasks = 500
    assert len(first_step_tasks(cfg, tasks)) == 90  # all the others
    cfg.train.sft_first_step_tasks = 0
    assert first_step_tasks(cfg, tasks) == []


def test_sft_micro_batches_take_the_same_optimizer_steps(tmp_path):
    """Length-sorted micro-batches accumulate the gradient of the batch's token-mean loss: the
    weights after 3 steps match those of whole batches (float32, up to summation order)."""
    corpus = ["search[a red hat]", "click[b07xtk3p89]", "Instruction: buy a red hat\nPage: Search\n>"]
    build_tiny_model(tmp_path / "m", corpus * 5, vocab_size=300, hidden_size=32, num_layers=1, num_heads=2,
                     intermediate_size=64)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 290, (n,), generator=g).tolist() for n in (3, 40, 7, 25, 11, 2)]
    responses = [torch.randint(3, 290, (n,), generator=g).tolist() for n in (4, 1, 6, 2, 3, 5)]
    weights = []
    for micro in (0, 2):
        model, tok = load_model_and_tokenizer(tmp_path / "m", device="cpu")
        stats = sft.supervised_finetune(model, tok, prompts, responses, epochs=1, lr=1e-2, batch_size=3, seed=0,
                                        micro_batch_size=micro)
        weights.append((stats, [p.detach().clone() for p in model.parameters()]))
    (a, wa), (b, wb) = weights
    assert a["sft/steps"] == b["sft/steps"] == 2
    assert a["sft/loss_first"] == pytest.approx(b["sft/loss_first"], rel=1e-5)
    assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(wa, wb))


def test_item_ids_are_single_tokens():
    words = ["B07XTK3P89", "b07xtk3p89", "B07XTK3P89", "x-large", "xx-large", "red"]
    tok = train_tokenizer(["click[B07XTK3P89] a red hat"] * 20, 300, words=words)
    text = "click[B07XTK3P89] then click[b07xtk3p89], size: xx-large, and color: red, reddish x-large"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    pieces = tok.convert_ids_to_tokens(ids)
    assert {"B07XTK3P89", "b07xtk3p89", "xx-large", "x-large", "red"} <= set(pieces)
    assert pieces.count("red") == 1 and pieces.count("x-large") == 1  # whole words only, the longest match
    assert tok.decode(ids) == text
    plain = train_tokenizer(["click[B07XTK3P89] a red hat"] * 20, 300)
    assert len(plain("B07XTK3P89", add_special_tokens=False)["input_ids"]) > 1
    assert len(tok) == len(plain) + 4  # duplicates once; "red", a token of the BPE already, keeps its id


def test_webshop_tokenizer_words_are_the_catalogues_ids_in_both_cases_and_its_option_values(synthetic):
    words = ws.BENCHMARK.tokenizer_words(synthetic)
    catalog = get_catalog(ws.source_for(synthetic), cache_root=str(default_cache_root(synthetic.cache_dir)))
    asins = [p.asin for p in catalog.products]
    values = list(dict.fromkeys(v for p in catalog.products for vs in p.options.values() for v in vs))
    assert words[:2] == [asins[0], asins[0].lower()] and words == [*words[:2 * len(asins)], *values]
    assert len(words) == 2 * len(asins) + len(values) and values
    with pytest.raises(ConfigError, match="model.item_tokens"):
        load_config(None, ["env.name=webshop", "model.item_tokens=true", "model.path=/"])
