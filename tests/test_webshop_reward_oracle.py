"""The WebShop reward against the original code's own numbers.

``../shared/data/webshop/reward_oracle.jsonl`` (see ``../shared/data/PROVENANCE.md``) holds
1,246 purchase cases (synthetic goals on the real 1k products; own product with correct,
partial, wrong or no options, over the price bound, random, same-category and same-query
products), each with the reward and its terms as the original WebShop ``get_reward``
computed them (spaCy 3.8 + en_core_web_sm 3.8, thefuzz 0.19). The project's default reward
(``mode="original"``, nouns ``en_core_web_sm``) must agree exactly (1e-9) on >= 99.5 % of
them; a failure names the terms of every disagreeing case.

Also here: hand-computed cases of the reference option term's quirks and of the lenient
variant, so that a reader sees what each mode does without the data.
"""

from __future__ import annotations

import json

import pytest
from conftest import require_shared

from g2po_bench.benchmarks.webshop.catalog import Catalog, resolve_source
from g2po_bench.benchmarks.webshop.goals import Goal
from g2po_bench.benchmarks.webshop.nouns import noun_extractor_name
from g2po_bench.benchmarks.webshop.products import Product
from g2po_bench.benchmarks.webshop.reward import (
    lenient_option_reward,
    normalize_color,
    option_reward,
    purchase_reward,
)

TERMS = ("r_type", "r_att", "r_option", "r_price", "query_match", "category_match", "title_score",
         "w_att", "w_option", "w_price")


# --------------------------------------------------------------------------- hand-computed
def test_normalize_color_on_values_and_pairs():
    assert normalize_color("black forest") == "black"
    assert normalize_color("standard") == "tan"  # substring test, as the original
    assert normalize_color(("color", "black")) == "black"  # an element equals "black"
    assert normalize_color(("color", "dark brown")) == ("color", "dark brown")  # no element equals


def test_original_option_term_compares_pairs_with_values():
    # ("size", "7") stays a pair; its text "('size', '7')" -> tokens {size, 7}; the purchased
    # "7" is a subset -> token_set_ratio 100 > 85: match. ("color", "black") -> "black" == "black".
    assert option_reward({"color": "black", "size": "7"}, {"color": "black", "size": "7"}) == (1.0, 2)
    # "7.5" -> tokens {7, 5} vs {size, 7}: best ratio is "7" vs "7 5" = 2*1/(1+3) = 50 -> no match
    assert option_reward({"color": "black", "size": "7"}, {"color": "black", "size": "7.5"}) == (0.5, 1)
    # no size special case: "x-large" vs pair ("size", "large") -> tokens {x, large} vs
    # {size, large}: sect "large", ratio("large x", "large size") = 2*6/(7+10) = 70.6 -> 71,
    # ratio("large", "large x") = 2*5/(5+7) = 83.3 -> 83 -> no match
    assert option_reward({"size": "large"}, {"size": "x-large"}) == (0.0, 0)
    # ... while "large" vs pair ("size", "x-large") is a subset -> 100: the quirk that a
    # wrong size can count
    assert option_reward({"size": "x-large"}, {"size": "large"}) == (1.0, 1)
    # each goal item counts at most once; purchased options beyond the goal's add nothing
    assert option_reward({"color": "red"}, {"color": "red", "style": "red"}) == (1.0, 1)
    # a human goal's list of values is compared value with value; "navy blue" normalises to
    # "blue" (the first colour of the alphabetical list found in it), which no longer matches "navy"
    assert option_reward(["x-large", "navy"], {"size": "x-large", "color": "navy blue"}) == (0.5, 1)
    assert option_reward(["x-large", "navy"], {"size": "x-large", "color": "navy"}) == (1.0, 2)
    assert option_reward({}, {"size": "7"}) == (None, 0)


def _product(**kw) -> Product:
    base = dict(asin="B000000001", title="Blue Cotton Shirt", description="a shirt in size small",
                bullet_points=["machine wash"], price_tag="$10.00", pricing=[10.0],
                options={"size": ["small", "large"]}, attributes=["machine wash"],
                category="fashion", query="shirt", product_category="Clothing › Men › Shirts")
    base.update(kw)
    return Product(**base)


def test_lenient_option_term_size_exact_and_text_fallback():
    p = _product()
    # size is matched exactly: "large" != "small", and "large" is not in the title, bullet
    # points or description -> 0
    assert lenient_option_reward(p, ["small"], {"size": "large"}) == (0.0, 0)
    # "small" is in the description -> the text fallback counts it
    assert lenient_option_reward(p, ["medium"], {"size": "small"}) == (1.0, 1)
    # the original never uses the text: pair ("size", "medium") vs "small" -> no match
    assert option_reward({"size": "medium"}, {"size": "small"}) == (0.0, 0)


def test_purchase_reward_modes_on_a_hand_made_case():
    p = _product()
    goal = Goal(index=0, asin=p.asin, category="fashion", query="shirt", name=p.title,
                product_category=p.product_category, instruction_text="", attributes=["machine wash"],
                price_upper=20.0, goal_options={"size": "medium"})
    # same product: r_type 1 (query match); attribute in Attributes: 1; price 10 <= 20: 1;
    # option: original 0 (above), lenient 1 ("small" in the description)
    r, info = purchase_reward(p, goal, 10.0, {"size": "small"}, mode="original", nouns="heuristic")
    assert r == pytest.approx(2 / 3) and info["r_option"] == 0.0 and info["reward_mode"] == "original"
    assert info["noun_extractor"] == "heuristic-v1"
    r, info = purchase_reward(p, goal, 10.0, {"size": "small"}, mode="lenient", nouns="heuristic")
    assert r == 1.0 and info["r_option"] == 1.0
    with pytest.raises(ValueError, match="original or lenient"):
        purchase_reward(p, goal, 10.0, {}, mode="exact")


# --------------------------------------------------------------------------- the oracle
@pytest.mark.shared_data
def test_reward_agrees_with_the_original_on_the_oracle_cases(tmp_path_factory):
    path = require_shared("webshop/reward_oracle.jsonl")
    require_shared("webshop/resources_1k/documents.jsonl")
    name = noun_extractor_name("en_core_web_sm")  # NounExtractorError: install the model
    assert name.startswith("spacy:")
    catalog = Catalog(resolve_source(path.parent), cache_root=tmp_path_factory.mktemp("cache"))
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(rows) == 1246
    disagreements = []
    for i, row in enumerate(rows):
        goal = Goal.from_dict({**row["goal"], "index": i})
        product = catalog.by_asin[row["purchased_asin"]]
        reward, info = purchase_reward(product, goal, row["price"], row["options"])
        if abs(reward - row["reward"]) > 1e-9:
            ours = {k: info.get(k) for k in TERMS}
            theirs = {k: row["terms"].get(k) for k in TERMS}
            diff = {k: (ours[k], theirs[k]) for k in TERMS if ours[k] != theirs[k]}
            disagreements.append(
                f"case {i} ({row['kind']}, goal {goal.asin} bought {product.asin} with {row['options']}): "
                f"reward {reward!r} vs original {row['reward']!r}; differing terms (ours, original): {diff}"
            )
    agreement = 1 - len(disagreements) / len(rows)
    print(f"agreement with the original get_reward ({name}): {100 * agreement:.2f} % of {len(rows)}")
    assert agreement >= 0.995, "\n".join(disagreements)
