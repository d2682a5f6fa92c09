"""Memory of an environment worker over many resets on distinct games, with and without recycling.

Usage::

    python -m g2po_bench.benchmarks.worker_memory --data ../shared/data/alfworld            # 1,000 resets, 474 official games
    python -m g2po_bench.benchmarks.worker_memory --data ../shared/data/alfworld --max-episodes 0   # no recycling
    python -m g2po_bench.benchmarks.worker_memory --resets 300 --every 50 --max-episodes 100
    python -m g2po_bench.benchmarks.worker_memory --env toy --resets 1000
    # one worker of the CPU default's training (64 slots, 16 games x 4 slots per iteration, 15 steps):
    python -m g2po_bench.benchmarks.worker_memory --data results/cache/alfworld_generated --splits train \
        --slots 64 --group 4 --steps 15 --resets 1280 --every 64 --max-episodes 0

One :class:`g2po_bench.runtime.workers.EnvPool` worker plays rounds: each round resets its
``--slots`` environments on the next ``slots / group`` games of ``--splits`` (``--group`` slots per
game, as the slots of one task group; distinct games first, then again from the start) and takes up
to ``--steps`` random admissible actions in every slot; every ``--every`` resets it prints the
worker's resident memory (RSS, MiB, measured inside the worker) and how many times the worker was
recycled. ``--max-episodes K`` recycles the worker after K episodes (the trainer's
``env.worker_max_episodes``); 0 = never. The defaults (one slot, one game per round) reset one
environment on one game after another.

What an ALFWorld worker keeps per distinct game is bounded
(:mod:`g2po_bench.benchmarks.alfworld.engine`, "Memory"): without recycling its RSS levels off once
the per-game memos are full instead of growing with every game, and recycling bounds whatever else
a worker accumulates.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from types import SimpleNamespace

from g2po_bench.benchmarks.alfworld.games import find_games
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.core.protocol import Task
from g2po_bench.runtime.workers import EnvPool

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
            steps: int = 2, seed: int = 0, printer=print, *, slots: int = 1,
            group: int = 1) -> list[dict[str, float]]:
    """Run the measurement (module docstring); returns one row per ``every`` resets: ``{"resets",
    "games" (distinct so far), "rss_mib" (worker RSS), "recycled", "seconds"}`` (also printed).

    Raises:
        ValueError: ``group`` does not divide ``slots``.
    """
    if slots < 1 or group < 1 or slots % group:
        raise ValueError(f"--slots {slots} must be a positive multiple of --group {group}")
    tasks, env_cfg = _tasks(env, data, splits)
    rng = random.Random(seed)
    rows = []
    t0 = time.time()
    with EnvPool(get_benchmark(env), env_cfg, num_workers=1, max_episodes=max_episodes) as pool:
        printer(f"{env}: {len(tasks)} distinct games, {resets} resets, {steps} random steps each, "
                f"{slots} slot(s), {group} per game, recycling after {max_episodes or 'never'} episodes")
        printer(f"{'resets':>7} {'games':>6} {'RSS MiB':>8} {'recycled':>8} {'seconds':>8}")
        rss0 = pool.probe()[0]["rss_bytes"] / 2**20
        printer(f"{0:>7} {0:>6} {rss0:>8.1f} {0:>8} {0.0:>8.1f}")
        done, games = 0, 0
        while done < resets:
            n = min(slots, resets - done)
            items = []
            for slot in range(n):
                if slot % group == 0:
                    games += 1
                items.append((slot, tasks[(games - 1) % len(tasks)]))
            live = pool.reset(items)
            for _ in range(steps):
                live = {s: o for s, o in live.items() if not o.done}
                if not live:
                    break
                live = pool.step([(s, rng.choice(o.admissible_actions or ["look"])) for s, o in sorted(live.items())])
            before, done = done, done + n
            if done // every > before // every or done == resets:
                rss = pool.probe()[0]["rss_bytes"] / 2**20
                row = {"resets": done, "games": min(games, len(tasks)), "rss_mib": rss, "recycled": pool.recycled,
                       "seconds": time.time() - t0}
                rows.append(row)
                printer(f"{done:>7} {row['games']:>6} {rss:>8.1f} {pool.recycled:>8} {row['seconds']:>8.1f}")
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
    p.add_argument("--slots", type=int, default=1, help="environments in the worker, reset together each round")
    p.add_argument("--group", type=int, default=1, help="slots per game in a round (a task group's share)")
    a = p.parse_args(argv)
    if a.data is not None and not Path(a.data).exists():
        p.error(f"--data {a.data!r} does not exist")
    if a.resets < 1 or a.every < 1 or a.max_episodes < 0:
        p.error("--resets and --every must be >= 1, --max-episodes >= 0")
    if a.slots < 1 or a.group < 1 or a.slots % a.group:
        p.error(f"--slots {a.slots} must be a positive multiple of --group {a.group}")
    measure(a.env, a.data, a.splits, a.resets, a.every, a.max_episodes, a.steps, a.seed, slots=a.slots,
            group=a.group)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
