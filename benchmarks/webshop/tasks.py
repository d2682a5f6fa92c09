"""WebShop's tasks and environments from an ``EnvConfig``: the data source, one task per goal,
the splits' tasks, and the environment (the benchmark interface's data half)."""

from __future__ import annotations

import functools

from g2po_bench.benchmarks.webshop.catalog import (
    DataSource,
    default_cache_root,
    get_catalog,
    resolve_source,
)
from g2po_bench.benchmarks.webshop.env import WebShopEnv
from g2po_bench.benchmarks.webshop.goals import Goal
from g2po_bench.core.config import EnvConfig
from g2po_bench.core.protocol import Task, state_key_rule

__all__ = ["TASK_TYPES", "PROJECTION", "source_for", "task_for_goal", "load_tasks", "make_env"]

TASK_TYPES = ("webshop",)
#: the reference action projection (verl-agent ``webshop_projection``: 20-character fallback)
PROJECTION = "webshop"


def source_for(cfg: EnvConfig) -> DataSource:
    """The data source of an ``EnvConfig`` (``data_dir``; None = synthetic catalogue with
    ``generated_seed``/``generated_eval_games``/``generated_train_games``).

    Raises:
        g2po_bench.benchmarks.webshop.products.ProductDataError: no product file where ``data_dir`` points.
    """
    return resolve_source(
        cfg.data_dir,
        cache_root=cfg.cache_dir,
        seed=int(cfg.generated_seed),
        n_eval=int(cfg.generated_eval_games),
        n_train=int(cfg.generated_train_games),
    )


def task_for_goal(goal: Goal, source: DataSource, split: str = "", cache_root: str | None = None,
                  expert: str = "reference") -> Task:
    """The Task of one goal: id ``webshop/goal_<index>`` (``webshop/human_<index>`` for human
    goals), payload = the goal dict plus ``source``, ``split`` and ``cache_root``, and
    ``expert`` (the expert of :func:`~g2po_bench.benchmarks.webshop.expert.expert_actions`)
    when it is not ``"reference"``."""
    payload = goal.to_dict()
    payload.update({"source": source.to_dict(), "split": split, "cache_root": cache_root})
    if expert != "reference":
        payload["expert"] = expert
    prefix = "human" if goal.kind == "human" else "goal"
    return Task(task_id=f"webshop/{prefix}_{goal.index:05d}", task_type="webshop", env="webshop",
                payload=payload)


def load_tasks(cfg: EnvConfig, split: str) -> list[Task]:
    """The tasks of a split, in goal-index order (deterministic; goals are computed once
    per catalogue, never per worker).

    Args:
        cfg: an ``EnvConfig`` (``data_dir``, generated settings, ``task_types``,
            ``webshop_expert``).
        split: a split name (module docstring).

    Raises:
        ValueError: unknown split, or ``task_types`` without ``webshop``.
        g2po_bench.benchmarks.webshop.products.ProductDataError: missing data (names the download command).
    """
    types = list(cfg.task_types or [])
    if types and "webshop" not in types:
        raise ValueError(f"env.task_types {types} selects no WebShop task; WebShop has one type: webshop")
    source = source_for(cfg)
    cache_root = str(default_cache_root(cfg.cache_dir))
    catalog = get_catalog(source, cache_root=cache_root)
    return [task_for_goal(g, source, split, cache_root, cfg.webshop_expert) for g in catalog.goals_for(split)]


def make_env(cfg: EnvConfig) -> WebShopEnv:
    """A WebShop environment for an ``EnvConfig`` (``webshop_observation_mode``,
    ``state_key``, ``webshop_reward``, ``webshop_nouns``, ``webshop_train_reward``). Cheap: nothing is read until the first reset, which takes the data
    source from the task payload (or from ``cfg`` when needed); the catalogue and the search
    index then come from the process cache, else from disk."""
    return WebShopEnv(
        None,
        observation_mode=cfg.webshop_observation_mode,
        state_key=state_key_rule(cfg),
        cache_root=default_cache_root(cfg.cache_dir),
        source_factory=functools.partial(source_for, cfg),
        reward_mode=cfg.webshop_reward,
        nouns=cfg.webshop_nouns,
        train_reward=cfg.webshop_train_reward,
    )
