"""WebShop environment on the real 1k products (../shared/data/webshop): the observation
strings of every page, the action semantics, the reward on hand-computed cases, and the
scripted expert through the environment."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import require_shared

import g2po_bench.benchmarks.webshop as ws
from g2po_bench.benchmarks.webshop.expert import play_expert
from g2po_bench.benchmarks.webshop.goals import Goal
from g2po_bench.benchmarks.webshop.reward import purchase_reward
from g2po_bench.core.config import EnvConfig
from g2po_bench.core.protocol import Task

pytestmark = pytest.mark.shared_data


def shared_webshop() -> Path:
    """The shared WebShop data (``tests/conftest.py``: skipped outside CI, failed in CI
    when missing)."""
    require_shared("webshop/resources_1k/documents.jsonl")
    return require_shared("webshop")


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    """Golden values below use the deterministic noun heuristic (``env.webshop_nouns``) and
    the reference reward (``env.webshop_reward=original``, the default)."""
    cache = tmp_path_factory.mktemp("cache")
    return EnvConfig(name="webshop", data_dir=str(shared_webshop()),
                     generated_dir=str(cache / "alfworld_generated"), webshop_nouns="heuristic")


@pytest.fixture(scope="module")
def tasks(cfg):
    return ws.load_tasks(cfg, "all")


@pytest.fixture(scope="module")
def pumps(tasks) -> Task:
    """Goal 19: women's pumps B092VDY5MF, attributes closed toe + rubber sole, options
    color black + size 7, bound 80 dollars; purchase price 47.465 (drawn in 45.99-47.99)."""
    t = tasks[19]
    assert t.payload["asin"] == "B092VDY5MF"
    assert t.payload["attributes"] == ["closed toe", "rubber sole"]
    assert t.payload["goal_options"] == {"color": "black", "size": "7"}
    assert t.payload["price_upper"] == 80.0
    return t


INSTR = ("Find me women's pumps with closed toe, rubber sole with color: black, and size: 7, "
         "and price lower than 80.00 dollars")
TITLE = "JOY IN LOVE Kitten Heels for Women Slingback Pumps Sandals Pointy Toe Pumps"
ITEM_TEXT = (
    f"Instruction: [SEP] {INSTR} [SEP] Back to Search [SEP] < Prev [SEP] size [SEP] 5.5 [SEP] 6 "
    "[SEP] 7 [SEP] 7.5 [SEP] 8 [SEP] 8.5 [SEP] 9 [SEP] 10 [SEP] 10.5 [SEP] 11 [SEP] color [SEP] black "
    "[SEP] leopard [SEP] red black [SEP] nude black [SEP] nude [SEP] "
    f"{TITLE} [SEP] Price: $45.99 to $47.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features "
    "[SEP] Reviews [SEP] Buy Now"
)
QUERY = "search[women's pumps closed toe]"


def env_for(cfg, mode="text", state_key="reference", reward="original"):
    return ws.make_env(EnvConfig(name="webshop", data_dir=cfg.data_dir, generated_dir=cfg.generated_dir,
                                 webshop_observation_mode=mode, state_key=state_key,
                                 webshop_reward=reward, webshop_nouns=cfg.webshop_nouns))


def buy(env, task, actions, payload_update=None):
    if payload_update:
        task = Task(task.task_id, task.task_type, task.env, {**task.payload, **payload_update})
    env.reset(task)
    obs = None
    for a in actions:
        obs = env.step(a)
        assert obs.info["valid"], a
    return obs


# --------------------------------------------------------------------------- pages
def test_start_page_text_and_actions(cfg, pumps):
    env = env_for(cfg)
    obs = env.reset(pumps)
    assert pumps.payload["instruction_text"] == INSTR
    assert obs.text == f"WebShop [SEP] Instruction: [SEP] {INSTR} [SEP] Search"
    assert obs.instruction == INSTR
    assert obs.admissible_actions == ["search[<your query>]", "click[search]"]
    assert obs.state_key == "'Search'"
    assert (obs.reward, obs.done, obs.won) == (0.0, False, False)


def test_results_page_text_paging_and_actions(cfg, pumps):
    env = env_for(cfg)
    env.reset(pumps)
    obs = env.step(QUERY)
    cat = env.catalog
    hits = cat.search.search("women's pumps closed toe")
    assert len(hits) == 50
    shown = [cat.products[i] for i in hits[:10]]
    expected = (f"Instruction: [SEP] {INSTR} [SEP] Back to Search [SEP] Page 1 (Total results: 50) "
                "[SEP] Next > [SEP] " + " [SEP] ".join(f"{p.asin} [SEP] {p.title} [SEP] {p.price_tag}" for p in shown))
    assert obs.text == expected
    assert f"B092VDY5MF [SEP] {TITLE} [SEP] $45.99 to $47.99" in obs.text
    assert obs.admissible_actions == ["click[back to search]", "click[next >]"] + [
        f"click[{p.asin.lower()}]" for p in shown]
    assert obs.state_key.startswith("'Back to Search' [SEP] 'Page 1 (Total results: 50)' [SEP] 'Next >' [SEP] ")
    obs = env.step("click[next >]")
    assert obs.text.startswith(f"Instruction: [SEP] {INSTR} [SEP] Back to Search [SEP] Page 2 (Total results: 50) "
                               f"[SEP] < Prev [SEP] Next > [SEP] {cat.products[hits[10]].asin} [SEP] ")
    assert obs.admissible_actions[:3] == ["click[back to search]", "click[< prev]", "click[next >]"]
    for _ in range(4):  # "Next >" is offered even past the last hit (as in the original)
        obs = env.step("click[next >]")
    assert obs.text == f"Instruction: [SEP] {INSTR} [SEP] Back to Search [SEP] Page 6 (Total results: 50) [SEP] < Prev [SEP] Next >"
    obs = env.step("click[< prev]")
    assert "Page 5 (Total results: 50)" in obs.text


def test_item_and_sub_pages_text(cfg, pumps):
    env = env_for(cfg)
    env.reset(pumps)
    env.step(QUERY)
    obs = env.step("click[b092vdy5mf]")
    assert obs.text == ITEM_TEXT
    assert obs.admissible_actions == (
        ["click[back to search]", "click[< prev]", "click[description]", "click[features]", "click[reviews]",
         "click[buy now]"] + [f"click[{v}]" for v in ["5.5", "6", "7", "7.5", "8", "8.5", "9", "10", "10.5", "11",
                                                      "black", "leopard", "red black", "nude black", "nude"]])
    assert obs.state_key == " [SEP] ".join(f"'{p}'" for p in ITEM_TEXT.split(" [SEP] ")[2:])
    head = f"Instruction: [SEP] {INSTR} [SEP] Back to Search [SEP] < Prev"
    obs = env.step("click[features]")
    bullets = env.catalog.by_asin["B092VDY5MF"].bullet_points
    assert obs.text == head + "".join(f" [SEP] {b.strip()}" for b in bullets)
    assert obs.text.startswith(head + " [SEP] Imported [SEP] Rubber sole [SEP] Platform measures approximately .25\"")
    assert obs.admissible_actions == ["click[back to search]", "click[< prev]"]
    assert env.step("click[< prev]").text == ITEM_TEXT
    # empty description and no reviews: nothing after "< Prev" (an empty <p> has no text node)
    assert env.step("click[description]").text == head
    env.step("click[< prev]")
    assert env.step("click[reviews]").text == head


def test_done_page_text(cfg, pumps):
    env = env_for(cfg)
    obs = buy(env, pumps, [QUERY, "click[b092vdy5mf]", "click[black]", "click[7]", "click[buy now]"])
    assert obs.text == (
        "Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] (Paste it in your MTurk interface.) "
        "[SEP] Purchased [SEP] asin [SEP] B092VDY5MF [SEP] options [SEP] {\"color\": \"black\", \"size\": \"7\"} "
        "[SEP] attrs [SEP] None [SEP] category [SEP] None [SEP] query [SEP] None [SEP] product category [SEP] None "
        "[SEP] Target [SEP] asin [SEP] options [SEP] attrs [SEP] price upper [SEP] instuction text [SEP] category "
        "[SEP] product category [SEP] query [SEP] Goal [SEP] None [SEP] Reward [SEP] Your score (min 0.0, max 1.0) "
        "[SEP] 1.0 [SEP] Reward Details [SEP] None")
    assert obs.admissible_actions == []
    with pytest.raises(RuntimeError, match="over"):
        env.step("click[buy now]")


def test_text_rich_strings(cfg, pumps):
    env = env_for(cfg, mode="text_rich")
    obs = env.reset(pumps)
    assert obs.text == f"WebShop\nInstruction: \n{INSTR}\n[button] Search [button_]\n"
    assert obs.state_key == obs.text  # no " [SEP] " parts: verl-agent keeps the observation whole
    obs = env.step(QUERY)
    assert obs.text.startswith(f"Instruction:\n{INSTR}\n[button] Back to Search [button_]\n"
                               "Page 1 (Total results: 50)\n[button] Next > [button_]\n\n[button] ")
    assert f"\n[button] B092VDY5MF [button_]\n{TITLE}\n$45.99 to $47.99\n" in obs.text
    obs = env.step("click[b092vdy5mf]")
    assert obs.text.startswith(f"Instruction:\n{INSTR}\n[button] Back to Search [button_]\n[button] < Prev [button_]\n"
                               "size\n  [button] 5.5 [button_]\n")
    assert obs.text.endswith(f"{TITLE}\nPrice: $45.99 to $47.99\nRating: N.A.\n[button] Description [button_]\n"
                             "[button] Features [button_]\n[button] Reviews [button_]\n[button] Buy Now [button_]\n")
    obs = env.step("click[7]")
    obs = env.step("click[black]")
    assert obs.text.startswith(f"You have clicked black.\nYou have clicked 7.\nInstruction:\n{INSTR}\n")
    assert "  [clicked button] black [clicked button_]\n  [button] leopard [button_]\n  [button] red black [button_]" in obs.text
    assert "  [clicked button] 7 [clicked button_]\n  [button] 7.5 [button_]" in obs.text
    obs = env.step("click[< prev]")  # back to the results: the opened ASIN is marked
    assert "\n[clicked button] B092VDY5MF [clicked button_]\n" in obs.text
    obs = env.step("click[back to search]")  # the opened-ASIN set is cleared
    obs = env.step(QUERY)
    assert "\n[button] B092VDY5MF [button_]\n" in obs.text


def test_option_clicks_alias_in_text_mode_not_in_text_rich(cfg, pumps):
    for mode, aliased in (("text", True), ("text_rich", False)):
        env = env_for(cfg, mode=mode)
        env.reset(pumps)
        env.step(QUERY)
        before = env.step("click[b092vdy5mf]")
        after = env.step("click[black]")
        assert after.info["valid"]
        assert (after.text == before.text) is aliased, mode
        assert (after.state_key == before.state_key) is aliased, mode
        assert env.options == {"color": "black"}
    raw = env_for(cfg, state_key="raw")
    assert raw.reset(pumps).state_key == raw.reset(pumps).text


def test_invalid_actions_leave_the_state_unchanged(cfg, pumps):
    env = env_for(cfg)
    start = env.reset(pumps)
    for bad in ["click[search]", "click[buy now]", "search[]", "Search[pumps]", "buy now", "click[b092vdy5mf]",
                "click pumps", "[pumps]"]:
        obs = env.step(bad)
        assert (obs.text, obs.state_key, obs.reward, obs.done, obs.info["valid"]) == (
            start.text, start.state_key, 0.0, False, False), bad
    env.step(QUERY)
    item = env.step("click[b092vdy5mf]")
    for bad in ["click[next >]", "click[b09qpx97vw]", "click[purple]", "click[Black", "click[]"]:
        obs = env.step(bad)
        assert (obs.text, obs.info["valid"], obs.done) == (item.text, False, False), bad
    assert env.step("CLICK[BLACK]").info["valid"] is False  # the action name is case-sensitive
    assert env.step("click[BLACK]").info["valid"] is True  # the argument is lowercased
    assert env.options == {"color": "black"}


def test_navigation_semantics(cfg, pumps):
    env = env_for(cfg, mode="text_rich")
    env.reset(pumps)
    env.step(QUERY)
    env.step("click[b092vdy5mf]")
    env.step("click[black]")
    obs = env.step("click[features]")
    obs = env.step("click[< prev]")  # sub-page -> item page, options kept
    assert obs.text.startswith("You have clicked black.\n") and env.page.kind == "item"
    obs = env.step("click[< prev]")  # item page -> results page, product and options cleared
    assert env.page.kind == "results" and env.options == {} and env.asin is None
    obs = env.step("click[b092vdy5mf]")
    assert not obs.text.startswith("You have clicked")
    obs = env.step("search[console table]")  # search works from any page, as in the original
    assert env.page.kind == "results" and "B06Y3VLDFB" in obs.text
    obs = env.step("click[back to search]")
    assert env.page.kind == "start" and env.keywords is None


# --------------------------------------------------------------------------- reward
# Goal 19 (see the ``pumps`` fixture): |attributes| = 2, |options| = 2, so every reward is
#   (n_attr + n_opt + price_ok) / (2 + 2 + 1) * r_type.
FULL = [QUERY, "click[b092vdy5mf]", "click[black]", "click[7]", "click[buy now]"]


def test_reward_exact_purchase_is_one(cfg, pumps):
    # attributes: both in the product's Attributes (token_set_ratio 100); options: goal pair
    # ("color", "black") normalises to "black" == "black"; pair ("size", "7") -> text tokens
    # {size, 7} hold "7" (ratio 100); price 47.47 <= 80; query match -> r_type 1:
    # (2 + 2 + 1) / 5 * 1 = 1.0
    obs = buy(env_for(cfg), pumps, FULL)
    assert obs.reward == 1.0 and obs.won and obs.done
    assert obs.info["score"] == 100.0 and obs.info["task_score"] == 1.0
    assert obs.info["price"] == pytest.approx(47.465173, abs=1e-6)
    assert obs.info["reward_info"]["r_type"] == 1.0
    assert obs.info["noun_extractor"] == "heuristic-v1"


def test_reward_right_product_without_options(cfg, pumps):
    # no option chosen: no purchased value to match -> n_opt = 0 -> (2 + 0 + 1) / 5 = 0.6
    for reward in ("original", "lenient"):
        obs = buy(env_for(cfg, reward=reward), pumps, [QUERY, "click[b092vdy5mf]", "click[buy now]"])
        assert obs.reward == pytest.approx(0.6) and not obs.won
        assert obs.info["score"] == pytest.approx(60.0)


def test_reward_colour_normalisation_and_exact_size(cfg, pumps):
    # "red black" normalises to "black" (first colour of the list found in it): (2 + 2 + 1) / 5
    for reward in ("original", "lenient"):
        obs = buy(env_for(cfg, reward=reward), pumps,
                  [QUERY, "click[b092vdy5mf]", "click[red black]", "click[7]", "click[buy now]"])
        assert obs.reward == 1.0 and obs.won
    # original: "7.5" -> tokens {7, 5} against the pair's {size, 7}: best ratio "7" vs "7 5"
    # = 2 * 1 / (1 + 3) = 50 <= 85 -> no match. Lenient: size exact, "7.5" != "7", and "7.5"
    # is not in the title, bullets or description (test_size_substring_fallback_not_applicable).
    # Both: (2 + 1 + 1) / 5 = 0.8
    for reward in ("original", "lenient"):
        obs = buy(env_for(cfg, reward=reward), pumps,
                  [QUERY, "click[b092vdy5mf]", "click[black]", "click[7.5]", "click[buy now]"])
        assert obs.reward == pytest.approx(0.8)
        assert obs.info["reward_info"]["r_option"] == 0.5


def test_reward_same_type_other_product(cfg, pumps):
    # B08R3XSC65 "Pointed Toe Pumps Shoes, Stiletto Plaid Leather High Heels, ...", query
    # "women's pumps" (query match), no Attributes, price 100.0.
    # attributes: "closed toe" nowhere; "rubber sole" is in its description -> n_attr = 1;
    # no options chosen -> 0; price 100 > 80 -> 0.
    # title score: goal nouns (heuristic) joy love kitten heels women slingback pumps sandals
    # pointy toe pumps (11, "pumps" twice); shared with the purchased title: heels, pumps, toe
    # -> 3 / 11 = 0.27 >= 0.1 and a query match -> r_type 1.  Reward (1 + 0 + 0) / 5 = 0.2
    env = env_for(cfg)
    obs = buy(env, pumps, ["search[pointed toe pumps stiletto plaid leather high heels]", "click[b08r3xsc65]",
                           "click[buy now]"])
    assert obs.reward == pytest.approx(0.2)
    info = obs.info["reward_info"]
    assert info["title_score"] == pytest.approx(3 / 11) and info["query_match"] and info["r_type"] == 1.0
    assert info["r_att"] == 0.5 and info["r_price"] is False
    p = env.catalog.by_asin["B08R3XSC65"]
    assert "rubber sole" in p.description.lower() and p.attributes == [] and env.catalog.prices[p.asin] == 100.0


def test_reward_wrong_category_is_zero(cfg, pumps):
    # B06Y3VLDFB "Vhomes Lights Reclaimed Wood Console Table ...": other query, category path
    # (Home & Kitchen › Furniture ...) shares nothing, no title noun in common -> title
    # score 0 -> r_type 0 -> reward 0 whatever the other terms
    env = env_for(cfg)
    obs = buy(env, pumps, ["search[console table]", "click[b06y3vldfb]", "click[buy now]"])
    assert obs.reward == 0.0 and obs.info["reward_info"]["title_score"] == 0.0
    assert obs.info["reward_info"]["r_type"] == 0.0 and not obs.won


def test_reward_price_above_the_limit(cfg, pumps):
    # same exact purchase, but a goal bound of 40 dollars < purchase price 47.47:
    # (2 + 2 + 0) / 5 = 0.8
    obs = buy(env_for(cfg), pumps, FULL, payload_update={"price_upper": 40.0})
    assert obs.reward == pytest.approx(0.8) and not obs.won
    assert obs.info["reward_info"]["r_price"] is False


def test_size_substring_fallback_not_applicable(cfg):
    env = env_for(cfg)
    p = env.catalog.by_asin["B092VDY5MF"]
    text = (p.title + " " + " ".join(p.bullet_points) + " " + p.description).lower()
    assert "7.5" not in text  # why click[7.5] above earns no option point


# --------------------------------------------------------------------------- expert
def _expert_report(env, tasks):
    failures = []
    for t in tasks:
        r = play_expert(env, t)
        if not r.won:
            failures.append((t.task_id, r.failure))
    return failures


def _unwinnable(env, tasks) -> set[str]:
    """Goals the reward never scores 1.0, even for their own product bought at its price with
    exactly the goal's options (original reward: a goal pair whose value the colour list
    turns into another colour, e.g. purchased "navy blue" -> "blue" against ("color", "navy blue"))."""
    out = set()
    for t in tasks:
        goal = Goal.from_dict(t.payload)
        product = env.catalog.by_asin[goal.asin]
        options = dict(goal.goal_options) if isinstance(goal.goal_options, dict) else {}
        r, _ = purchase_reward(product, goal, env.catalog.prices[goal.asin], options,
                               mode=env.reward_mode, nouns=env.nouns)
        if r != 1.0:
            out.add(t.task_id)
    return out


def test_expert_wins_the_415_goal_products(cfg, tasks):
    """One goal per product with an instruction (its first goal in shuffled order); goals
    the reward can never award 1.0 do not count against the expert."""
    first: dict[str, Task] = {}
    for t in tasks:
        first.setdefault(t.payload["asin"], t)
    assert len(first) == 415
    env = env_for(cfg)
    lost = _unwinnable(env, list(first.values()))
    failures = [f for f in _expert_report(env, list(first.values())) if f[0] not in lost]
    n = len(first) - len(lost)
    rate = 1 - len(failures) / n
    print(f"expert: {n - len(failures)}/{n} winnable goals won ({100 * rate:.1f} %; {len(lost)} unwinnable); "
          f"failures: {failures}")
    assert rate >= 0.95, failures


@pytest.mark.slow
def test_expert_on_all_6910_goals_and_expert_actions(cfg, tasks):
    assert len(tasks) == 6910
    env = env_for(cfg)
    # the measurement with the original get_reward: 458 goals on 17 products can never
    # be won (6,452 / 6,910 = 93.4 % can); the lenient reward can win them all
    lost = _unwinnable(env, tasks)
    assert len(lost) == 458
    assert len({t.payload["asin"] for t in tasks if t.task_id in lost}) == 17
    assert not _unwinnable(env_for(cfg, reward="lenient"), tasks)
    failures = [f for f in _expert_report(env, tasks) if f[0] not in lost]
    n = len(tasks) - len(lost)
    print(f"expert on all winnable goals: {n - len(failures)}/{n}; failures: {failures[:20]}")
    assert 1 - len(failures) / n >= 0.95
    # expert_actions replays through its own environment and gives the same plan
    acts = ws.expert_actions(tasks[19])
    assert acts == ["search[Find me women's pumps with closed toe, rubber sole with color: black, and size: 7, "
                    "and price lower than 80.00 dollars]", "click[b092vdy5mf]", "click[black]", "click[7]",
                    "click[buy now]"]


def test_reward_modes_differ_on_a_wrong_size(cfg, pumps):
    # goal size "7.5" but size 7 bought. Original: the goal pair ("size", "7.5") is scored
    # through its text "('size', '7.5')" -> tokens {size, 7, 5}; the purchased "7" is a subset
    # -> token_set_ratio 100 > 85: the wrong size counts and the purchase wins (5 / 5).
    goal = {"goal_options": {"color": "black", "size": "7.5"}}
    obs = buy(env_for(cfg), pumps, FULL, payload_update=goal)
    assert obs.reward == 1.0 and obs.won and obs.info["reward_info"]["reward_mode"] == "original"
    # lenient: size is compared exactly ("7" != "7.5") and "7" is nowhere in the title, bullet
    # points or description (no text fallback either) -> (2 + 1 + 1) / 5 = 0.8
    env = env_for(cfg, reward="lenient")
    p = env.catalog.by_asin["B092VDY5MF"]
    assert "7" not in (p.title + " " + " ".join(p.bullet_points) + " " + p.description).lower()
    obs = buy(env, pumps, FULL, payload_update=goal)
    assert obs.info["reward_info"]["reward_mode"] == "lenient"
    assert obs.reward == pytest.approx(0.8) and not obs.won
