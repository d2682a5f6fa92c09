"""The real ALFWorld engine behind AlfworldEnv, on the official valid_seen games."""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path

import pytest

from g2po_bench.benchmarks.alfworld import TASK_TYPES, expert_actions, make_env
from g2po_bench.benchmarks.alfworld.engine import install_caches, split_intro, uninstall_caches
from g2po_bench.benchmarks.alfworld.env import AlfworldEnv
from g2po_bench.benchmarks.alfworld.games import find_games
from g2po_bench.benchmarks.alfworld.state_keys import format_state_text
from g2po_bench.core.config import EnvConfig
from g2po_bench.core.protocol import Task

pytestmark = pytest.mark.shared_data


@pytest.fixture(scope="module")
def tasks(shared_data: Path) -> list[Task]:
    path = shared_data / "alfworld"
    if not (path / "json_2.1.1" / "valid_seen").is_dir():
        msg = f"ALFWorld shared data not found at {path}"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return find_games(path, "valid_seen")


@pytest.fixture(scope="module")
def env() -> AlfworldEnv:
    e = AlfworldEnv(state_key="reference")
    yield e
    e.close()


def _shortest(tasks: list[Task], task_type: str) -> Task:
    """The game of a type with the fewest receptacles (fastest to load)."""
    of_type = [t for t in tasks if t.task_type == task_type]
    return min(of_type, key=lambda t: Path(t.payload).stat().st_size)


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_walkthrough_wins(tasks, env, task_type):
    task = _shortest(tasks, task_type)
    obs = env.reset(task)
    assert obs.text.startswith(
        "You are in the middle of a room. Looking quickly around you, you see "
    )
    assert obs.instruction.endswith(".") and "Your task is to" not in obs.instruction
    assert obs.reward == 0.0 and not obs.done and not obs.won
    assert obs.admissible_actions and "help" not in obs.admissible_actions
    assert obs.state_key == format_state_text(obs.text, obs.admissible_actions)
    walkthrough = expert_actions(task)
    for i, action in enumerate(walkthrough):
        obs = env.step(action)
        assert obs.text != "Nothing happens.", action
        last = i == len(walkthrough) - 1
        assert obs.done == last and obs.won == last
    assert obs.reward == 1.0
    with pytest.raises(RuntimeError):
        env.step("look")


def test_invalid_action_and_reset_switching(tasks, env):
    pick = _shortest(tasks, "pick_and_place_simple")
    look = _shortest(tasks, "look_at_obj_in_light")
    obs0 = env.reset(pick)
    bad = env.step("put the thing somewhere</action")
    assert bad.text == "Nothing happens."
    assert not bad.done and bad.reward == 0.0
    assert bad.state_key == obs0.state_key  # reference key: self-loop
    assert bad.admissible_actions == obs0.admissible_actions
    first = expert_actions(pick)[0]
    moved = env.step(first)
    assert moved.text.startswith("You arrive at")
    obs_look = env.reset(look)
    assert obs_look.instruction != obs0.instruction
    again = env.reset(pick)  # back to the first game: identical start
    assert (again.text, again.instruction, again.admissible_actions, again.state_key) == (
        obs0.text,
        obs0.instruction,
        obs0.admissible_actions,
        obs0.state_key,
    )
    intro_text, task = split_intro(again.info["intro"])
    assert (intro_text, task) == (again.text, again.instruction)


def test_raw_key_config_and_pickling(tasks):
    env = make_env(EnvConfig(state_key="raw"))
    clone = pickle.loads(pickle.dumps(env))
    task = _shortest(tasks, "pick_two_obj_and_place")
    obs = clone.reset(task)
    assert obs.state_key == obs.text
    assert clone.step("nonsense").state_key == "Nothing happens."
    clone.close()
    with pytest.raises(ValueError):
        make_env(EnvConfig(state_key="bogus"))


