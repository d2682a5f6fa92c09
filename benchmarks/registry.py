"""Benchmark lookup: the environment name of a config -> the benchmark module.

Every benchmark package (``benchmarks/<name>/__init__.py``) exports the same interface:

- ``load_tasks(cfg: EnvConfig, split: str) -> list[Task]`` (sorted, deterministic),
- ``make_env(cfg: EnvConfig) -> Environment`` (cheap, no download; runs in worker processes),
- ``build_prompt(obs, history, step, history_length) -> str``,
- ``expert_actions(task) -> list[str]`` (a winning action sequence, for warm starts and tests),
- ``expert_response(action, obs) -> str`` (the response text an expert would give),
- ``TASK_TYPES``: the reporting categories, in table order,
- ``PROJECTION`` (optional, default ``"alfworld"``): the name of the reference action
  projection that turns a response into the action (:data:`g2po_bench.benchmarks.parsing.PROJECTIONS`).

Optional: ``parse_response(text) -> ParsedAction`` (the benchmark's own action extraction;
default :func:`g2po_bench.benchmarks.parsing.parse_response`), ``episode_set_score(trajectories)``
(an evaluation ``score`` computed over all episodes, e.g. AppWorld's scenario completion),
``EPISODE_SCORE_DEFAULT`` (the score of an episode that ends without the environment reporting
one: WebShop's 0.0 for an episode that never buys, as the reference scores every episode; absent
or None: the environment reports no score, e.g. ALFWorld) and
``preload_worker_modules()`` (imports the environments' libraries in the process that forks the
environment workers, so that a new or recycled worker does not import them itself).
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["get_benchmark", "BENCHMARKS"]

BENCHMARKS = ("alfworld", "webshop", "appworld", "toy")


def get_benchmark(name: str) -> ModuleType:
    """Import ``benchmarks.<name>``. Raises ValueError for an unknown name."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown environment {name!r}; known: {', '.join(BENCHMARKS)}")
    return importlib.import_module(f"g2po_bench.benchmarks.{name}")
