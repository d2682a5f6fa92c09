"""AppWorld (Trivedi et al., ACL 2024): apps driven by Python code cells, with the benchmark
interface of :mod:`g2po_bench.benchmarks.registry`.

Modules (one concept each): :mod:`~g2po_bench.benchmarks.appworld.runtime` (the AppWorld interpreter,
a client of one world-server process with hard time limits), :mod:`~g2po_bench.benchmarks.appworld.server`
(the world server, run under the AppWorld interpreter), :mod:`~g2po_bench.benchmarks.appworld.env`
(the environment), :mod:`~g2po_bench.benchmarks.appworld.prompt` (prompt, ``<code>`` extraction, expert
responses), :mod:`~g2po_bench.benchmarks.appworld.synthetic` (small tasks built from the package's own
app factories), :mod:`~g2po_bench.benchmarks.appworld.download` (the data download).

Data (``env.data_dir``): a folder holding AppWorld's ``data/`` (what ``appworld download
data`` writes into its root, i.e. ``$APPWORLD_ROOT``). None = the embedded default: the
:func:`~g2po_bench.benchmarks.appworld.synthetic.smoke_specs` tasks, built once into
``env.appworld_generated_dir`` (about 30 s; the CPU smoke preset ``appworld_cpu``).

Splits: the names of ``data/datasets/<split>.txt`` (official: ``train``, ``dev``,
``test_normal``, ``test_challenge``; the reference trains on ``train`` and validates on
``test_normal``). ``env.appworld_difficulties`` keeps only tasks of these difficulty levels
(the reference uses ``load_task_ids(split, difficulty=1) + load_task_ids(split, difficulty=2)``,
i.e. ``[1, 2]``; empty = all).

Score: the ``score`` of an evaluation is the scenario goal completion (SGC, %): a scenario
(the part of the task id before ``_``) counts when every episode of every one of its tasks
on the panel succeeded (:func:`episode_set_score`); success is the task goal completion
(TGC). Which of the two the paper's Table 2 "score" column is, is not published; SGC <= TGC
matches its numbers (score < success in every row).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from g2po_bench.benchmarks.appworld.download import download_appworld
from g2po_bench.benchmarks.appworld.env import AppWorldEnv
from g2po_bench.benchmarks.appworld.prompt import build_prompt, expert_response, parse_response
from g2po_bench.benchmarks.appworld.runtime import (
    AppWorldDataMissing,
    AppWorldUnavailable,
    check_data_root,
    find_python,
)
from g2po_bench.benchmarks.appworld.synthetic import ensure_built, load_specs, smoke_specs
from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.core.config import require
from g2po_bench.core.protocol import Task

__all__ = [
    "TASK_TYPES",
    "load_tasks",
    "make_env",
    "build_prompt",
    "parse_response",
    "expert_actions",
    "expert_response",
    "episode_set_score",
    "data_root",
    "AppWorldEnv",
    "AppWorldDataMissing",
    "AppWorldUnavailable",
    "AppWorldBenchmark",
    "BENCHMARK",
]

TASK_TYPES = ("appworld",)


def data_root(cfg: Any, *, build: bool = False) -> Path:
    """The folder holding ``data/`` for an ``EnvConfig``: ``data_dir``, else the synthetic
    default under ``appworld_generated_dir`` (built first when ``build``).

    Raises:
        AppWorldDataMissing: ``data_dir`` holds no AppWorld data (names the download command).
        AppWorldUnavailable: building the default needs the AppWorld interpreter.
    """
    if cfg.data_dir:
        return check_data_root(cfg.data_dir)
    root = Path(cfg.appworld_generated_dir).expanduser().resolve()
    if build:
        ensure_built(root, smoke_specs(), find_python(cfg.appworld_python))
    return root


def _read_split(root: Path, split: str) -> list[str]:
    path = root / "data" / "datasets" / f"{split}.txt"
    if not path.exists():
        have = sorted(p.stem for p in (root / "data" / "datasets").glob("*.txt"))
        raise ValueError(f"unknown AppWorld split {split!r}: no {path}; splits here: {', '.join(have) or 'none'}")
    # appworld.load_task_ids: one id a line, an optional ":tag" suffix removed
    return [line.strip().split(":")[0] for line in path.read_text().splitlines() if line.strip()]


def _difficulty(root: Path, task_id: str) -> int:
    import json

    meta = root / "data" / "tasks" / task_id / "ground_truth" / "metadata.json"
    if not meta.exists():
        return 0
    return int(json.loads(meta.read_text()).get("difficulty", 0))


def load_tasks(cfg: Any, split: str) -> list[Task]:
    """The tasks of a split in file order (deterministic).

    Task ids are AppWorld's (``<scenario>_<n>``); ``task_type`` is ``"appworld"``; the
    payload holds ``difficulty``, ``scenario`` and, for synthetic tasks, the expert
    ``solution`` cells.

    Raises:
        ValueError: unknown split, ``task_types`` without ``appworld``, or a difficulty filter
            that leaves no task.
        AppWorldDataMissing / AppWorldUnavailable: see :func:`data_root`.
    """
    types = list(cfg.task_types or [])
    if types and "appworld" not in types:
        raise ValueError(f"env.task_types {types} selects no AppWorld task; AppWorld has one type: appworld")
    root = data_root(cfg, build=True)
    ids = _read_split(root, split)
    specs = load_specs(root)
    wanted = [int(d) for d in (cfg.appworld_difficulties or [])]
    tasks = []
    for tid in ids:
        d = _difficulty(root, tid)
        if wanted and d not in wanted:
            continue
        tasks.append(Task(task_id=tid, task_type="appworld", env="appworld",
                          payload={"difficulty": d, "scenario": tid.split("_")[0],
                                   "solution": list(specs.get(tid, {}).get("solution", []))}))
    if not tasks:
        raise ValueError(f"AppWorld split {split!r} at {root} has no task with difficulty in {wanted}")
    return tasks


def make_env(cfg: Any) -> AppWorldEnv:
    """An AppWorld environment for an ``EnvConfig`` (cheap: the world server starts at the
    first reset; ``appworld_python``, ``appworld_max_interactions``,
    ``appworld_timeout_seconds``, ``appworld_cell_timeout``)."""
    return AppWorldEnv(
        data_root(cfg),
        python=cfg.appworld_python,
        max_interactions=int(cfg.appworld_max_interactions),
        timeout_seconds=int(cfg.appworld_timeout_seconds),
        cell_timeout=float(cfg.appworld_cell_timeout),
    )


def expert_actions(task: Task) -> list[str]:
    """The expert code cells of a synthetic task (its spec's ``solution``, carried in the
    payload); [] for official tasks (their ground-truth solutions are not used)."""
    return list((task.payload or {}).get("solution", []))


def episode_set_score(trajectories: Sequence[dict[str, Any]]) -> float | None:
    """Scenario goal completion in % (module docstring, "Score"); None without trajectories."""
    by_scenario: dict[str, list[bool]] = {}
    for t in trajectories:
        by_scenario.setdefault(str(t["task_id"]).split("_")[0], []).append(bool(t["success"]))
    if not by_scenario:
        return None
    return 100.0 * sum(all(v) for v in by_scenario.values()) / len(by_scenario)


class AppWorldBenchmark(Benchmark):
    """AppWorld as the suite's benchmark: code-cell actions (``<code>``), the scenario goal
    completion as the evaluation score, its settings (``env.appworld_*``) and its data download."""

    name = "appworld"
    task_types = TASK_TYPES
    projection = "appworld"
    action_tag = "code"
    reference_max_steps = 30  # the papers' step limit (the GPU presets' env.max_steps)
    agent_intro = (
        "You are a super intelligent AI assistant who achieves your supervisor's day-to-day tasks "
        'autonomously by writing Python code that runs in a REPL, one code cell at a time; the '
        'environment answers every cell with its output. Apps are reached through '
        '`apis.<app>.<api>(...)`: `apis.api_docs.show_app_descriptions()`, '
        '`apis.api_docs.show_api_descriptions(app_name=...)` and '
        '`apis.api_docs.show_api_doc(app_name=..., api_name=...)` document them; account passwords '
        "are in `apis.supervisor.show_account_passwords()`. Do not use try/except or '...'. When "
        'the task is done, call `apis.supervisor.complete_task()` (with `answer=...` when the task '
        'asks a question).'
    )
    downloads = True

    # the package's functions are the protocol's required parts
    load_tasks = staticmethod(load_tasks)
    make_env = staticmethod(make_env)
    build_prompt = staticmethod(build_prompt)
    expert_actions = staticmethod(expert_actions)
    expert_response = staticmethod(expert_response)

    # the code of a response's ``<code>...</code>`` cell, not the reference projection
    parse_response = staticmethod(parse_response)

    def validate_config(self, cfg) -> None:
        """The base checks and AppWorld's limits and difficulty levels."""
        super().validate_config(cfg)
        env = cfg.env
        require(env.appworld_max_interactions >= 1, "env.appworld_max_interactions", "must be >= 1")
        require(env.appworld_timeout_seconds >= 1, "env.appworld_timeout_seconds", "must be >= 1 (seconds)")
        require(env.appworld_cell_timeout > 0, "env.appworld_cell_timeout", "must be > 0 (seconds)")
        for d in env.appworld_difficulties:
            require(d in (1, 2, 3), "env.appworld_difficulties", f"{d!r}; AppWorld difficulties are 1, 2 and 3")

    def episode_set_score(self, trajectories):
        return episode_set_score(trajectories)

    def download(self, dest):
        """``appworld download data`` with ``dest`` as the AppWorld root (it will hold ``data/``)."""
        return download_appworld(dest)

    def describe_data(self, path):
        return f"{path}/data (the AppWorld root is {path}; or set APPWORLD_ROOT={path})"


BENCHMARK = AppWorldBenchmark()
