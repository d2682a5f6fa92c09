"""A generated game's stored parse (``game.parsed.pkl``: PDDL->SAS translations and grammar
parse, :func:`g2po_bench.benchmarks.alfworld.engine.save_parsed_game`): written by the generator, read
back before a load so the engine neither translates nor parses again, and the game plays exactly
as when it is translated and parsed from scratch; a stale, foreign or damaged file is ignored."""

from __future__ import annotations

import json
import pickle
import random
import shutil
import zlib
from pathlib import Path

import pytest

from g2po_bench.benchmarks.alfworld import engine
from g2po_bench.benchmarks.alfworld.env import AlfworldEnv
from g2po_bench.benchmarks.alfworld.games import PARSED_FILE, find_games
from g2po_bench.benchmarks.alfworld.generate import ensure_generated, generate_games
from g2po_bench.core.config import EnvConfig

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def games(tmp_path_factory):
    out = tmp_path_factory.mktemp("alfparsed")
    generate_games(out, "train", 3, seed=11, max_receptacles=4, workers=1)
    return sorted(find_games(out, "train"), key=lambda t: t.task_id)


def _fresh_memos() -> None:
    """An engine that has parsed nothing yet (as in a new worker process)."""
    engine.uninstall_caches()
    engine.install_caches()


@pytest.fixture
def count_translations(monkeypatch):
    """Counts fast-downward translations and grammar parses actually run."""
    import fast_downward.translate.translate as fd_translate
    import textworld.envs.pddl.logic as pddl_logic

    calls = {"sas": 0, "grammar": 0}
    real_sas = fd_translate.pddl_to_sas

    def sas(*a, **k):
        calls["sas"] += 1
        return real_sas(*a, **k)

    monkeypatch.setattr(fd_translate, "pddl_to_sas", sas)
    real_parse = pddl_logic._parse_and_convert if not engine._ORIGINALS else engine._ORIGINALS["logic_parse"]

    def parse(text, rule_name=None, **k):
        calls["grammar"] += 1
        return real_parse(text, rule_name=rule_name, **k)

    engine.uninstall_caches()
    monkeypatch.setattr(pddl_logic, "_parse_and_convert", parse)
    engine.install_caches()  # the memoizing wrappers call the counting original
    yield calls
    engine.uninstall_caches()
    monkeypatch.undo()
    engine.install_caches()


def _play(task, actions=None, seed=0):
    """Observation texts, admissible actions, rewards along the walkthrough with random detours."""
    env = AlfworldEnv(state_key="raw")
    walkthrough = json.loads(Path(task.payload).read_text())["walkthrough"]
    rng = random.Random(seed)
    obs = env.reset(task)
    out = [(obs.text, tuple(obs.admissible_actions))]
    taken = []
    plan = iter(walkthrough)
    for i in range(40):
        a = actions[i] if actions is not None else (
            next(plan, None) if i % 2 else rng.choice(obs.admissible_actions))
        if a is None:
            break
        taken.append(a)
        obs = env.step(a)
        out.append((obs.text, tuple(obs.admissible_actions), obs.reward, obs.done))
        if obs.done or (actions is not None and i + 1 == len(actions)):
            break
    env.close()
    return out, taken


def test_generator_writes_the_parsed_game_of_every_game(games):
    assert len(games) == 3
    for task in games:
        parsed = Path(task.payload).with_name(PARSED_FILE)
        assert parsed.is_file() and parsed.stat().st_size > 1000


def test_a_load_with_the_parsed_game_plays_the_same_without_translating(games, count_translations):
    for task in games:
        _fresh_memos()
        # from scratch: the parsed file hidden
        parsed = Path(task.payload).with_name(PARSED_FILE)
        hidden = parsed.with_name("hidden.pkl")
        parsed.rename(hidden)
        try:
            before = dict(count_translations)
            scratch, actions = _play(task)
            assert count_translations["sas"] - before["sas"] == 2  # optimize off and on
            assert count_translations["grammar"] - before["grammar"] == 1
        finally:
            hidden.rename(parsed)
        _fresh_memos()
        before = dict(count_translations)
        stored, _ = _play(task, actions)
        assert count_translations == before, "the stored parse was not used"
        assert stored == scratch
        assert len(actions) >= 4 and scratch[-1][-1] in (True, False)


def test_a_damaged_or_foreign_parsed_file_is_ignored(games, tmp_path, count_translations):
    task, other = games[0], games[1]
    scratch, actions = _play(task)
    game_dir = tmp_path / "game"
    shutil.copytree(Path(task.payload).parent, game_dir)
    copy = type(task)(task.task_id, task.task_type, task.env, str(game_dir / Path(task.payload).name))
    for content in (b"not a pickle", b"", Path(other.payload).with_name(PARSED_FILE).read_bytes()):
        (game_dir / PARSED_FILE).write_bytes(content)
        _fresh_memos()
        before = count_translations["sas"]
        assert engine.load_parsed_game(game_dir / PARSED_FILE) is (len(content) > 100)
        assert _play(copy, actions)[0] == scratch
        assert count_translations["sas"] - before == 2  # translated as usual


