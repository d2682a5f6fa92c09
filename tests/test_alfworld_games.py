"""Discovery of ALFWorld games: layout variants, sorting, split/type filters and errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from g2po_bench.benchmarks.alfworld import TASK_TYPES, load_tasks
from g2po_bench.benchmarks.alfworld.games import (
    SHORT_NAMES,
    AlfworldDataError,
    available_splits,
    find_games,
    load_walkthrough,
)
from g2po_bench.core.config import EnvConfig


@pytest.fixture(scope="module")
def alfworld_root(shared_data: Path) -> Path:
    path = shared_data / "alfworld"
    if not (path / "json_2.1.1" / "valid_seen").is_dir():
        msg = f"ALFWorld shared data not found at {path}"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def _fake_game(
    root: Path, split: str, task: str, trial: str, solvable=True, walkthrough=("look",)
) -> Path:
    d = root / "json_2.1.1" / split / task / trial
    d.mkdir(parents=True)
    (d / "traj_data.json").write_text(json.dumps({"task_type": task.split("-")[0]}))
    game = {
        "pddl_domain": "",
        "grammar": "",
        "pddl_problem": "",
        "solvable": solvable,
        "walkthrough": list(walkthrough) if walkthrough else None,
    }
    (d / "game.tw-pddl").write_text(json.dumps(game))
    return d / "game.tw-pddl"


def test_task_types_order_and_short_names():
    assert [SHORT_NAMES[t] for t in TASK_TYPES] == [
        "Pick",
        "Look",
        "Clean",
        "Heat",
        "Cool",
        "Pick2",
    ]


@pytest.mark.shared_data
def test_valid_seen_sorted_and_complete(alfworld_root):
    tasks = find_games(alfworld_root, "valid_seen")
    assert len(tasks) == 140
    ids = [t.task_id for t in tasks]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert {t.task_type for t in tasks} == set(TASK_TYPES)
    t = tasks[0]
    assert t.env == "alfworld" and t.task_id.startswith("valid_seen/") and t.task_id.count("/") == 2
    assert Path(t.payload).name == "game.tw-pddl" and Path(t.payload).is_file()
    assert t.task_id.split("/")[1].startswith(t.task_type + "-")
    assert find_games(alfworld_root, "valid_seen") == tasks  # deterministic


@pytest.mark.shared_data
def test_filters_and_layout_variants(alfworld_root):
    heat = find_games(alfworld_root, "valid_seen", ["pick_heat_then_place_in_recep"])
    assert heat and all(t.task_type == "pick_heat_then_place_in_recep" for t in heat)
    two = find_games(
        alfworld_root, "valid_seen", ["look_at_obj_in_light", "pick_two_obj_and_place"]
    )
    assert {t.task_type for t in two} == {"look_at_obj_in_light", "pick_two_obj_and_place"}
    assert (
        find_games(alfworld_root / "json_2.1.1", "valid_seen", ["pick_heat_then_place_in_recep"])
        == heat
    )
    assert (
        find_games(
            alfworld_root / "json_2.1.1" / "valid_seen",
            "valid_seen",
            ["pick_heat_then_place_in_recep"],
        )
        == heat
    )
    assert {"valid_seen", "valid_unseen"} <= set(available_splits(alfworld_root))
    cfg = EnvConfig(data_dir=str(alfworld_root), task_types=["pick_heat_then_place_in_recep"])
    assert load_tasks(cfg, "valid_seen") == heat
    assert load_walkthrough(heat[0]) and all(isinstance(a, str) for a in load_walkthrough(heat[0]))


@pytest.mark.shared_data
def test_missing_split_lists_available(alfworld_root):
    with pytest.raises(AlfworldDataError, match="available splits: .*valid_seen"):
        find_games(alfworld_root, "no_such_split")


def test_missing_folder_names_the_download_command(tmp_path):
    with pytest.raises(AlfworldDataError, match="g2po data download alfworld"):
        find_games(tmp_path / "nowhere", "valid_seen")


def test_unsolvable_movable_and_unknown_types_are_skipped(tmp_path):
    ok = _fake_game(tmp_path, "s", "pick_and_place_simple-Book-None-Sofa-1", "trial_b")
    _fake_game(tmp_path, "s", "pick_and_place_simple-Book-None-Sofa-1", "trial_a", solvable=False)
    _fake_game(tmp_path, "s", "pick_and_place_with_movable_recep-Apple-Bowl-Fridge-1", "trial_c")
    _fake_game(tmp_path, "s", "pick_heat_then_place_in_recep-AppleSliced-None-Fridge-1", "trial_d")
    tasks = find_games(tmp_path, "s")
    assert [t.payload for t in tasks] == [str(ok.resolve())]
    assert len(find_games(tmp_path, "s", check_solvable=False)) == 2
    with pytest.raises(AlfworldDataError, match="no solvable ALFWorld games"):
        find_games(tmp_path, "s", ["look_at_obj_in_light"])
    with pytest.raises(ValueError, match="unknown ALFWorld task type"):
        find_games(tmp_path, "s", ["bogus"])
    bad = _fake_game(
        tmp_path, "s", "look_at_obj_in_light-CD-None-DeskLamp-301", "t", walkthrough=None
    )
    with pytest.raises(ValueError, match="no walkthrough"):
        load_walkthrough(bad)
