"""Memory of an environment worker over many resets on distinct games, with and without recycling.

Usage::

    python -m g2po_bench.benchmarks.worker_memory --data ../shared/data/alfworld            # 1,000 resets, 474 official games
    python -m g2po_bench.benchmarks.worker_memory --data ../shared/data/alfworld --max-episodes 0   # no recycling
    python -m g2po_bench.benchmarks.worker_memory --resets 300 --every 50 --max-episodes 100
    python -m g2po_bench.benchmarks.worker_memory --env toy --resets 1000

One :class:`g2po_bench.benchmarks.workers.EnvPool` worker resets one environment on the games of
``--splits`` in turn (distinct games first, then again from the start) and takes
``--steps`` random admissible actions after each reset; every ``--every`` resets it prints the
worker's resident memory (RSS, MiB, measured inside the worker) and how many times the worker
was recycled. ``--max-episodes K`` recycles the worker after K episodes (the trainer's
``env.worker_max_episodes``); 0 = never. Without recycling an ALFWorld worker grows by about
1.4 MiB per distinct game (textworld/alfworld keep per-game state alive); with it RSS stays
within one recycling period's growth.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from types import SimpleNamespace

from g2po_bench.benchmarks.alfworld.games import find_games
from g2po_bench.benchmarks.workers import EnvPool
from g2po_bench.core.protocol import Task

__all__ = ["measure", "main"]


def _tasks(env: str, data: str | None, splits: list[str]) -> tuple[list, object]:
    if env == "toy":

        tasks = [Task(task_id=f"corridor-{n}", task_type="corridor", env="toy", payload={"length": n})
                 for n in range(2, 50)]
        return tasks, None

    if data is None:
        raise SystemExit("--data: an ALFWorld data root is needed for --env alfworld "
                         "(e.g. ../shared/data/alfworld, or `g2po data download alfworld`)")
    tasks = [t for s in splits for t in find_games(data, s)]
    if not tasks:
        raise SystemExit(f"no games under {data} for splits {', '.join(splits)}")
    return tasks, SimpleNamespace(state_key="reference")


def measure(env: str, data: str | None, splits: list[str], resets: int, every: int, max_episodes: int,
            steps: int = 2, seed: int = 0, printer=print) -> list[dict[str, float]]:
    """Run the measurement; returns one row per ``every`` resets: ``{"resets", "games" (distinct
    so far), "rss_mib" (worker RSS), "recycled", "seconds"}`` (also printed)."""
    tasks, env_cfg = _tasks(env, data, splits)
    rng = random.Random(seed)
    rows = []
    t0 = time.time()
    with EnvPool(env, env_cfg, num_workers=1, max_episodes=max_episodes) as pool:
        printer(f"{env}: {len(tasks)} distinct games, {resets} resets, {steps} random steps each, "
                f"recycling after {max_episodes or 'never'} episodes")
        printer(f"{'resets':>7} {'games':>6} {'RSS MiB':>8} {'recycled':>8} {'seconds':>8}")
        rss0 = pool.probe()[0]["rss_bytes"] / 2**20
        printer(f"{0:>7} {0:>6} {rss0:>8.1f} {0:>8} {0.0:>8.1f}")
        for i in range(1, resets + 1):
            task = tasks[(i - 1) % len(tasks)]
            obs = pool.reset([(0, task)])[0]
            for _ in range(steps):
                if obs.done:
                    break
                obs = pool.step([(0, rng.choice(obs.admissible_actions or ["look"]))])[0]
            if i % every == 0 or i == resets:
                rss = pool.probe()[0]["rss_bytes"] / 2**20
                row = {"resets": i, "games": min(i, len(tasks)), "rss_mib": rss, "recycled": pool.recycled,
                       "seconds": time.time() - t0}
                rows.append(row)
                printer(f"{i:>7} {row['games']:>6} {rss:>8.1f} {pool.recycled:>8} {row['seconds']:>8.1f}")
    return rows


def main(argv: list[str] | None = None) -> int:
    """Command-line entry (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", choices=("alfworld", "toy"), default="alfworld")
    p.add_argument("--data", default=None, help="ALFWorld data root (e.g. ../shared/data/alfworld)")
    p.add_argument("--splits", nargs="+", default=["valid_train", "valid_seen", "valid_unseen"])
    p.add_argument("--resets", type=int, default=1000)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--max-episodes", type=int, default=256,
                   help="recycle the worker after this many episodes (0 = never); env.worker_max_episodes")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.data is not None and not Path(a.data).exists():
        p.error(f"--data {a.data!r} does not exist")
    if a.resets < 1 or a.every < 1 or a.max_episodes < 0:
        p.error("--resets and --every must be >= 1, --max-episodes >= 0")
    measure(a.env, a.data, a.splits, a.resets, a.every, a.max_episodes, a.steps, a.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
