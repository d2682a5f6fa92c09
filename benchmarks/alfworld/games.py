"""Finding ALFWorld games on disk and turning them into :class:`g2po_bench.core.protocol.Task` objects.

Layout (official data and the offline generator alike)::

    <root>/json_2.1.1/<split>/<task folder>/<trial folder>/{game.tw-pddl, traj_data.json}

with ``<task folder> = <task_type>-<Object>-<MovableRecep>-<Receptacle>-<floor plan number>``
(e.g. ``pick_heat_then_place_in_recep-Apple-None-DiningTable-26``). ``root`` may also point
at the ``json_2.1.1`` folder itself or directly at one split folder.

Selection rules follow ``AlfredTWEnv.collect_game_files`` (alfworld 0.4.2): a game needs
``traj_data.json`` with a sibling ``game.tw-pddl``; folders whose path contains ``movable`` or
``Sliced`` are skipped; only the six task types below are used; games whose file says
``"solvable": false`` (or has no ``solvable`` key) are skipped. Unlike AlfredTWEnv the task
type is read from the task-folder prefix (not from ``traj_data.json``), so discovery does not
parse any JSON; the ``solvable`` flag is read from the last few KB of the game file (the key
is written after the problem), falling back to a full parse.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from g2po_bench.benchmarks.loading import warn_skipped
from g2po_bench.core.errors import DataError
from g2po_bench.core.protocol import Task

__all__ = [
    "TASK_TYPES",
    "SHORT_NAMES",
    "AlfworldDataError",
    "resolve_split_dirs",
    "available_splits",
    "find_games",
    "scan_games",
    "GameScan",
    "load_walkthrough",
    "task_type_of",
]

#: the six ALFWorld task types, in the papers' column order Pick, Look, Clean, Heat, Cool, Pick2.
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

#: short column names used in the papers' tables.
SHORT_NAMES: dict[str, str] = {
    "pick_and_place_simple": "Pick",
    "look_at_obj_in_light": "Look",
    "pick_clean_then_place_in_recep": "Clean",
    "pick_heat_then_place_in_recep": "Heat",
    "pick_cool_then_place_in_recep": "Cool",
    "pick_two_obj_and_place": "Pick2",
}

GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
#: the generator's parsed form of a game (PDDL->SAS translations, grammar parse), next to its
#: GAME_FILE (:func:`g2po_bench.benchmarks.alfworld.engine.save_parsed_game`); optional, official games have none.
PARSED_FILE = "game.parsed.pkl"
DATA_FOLDER = "json_2.1.1"
DOWNLOAD_HINT = (
    "run `g2po data download alfworld` (or download ALFWorld's json_2.1.1 games yourself and "
    "set env.data_dir to the folder that holds json_2.1.1), or leave env.data_dir unset to "
    "use games generated offline"
)

_SOLVABLE_RE = re.compile(r'"solvable"\s*:\s*(true|false|null)')


class AlfworldDataError(DataError, FileNotFoundError):
    """The ALFWorld data folder, a split, or its games are missing; the message says which
    and how to get them."""


def task_type_of(task_folder: str) -> str | None:
    """Task type of a task folder name (its prefix before the first ``-``), or None if the
    prefix is not one of :data:`TASK_TYPES`."""
    prefix = task_folder.split("-", 1)[0]
    return prefix if prefix in TASK_TYPES else None


def _looks_like_split(folder: Path) -> bool:
    try:
        return any(p.is_dir() and task_type_of(p.name) for p in folder.iterdir())
    except OSError:
        return False


def resolve_split_dirs(root: str | Path) -> dict[str, Path]:
    """Map split name -> split folder for a data root in any of the accepted forms.

    Args:
        root: ``<root>`` holding ``json_2.1.1``, the ``json_2.1.1`` folder, or one split folder.

    Returns:
        ``{split_name: folder}``, sorted by name (a split folder given directly maps its own
        name to itself).

    Raises:
        AlfworldDataError: ``root`` does not exist.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise AlfworldDataError(
            f"ALFWorld data folder {str(root)!r} does not exist; {DOWNLOAD_HINT}"
        )
    if (root / DATA_FOLDER).is_dir():
        base = root / DATA_FOLDER
    elif _looks_like_split(root):
        return {root.name: root}
    else:
        base = root
    return {p.name: p for p in sorted(base.iterdir()) if p.is_dir() and not p.name.startswith(".")}


def available_splits(root: str | Path) -> list[str]:
    """Names of the split folders under ``root`` (see :func:`resolve_split_dirs`)."""
    return list(resolve_split_dirs(root))


