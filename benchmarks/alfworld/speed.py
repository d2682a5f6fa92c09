"""Speed of the ALFWorld harness (``g2po bench alfworld``): reset time and environment steps per second.

Usage::

    python -m g2po_bench.benchmarks.alfworld.speed                      # generated games (temporary folder)
    python -m g2po_bench.benchmarks.alfworld.speed --data ../shared/data/alfworld --split valid_seen
    python -m g2po_bench.benchmarks.alfworld.speed --games 6 --steps 30 --seed 0

Plays ``--episodes`` episodes per game with uniformly random admissible actions (seeded) for
``--steps`` steps or until won, through :class:`g2po_bench.benchmarks.alfworld.env.AlfworldEnv`, and prints
the first reset of each game (load + translate), repeated resets (cached) and steps/s. With
generated games it also prints the generation time per game and the first reset of a game the
worker has not played (per-game memos empty, :func:`g2po_bench.benchmarks.alfworld.engine.forget_games`),
with the generator's stored parse (``game.parsed.pkl``) and without it.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path

from g2po_bench.benchmarks.alfworld import engine
from g2po_bench.benchmarks.alfworld.env import AlfworldEnv
from g2po_bench.benchmarks.alfworld.games import PARSED_FILE, TASK_TYPES, find_games
from g2po_bench.benchmarks.alfworld.generate import (
    generate_games,
    last_generation_stats,
)
from g2po_bench.core.arguments import ArgumentParser


def fresh_worker_reset_s(tasks, *, parsed: bool) -> float:
    """Mean seconds of a reset of each of ``tasks`` by an engine that has not played them (its
    per-game memos emptied), with the games' stored parse read (``parsed``) or hidden."""
    env = AlfworldEnv(state_key="reference")
    times = []
    for task in tasks:
        stored = Path(task.payload).with_name(PARSED_FILE)
        hidden = stored.with_name(f".{PARSED_FILE}.hidden")
        if not parsed and stored.exists():
            stored.rename(hidden)
        try:
            engine.forget_games()
            t0 = time.perf_counter()
            env.reset(task)
            times.append(time.perf_counter() - t0)
        finally:
            if hidden.exists():
                hidden.rename(stored)
    env.close()
    return statistics.mean(times)


def run(
    data: str | None, split: str, games: int, steps: int, episodes: int, seed: int
) -> dict[str, float]:
    """Run the benchmark; returns the measured numbers (also printed)."""
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if data is None:

            t0 = time.perf_counter()
            generate_games(tmp, "eval", games, seed, 6, workers=1)
            gen = time.perf_counter() - t0
            stats = last_generation_stats()
            results["generate_s_per_game"] = gen / max(1, games)
            results["generate_cpu_s_per_game"] = stats.get("cpu_seconds_per_game", float("nan"))
            print(
                f"generated {games} games in {gen:.2f} s ({gen / max(1, games):.3f} s/game wall, "
                f"{results['generate_cpu_s_per_game']:.3f} s/game CPU, 1 process, "
                f"{stats.get('attempts')} attempts incl. the first-game engine start)"
            )
            root, split = tmp, "eval"
        else:
            root = data
        tasks = find_games(root, split)
        by_type = {t: [x for x in tasks if x.task_type == t] for t in TASK_TYPES}
        chosen = []
        i = 0
        while len(chosen) < min(games, len(tasks)):  # round robin over task types
            for t in TASK_TYPES:
                if i < len(by_type[t]) and len(chosen) < games:
                    chosen.append(by_type[t][i])
            i += 1
        rng = random.Random(seed)
        env = AlfworldEnv(state_key="reference")
        first_resets, resets, step_times, step_cpu = [], [], [], []
        cpu0 = time.process_time()
        wins = 0
        for task in chosen:
            for ep in range(episodes):
                t0 = time.perf_counter()
                obs = env.reset(task)
                (first_resets if ep == 0 else resets).append(time.perf_counter() - t0)
                for _ in range(steps):
                    action = rng.choice(obs.admissible_actions or ["look"])
                    t0, c0 = time.perf_counter(), time.process_time()
                    obs = env.step(action)
                    step_times.append(time.perf_counter() - t0)
                    step_cpu.append(time.process_time() - c0)
                    if obs.done:
                        wins += 1
                        break
        cpu = time.process_time() - cpu0
        env.close()
        if data is None:
            results["fresh_reset_parsed_s"] = fresh_worker_reset_s(chosen, parsed=True)
            results["fresh_reset_unparsed_s"] = fresh_worker_reset_s(chosen, parsed=False)
    wall = sum(first_resets) + sum(resets) + sum(step_times)
    results.update(
        games=len(chosen),
        first_reset_s=statistics.mean(first_resets),
        reset_s=statistics.mean(resets) if resets else float("nan"),
        step_s=statistics.mean(step_times),
        steps_per_s=len(step_times) / sum(step_times),
        step_cpu_s=statistics.mean(step_cpu),
        random_wins=wins,
        cpu_share=cpu / wall if wall else float("nan"),
    )
    print(
        f"{len(chosen)} games ({'generated' if data is None else split}), {episodes} episodes each, "
        f"{len(step_times)} random steps\n"
        f"  first reset (load game): {results['first_reset_s'] * 1000:.0f} ms\n"
        f"  reset (game loaded):     {results['reset_s'] * 1000:.0f} ms\n"
        f"  step:                    {results['step_s'] * 1000:.1f} ms  -> {results['steps_per_s']:.1f} steps/s "
        f"(CPU time {results['step_cpu_s'] * 1000:.1f} ms/step -> {1 / results['step_cpu_s']:.1f} steps/s per core)\n"
        + (f"  first reset, new game:   {results['fresh_reset_parsed_s'] * 1000:.0f} ms with the stored parse "
           f"({PARSED_FILE}), {results['fresh_reset_unparsed_s'] * 1000:.0f} ms without\n"
           if "fresh_reset_parsed_s" in results else "")
        + f"  random-policy wins:      {wins}\n"
        f"  CPU time / wall time:    {results['cpu_share']:.2f} (well below 1 = other processes compete for the CPU)"
    )
    return results


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Command-line entry. ``argv`` None means ``sys.argv[1:]`` when run as
    ``python -m g2po_bench.benchmarks.alfworld.speed`` and no arguments (defaults) when called from
    another program (e.g. ``g2po bench alfworld``, which passes ``prog`` for its usage line)."""
    if argv is None and __name__ != "__main__":
        argv = []
    p = ArgumentParser(prog=prog or "python -m g2po_bench.benchmarks.alfworld.speed",
                       description=__doc__.splitlines()[0])
    p.add_argument(
        "--data",
        default=None,
        help="ALFWorld data root; default: generate games into a temp folder",
    )
    p.add_argument("--split", default="valid_seen")
    p.add_argument("--games", type=int, default=6)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--episodes", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.data is not None and not Path(a.data).exists():
        p.error(f"--data {a.data!r} does not exist")
    run(a.data, a.split, a.games, a.steps, a.episodes, a.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
