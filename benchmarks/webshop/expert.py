"""Scripted WebShop experts: search, open a product, choose the goal options, buy.

Two experts (:data:`EXPERT_MODES`; ``env.webshop_expert``). Both know the goal (the target ASIN,
attributes and options) and act only through the environment.

``"reference"`` (the default) finds the target product, looking at the search engine to pick
its query:

1. query: the first of these that puts the target among the 50 hits, the earliest page
   winning: the instruction text, the target's title, the goal's scraping query (``[``
   and ``]`` removed, since they would break the action syntax). If none finds it, the
   instruction is searched anyway (the episode then fails at the purchase).
2. ``search[query]``, ``click[next >]`` until the target's page, ``click[<asin>]``;
3. ``click[value]`` for each goal option value (synthetic goals: exact values; human goals:
   the product option value with the best ``token_set_ratio`` above 85, skipped otherwise);
4. ``click[buy now]``.

``"instruction"`` acts as an agent that reads only the page could: it searches the instruction
text (``[`` and ``]`` removed), never turns a results page, and opens the product of the first
results page whose purchase would score best for the goal (the purchase reward of
:mod:`~g2po_bench.benchmarks.webshop.reward` with the goal's option values that product offers;
ties go to the higher-ranked result), then clicks those option values and buys. It need not
open the target: another product of the page may match every requirement (the reward judges
the purchase, not the ASIN). Every query of its demonstrations is a copy of the instruction
and every click names a button of the current page, so a policy can learn all of it from the
prompt (the tiny CPU model's warm start, ``--preset webshop_cpu``); where no product of the
first page can score 1, it still buys the best one and the demonstration fails.

:func:`expert_actions` returns the actions actually taken through a fresh environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from thefuzz import fuzz

from g2po_bench.benchmarks.webshop.catalog import Catalog, DataSource, get_catalog
from g2po_bench.benchmarks.webshop.env import WebShopEnv
from g2po_bench.benchmarks.webshop.goals import Goal
from g2po_bench.benchmarks.webshop.reward import purchase_reward
from g2po_bench.benchmarks.webshop.search import PRODUCT_WINDOW, SEARCH_RETURN_N
from g2po_bench.core.protocol import Observation, Task

__all__ = ["EXPERT_MODES", "ExpertResult", "plan_query", "best_on_page", "play_expert", "expert_actions"]

#: ``env.webshop_expert``: the experts of the warm start's demonstrations (module docstring)
EXPERT_MODES = ("reference", "instruction")


@dataclass
class ExpertResult:
    """What one expert episode did.

    Attributes:
        actions: the actions sent, in order.
        observations: the observation before each action, then the final one.
        reward: the purchase reward (0 if it never bought).
        won: reward == 1.0.
        query: the query it searched; page: the results page of the target (None: not found).
        failure: "" on success, else the cause (for reports).
    """

    actions: list[str] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    reward: float = 0.0
    won: bool = False
    query: str = ""
    page: int | None = None
    failure: str = ""
    info: dict[str, Any] = field(default_factory=dict)


def _clean_query(text: str) -> str:
    return " ".join(text.replace("[", " ").replace("]", " ").split())


def plan_query(catalog: Catalog, goal: Goal) -> tuple[str, int | None]:
    """(query, results page of the target or None): module docstring step 1."""
    target = catalog.index_of.get(goal.asin)
    best: tuple[str, int | None] = (_clean_query(goal.instruction_text), None)
    for candidate in (goal.instruction_text, goal.name, goal.query):
        q = _clean_query(candidate)
        if not q:
            continue
        hits = catalog.search.search(q, SEARCH_RETURN_N)
        if target in hits:
            page = hits.index(target) // PRODUCT_WINDOW + 1
            if best[1] is None or page < best[1]:
                best = (q, page)
            if page == 1:
                break
    return best


def _option_clicks(catalog: Catalog, goal: Goal, asin: str | None = None) -> list[str]:
    """The option values to click on product ``asin`` (default: the target) for the goal's
    option values: exact, else the best ``token_set_ratio`` above 85, else none."""
    product = catalog.by_asin[asin or goal.asin]
    values = [v for vs in product.options.values() for v in vs]
    clicks = []
    for want in goal.option_values:
        if want in values:
            clicks.append(want)
            continue
        scored = [(fuzz.token_set_ratio(want, v), v) for v in values]
        if scored:
            score, v = max(scored, key=lambda x: x[0])
            if score > 85:
                clicks.append(v)
    return clicks


def best_on_page(env: WebShopEnv, goal: Goal, hits: list[int]) -> tuple[str, list[str], float]:
    """The product of ``hits`` (catalogue indices in rank order) whose purchase with the goal's
    option values it offers (:func:`_option_clicks`) would score best for ``goal``, with the
    environment's reward settings; ties go to the earlier hit.

    Returns:
        (ASIN, option values to click, the reward that purchase would get).

    Raises:
        ValueError: ``hits`` is empty.
    """
    if not hits:
        raise ValueError("no product to choose from: the search returned no hit")
    catalog = env.catalog
    best: tuple[str, list[str], float] | None = None
    for i in hits:
        product = catalog.products[i]
        clicks = _option_clicks(catalog, goal, product.asin)
        names = {v: n for n, vs in product.options.items() for v in vs}
        chosen: dict[str, str] = {}
        for v in clicks:  # as the environment records clicks: one value per option name
            chosen[names[v].lower()] = v
        reward, _ = purchase_reward(product, goal, catalog.prices[product.asin], chosen,
                                    mode=env.reward_mode, nouns=env.nouns)
        if best is None or reward > best[2]:
            best = (product.asin, clicks, reward)
    assert best is not None
    return best


def play_expert(env: WebShopEnv, task: Task, mode: str = "reference") -> ExpertResult:
    """Play the expert ``mode`` (:data:`EXPERT_MODES`) on ``task`` through ``env`` (reset included).

    Raises:
        ValueError: an unknown ``mode``.
    """
    if mode not in EXPERT_MODES:
        raise ValueError(f"unknown WebShop expert {mode!r}; choose one of {', '.join(EXPERT_MODES)}")
    res = ExpertResult()
    obs = env.reset(task)
    goal = env.goal
    assert goal is not None
    catalog = env.catalog
    if mode == "instruction":
        query = _clean_query(goal.instruction_text)
        hits = catalog.search.search(query.lower(), SEARCH_RETURN_N)[:PRODUCT_WINDOW]
        res.query = query
        plan = [f"search[{query}]"]
        if hits:
            asin, clicks, _ = best_on_page(env, goal, hits)
            res.page = 1 if asin == goal.asin else None
            plan += [f"click[{asin.lower()}]", *(f"click[{v}]" for v in clicks), "click[buy now]"]
    else:
        query, page = plan_query(catalog, goal)
        res.query, res.page = query, page
        plan = [f"search[{query}]"]
        if page is not None:
            plan += ["click[next >]"] * (page - 1)
            plan.append(f"click[{goal.asin.lower()}]")
            plan += [f"click[{v}]" for v in _option_clicks(catalog, goal)]
            plan.append("click[buy now]")
    for action in plan:
        res.observations.append(obs)
        res.actions.append(action)
        obs = env.step(action)
        if not obs.info.get("valid", True):
            res.failure = f"action refused by the environment: {action!r}"
            break
        if obs.done:
            break
    res.observations.append(obs)
    if obs.done:
        res.reward, res.won = obs.reward, obs.won
        res.info = dict(obs.info.get("reward_info", {}))
        if not obs.won and not res.failure:
            res.failure = f"bought with reward {obs.reward:.3f} ({res.info})"
    elif not res.failure:
        res.failure = ("the search returned no product" if mode == "instruction"
                       else "target not among the 50 hits of any query")
    return res


_ENVS: dict[str, WebShopEnv] = {}


def expert_actions(task: Task) -> list[str]:
    """The expert's action sequence for a WebShop task, computed by playing it through a
    ``text``-mode environment on the task's own data source (``payload["source"]``); the
    expert is ``payload["expert"]`` (:data:`EXPERT_MODES`; ``env.webshop_expert``, absent =
    ``"reference"``).

    Raises:
        ValueError: the task is not a WebShop task with a data source, or names an unknown expert.
    """
    payload = task.payload if isinstance(task.payload, dict) else {}
    src = payload.get("source")
    if not src:
        raise ValueError(f"task {task.task_id!r} has no WebShop data source in its payload")
    source = DataSource.from_dict(src)
    env = _ENVS.get(source.key)
    if env is None:
        env = WebShopEnv(catalog=get_catalog(source, cache_root=payload.get("cache_root")))
        _ENVS[source.key] = env
    return play_expert(env, task, payload.get("expert", "reference")).actions


def expert_detour(plan: list[str], first_obs, rng, open_prob: float = 0.0) -> list[str]:
    """A hasty expert (``train.sft_detour_prob``: the fraction of the WebShop demonstrations made
    hasty): the plan with its last option click left out, so it buys with one option value that
    the instruction names missing, and the purchase fails (its option match falls below 1).

    Args:
        plan: an expert plan, ``[search[...], click[next >]*, click[<product id>], click[<value>]*,
            click[buy now]]`` (:func:`expert_actions`).
        first_obs, rng, open_prob: unused (the signature of ALFWorld's ``expert_detour``).

    Returns:
        A new list: the plan without its last option click; the plan unchanged when it clicks no
        option or does not end with a purchase.
    """
    clicks = [i for i, a in enumerate(plan) if a.startswith("click[") and a != "click[next >]"]
    if not clicks or plan[-1] != "click[buy now]" or clicks[-1] - clicks[0] < 2:
        return list(plan)
    last_option = len(plan) - 2  # [..., click[<product>], click[<value>]..., click[buy now]]
    return plan[:last_option] + plan[last_option + 1:]