def test_caches_do_not_change_the_game(tasks):
    """The engine speed-ups (memoized parsing/translation, shallow context copies) give the
    same observations, admissible actions, keys and rewards as the plain engine."""
    task = min(tasks, key=lambda t: Path(t.payload).stat().st_size)  # a small bathroom
    walkthrough = expert_actions(task)

    def play(e: AlfworldEnv, actions: list[str] | None) -> tuple[list[tuple], list[str]]:
        rng = random.Random(0)
        o = e.reset(task)
        out = [(o.text, tuple(o.admissible_actions), o.state_key)]
        taken: list[str] = []
        for i in range(len(actions) if actions is not None else 24):
            if actions is not None:
                a = actions[i]
            elif i % 3 == 2 and i // 3 < len(walkthrough):
                a = walkthrough[i // 3]
            else:
                a = rng.choice([*o.admissible_actions, "help", "nonsense"])
            taken.append(a)
            o = e.step(a)
            out.append((o.text, tuple(o.admissible_actions), o.state_key, o.reward, o.done))
            if o.done:
                break
        return out, taken

    uninstall_caches()
    try:
        plain_env = AlfworldEnv(caches=False)
        plain, actions = play(plain_env, None)
        plain_env.close()
    finally:
        install_caches()
    cached_env = AlfworldEnv(caches=True)
    assert play(cached_env, actions)[0] == plain
    assert play(cached_env, actions)[0] == plain  # second reset: translation served from the cache
    cached_env.close()
    assert len(actions) >= 10


def test_closed_engines_hand_their_library_on_and_mappings_stay_bounded(tasks):
    """Issue 39, item 6 (AgentGym issue 62): every engine built and closed in one process left
    its own fast-downward library copy mapped (12 engines: 12 copies, RSS 83 -> 120 MB). A closed
    engine now hands its copy to the next one: after 3 engines open at once and 12 more built,
    played and closed one after the other, at most 3 more copies are mapped (read from
    /proc/self/maps), and a game played on a reused copy gives the same transcript as on a new one."""
    from g2po_bench.benchmarks.alfworld.engine import mapped_downward_libs

    if not Path("/proc/self/maps").exists():
        pytest.skip("needs /proc/self/maps")
    small = sorted(tasks, key=lambda t: Path(t.payload).stat().st_size)[:2]

    def play(e: AlfworldEnv, task: Task) -> list[tuple]:
        o = e.reset(task)
        out = [(o.text, tuple(o.admissible_actions))]
        for a in expert_actions(task):
            o = e.step(a)
            out.append((o.text, tuple(o.admissible_actions), o.reward, o.done))
        return out

    uninstall_caches()  # an empty pool: the first engines below load new copies
    install_caches()
    before = mapped_downward_libs()
    together = [AlfworldEnv() for _ in range(3)]
    fresh = [play(e, t) for e, t in zip(together, [small[0], small[1], small[0]])]
    assert fresh[0][-1][-1] is True and fresh[1][-1][-1] is True  # the walkthroughs win
    assert mapped_downward_libs() == before + 3
    for e in together:
        e.close()
    for i in range(12):
        e = AlfworldEnv()
        # the reused copy last held the other game (or the same one): same transcript as a new copy
        assert play(e, small[i % 2]) == fresh[i % 2]
        e.close()
    assert mapped_downward_libs() <= before + 3


def test_observation_key_rules_reproduce_the_environment_keys(tasks):
    """The rollout engine's key_rules compute both rules' keys from the observations alone
    (make_state_key_rule): they equal what AlfworldEnv keys with each rule, on a heat task (the
    reference key joins the heat message with the next one) with refused actions in between."""
    from g2po_bench.benchmarks.alfworld import BENCHMARK

    make_state_key_rule = BENCHMARK.make_state_key_rule
    task = _shortest(tasks, "pick_heat_then_place_in_recep")
    plan = []
    for a in expert_actions(task):
        plan += [a, "jump around"] if a.startswith("heat") else [a]
    for rule in ("reference", "raw"):
        env = AlfworldEnv(state_key=rule)
        other = "raw" if rule == "reference" else "reference"
        mine, theirs = make_state_key_rule(rule), make_state_key_rule(other)
        obs = env.reset(task)
        first = obs.text
        keys = [(obs.state_key, mine.reset(obs), theirs.reset(obs))]
        for a in plan:
            obs = env.step(a)
            keys.append((obs.state_key, mine.update(obs), theirs.update(obs)))
        env.close()
        assert obs.won
        assert all(k == m for k, m, _ in keys)
        if rule == "reference":
            assert any(" " in k and k.count("Admissible actions") == 2 for k, _, _ in keys)  # a joined key
            ref = [k for k, _, _ in keys]
        else:
            assert [t for _, _, t in keys] == ref  # the other rule, computed on the raw-keyed episode
            assert keys[0][0] == first and keys[1][0] != keys[1][2]  # raw: the observation text itself
    with pytest.raises(ValueError, match="unknown ALFWorld state key"):
        make_state_key_rule("fancy")


def test_copy_symbols_copies_what_the_deriver_rebinds():
    """The parse-tree copy of the engine caches: new symbol objects (nested ones too) with new
    context dicts, the same text; rebinding a copy's context leaves the original as it was."""
    pytest.importorskip("textworld")
    import textworld.envs.pddl.textgen as textgen

    from g2po_bench.benchmarks.alfworld.engine import copy_symbols

    tree = textgen._parse_and_convert("[{o.name | objectatlocation(o:object, r:receptacle)}] #look#",
                                      rule_name="symbols")
    copied = copy_symbols(tree)
    assert [repr(x) for x in copied] == [repr(x) for x in tree]
    for a, b in zip(tree, copied):
        assert a is not b and a.context is not b.context
    assert copied[0].symbol is not tree[0].symbol and copied[0].symbol.expression is not tree[0].symbol.expression
    copied[0].symbol.context = {"state": None}
    assert tree[0].symbol.context == {}

