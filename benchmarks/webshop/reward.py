"""The WebShop purchase reward, as the reference computes it (``engine/goal.py``
``get_reward`` and ``engine/normalize.py`` of WebShop as verl-agent and the G2PO repository
ship them; facts in our words, quirks included).

On ``click[buy now]`` the purchased product P, its chosen options O (name -> value) and its
purchase price are scored against the goal G::

    reward = (n_attr + n_opt + price_ok) / (|G.attributes| + |G.goal_options| + 1) * r_type

- **r_type** (type term): ``query_match`` = P.query == G.query; ``category_match`` = the
  ``" › "``-separated paths of P and G share at least 2 elements (as sets, stripped);
  ``title_score`` = |nouns(P.name) ∩ nouns(G.name)| / |nouns(G.name)| (as sets over the
  lists; 0.2 when G's title has no nouns; nouns: :mod:`g2po_bench.benchmarks.webshop.nouns`, spaCy
  ``en_core_web_sm`` by default). r_type = 1.0; 0.5 if neither query_match, category_match
  nor title_score > 0.2; then 0.1 if title_score < 0.1; then 0.0 if title_score == 0.
- **n_attr**: goal attributes matched: ``thefuzz.fuzz.token_set_ratio`` > 85 with one of
  P's attributes, else found as a substring of P's lowercased title, joined bullet points
  or description.
- **n_opt** (``mode="original"``, the default): the purchased side is the list of the chosen
  option *values*; the goal side is, for a synthetic goal (a mapping), the list of its
  ``(name, value)`` *pairs* (``dict.items()``), for a human goal (a list) its values. Both
  sides go through :func:`normalize_color`; a pair becomes a colour word only when one of
  its two elements *equals* that word (tuple membership), otherwise it stays a pair. Each
  goal item counts once when ``token_set_ratio(purchased value, goal item) > 85`` for some
  purchased value; thefuzz scores a pair through its text ``str(pair)`` (``"('size',
  'x-large')"`` -> tokens ``size x large``). No size special case, no title/bullet/
  description fallback (that one exists only for attributes).
- **n_opt** (``mode="lenient"``, this project's earlier reading, kept as a named option,
  never the default): counted over the purchased options against the goal's *values*; an
  option named ``size`` matches only an identical value, any other a value with
  token_set_ratio > 85; an unmatched value still counts when it is a substring of P's
  lowercased title, bullet points or description. It accepts more purchases than the
  reference (every synthetic goal is winnable; wrong options often score), so its success
  rates are not comparable with the paper's.
- **price_ok**: purchase price <= G.price_upper.

Success is ``reward == 1.0`` exactly; the reported score is reward x 100. Agreement with the
original code: ``tests/test_webshop_reward_oracle.py`` replays 1,246 purchase cases it scored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from thefuzz import fuzz

from g2po_bench.benchmarks.webshop.goals import Goal
from g2po_bench.benchmarks.webshop.nouns import (
    DEFAULT_NOUN_EXTRACTOR,
    noun_extractor_name,
    title_nouns,
)
from g2po_bench.benchmarks.webshop.products import Product

__all__ = [
    "COLOR_SET",
    "EXACT_MATCH_OPTS",
    "REWARD_MODES",
    "normalize_color",
    "type_reward",
    "attribute_reward",
    "option_reward",
    "lenient_option_reward",
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
#: option names matched exactly rather than fuzzily (``mode="lenient"`` only)
EXACT_MATCH_OPTS = ("size",)
#: ``env.webshop_reward`` values: the reference's reward (default) and the earlier reading
REWARD_MODES = ("original", "lenient")
_FUZZY_THRESHOLD = 85


def normalize_color(item: str | tuple[str, ...]) -> str | tuple[str, ...]:
    """The first colour of :data:`COLOR_SET` found ``in`` ``item``, else ``item`` unchanged.

    On a string ``in`` is a substring test (``"black forest"`` -> ``"black"``,
    ``"123alabaster"`` -> ``"alabaster"``, ``"standard"`` -> ``"tan"``, as in the original);
    on a ``(name, value)`` pair it is element equality (``("color", "black")`` -> ``"black"``,
    ``("color", "dark brown")`` stays the pair), as the original applies it to goal pairs.
    """
    for color in COLOR_SET:
        if color in item:
            return color
    return item


def _category_path(path: str) -> set[str]:
    return {x.strip() for x in path.split("›")}


def type_reward(product: Product, goal: Goal, nouns: str = DEFAULT_NOUN_EXTRACTOR) -> dict[str, Any]:
    """The type term (module docstring) with noun extractor ``nouns`` (``env.webshop_nouns``).
    Returns ``r_type``, ``query_match``, ``category_match``, ``title_score``.

    Raises:
        g2po_bench.benchmarks.webshop.nouns.NounExtractorError: the spaCy model is not installed.
    """
    query_match = product.query == goal.query
    category_match = len(_category_path(product.product_category) & _category_path(goal.product_category)) >= 2
    purchased = set(title_nouns(product.name, nouns))
    desired_list = title_nouns(goal.name, nouns)
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


def _fuzzy_text(item: str | tuple[str, ...]) -> str:
    # thefuzz scores a non-string through str(); done here explicitly so the behaviour does
    # not depend on thefuzz's type handling
    return item if isinstance(item, str) else str(item)


def option_reward(
    goal_options: Mapping[str, str] | Sequence[str], purchased_options: Mapping[str, str]
) -> tuple[float | None, int]:
    """The reference's option term (``mode="original"``; module docstring).

    Args:
        goal_options: a synthetic goal's name -> value mapping (scored as its pairs) or a
            human goal's list of values.
        purchased_options: the chosen option name -> value.

    Returns:
        (matches / number of goal options, or None when the goal has none; number of
        goal items matched, each at most once).
    """
    goals = [normalize_color(g) for g in (list(goal_options.items()) if isinstance(goal_options, Mapping)
                                          else list(goal_options))]
    purchased = [normalize_color(v) for v in purchased_options.values()]
    matches = 0
    for g in goals:
        g_text = _fuzzy_text(g)
        if any(fuzz.token_set_ratio(p, g_text) > _FUZZY_THRESHOLD for p in purchased):
            matches += 1
    return (matches / len(goals) if goals else None), matches


def lenient_option_reward(
    product: Product, goal_options: Sequence[str], purchased_options: Mapping[str, str]
) -> tuple[float | None, int]:
    """The lenient option term (``mode="lenient"``; module docstring): (matches / number of
    goal option values or None when the goal has none, number of matches), counted over the
    purchased options."""
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
    product: Product, goal: Goal, price: float, options: Mapping[str, str], *,
    mode: str = "original", nouns: str = DEFAULT_NOUN_EXTRACTOR,
) -> tuple[float, dict[str, Any]]:
    """The reward of buying ``product`` at ``price`` dollars with ``options`` for ``goal``.

    Args:
        mode: ``"original"`` (the reference's reward, default) or ``"lenient"`` (module
            docstring; ``env.webshop_reward``).
        nouns: the noun extractor of the type term (``env.webshop_nouns``).

    Returns:
        (reward in [0, 1] for synthetic goals, details) where details holds ``r_type``,
        ``r_att``, ``w_att``, ``query_match``, ``category_match``, ``title_score``,
        ``r_option``/``w_option`` (when the goal has options), ``r_price``/``w_price``,
        ``noun_extractor`` and ``reward_mode``.

    Raises:
        ValueError: unknown ``mode``.
        g2po_bench.benchmarks.webshop.nouns.NounExtractorError: the spaCy model is not installed.
    """
    if mode not in REWARD_MODES:
        raise ValueError(f"unknown WebShop reward mode {mode!r}; choose original or lenient")
    t = type_reward(product, goal, nouns)
    price_ok = (price <= goal.price_upper) if goal.price_upper > 0 else None
    r_att, n_attr = attribute_reward(product, goal)
    n_goal_opts = len(goal.goal_options)
    if mode == "original":
        r_option, n_opt = option_reward(goal.goal_options, options)
    else:
        r_option, n_opt = lenient_option_reward(product, goal.option_values, options)
    denom = len(goal.attributes) + n_goal_opts + 1
    reward = (n_attr + n_opt + (1 if price_ok else 0)) / denom * t["r_type"]
    info: dict[str, Any] = {
        "r_type": t["r_type"], "r_att": r_att, "w_att": len(goal.attributes) / denom,
        "query_match": t["query_match"], "category_match": t["category_match"],
        "title_score": t["title_score"], "noun_extractor": noun_extractor_name(nouns),
        "reward_mode": mode,
    }
    if r_option is not None:
        info["r_option"] = r_option
        info["w_option"] = n_goal_opts / denom
    if price_ok is not None:
        info["r_price"] = bool(price_ok)
        info["w_price"] = 1 / denom
    return reward, info