def _solvable(game_file: Path) -> str:
    """The game's ``solvable`` entry, cheaply: ``"true"``, ``"false"``, ``"null"``, ``"missing"``
    (no such key, e.g. a game file of an older or partial download), or ``"unreadable"`` (the file
    cannot be read or is not a JSON object: a game that fails to load)."""
    try:
        with open(game_file, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 16384))
            tail = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return "unreadable"
    matches = _SOLVABLE_RE.findall(tail)
    if matches:
        return matches[-1]
    try:
        data = json.loads(game_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "unreadable"
    if not isinstance(data, dict):
        return "unreadable"
    if "solvable" not in data:
        return "missing"
    return "true" if data["solvable"] is True else ("null" if data["solvable"] is None else "false")


#: why a game file's ``solvable`` entry leaves the game out (:func:`_solvable`)
_NOT_SOLVABLE = {"false": '"solvable": false', "null": '"solvable": null', "missing": 'no "solvable" key'}


@dataclass
class GameScan:
    """What :func:`scan_games` found in one split.

    ``tasks``: the games loaded (as :func:`find_games` returns them); ``left_out``: ``(name,
    reason)`` of the games left out because their file is not marked solvable (``"solvable":
    false``/``null``, or no ``solvable`` key), as AlfredTWEnv leaves them out; ``skipped``:
    ``(name, reason)`` of the games that failed to load (named in a DataLoadWarning).
    """

    tasks: list[Task]
    left_out: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def find_games(
    root: str | Path,
    split: str,
    task_types: Iterable[str] | None = None,
    *,
    check_solvable: bool = True,
) -> list[Task]:
    """All games of ``split`` under ``root``: :func:`scan_games` ``(...).tasks`` (same arguments,
    errors and warnings)."""
    return scan_games(root, split, task_types, check_solvable=check_solvable).tasks


def scan_games(
    root: str | Path,
    split: str,
    task_types: Iterable[str] | None = None,
    *,
    check_solvable: bool = True,
) -> GameScan:
    """All games of ``split`` under ``root``, optionally restricted to some task types, with the
    games left out and those that failed to load (:class:`GameScan`).

    Args:
        root: data root (see :func:`resolve_split_dirs`).
        split: split folder name (``"valid_seen"``, ``"train"``, ``"eval"``, ...).
        task_types: subset of :data:`TASK_TYPES`; None or empty = all six.
        check_solvable: skip games not marked ``"solvable": true`` (AlfredTWEnv does this).

    A game that fails to load (a trial folder without ``game.tw-pddl`` or ``traj_data.json``, a
    game file that cannot be read or parsed, a task folder of an unknown task type or without
    trials) is named with the reason in one :class:`g2po_bench.benchmarks.loading.DataLoadWarning`; what
    is left out by definition (``movable``/``Sliced`` folders, unsolvable games) is not.

    Returns:
        :class:`GameScan` whose tasks are sorted by ``task_id = "<split>/<task folder>/<trial
        folder>"`` with ``task_type`` from the task folder, ``env="alfworld"`` and ``payload`` =
        absolute path of ``game.tw-pddl`` (a str).

    Raises:
        AlfworldDataError: root or split missing (the message lists the available splits), or
            no game matches.
        ValueError: an unknown task type was requested.
    """
    wanted = tuple(task_types or ())
    unknown = [t for t in wanted if t not in TASK_TYPES]
    if unknown:
        raise ValueError(f"unknown ALFWorld task type(s) {unknown}; known: {', '.join(TASK_TYPES)}")
    wanted_set = set(wanted or TASK_TYPES)
    splits = resolve_split_dirs(root)
    if split not in splits:
        have = ", ".join(splits) or "none"
        raise AlfworldDataError(
            f"ALFWorld split {split!r} not found under {str(root)!r}; available splits: {have}"
        )
    split_dir = splits[split]
    tasks: list[Task] = []
    skipped: list[tuple[str, str]] = []  # games that fail to load: named in a DataLoadWarning
    left_out: list[tuple[str, str]] = []  # games not marked solvable
    for task_dir in sorted(p for p in split_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if "movable" in task_dir.name or "Sliced" in task_dir.name:
            continue  # left out by definition (AlfredTWEnv), not a failure
        ttype = task_type_of(task_dir.name)
        if ttype is None:
            skipped.append((f"{split}/{task_dir.name}", f"unknown task type {task_dir.name.split('-', 1)[0]!r}"))
            continue
        if ttype not in wanted_set:
            continue
        trials = sorted(p for p in task_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not trials:
            skipped.append((f"{split}/{task_dir.name}", "no trial folder"))
        for trial_dir in trials:
            game = trial_dir / GAME_FILE
            name = f"{split}/{task_dir.name}/{trial_dir.name}"
            missing = [f for f in (GAME_FILE, TRAJ_FILE) if not (trial_dir / f).is_file()]
            if missing:
                skipped.append((name, "no " + " and no ".join(missing)))
                continue
            if check_solvable:
                flag = _solvable(game)
                if flag == "unreadable":
                    skipped.append((name, f"{GAME_FILE} cannot be read or is not a JSON object"))
                    continue
                if flag != "true":
                    left_out.append((name, _NOT_SOLVABLE[flag]))  # left out as AlfredTWEnv does
                    continue
            tasks.append(
                Task(
                    task_id=f"{split}/{task_dir.name}/{trial_dir.name}",
                    task_type=ttype,
                    env="alfworld",
                    payload=str(game.resolve()),
                )
            )
    warn_skipped("ALFWorld games", str(split_dir), skipped)
    if not tasks:
        kinds = ", ".join(sorted(wanted_set))
        raise AlfworldDataError(
            f"no solvable ALFWorld games of type(s) {kinds} in {str(split_dir)!r} "
            f"(expected <task>/<trial>/{GAME_FILE} with a sibling {TRAJ_FILE}); {DOWNLOAD_HINT}"
        )
    tasks.sort(key=lambda t: t.task_id)
    return GameScan(tasks, left_out, skipped)


def load_walkthrough(task: Task | str | Path) -> list[str]:
    """The expert walkthrough stored in a game file (the list of commands that wins).

    Args:
        task: a Task from :func:`find_games` (its payload is the game file) or a game-file path.

    Raises:
        ValueError: the game file has no walkthrough.
        OSError: the file cannot be read.
    """
    path = Path(task.payload if isinstance(task, Task) else task)
    data = json.loads(path.read_text(encoding="utf-8"))
    walkthrough = data.get("walkthrough")
    if not walkthrough:
        raise ValueError(f"game file {str(path)!r} carries no walkthrough")
    return [str(a) for a in walkthrough]
