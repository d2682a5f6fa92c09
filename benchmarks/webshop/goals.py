"""WebShop goals: construction from products, the seeded shuffle, and the named splits.

Facts reproduced from the original (``web_agent_site/engine/goal.py`` and the text env):

- **Prices.** Every product gets one purchase price: its single price, or, for a price range
  ``[lo, hi]``, a uniform draw in it. The reward compares this price (not the displayed
  range) with the goal's bound.
- **Synthetic goals** (the default; what verl-agent/G2PO train and test on): for each product
  with a synthetic instruction (attribute file), one goal per combination of its option
  values (options in sorted name order, ``itertools.product``). The instruction text is
  ``"{instruction}{ with name: value, and name: value}{, and price lower than X.00 dollars}"``.
  The price bound is drawn once per product: the next four multiples of 10 above the price,
  two of them sampled, the larger one kept; fewer than two candidates (price >= 980) gives
  no bound (1,000,000) and no price text.
- **Human goals**: one goal per human instruction with at least one attribute; text =
  instruction with trailing dots stripped + price text; goal options = the human-chosen
  option values (a list, not a mapping).
- **Order and splits.** Goals follow product order; the list is then shuffled once with
  ``random.seed(233); random.shuffle(goals)``, which equals ``random.Random(233).shuffle``.
  The original splits the shuffled list by index: test = 0-499, eval = 500-1499, train =
  1500+ (verl-agent/G2PO train on 500+ and test on 0-499). The shuffle happens once per
  catalogue, here, never per worker (shuffling per worker with different seeds leaks test
  goals into training).

Randomness: the original draws purchase prices and price bounds from Python's global RNG
without a seed (so they differ between runs; verl-agent seeds it with the env seed). Here
both come from one ``random.Random(GOAL_SEED)`` stream in the original call order (prices
for the range-priced products in product order, then one bound per goal product in product
order), so every process computes the same goals.

Split names (:func:`split_range`): ``test``, ``eval``, ``train`` (the original's three),
``trainval`` (500+: what verl-agent/G2PO train on), ``all``. The ALFWorld names of the shared
config defaults are accepted as aliases: ``valid_seen`` and ``valid_unseen`` -> ``test``,
``valid_train`` -> ``eval``. A ``human_`` prefix (``human_test``) selects human goals.
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from g2po_bench.benchmarks.webshop.products import Product

__all__ = [
    "Goal",
    "GOAL_SEED",
    "PRICE_RANGE",
    "NO_PRICE_BOUND",
    "ORIGINAL_SPLITS",
    "SPLIT_ALIASES",
    "generate_product_prices",
    "synthetic_goals",
    "human_goals",
    "build_goals",
    "split_range",
]

#: seed of the goal shuffle (and, here, of the price draws)
GOAL_SEED = 233
#: candidate price bounds in dollars: 10, 20, ..., 990
PRICE_RANGE = [10.0 * i for i in range(1, 100)]
#: the bound used when no price text is added
NO_PRICE_BOUND = 1000000
#: index ranges [start, stop) of the original splits over the shuffled goals (stop None = end)
ORIGINAL_SPLITS: dict[str, tuple[int, int | None]] = {
    "test": (0, 500),
    "eval": (500, 1500),
    "train": (1500, None),
    "trainval": (500, None),
    "all": (0, None),
}
#: ALFWorld split names (the shared config defaults) mapped onto WebShop splits
SPLIT_ALIASES = {"valid_seen": "test", "valid_unseen": "test", "valid_train": "eval"}


@dataclass
class Goal:
    """One shopping goal.

    Attributes:
        index: position in the shuffled goal list of its catalogue (stable id).
        asin: the target product.
        category, query, name, product_category: copied from the target product (the type
            reward compares them with the purchased product).
        instruction_text: what the agent is told.
        attributes: goal attributes (reward: attribute term).
        price_upper: the price bound in dollars (``1000000`` = none).
        goal_options: option name -> value (synthetic) or a list of values (human).
        weight: the original's sampling weight (mean inverse attribute frequency; 1 for human).
        kind: ``"synthetic"`` or ``"human"``.
    """

    index: int
    asin: str
    category: str
    query: str
    name: str
    product_category: str
    instruction_text: str
    attributes: list[str]
    price_upper: float
    goal_options: dict[str, str] | list[str] = field(default_factory=dict)
    weight: float = 1.0
    kind: str = "synthetic"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the Task payload's goal part)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Goal:
        """Inverse of :meth:`to_dict`; unknown keys are ignored.

        Raises:
            KeyError: a required field is missing.
        """
        names = cls.__dataclass_fields__.keys()
        return cls(**{k: d[k] for k in names if k in d})

    @property
    def option_values(self) -> list[str]:
        """The goal option values, in order."""
        opts = self.goal_options
        return list(opts.values()) if isinstance(opts, Mapping) else list(opts)


def generate_product_prices(products: Sequence[Product], rng: random.Random) -> dict[str, float]:
    """ASIN -> purchase price in dollars (a range draws ``rng.uniform(lo, hi)``)."""
    prices = {}
    for p in products:
        pricing = p.pricing
        if not pricing:
            prices[p.asin] = 100.0
        elif len(pricing) == 1:
            prices[p.asin] = float(pricing[0])
        else:
            prices[p.asin] = rng.uniform(*pricing[:2])
    return prices


def _price_bound(price: float, rng: random.Random) -> tuple[float, str]:
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) >= 2:
        _, upper = sorted(rng.sample(candidates, 2))
        return upper, f", and price lower than {upper:.2f} dollars"
    return NO_PRICE_BOUND, ""


def synthetic_goals(
    products: Sequence[Product], prices: Mapping[str, float], rng: random.Random
) -> list[Goal]:
    """The synthetic goals in product order (not shuffled; ``index`` is set by
    :func:`build_goals`). Products without an instruction or with no instruction attributes
    give no goal (the original asserts the latter never happens)."""
    goals: list[Goal] = []
    counts: dict[str, int] = defaultdict(int)
    for p in products:
        if p.instruction is None or not p.instruction_attributes:
            continue
        upper, price_text = _price_bound(prices[p.asin], rng)
        names = sorted(p.options)
        for combo in itertools.product(*(p.options[n] for n in names)):
            chosen = dict(zip(names, combo))
            opt = ", and ".join(f"{k}: {v}" for k, v in chosen.items())
            opt = f" with {opt}" if opt else ""
            goals.append(Goal(
                index=-1, asin=p.asin, category=p.category, query=p.query, name=p.title,
                product_category=p.product_category,
                instruction_text=f"{p.instruction}{opt}{price_text}",
                attributes=list(p.instruction_attributes), price_upper=upper,
                goal_options=chosen, kind="synthetic",
            ))
            for a in p.instruction_attributes:
                counts[a] += 1
    for g in goals:
        g.weight = sum(1.0 / counts[a] for a in g.attributes) / len(g.attributes)
    return goals


def human_goals(
    products: Sequence[Product], prices: Mapping[str, float], rng: random.Random
) -> list[Goal]:
    """The human goals in product order (instructions with no attributes are skipped)."""
    goals = []
    for p in products:
        for ins in p.human_instructions:
            attrs = list(ins.get("instruction_attributes") or [])
            if not attrs:
                continue
            upper, price_text = _price_bound(prices[p.asin], rng)
            goals.append(Goal(
                index=-1, asin=p.asin, category=p.category, query=p.query, name=p.title,
                product_category=p.product_category,
                instruction_text=str(ins.get("instruction", "")).strip(".") + price_text,
                attributes=attrs, price_upper=upper,
                goal_options=list(ins.get("instruction_options") or []), weight=1.0, kind="human",
            ))
    return goals


def build_goals(
    products: Sequence[Product], *, human: bool = False, seed: int = GOAL_SEED
) -> tuple[list[Goal], dict[str, float]]:
    """Prices and shuffled goals of a catalogue, computed the one way every process agrees on.

    Args:
        products: the catalogue in file order.
        human: human goals instead of synthetic ones.
        seed: seed of the price stream; the shuffle always uses :data:`GOAL_SEED`.

    Returns:
        (goals with ``index`` = shuffled position, ASIN -> purchase price).
    """
    rng = random.Random(seed)
    prices = generate_product_prices(products, rng)
    goals = (human_goals if human else synthetic_goals)(products, prices, rng)
    random.Random(GOAL_SEED).shuffle(goals)
    for i, g in enumerate(goals):
        g.index = i
    return goals, prices


def split_range(
    split: str, n_goals: int, bounds: Mapping[str, tuple[int, int | None]] | None = None
) -> tuple[int, int]:
    """Resolve a split name to goal indices ``[start, stop)``.

    Args:
        split: ``test``, ``eval``, ``train``, ``trainval``, ``all`` or an alias (module
            docstring); an optional ``human_`` prefix is ignored here.
        n_goals: number of goals of the catalogue.
        bounds: the catalogue's split table (default :data:`ORIGINAL_SPLITS`).

    Raises:
        ValueError: unknown split name.
    """
    name = split.removeprefix("human_")
    name = SPLIT_ALIASES.get(name, name)
    table = dict(ORIGINAL_SPLITS if bounds is None else bounds)
    if name not in table:
        known = ", ".join(sorted(set(table) | set(SPLIT_ALIASES)))
        raise ValueError(f"unknown WebShop split {split!r}; known: {known} (prefix human_ for human goals)")
    start, stop = table[name]
    stop = n_goals if stop is None else min(stop, n_goals)
    return min(start, n_goals), stop
