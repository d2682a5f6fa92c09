"""WebShop (Yao et al., NeurIPS 2022): a faithful text-mode reimplementation on real or
synthetic products, with the benchmark interface of :mod:`g2po_bench.benchmarks.registry`.

Modules (one concept each): :mod:`~g2po_bench.benchmarks.webshop.products` (product records and
loaders), :mod:`~g2po_bench.benchmarks.webshop.goals` (goals, prices, shuffle, splits),
:mod:`~g2po_bench.benchmarks.webshop.catalog` (data sources, per-process catalogue),
:mod:`~g2po_bench.benchmarks.webshop.search` (bm25s search, caches), :mod:`~g2po_bench.benchmarks.webshop.pages`
(page text), :mod:`~g2po_bench.benchmarks.webshop.reward` and :mod:`~g2po_bench.benchmarks.webshop.nouns` (the
purchase reward), :mod:`~g2po_bench.benchmarks.webshop.env` (the environment),
:mod:`~g2po_bench.benchmarks.webshop.prompt` (prompt, expert responses), :mod:`~g2po_bench.benchmarks.webshop.expert`
(scripted expert), :mod:`~g2po_bench.benchmarks.webshop.synthetic` (embedded default catalogue),
:mod:`~g2po_bench.benchmarks.webshop.download` (user data download), :mod:`~g2po_bench.benchmarks.webshop.bench`.

Splits (``env.train_split`` / ``env.eval_split``; :mod:`~g2po_bench.benchmarks.webshop.goals`):
``test`` = shuffled goals 0-499, ``eval`` = 500-1499, ``train`` = 1500+, ``trainval`` =
500+ (what verl-agent/G2PO train on), ``all``; ``valid_seen``/``valid_unseen`` are aliases
of ``test`` and ``valid_train`` of ``eval``; prefix ``human_`` for human goals. In the
shared 1k setting the 415 products with an instruction give 6,910 synthetic goals (one per
option combination), so every split is filled: test 500, eval 1,000, train 5,410. The
synthetic default uses its own table (test = first ``env.generated_eval_games`` goals,
eval = the next as many, train = the next ``env.generated_train_games``).
"""

from __future__ import annotations

import functools
from typing import Any

from g2po_bench.benchmarks.webshop.catalog import (
    Catalog,
    DataSource,
    default_cache_root,
    get_catalog,
    resolve_source,
)
from g2po_bench.benchmarks.webshop.env import WebShopEnv
from g2po_bench.benchmarks.webshop.expert import expert_actions
from g2po_bench.benchmarks.webshop.goals import Goal
from g2po_bench.benchmarks.webshop.nouns import DEFAULT_NOUN_EXTRACTOR
from g2po_bench.benchmarks.webshop.prompt import build_prompt, expert_response
from g2po_bench.core.protocol import Task, state_key_rule

__all__ = [
    "TASK_TYPES",
    "PROJECTION",
    "EPISODE_SCORE_DEFAULT",
    "load_tasks",
    "make_env",
    "build_prompt",
    "expert_actions",
    "expert_response",
    "WebShopEnv",
    "Goal",
    "Catalog",
    "DataSource",
    "source_for",
    "task_for_goal",
]

TASK_TYPES = ("webshop",)
#: the score of an episode that never buys (step limit, refusals, a crash): 0, as the reference
#: (verl-agent's WebShop environment manager) scores every episode; the published "Score" column
#: is the mean over all episodes of reward x 100 (:mod:`g2po_bench.benchmarks.registry`)
EPISODE_SCORE_DEFAULT = 0.0
#: the reference action projection (verl-agent ``webshop_projection``: 20-character fallback)
PROJECTION = "webshop"


def source_for(cfg: Any) -> DataSource:
    """The data source of an ``EnvConfig`` (``data_dir``; None = synthetic catalogue with
    ``generated_seed``/``generated_eval_games``/``generated_train_games``).

    Raises:
        g2po_bench.benchmarks.webshop.products.ProductDataError: no product file where ``data_dir`` points.
    """
    return resolve_source(
        getattr(cfg, "data_dir", None),
        generated_dir=getattr(cfg, "generated_dir", None),
        seed=int(getattr(cfg, "generated_seed", 0)),
        n_eval=int(getattr(cfg, "generated_eval_games", 24)),
        n_train=int(getattr(cfg, "generated_train_games", 48)),
    )


def task_for_goal(goal: Goal, source: DataSource, split: str = "", cache_root: str | None = None) -> Task:
    """The Task of one goal: id ``webshop/goal_<index>`` (``webshop/human_<index>`` for human
    goals), payload = the goal dict plus ``source``, ``split`` and ``cache_root``."""
    payload = goal.to_dict()
    payload.update({"source": source.to_dict(), "split": split, "cache_root": cache_root})
    prefix = "human" if goal.kind == "human" else "goal"
    return Task(task_id=f"webshop/{prefix}_{goal.index:05d}", task_type="webshop", env="webshop",
                payload=payload)


def load_tasks(cfg: Any, split: str) -> list[Task]:
    """The tasks of a split, in goal-index order (deterministic; goals are computed once
    per catalogue, never per worker).

    Args:
        cfg: an ``EnvConfig`` (``data_dir``, generated settings, ``task_types``).
        split: a split name (module docstring).

    Raises:
        ValueError: unknown split, or ``task_types`` without ``webshop``.
        g2po_bench.benchmarks.webshop.products.ProductDataError: missing data (names the download command).
    """
    types = list(getattr(cfg, "task_types", None) or [])
    if types and "webshop" not in types:
        raise ValueError(f"env.task_types {types} selects no WebShop task; WebShop has one type: webshop")
    source = source_for(cfg)
    cache_root = str(default_cache_root(getattr(cfg, "generated_dir", None)))
    catalog = get_catalog(source, cache_root=cache_root)
    return [task_for_goal(g, source, split, cache_root) for g in catalog.goals_for(split)]


def make_env(cfg: Any) -> WebShopEnv:
    """A WebShop environment for an ``EnvConfig`` (``webshop_observation_mode``,
    ``state_key``, ``webshop_reward``, ``webshop_nouns``). Cheap: nothing is read until the first reset, which takes the data
    source from the task payload (or from ``cfg`` when needed); the catalogue and the search
    index then come from the process cache, else from disk."""
    return WebShopEnv(
        None,
        observation_mode=getattr(cfg, "webshop_observation_mode", "text"),
        state_key=state_key_rule(cfg),
        cache_root=default_cache_root(getattr(cfg, "generated_dir", None)),
        source_factory=functools.partial(source_for, cfg),
        reward_mode=getattr(cfg, "webshop_reward", "original"),
        nouns=getattr(cfg, "webshop_nouns", DEFAULT_NOUN_EXTRACTOR),
    )
