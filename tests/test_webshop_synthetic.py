"""WebShop on the embedded default (synthetic catalogue, ``env.data_dir`` None) end to end:
generation, splits, the expert through the worker-process harness, the verl-agent prompt,
expert responses and the response parser."""

from __future__ import annotations

import pytest

import g2po_bench.benchmarks.webshop as ws
from g2po_bench.benchmarks.parsing import parse_response
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.webshop.expert import play_expert
from g2po_bench.benchmarks.webshop.prompt import MAX_PROMPT_CHARS, format_observation
from g2po_bench.benchmarks.webshop.synthetic import generate_catalogue
from g2po_bench.core.config import EnvConfig
from g2po_bench.core.protocol import Observation


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    return EnvConfig(name="webshop", generated_dir=str(root / "alfworld_generated"))


def test_generated_catalogue_files_splits_and_determinism(cfg, tmp_path):
    sizes = {s: len(ws.load_tasks(cfg, s)) for s in ("test", "eval", "train", "valid_seen")}
    n_train, n_eval = cfg.generated_train_games, cfg.generated_eval_games  # the config decides
    assert sizes == {"test": n_eval, "eval": n_eval, "train": n_train, "valid_seen": n_eval}
    src = ws.source_for(cfg)
    assert src.generated and "webshop_generated" in src.products
    train_ids = {t.task_id for t in ws.load_tasks(cfg, "train")}
    assert not train_ids & {t.task_id for t in ws.load_tasks(cfg, "test")}
    # same settings, another folder: byte-identical files
    other = EnvConfig(name="webshop", generated_dir=str(tmp_path / "x" / "alfworld_generated"))
    a, b = ws.source_for(cfg), ws.source_for(other)
    for f in ("products", "attributes"):
        assert open(getattr(a, f), "rb").read() == open(getattr(b, f), "rb").read()
    assert generate_catalogue(1)[0][0].asin != generate_catalogue(0)[0][0].asin
    bigger = EnvConfig(name="webshop", generated_dir=cfg.generated_dir, generated_train_games=200)
    assert len(ws.load_tasks(bigger, "train")) == 200


def test_expert_wins_every_synthetic_goal(cfg):
    tasks = ws.load_tasks(cfg, "all")
    env = ws.make_env(cfg)
    results = [play_expert(env, t) for t in tasks]
    assert all(r.won for r in results), [r.failure for r in results if not r.won][:3]
    assert max(len(r.actions) for r in results) <= cfg.max_steps


def test_synthetic_default_through_the_worker_harness(cfg):
    from g2po_bench.benchmarks.demos import collect_demonstrations
    from g2po_bench.runtime.workers import EnvPool

    tasks = ws.load_tasks(cfg, "train")[:6]
    with EnvPool(get_benchmark("webshop"), cfg, num_workers=2) as pool:
        demos, win_rate = collect_demonstrations(pool, get_benchmark("webshop"), tasks, max_steps=cfg.max_steps,
                                                 history_length=2)
        assert win_rate == 1.0
        assert len(demos) == sum(len(ws.expert_actions(t)) for t in tasks)
        for d in demos:
            assert "Your task is to: " in d.prompt and d.prompt.endswith("within <action> </action> tags.\n")
            parsed = parse_response(d.response)
            assert parsed.valid
        first = [d for d in demos if d.task_id == tasks[0].task_id]
        assert [parse_response(d.response).action for d in first] == [a.lower() for a in ws.expert_actions(tasks[0])]
        assert "Prior to this step, you have already taken 1 step(s)" in first[1].prompt
        # the history shows the action as a rollout's does: as the agent reads it (lowercase)
        task = next(t for t in tasks if ws.expert_actions(t)[0] != ws.expert_actions(t)[0].lower())
        said = ws.expert_actions(task)[0]  # search[Find me ...]
        second = [d for d in demos if d.task_id == task.task_id][1]
        assert f"Action 1: '{said.lower()}'" in second.prompt and said not in second.prompt
        # a second round in the same workers: resets reuse the loaded catalogue
        obs = pool.reset([(0, tasks[1])])
        assert obs[0].text.startswith("WebShop [SEP] Instruction: [SEP] ")


# --------------------------------------------------------------------------- prompt
def _obs(text, instruction="buy a hat", actions=("search[<your query>]", "click[search]"), page="start"):
    return Observation(text=text, instruction=instruction, admissible_actions=list(actions),
                       state_key="", info={"page": page})


def test_format_observation():
    text = "Instruction: [SEP] buy a hat [SEP] Back to Search [SEP] Page 1 (Total results: 2)"
    assert format_observation(text, "buy a hat") == "'Back to Search' [SEP] 'Page 1 (Total results: 2)'"
    assert format_observation("WebShop\nInstruction: \nbuy a hat\n", "buy a hat") == "WebShop\nInstruction: \nbuy a hat\n"
    assert format_observation(format_observation(text, "buy a hat"), "buy a hat") == format_observation(text, "buy a hat")


