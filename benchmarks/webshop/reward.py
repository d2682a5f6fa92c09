"""The WebShop purchase reward (facts from the original ``engine/goal.py`` and ``normalize.py``).

On ``click[buy now]`` the purchased product P, its chosen options O (name -> value) and its
purchase price are scored against the goal G::

    reward = (n_attr + n_opt + price_ok) / (|G.attributes| + |G.goal_options| + 1) * r_type

- **r_type** (type term): ``query_match`` = P.query == G.query; ``category_match`` = the
  ``" › "``-separated paths of P and G share at least 2 elements (as sets, stripped);
  ``title_score`` = |nouns(P.name) ∩ nouns(G.name)| / |nouns(G.name)| (as sets over the
  lists; 0.2 when G's title has no nouns; nouns: :mod:`benchmarks.webshop.nouns`).
  r_type = 1.0; 0.5 if neither query_match, category_match nor title_score > 0.2;
  then 0.1 if title_score < 0.1; then 0.0 if title_score == 0.
- **n_attr**: goal attributes matched: ``thefuzz.fuzz.token_set_ratio`` > 85 with one of
  P's attributes, else found as a substring of P's lowercased title, joined bullet points
  or description.
- **n_opt**: counted over the *purchased* options, after colour normalisation of both
  sides (:func:`normalize_color`): an option named ``size`` matches only an identical goal
  value; any other option matches a goal value with token_set_ratio > 85; an unmatched
  value still counts when it is a substring of P's lowercased title, bullet points or
  description. (With human goals, which list fewer options, the reward can exceed 1.)
- **price_ok**: purchase price <= G.price_upper.

Success is ``reward == 1.0`` exactly; the reported score is reward x 100.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from thefuzz import fuzz

from benchmarks.webshop.goals import Goal
from benchmarks.webshop.nouns import noun_extractor_name, title_nouns
from benchmarks.webshop.products import Product

__all__ = [
    "COLOR_SET",
    "EXACT_MATCH_OPTS",
    "normalize_color",
    "type_reward",
    "attribute_reward",
    "option_reward",
    "purchase_reward",
]

#: the original's colour vocabulary, in its (alphabetical) match order
COLOR_SET = (
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown "
    "burgundy camel camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee "
    "cognac copper coral cranberry cream crystal dark denim eggplant elephant espresso fuchsia gold "
    "granite grape graphite grass gray green grey heather indigo ivory ivy khaki lavender lemon "
    "leopard light lilac lime magenta maroon mauve merlot midnight mint mocha multicolor mushroom "
    "mustard natural navy nude olive orange peach pewter pink plum purple rainbow red rose royal "
    "rust sand sapphire seashell silver skull slate steel stone stonewash sunflower tan taupe teal "
    "tiger turquoise violet walnut wheat white wine yellow"
).split()
#: option names matched exactly rather than fuzzily
EXACT_MATCH_OPTS = ("size",)
_FUZZY_THRESHOLD = 85


def normalize_color(value: str) -> str:
    """The first colour of :data:`COLOR_SET` that is a substring of ``value``, else ``value``
    (``"black forest"`` -> ``"black"``, ``"123alabaster"`` -> ``"alabaster"``; plain
    substring test, so ``"standard"`` -> ``"tan"``, as in the original)."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def _category_path(path: str) -> set[str]:
    return {x.strip() for x in path.split("›")}


def type_reward(product: Product, goal: Goal) -> dict[str, Any]:
    """The type term (module docstring). Returns ``r_type``, ``query_match``,
    ``category_match``, ``title_score``."""
    query_match = product.query == goal.query
    category_match = len(_category_path(product.product_category) & _category_path(goal.product_category)) >= 2
    purchased = set(title_nouns(product.name))
    desired_list = title_nouns(goal.name)
    if len(desired_list) == 0:
        title_score = 0.2
    else:
        title_score = len(purchased & set(desired_list)) / len(desired_list)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match,
            "title_score": title_score}


def _in_product_text(text: str, product: Product) -> bool:
    return (
        text in product.title.lower()
        or text in " ".join(product.bullet_points).lower()
        or text in product.description.lower()
    )


def attribute_reward(product: Product, goal: Goal) -> tuple[float, int]:
    """(share of goal attributes matched, number matched); module docstring."""
    matches = 0
    for g_attr in goal.attributes:
        if any(fuzz.token_set_ratio(p_attr, g_attr) > _FUZZY_THRESHOLD for p_attr in product.attributes):
            matches += 1
        elif _in_product_text(g_attr, product):
            matches += 1
    return (matches / len(goal.attributes) if goal.attributes else 0.0), matches


def option_reward(
    product: Product, goal_options: Sequence[str], purchased_options: Mapping[str, str]
) -> tuple[float | None, int]:
    """(matches / number of goal options or None when the goal has none, number of matches),
    counted over the purchased options; module docstring."""
    purchased = {k: normalize_color(v) for k, v in purchased_options.items()}
    goals = [normalize_color(o) for o in goal_options]
    matches = 0
    for name, value in purchased.items():
        matched = False
        if name.lower() in EXACT_MATCH_OPTS:
            if value in goals:
                matches += 1
                matched = True
        else:
            for g in goals:
                if fuzz.token_set_ratio(g, value) > _FUZZY_THRESHOLD:
                    matches += 1
                    matched = True
                    break
        if not matched and _in_product_text(value, product):
            matches += 1
    return (matches / len(goals) if goals else None), matches


def purchase_reward(
    product: Product, goal: Goal, price: float, options: Mapping[str, str]
) -> tuple[float, dict[str, Any]]:
    """The reward of buying ``product`` at ``price`` dollars with ``options`` for ``goal``.

    Returns:
        (reward, details) where details holds ``r_type``, ``r_att``, ``w_att``,
        ``query_match``, ``category_match``, ``title_score``, ``r_option``/``w_option``
        (when the goal has options), ``r_price``/``w_price`` and ``noun_extractor``.
    """
    t = type_reward(product, goal)
    price_ok = (price <= goal.price_upper) if goal.price_upper > 0 else None
    r_att, n_attr = attribute_reward(product, goal)
    goal_values = goal.option_values
    r_option, n_opt = option_reward(product, goal_values, options)
    denom = len(goal.attributes) + len(goal_values) + 1
    reward = (n_attr + n_opt + (1 if price_ok else 0)) / denom * t["r_type"]
    info: dict[str, Any] = {
        "r_type": t["r_type"], "r_att": r_att, "w_att": len(goal.attributes) / denom,
        "query_match": t["query_match"], "category_match": t["category_match"],
        "title_score": t["title_score"], "noun_extractor": noun_extractor_name(),
    }
    if r_option is not None:
        info["r_option"] = r_option
        info["w_option"] = len(goal_values) / denom
    if price_ok is not None:
        info["r_price"] = bool(price_ok)
        info["w_price"] = 1 / denom
    return reward, info
