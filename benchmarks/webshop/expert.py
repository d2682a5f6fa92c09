"""A scripted WebShop expert: search, open the target, choose the goal options, buy.

The expert knows the goal (the target ASIN and options) and may look at the search engine
to pick its query, but acts only through the environment:

1. query: the first of these that puts the target among the 50 hits, the earliest page
   winning: the instruction text, the target's title, the goal's scraping query (``[``
   and ``]`` removed, since they would break the action syntax). If none finds it, the
   instruction is searched anyway (the episode then fails at the purchase).
2. ``search[query]``, ``click[next >]`` until the target's page, ``click[<asin>]``;
3. ``click[value]`` for each goal option value (synthetic goals: exact values; human goals:
   the product option value with the best ``token_set_ratio`` above 85, skipped otherwise);
4. ``click[buy now]``.

:func:`expert_actions` returns the actions actually taken through a fresh environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from thefuzz import fuzz

from g2po_bench.benchmarks.webshop.catalog import Catalog, DataSource, get_catalog
from g2po_bench.benchmarks.webshop.env import WebShopEnv
from g2po_bench.benchmarks.webshop.goals import Goal
from g2po_bench.benchmarks.webshop.search import PRODUCT_WINDOW, SEARCH_RETURN_N
from g2po_bench.core.protocol import Observation, Task

__all__ = ["ExpertResult", "plan_query", "play_expert", "expert_actions"]


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


def _option_clicks(catalog: Catalog, goal: Goal) -> list[str]:
    product = catalog.by_asin[goal.asin]
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


def play_expert(env: WebShopEnv, task: Task) -> ExpertResult:
    """Play the expert on ``task`` through ``env`` (reset included)."""
    res = ExpertResult()
    obs = env.reset(task)
    goal = env.goal
    assert goal is not None
    catalog = env.catalog
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
        res.failure = "target not among the 50 hits of any query"
    return res


_ENVS: dict[str, WebShopEnv] = {}


def expert_actions(task: Task) -> list[str]:
    """The expert's action sequence for a WebShop task, computed by playing it through a
    ``text``-mode environment on the task's own data source (``payload["source"]``).

    Raises:
        ValueError: the task is not a WebShop task with a data source.
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
    return play_expert(env, task).actions