@pytest.mark.parametrize("workers", [1, 2])
def test_a_folder_generated_before_stored_parses_gets_them_once(tmp_path, workers, capsys):
    cfg = EnvConfig(generated_dir=str(tmp_path / "gen"), generated_train_games=3, generated_eval_games=1,
                    generated_max_receptacles=3, task_types=["pick_and_place_simple"])
    root = ensure_generated(cfg, workers=1, progress=False)
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["parsed"] == engine.PARSED_GAME_FORMAT
    parsed = sorted(root.rglob(PARSED_FILE))
    assert len(parsed) == 4
    original = {p: p.read_bytes() for p in parsed}
    games = {p: p.with_name("game.tw-pddl").read_bytes() for p in parsed}
    # as the generator left a folder before it stored parses
    for p in parsed:
        p.unlink()
    del manifest["parsed"]
    (root / "manifest.json").write_text(json.dumps(manifest))
    assert ensure_generated(cfg, workers=workers, progress=True) == root
    assert "storing the parse of ALFWorld games" in capsys.readouterr().err
    assert json.loads((root / "manifest.json").read_text())["parsed"] == engine.PARSED_GAME_FORMAT
    for p in parsed:
        assert p.with_name("game.tw-pddl").read_bytes() == games[p]  # the games are untouched
        new, old = (pickle.loads(zlib.decompress(b)) for b in (p.read_bytes(), original[p]))
        assert new["grammar"].keys() == old["grammar"].keys()
        assert {k: v[1] for k, v in new["sas"].items()} == {k: v[1] for k, v in old["sas"].items()}
    stamp = (root / "manifest.json").stat().st_mtime_ns
    assert ensure_generated(cfg, workers=workers, progress=False) == root
    assert (root / "manifest.json").stat().st_mtime_ns == stamp  # once


def test_a_parsed_file_already_in_the_memos_is_not_read_again(games, monkeypatch):
    parsed = Path(games[0].payload).with_name(PARSED_FILE)
    reads = []
    real = zlib.decompress
    monkeypatch.setattr(engine.zlib, "decompress", lambda b: reads.append(len(b)) or real(b))
    _fresh_memos()
    assert engine.load_parsed_game(parsed) and engine.load_parsed_game(parsed)
    assert len(reads) == 1  # the second slot of the same game: memo hit, no read
    engine._SAS_MEMO.clear()  # evicted (the memos keep the most recent games only)
    assert engine.load_parsed_game(parsed)
    assert len(reads) == 2
    engine.forget_games()
    assert engine.load_parsed_game(parsed)
    assert len(reads) == 3


def _task_sentences() -> list[str]:
    """Task sentences of every kind the generator writes (one per task type and a few objects)."""
    return [
        "put a mug in cabinet", "put some apple in fridge", "look at alarmclock under the desklamp",
        "clean some cloth and put it in countertop", "heat some egg and put it in garbagecan",
        "cool some bread and put it in diningtable", "put two soapbar in toilet",
        "find two pen and put them in drawer", "examine the book with the floorlamp",
    ]


def test_a_task_grammar_made_from_the_template_equals_its_full_parse():
    """`remember_task_grammar` (the generator's shortcut: the template's parse with the task rule
    parsed anew) gives exactly what textworld's parse of the whole game grammar gives."""
    from g2po_bench.benchmarks.alfworld.generate import _assets

    template = _assets().grammar
    _fresh_memos()
    full_parse = engine._ORIGINALS["logic_parse"]
    for task in _task_sentences():
        text = template.replace(engine.TASK_PLACEHOLDER, task)
        assert engine.remember_task_grammar(template, task), task
        made = engine._GRAMMAR_MEMO[(engine._digest(text), engine._GRAMMAR_RULE)]
        actions, grammar = made
        assert [str(sym) for sym in grammar._rules["task"][0].rhs] == [f"Your task is to: {task}."]
        assert pickle.dumps(made) == pickle.dumps(full_parse(text, rule_name=engine._GRAMMAR_RULE)), task
    # a sentence with grammar syntax, or a template of another shape, is left to the full parse
    assert not engine.remember_task_grammar(template, "put a #mug# in cabinet")
    assert not engine.remember_task_grammar(template.replace(engine.TASK_PLACEHOLDER, "x"), "put a mug in cabinet")
    _fresh_memos()


def test_generated_games_are_the_same_with_the_task_grammar_shortcut(tmp_path, monkeypatch):
    """Games, walkthroughs and stored parses are byte-identical with and without the shortcut."""
    import g2po_bench.benchmarks.alfworld.generate as gen

    def files(root: Path) -> dict[str, bytes]:
        out = {}
        for p in sorted(root.rglob("*")):
            if p.is_file():
                data = p.read_bytes()
                if p.name == PARSED_FILE:  # compare the stored objects, not the compressed bytes
                    data = pickle.dumps(pickle.loads(zlib.decompress(data)))
                out[str(p.relative_to(root))] = data
        return out

    _fresh_memos()
    generate_games(tmp_path / "with", "train", 6, seed=5, max_receptacles=2, workers=1)
    _fresh_memos()
    monkeypatch.setattr(gen, "remember_task_grammar", lambda template, task: False)
    generate_games(tmp_path / "without", "train", 6, seed=5, max_receptacles=2, workers=1)
    a, b = files(tmp_path / "with"), files(tmp_path / "without")
    assert len(a) == 18 and a.keys() == b.keys()
    assert all(a[k] == b[k] for k in a), [k for k in a if a[k] != b[k]]
    _fresh_memos()
