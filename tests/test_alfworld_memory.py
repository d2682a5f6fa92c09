"""What an ALFWorld engine keeps per game is bounded (issue 48, item 7): textworld's interned
propositions are dropped when a new game is loaded, and the per-game memos keep about one training
iteration of games; a game played after many others plays exactly as in a fresh process.

RSS figures over many games come from the benchmark, not from a test:
``python -m g2po_bench.benchmarks.worker_memory --data results/cache/alfworld_generated --splits train
--slots 64 --group 4 --steps 15 --resets 1280 --every 64 --max-episodes 0``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from g2po_bench.benchmarks.alfworld import engine, expert_actions
from g2po_bench.benchmarks.alfworld.env import AlfworldEnv
from g2po_bench.benchmarks.alfworld.games import find_games
from g2po_bench.benchmarks.alfworld.generate import generate_games
from g2po_bench.core.protocol import Task

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
NUM_GAMES = 20


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> list[Task]:
    out = tmp_path_factory.mktemp("alfmemory")
    generate_games(out, "train", NUM_GAMES, seed=5, max_receptacles=2, workers=1)
    tasks = sorted(find_games(out, "train"), key=lambda t: t.task_id)
    assert len(tasks) == NUM_GAMES
    return tasks


def _interned_propositions() -> set:
    """The keys of the propositions in textworld's interning cache (``mementos``)."""
    import mementos.core
    from textworld.logic import Proposition

    return {k for k in mementos.core._memento_cache if type(k) is tuple and k and k[0] is Proposition}


def _drop_interned_propositions() -> None:
    """Empty textworld's interning cache of propositions, as in a fresh process."""
    import mementos.core

    for k in _interned_propositions():
        del mementos.core._memento_cache[k]


def _play_random(env: AlfworldEnv, task: Task, rng: random.Random, steps: int = 6) -> None:
    obs = env.reset(task)
    for _ in range(steps):
        if obs.done:
            break
        obs = env.step(rng.choice(obs.admissible_actions))


def test_a_new_game_keeps_no_interned_facts_of_earlier_games(games):
    """textworld interns every proposition it builds, for good: before, each game played left its
    facts in the cache; now loading a new game drops them, so after 19 games and a reset on the
    20th the cache holds exactly what a reset on the 20th game alone interns."""
    env = AlfworldEnv()
    _drop_interned_propositions()
    env.reset(games[-1])
    alone = _interned_propositions()
    assert len(alone) > 20  # a game's facts are interned
    _drop_interned_propositions()
    rng = random.Random(0)
    for task in games[:-1]:
        _play_random(env, task, rng, steps=15)
    assert len(_interned_propositions() - alone) > 20  # the facts of the game being played
    env.reset(games[-1])
    kept = _interned_propositions() - alone
    assert not kept, f"{len(kept)} propositions of earlier games are still interned, e.g. {sorted(kept)[:2]}"
    assert _interned_propositions() == alone
    env.close()


@pytest.mark.skipif("G2PO_ALFWORLD_SAS_CACHE" in os.environ, reason="memo size overridden by the environment")
def test_the_per_game_memos_keep_about_one_iteration_of_games(games):
    """After 20 distinct games the memos hold the translations of the last 16 (two per game: a
    training iteration's task groups), not of the last 64, and the most recent game is among them
    (the slots of its group load it without translating or reading its stored parse again)."""
    engine.forget_games()
    env = AlfworldEnv()
    rng = random.Random(0)
    for task in games:
        _play_random(env, task, rng, steps=1)
    env.close()
    assert len(engine._SAS_MEMO) == 2 * 16
    assert len(engine._GRAMMAR_MEMO) <= 2 * 16 and len(engine._PARSED_READ) <= 2 * 16
    last = str(Path(games[-1].payload).with_name("game.parsed.pkl"))
    assert last in engine._PARSED_READ
    assert all(k in engine._SAS_MEMO for k in engine._PARSED_READ[last][1])


_FRESH = """
import json, sys
from g2po_bench.benchmarks.alfworld.env import AlfworldEnv
from g2po_bench.core.protocol import Task
payload, actions = sys.argv[1], json.loads(sys.argv[2])
env = AlfworldEnv()
o = env.reset(Task("t", "x", "alfworld", payload))
out = [[o.text, o.instruction, o.admissible_actions, o.state_key]]
for a in actions:
    o = env.step(a)
    out.append([o.text, o.admissible_actions, o.state_key, o.reward, o.done, o.won])
print(json.dumps(out))
"""


def test_a_game_played_after_many_others_plays_as_in_a_fresh_process(games):
    """The same game and actions give the same observations, admissible actions, keys, rewards and
    ends in a fresh interpreter, in an engine that played 19 other games before, and in an
    episode that goes on while another engine of the process loads new games (each load drops
    the interned facts this episode's state still holds)."""
    task, others = games[0], games[1:]
    rng = random.Random(3)
    plan = expert_actions(task)
    actions = []
    for a in plan:  # the walkthrough with a random action and a refused one before each step
        actions += [f"examine {rng.choice(['it', 'the room'])}", "jump around", a]

    def transcript(env: AlfworldEnv, pause=None) -> list:
        o = env.reset(task)
        out = [[o.text, o.instruction, list(o.admissible_actions), o.state_key]]
        for i, a in enumerate(actions):
            if pause is not None and i == len(actions) // 2:
                pause()
            o = env.step(a)
            out.append([o.text, list(o.admissible_actions), o.state_key, o.reward, o.done, o.won])
        return out

    proc = subprocess.run([sys.executable, "-c", _FRESH, task.payload, json.dumps(actions)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fresh = json.loads(proc.stdout.strip().splitlines()[-1])
    assert fresh[-1][-1] is True and any(row[0] == "Nothing happens." for row in fresh[1:])

    env = AlfworldEnv()
    for other in others:
        _play_random(env, other, rng)
    assert transcript(env) == fresh

    other_env = AlfworldEnv()
    dropped = []

    def load_other_games():
        for other in others[:3]:
            _play_random(other_env, other, rng)
            dropped.append(engine.release_interned_facts())

    assert transcript(env, pause=load_other_games) == fresh
    assert len(dropped) == 3 and min(dropped) > 0
    env.close()
    other_env.close()