def test_build_prompt_first_step_exact():
    obs = _obs("WebShop [SEP] Instruction: [SEP] buy a hat [SEP] Search")
    expected = (
        "\nYou are an expert autonomous agent operating in the WebShop e\u2011commerce environment. \n"
        "Your task is to: buy a hat.\n"
        "Your current observation is: 'Search'.\n"
        "Your admissible actions of the current situation are: \n[\n'search[<your query>]',\n'click[search]',\n].\n\n"
        "Now it's your turn to take one action for the current step.\n"
        "You should first reason step-by-step about the current situation, then think carefully which admissible "
        "action best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> tags. \n"
        "Once you've finished your reasoning, you should choose an admissible action for current step and present it "
        "within <action> </action> tags.\n")
    assert ws.build_prompt(obs, [], 0) == expected
    assert ws.build_prompt(obs, [("x", "y")], 3, history_length=0) == expected


def test_build_prompt_with_history():
    start = "WebShop [SEP] Instruction: [SEP] buy a hat [SEP] Search"
    results = "Instruction: [SEP] buy a hat [SEP] Back to Search [SEP] Page 1 (Total results: 0) [SEP] Next >"
    history = [(start, "search[hat]"), (results, "click[next >]"), (results, "click[< prev]")]
    obs = _obs(results, actions=["click[back to search]", "click[next >]"], page="results")
    p = ws.build_prompt(obs, history, 3, history_length=2)
    assert ("Prior to this step, you have already taken 3 step(s). Below are the most recent 2 observations and the "
            "corresponding actions you took: [Observation 2: ''Back to Search' [SEP] 'Page 1 (Total results: 0)' [SEP] "
            "'Next >'', Action 2: 'click[next >]']\n[Observation 3: ''Back to Search' [SEP] 'Page 1 (Total results: 0)' "
            "[SEP] 'Next >'', Action 3: 'click[< prev]']\nYou are now at step 4 and your current observation is: "
            "'Back to Search' [SEP] 'Page 1 (Total results: 0)' [SEP] 'Next >'.\n") in p
    assert "'click[back to search]',\n'click[next >]',\n]." in p
    long_obs = _obs("Instruction: [SEP] buy a hat [SEP] " + "x" * MAX_PROMPT_CHARS)
    assert "Prior to this step" not in ws.build_prompt(long_obs, history, 3)


def test_expert_response_parses_back_to_the_action():
    for action, page in [("search[a red hat, size: l]", "start"), ("click[b0abc12345]", "results"),
                         ("click[navy blue]", "item"), ("click[buy now]", "item"), ("click[next >]", "results"),
                         ("click[< prev]", "item"), ("click[description]", "item")]:
        text = ws.expert_response(action, _obs("", page=page))
        assert text.startswith("<think>") and text.endswith(f"<action>{action}</action>")
        parsed = parse_response(text)
        assert parsed.valid and parsed.action == action.lower()


def test_text_rich_mode_and_raw_state_key_on_the_default(cfg):
    task = ws.load_tasks(cfg, "test")[0]
    rich = ws.make_env(EnvConfig(name="webshop", generated_dir=cfg.generated_dir, webshop_observation_mode="text_rich"))
    obs = rich.reset(task)
    assert obs.text.startswith("WebShop\nInstruction: \n") and obs.text.endswith("[button] Search [button_]\n")
    raw = ws.make_env(EnvConfig(name="webshop", generated_dir=cfg.generated_dir, state_key="raw"))
    obs = raw.reset(task)
    assert obs.state_key == obs.text
    assert ws.TASK_TYPES == ("webshop",)


# --------------------------------------------------------------------------- evaluation score
class _BuyOrSearchPolicy:
    """Plays the expert's actions for the goals in ``buyers`` (recognised by the instruction in the
    prompt, the step by its step counter) and only searches for every other goal."""

    def __init__(self, buyers: dict[str, list[str]]):
        self.buyers = buyers

    def generate(self, prompts, *, temperature, max_new_tokens, top_p=1.0, seed=None):
        import re

        from g2po_bench.runtime.policy_protocol import Generation

        out = []
        for p in prompts:
            instruction = re.search(r"Your task is to: (.*)\.\n", p).group(1)
            taken = re.search(r"already taken (\d+) step", p)
            t = int(taken.group(1)) if taken else 0
            plan = self.buyers.get(instruction)
            action = plan[t] if plan is not None else "search[something else]"
            out.append(Generation(f"<think>go</think><action>{action}</action>"))
        return out


def test_score_counts_every_episode_a_non_buyer_scores_zero(cfg):
    """Issue 39, item 1: 6 test goals, the expert buys for 3 and a searching policy plays the
    other 3 (they never buy): score 50.00 with success 0.5 (the reference scores every episode,
    a non-buyer as 0), not 100.00 over the buyers only."""
    from g2po_bench.algorithms.backends.common import rollout_metrics
    from g2po_bench.benchmarks.evaluation import evaluate
    from g2po_bench.benchmarks.rollout import collect_rollouts
    from g2po_bench.runtime.workers import EnvPool

    env = ws.make_env(cfg)
    by_instruction = {}
    for t in ws.load_tasks(cfg, "test"):
        by_instruction.setdefault(env.reset(t).instruction, t)
    tasks = sorted(list(by_instruction.values())[:6], key=lambda t: t.task_id)
    assert len(tasks) == 6
    buyers = {env.reset(t).instruction: [a.lower() for a in ws.expert_actions(t)] for t in tasks[:3]}
    max_steps = max(len(p) for p in buyers.values())
    with EnvPool(get_benchmark("webshop"), cfg, num_workers=1) as pool:
        ev = evaluate(_BuyOrSearchPolicy(buyers), pool, ws.BENCHMARK, tasks, iteration=0, max_steps=max_steps,
                      temperature=0.4, max_new_tokens=8, seed=0)
        rb = collect_rollouts(_BuyOrSearchPolicy(buyers), pool, ws.BENCHMARK, tasks, group_size=1,
                              max_steps=max_steps,
                              temperature=1.0, max_new_tokens=8, seed=0)
    # training rollouts and their metrics count every episode the same way
    assert [t["score"] for t in rb.trajectories] == [100.0] * 3 + [0.0] * 3
    assert rollout_metrics(rb)["train/score"] == pytest.approx(50.0)
    assert ev["success_rate"] == 0.5 and ev["num_episodes"] == 6
    assert ev["score"] == pytest.approx(50.0)
    assert sorted(ev["episode_scores"]) == [0.0, 0.0, 0.0, 100.0, 100.0, 100.0]
    # the score's interval is the success interval's bootstrap, over the episode scores
    from g2po_bench.algorithms.backends.progress import format_rate_ci
    from g2po_bench.core.stats import bootstrap_ci

    lo, hi = bootstrap_ci(ev["episode_scores"], confidence=0.95, n_boot=2000, seed=0)
    assert ev["score_ci"] == [lo, hi] and 0.0 <= lo < 50.0 < hi <= 100.0
    s_lo, s_hi = ev["success_ci"]
    assert format_rate_ci(ev) == (f"50.0 % [{100 * s_lo:.1f}, {100 * s_hi:.1f}] (n=6), "
                                  f"score 50.0 [{lo:.1f}, {hi:.1f}]")


def test_hasty_expert_leaves_out_the_last_option_and_loses(cfg):
    """``train.sft_detour_prob`` on WebShop: a hasty demonstration buys before its last option
    click; played through the environment the purchase misses a named value and fails, and the
    demonstrations drawn hasty are one step shorter."""
    import numpy as np

    from g2po_bench.benchmarks.demos import collect_demonstrations
    from g2po_bench.runtime.workers import EnvPool

    tasks = ws.load_tasks(cfg, "train")[:12]
    plans = [ws.expert_actions(t) for t in tasks]
    with_options = [i for i, p in enumerate(plans) if len(p) > 3]
    assert with_options, "the synthetic goals name options"
    env = ws.make_env(cfg)
    for i in with_options:
        hasty = ws.expert_detour(plans[i], None, np.random.default_rng(0))
        assert hasty == plans[i][:-2] + plans[i][-1:]  # [..., click[<last value>], click[buy now]] -> [..., buy]
        env.reset(tasks[i])
        for action in hasty:
            obs = env.step(action)
        assert obs.done and not obs.won and 0.0 < obs.reward < 1.0
    for plain in (["search[x]", "click[b00]", "click[buy now]"], ["search[x]", "click[next >]", "click[b00]",
                  "click[buy now]"], ["search[x]"]):
        assert ws.expert_detour(plain, None, np.random.default_rng(0)) == plain  # no option to leave out
    paged = ["search[x]", "click[next >]", "click[b00]", "click[red]", "click[buy now]"]
    assert ws.expert_detour(paged, None, None) == ["search[x]", "click[next >]", "click[b00]", "click[buy now]"]
    with EnvPool(get_benchmark("webshop"), cfg, num_workers=1) as pool:
        demos, win_rate = collect_demonstrations(pool, get_benchmark("webshop"), tasks, max_steps=cfg.max_steps,
                                                 history_length=2, detour_prob=1.0)
    assert win_rate == pytest.approx(1 - len(with_options) / len(tasks))
    assert len(demos) == sum(len(p) for p in plans) - len(with_options)
