"""Offline generator of ALFWorld games for all six task types, from what the alfworld wheel ships.

Why: the official games are a separate download (``alfworld-download`` fetches GitHub release
assets); the CPU default of this project trains on small generated games instead, built only
from the alfworld 0.4.2 wheel:

- PDDL domain ``alfworld/data/alfred.pddl`` and grammar ``alfworld/data/alfred.twl2``
  (:func:`g2po_bench.benchmarks.alfworld.engine.wheel_logic_paths`);
- goal PDDL and task-sentence templates: ``alfworld.gen.goal_library.gdict``;
- floor plans: ``alfworld/gen/layouts/FloorPlan<N>-objects.json`` (object types present in
  the ALFRED scene), ``FloorPlan<N>-openable.json`` (receptacle ids -> the pose the agent
  interacts from: ``[x, z, rotation, horizon]``), ``FloorPlan<N>-layout.npy`` (reachable
  ``(x, z)`` positions; the agent's start);
- ``alfworld.gen.constants``: ``VAL_RECEPTACLE_OBJECTS`` (which receptacle type can contain
  which object type -> ``canContain``), ``VAL_ACTION_OBJECTS`` (Heatable, Coolable, Cleanable,
  Toggleable, Sliceable), ``MOVABLE_RECEPTACLES`` (``isReceptacleObject``),
  ``OPENABLE_CLASS_LIST``, ``OBJECTS``/``RECEPTACLES`` (the constant declarations),
  ``GOALS_VALID`` (which room types a goal is generated in), ``TRAIN_SCENE_NUMBERS`` /
  ``TEST_SCENE_NUMBERS`` (ALFRED's train and held-out floor plans).

Game file format (the same as the official ``game.tw-pddl``): JSON ``{"pddl_domain",
"grammar" (the shipped grammar with "UNKNOWN GOAL" replaced by the task sentence, as
``alfworld.agents.utils.misc.add_task_to_grammar`` does), "pddl_problem", "solvable",
"walkthrough"}``. The problem declares ``agent1``, the object/otype/rtype constants, the scene's
objects, receptacles and locations with ALFRED's mangled ids (``Cabinet|-00.48|+02.05|+00.39``
-> ``Cabinet_bar__minus_00_dot_48_bar__plus_02_dot_05_bar__plus_00_dot_39``; a sink basin is
``Sink_bar_..._bar_SinkBasin`` so the demangler shows "sinkbasin 1"), the init facts in the
official order, and the goal from the goal library. Differences from the official games
(documented, intended): small scenes (a floor plan's receptacles subsampled to at most
``max_receptacles`` plus the appliance the task needs: sinkbasin/microwave/fridge; a desk lamp
on a desk-like receptacle for Look), a few objects (the target(s) plus 2-4 distractors), the
current wheel's domain/grammar (the official files carry an older copy), no sliced or movable-
receptacle tasks, target objects never start in a receptacle of the goal type (nor in the
fridge for Cool), no initial ``isCool``.

Each game is checked with the PDDL planner expert (textworld's ``policy_commands``:
fast-downward re-plans from the initial state; ALFWorld's ``AlfredExpert(expert_type=
"planner")``), stored with that plan as walkthrough, and the walkthrough is replayed through
:class:`g2po_bench.benchmarks.alfworld.env.AlfworldEnv`; a game is kept only if the replay wins at the last
step. A failed sample is redrawn (deterministically) up to :data:`MAX_ATTEMPTS` times.

Determinism: game ``k`` of a split is a pure function of ``(seed, split, k, task type,
max_receptacles)``: its random stream is seeded by a SHA-256 of those values; task types are
assigned round robin (``task_types[k % len(task_types)]``). The ``"train"`` split samples
ALFRED's training floor plans, every other split its held-out test floor plans, so train and
eval never share a floor plan.

Output layout (loadable by :func:`g2po_bench.benchmarks.alfworld.games.find_games`)::

    <out>/json_2.1.1/<split>/<task_type>-<Obj>-None-<Recep>-<floor plan>/trial_gen_<seed>_<k>/
        game.tw-pddl, traj_data.json, game.parsed.pkl

``game.parsed.pkl`` holds what the planner's load of the game computed (its two PDDL->SAS
translations and its grammar parse, :func:`g2po_bench.benchmarks.alfworld.engine.save_parsed_game`), so
that the rollout workers load the game without translating or parsing it again (a load of a
generated game: ~0.13 s of CPU without it, ~0.03 s with it, on 2 busy cores). A folder generated
before the generator stored it gets it once, at the next :func:`ensure_generated`
(``manifest.json`` then records ``"parsed"``).

Speed: about 0.3 s of CPU per game (sampling, one planner call, two engine loads, the
walkthrough replay). The default 48 + 24 games took 19 s of CPU in total and 54 s wall with 2
worker processes on a 2-core machine shared with other jobs; ``manifest.json`` of a generated
folder records the measured times (``seconds_per_game``, ``generation.*.cpu_seconds_per_game``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import math
import os
import random
import shutil
import sys
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import islice
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path
from typing import Any

from g2po_bench.benchmarks.alfworld.engine import (
    PARSED_GAME_FORMAT,
    TASK_PLACEHOLDER,
    ensure_alfworld_data_env,
    install_caches,
    make_pddl_env,
    remember_task_grammar,
    save_parsed_game,
    wheel_logic_paths,
)
from g2po_bench.benchmarks.alfworld.env import AlfworldEnv
from g2po_bench.benchmarks.alfworld.games import (
    DATA_FOLDER,
    GAME_FILE,
    PARSED_FILE,
    TASK_TYPES,
    TRAJ_FILE,
)
from g2po_bench.core.protocol import Task
from g2po_bench.runtime.shutdown import check_stop, die_with_parent

__all__ = [
    "GENERATOR_VERSION",
    "GENERATED_SPLITS",
    "GenerationError",
    "generate_games",
    "ensure_generated",
    "generated_settings",
    "last_generation_stats",
]

log = logging.getLogger(__name__)

#: bump when the generated games change for the same settings (invalidates caches).
GENERATOR_VERSION = 1
#: split names written by :func:`ensure_generated`.
GENERATED_SPLITS = ("train", "eval")
#: redraws of one game before giving up.
MAX_ATTEMPTS = 25
MANIFEST = "manifest.json"

_APPLIANCE = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}
_PROPERTY = {
    "pick_clean_then_place_in_recep": "Cleanable",
    "pick_heat_then_place_in_recep": "Heatable",
    "pick_cool_then_place_in_recep": "Coolable",
}
#: receptacle types a desk lamp stands on in the official games.
_LAMP_RECEPTACLES = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable")
_NON_TARGETS = {"PaperTowel", "ToiletPaperRoll"}  # listed by ALFRED, absent from ALFWorld games


class GenerationError(RuntimeError):
    """No valid game could be generated (e.g. no floor plan fits the task type)."""


# ---------------------------------------------------------------------------- wheel assets
@dataclass(frozen=True)
class _Scene:
    number: int
    room: str
    receptacles: tuple[tuple[str, str, str], ...]  # (ALFRED id, rtype, location id)
    objects: frozenset[str]  # object types present in the ALFRED scene
    starts: tuple[tuple[float, float], ...]  # reachable (x, z) positions


@dataclass
class _Assets:
    domain: str
    grammar: str
    goals: dict[str, Any]
    object_consts: list[str]
    rtype_consts: list[str]
    can_contain: dict[str, frozenset[str]]
    actions: dict[str, frozenset[str]]
    receptacle_objects: frozenset[str]
    openable: frozenset[str]
    pickupable: frozenset[str]
    goals_valid: dict[str, set[str]]
    train_scenes: tuple[int, ...]
    test_scenes: tuple[int, ...]
    layouts: Path
    scenes: dict[int, _Scene] = field(default_factory=dict)


@lru_cache(maxsize=1)
def _assets() -> _Assets:
    ensure_alfworld_data_env()
    import alfworld.gen.constants as C
    import alfworld.gen.goal_library as glib

    domain_path, grammar_path = wheel_logic_paths()
    static = sorted(set(C.RECEPTACLES) - set(C.MOVABLE_RECEPTACLES))
    objects = sorted(set(C.OBJECTS) - set(static))
    can_contain = {
        r: frozenset(o for o in objs if not o.endswith("Sliced") and o in objects)
        for r, objs in C.VAL_RECEPTACLE_OBJECTS.items()
        if r in static
    }
    pickupable = frozenset().union(*can_contain.values()) - _NON_TARGETS
    actions = {k: frozenset(v) for k, v in C.VAL_ACTION_OBJECTS.items()}
    return _Assets(
        domain=domain_path.read_text(encoding="utf-8"),
        grammar=grammar_path.read_text(encoding="utf-8"),
        goals=glib.gdict,
        object_consts=objects,
        rtype_consts=static,
        can_contain=can_contain,
        actions=actions,
        receptacle_objects=frozenset(C.MOVABLE_RECEPTACLES),
        openable=frozenset(C.OPENABLE_CLASS_LIST),
        pickupable=pickupable,
        goals_valid={k: set(v) for k, v in C.GOALS_VALID.items()},
        train_scenes=tuple(C.TRAIN_SCENE_NUMBERS),
        test_scenes=tuple(C.TEST_SCENE_NUMBERS),
        layouts=Path(C.__file__).parent / "layouts",
    )


def _room(number: int) -> str:
    return {0: "Kitchen", 2: "LivingRoom", 3: "Bedroom", 4: "Bathroom"}[number // 100]


def _scene(number: int) -> _Scene | None:
    a = _assets()
    if number in a.scenes:
        return a.scenes[number]
    objs_f = a.layouts / f"FloorPlan{number}-objects.json"
    recs_f = a.layouts / f"FloorPlan{number}-openable.json"
    if not objs_f.is_file() or not recs_f.is_file():
        return None
    objects = frozenset(json.loads(objs_f.read_text()))
    receptacles = []
    for rid, pose in sorted(json.loads(recs_f.read_text()).items()):
        parts = rid.split("|")
        rtype = parts[4] if len(parts) == 5 else parts[0]
        if rtype not in a.rtype_consts:
            continue
        x, z, rot, hor = pose
        loc = f"loc|{round(x / 0.25)}|{round(z / 0.25)}|{round(rot / 90) % 4}|{round(hor)}"
        receptacles.append((rid, rtype, loc))
    starts: tuple[tuple[float, float], ...] = ()
    try:
        import numpy as np

        arr = np.load(a.layouts / f"FloorPlan{number}-layout.npy")
        starts = tuple((float(x), float(z)) for x, z in arr[:, :2])
    except Exception:  # noqa: BLE001 - the start pose is cosmetic
        starts = ()
    scene = _Scene(number, _room(number), tuple(receptacles), objects, starts)
    a.scenes[number] = scene
    return scene


def _scene_pool(scenes: str) -> tuple[int, ...]:
    """Floor plans of ``scenes``: "train" (ALFRED's training floor plans) or "test" (held out)."""
    a = _assets()
    return a.train_scenes if scenes == "train" else a.test_scenes


# ---------------------------------------------------------------------------- sampling
def _mangle(alfred_id: str) -> str:
    """ALFRED id -> PDDL name (``|`` -> ``_bar_``, ``-`` -> ``_minus_``, ...)."""
    return (
        alfred_id.replace("|", "_bar_")
        .replace("-", "_minus_")
        .replace("+", "_plus_")
        .replace(".", "_dot_")
        .replace(",", "_comma_")
    )


@dataclass
class _Spec:
    task_type: str
    scene: _Scene
    obj: str
    parent: str  # goal receptacle type, or the toggle type (DeskLamp) for Look
    receptacles: list[tuple[str, str, str]]
    placements: list[tuple[str, str, str]]  # (object ALFRED id, otype, receptacle ALFRED id)
    agent_loc: str
    desc: str


def _candidates(task_type: str, scene: _Scene) -> list[tuple[str, str]]:
    """(object type, goal receptacle type or DeskLamp) pairs possible in a scene."""
    a = _assets()
    if scene.room not in a.goals_valid[task_type]:
        return []
    rtypes = {r[1] for r in scene.receptacles}
    present = sorted((scene.objects & a.pickupable) - {"DeskLamp", "FloorLamp"})
    if task_type in _PROPERTY:
        present = [o for o in present if o in a.actions[_PROPERTY[task_type]]]
        if _APPLIANCE[task_type] not in rtypes:
            return []
    out = []
    if task_type == "look_at_obj_in_light":
        if "DeskLamp" not in scene.objects or not rtypes & set(_LAMP_RECEPTACLES):
            return []
        for o in present:
            if any(o in a.can_contain.get(r, ()) for r in rtypes):
                out.append((o, "DeskLamp"))
        return out
    for o in present:
        starts = {r for r in rtypes if o in a.can_contain.get(r, ())}
        if task_type == "pick_cool_then_place_in_recep":
            starts.discard("Fridge")
        for p in sorted(rtypes):
            if p == _APPLIANCE.get(task_type) or o not in a.can_contain.get(p, ()):
                continue
            if starts - {p}:
                out.append((o, p))
    return out


def _jitter_id(otype: str, recep_id: str, rng: random.Random, used: set[str]) -> str:
    parts = recep_id.split("|")
    try:
        x, y, z = (float(v) for v in parts[1:4])
    except ValueError:
        x = y = z = 0.0
    for _ in range(1000):
        dx, dy, dz = (rng.randint(-40, 40) / 100 for _ in range(3))
        oid = f"{otype}|{x + dx:+06.2f}|{y + abs(dy):+06.2f}|{z + dz:+06.2f}"
        if oid not in used:
            used.add(oid)
            return oid
    raise GenerationError(f"could not place a unique {otype} near {recep_id}")


def _sample_spec(
    task_type: str, pool: tuple[int, ...], max_receptacles: int, rng: random.Random
) -> _Spec:
    a = _assets()
    eligible = []
    for n in pool:
        sc = _scene(n)
        if sc is not None and _candidates(task_type, sc):
            eligible.append(sc)
    if not eligible:
        raise GenerationError(f"no floor plan of this split fits task type {task_type!r}")
    scene = rng.choice(eligible)
    obj, parent = rng.choice(_candidates(task_type, scene))
    recs = list(scene.receptacles)
    by_type: dict[str, list[tuple[str, str, str]]] = {}
    for r in recs:
        by_type.setdefault(r[1], []).append(r)

    def can_start(r: tuple[str, str, str], otype: str) -> bool:
        if otype not in a.can_contain.get(r[1], ()):
            return False
        if otype == obj and r[1] == parent:
            return False
        return not (
            task_type == "pick_cool_then_place_in_recep" and otype == obj and r[1] == "Fridge"
        )

    core: list[tuple[str, str, str]] = []
    lamp_recep = None
    if task_type == "look_at_obj_in_light":
        lamp_recep = rng.choice([r for r in recs if r[1] in _LAMP_RECEPTACLES])
        core.append(lamp_recep)
    else:
        core.append(rng.choice(by_type[parent]))
    n_targets = 2 if task_type == "pick_two_obj_and_place" else 1
    starts = [r for r in recs if can_start(r, obj)]
    target_receps = [rng.choice(starts) for _ in range(n_targets)]
    for r in target_receps:
        if r not in core:
            core.append(r)
    others = [r for r in recs if r not in core]
    rng.shuffle(others)
    chosen = core + others[: max(0, max_receptacles - len(core))]
    appliance = _APPLIANCE.get(task_type)
    if appliance and not any(r[1] == appliance for r in chosen):
        chosen.append(rng.choice(by_type[appliance]))
    chosen.sort()

    used: set[str] = set()
    placements = [(_jitter_id(obj, r[0], rng, used), obj, r[0]) for r in target_receps]
    if lamp_recep is not None:
        placements.append(
            (_jitter_id("DeskLamp", lamp_recep[0], rng, used), "DeskLamp", lamp_recep[0])
        )
    distractor_types = sorted((scene.objects & a.pickupable) - {obj, "DeskLamp", "FloorLamp"})
    for _ in range(rng.randint(2, 4)):
        if not distractor_types:
            break
        otype = rng.choice(distractor_types)
        holders = [r for r in chosen if otype in a.can_contain.get(r[1], ())]
        if holders:
            r = rng.choice(holders)
            placements.append((_jitter_id(otype, r[0], rng, used), otype, r[0]))

    rec_locs = {r[2] for r in chosen}
    agent_loc = "loc|0|0|0|30"
    for _ in range(50):
        if scene.starts:
            x, z = rng.choice(scene.starts)
        else:
            x, z = rng.randint(-12, 12) * 0.25, rng.randint(-12, 12) * 0.25
        cand = f"loc|{round(x / 0.25)}|{round(z / 0.25)}|{rng.randint(0, 3)}|30"
        if cand not in rec_locs:
            agent_loc = cand
            break

    goal = a.goals[task_type]
    template = rng.choice(goal["templates"])
    if task_type == "look_at_obj_in_light":
        desc = template.format(obj=obj.lower(), toggle=parent.lower(), recep="", mrecep="")
    else:
        desc = template.format(obj=obj.lower(), recep=parent.lower(), toggle="", mrecep="")
    return _Spec(task_type, scene, obj, parent, chosen, placements, agent_loc, desc)


def _problem(spec: _Spec, name: str) -> str:
    a = _assets()
    ind = "\n        "
    objs = {oid: otype for oid, otype, _ in spec.placements}
    in_rec = {oid: rid for oid, _, rid in spec.placements}
    rec_loc = {rid: loc for rid, _, loc in spec.receptacles}
    locs = sorted({loc for _, _, loc in spec.receptacles} | {spec.agent_loc})
    declared = (
        [f"{_mangle(o)} - object" for o in sorted(objs)]
        + [f"{_mangle(r)} - receptacle" for r, _, _ in spec.receptacles]
        + [f"{_mangle(loc)} - location" for loc in locs]
    )
    rtypes = sorted({t for _, t, _ in spec.receptacles})
    otypes = sorted(set(objs.values()))
    facts: list[str] = []
    facts += [f"(receptacleType {_mangle(r)} {t}Type)" for r, t, _ in spec.receptacles]
    facts += [f"(objectType {_mangle(o)} {t}Type)" for o, t in sorted(objs.items())]
    facts += [
        f"(canContain {rt}Type {ot}Type)"
        for rt in rtypes
        for ot in otypes
        if ot in a.can_contain.get(rt, ())
    ]
    facts += [f"(pickupable {_mangle(o)})" for o, t in sorted(objs.items()) if t in a.pickupable]
    facts += [
        f"(isReceptacleObject {_mangle(o)})"
        for o, t in sorted(objs.items())
        if t in a.receptacle_objects
    ]
    facts += [f"(openable {_mangle(r)})" for r, t, _ in spec.receptacles if t in a.openable]
    facts += ["", f"(atLocation agent1 {_mangle(spec.agent_loc)})", ""]
    for prop, pred in (
        ("Cleanable", "cleanable"),
        ("Heatable", "heatable"),
        ("Coolable", "coolable"),
        ("Toggleable", "toggleable"),
        ("Sliceable", "sliceable"),
    ):
        facts += [f"({pred} {_mangle(o)})" for o, t in sorted(objs.items()) if t in a.actions[prop]]
    facts += [""]
    facts += [f"(inReceptacle {_mangle(o)} {_mangle(in_rec[o])})" for o in sorted(objs)]
    facts += [
        f"(receptacleAtLocation {_mangle(r)} {_mangle(loc)})" for r, _, loc in spec.receptacles
    ]
    facts += [
        f"(objectAtLocation {_mangle(o)} {_mangle(rec_loc[in_rec[o]])})" for o in sorted(objs)
    ]
    goal = a.goals[spec.task_type]["pddl"]
    if spec.task_type == "look_at_obj_in_light":
        goal = goal.format(obj=spec.obj, toggle=spec.parent, recep="", mrecep="")
    else:
        goal = goal.format(obj=spec.obj, recep=spec.parent, toggle="", mrecep="")
    return (
        f"\n(define (problem {name})\n(:domain alfred)\n(:objects\nagent1 - agent\n"
        + ind.join(f"{o} - object" for o in a.object_consts)
        + "\n"
        + ind.join(f"{o}Type - otype" for o in a.object_consts)
        + "\n"
        + ind.join(f"{r}Type - rtype" for r in a.rtype_consts)
        + "\n\n"
        + ind
        + ind.join(declared)
        + "\n        )\n    \n\n(:init\n\n"
        + ind
        + ind.join(facts)
        + "\n        )\n    \n"
        + goal.replace("#", "-")
    )


# ---------------------------------------------------------------------------- one game
_WORKER: dict[str, Any] = {}


def _game_seed(
    seed: int, split: str, k: int, task_type: str, max_receptacles: int, attempt: int
) -> int:
    blob = f"g2po-alfworld-gen/v{GENERATOR_VERSION}/{seed}/{split}/{k}/{task_type}/{max_receptacles}/{attempt}"
    return int.from_bytes(hashlib.sha256(blob.encode()).digest()[:8], "big")


def _generate_one(job: tuple[str, str, int, int, str, int, str]) -> tuple[int, str, float, int, float]:
    """Generate, solve and verify game ``k``; returns (k, game file, wall seconds, attempts,
    CPU seconds)."""
    out_dir, split, seed, k, task_type, max_receptacles, scenes = job

    t0, c0 = time.perf_counter(), time.process_time()
    a = _assets()
    if "planner" not in _WORKER:
        _WORKER["planner"] = make_pddl_env(planner=True)
        _WORKER["player"] = AlfworldEnv(state_key="raw")
    planner, player = _WORKER["planner"], _WORKER["player"]
    pool = _scene_pool(scenes)
    last_error = "no attempt"
    for attempt in range(MAX_ATTEMPTS):
        rng = random.Random(_game_seed(seed, split, k, task_type, max_receptacles, attempt))
        spec = _sample_spec(task_type, pool, max_receptacles, rng)
        trial = f"trial_gen_{seed}_{k}"
        folder = f"{task_type}-{spec.obj}-None-{spec.parent}-{spec.scene.number}"
        game_dir = Path(out_dir) / DATA_FOLDER / split / folder / trial
        game: dict[str, Any] = {
            "pddl_domain": a.domain,
            "grammar": a.grammar.replace(TASK_PLACEHOLDER, spec.desc),
            "pddl_problem": _problem(spec, f"plan_{trial}"),
            "solvable": None,
            "walkthrough": None,
        }
        remember_task_grammar(a.grammar, spec.desc)  # the load then skips parsing the grammar
        try:
            state = _load_and_reset(planner, game)
        except Exception as exc:  # noqa: BLE001 - a bad sample is redrawn
            last_error = f"engine error: {exc!r}"
            continue
        plan = list(state.get("policy_commands") or [])
        if state["won"] or not plan:
            last_error = "goal satisfied at start" if state["won"] else "planner found no plan"
            continue
        game["solvable"] = True
        game["walkthrough"] = plan
        game_dir.mkdir(parents=True, exist_ok=True)
        game_path = game_dir / GAME_FILE
        game_path.write_text(json.dumps(game), encoding="utf-8")
        task = Task(f"{split}/{folder}/{trial}", task_type, "alfworld", str(game_path))
        obs = player.reset(task)
        for i, cmd in enumerate(plan):
            obs = player.step(cmd)
            if obs.done and i < len(plan) - 1:
                break
        if not (obs.won and obs.done):
            last_error = f"walkthrough replay did not win ({obs.text!r})"
            shutil.rmtree(game_dir, ignore_errors=True)
            continue
        seconds = time.perf_counter() - t0
        cpu_seconds = time.process_time() - c0
        traj = {
            "task_id": trial,
            "task_type": task_type,
            "pddl_params": {
                "object_target": spec.obj,
                "parent_target": "" if task_type == "look_at_obj_in_light" else spec.parent,
                "toggle_target": spec.parent if task_type == "look_at_obj_in_light" else "",
                "mrecep_target": "",
                "object_sliced": False,
            },
            "scene": {
                "floor_plan": f"FloorPlan{spec.scene.number}",
                "scene_num": spec.scene.number,
            },
            "turk_annotations": {"anns": [{"task_desc": spec.desc, "high_descs": [], "votes": []}]},
            "generator": {
                "name": "g2po-bench offline ALFWorld generator",
                "version": GENERATOR_VERSION,
                "seed": seed,
                "split": split,
                "index": k,
                "attempt": attempt,
                "max_receptacles": max_receptacles,
                "num_receptacles": len(spec.receptacles),
                "num_objects": len(spec.placements),
                "walkthrough_length": len(plan),
            },
        }
        (game_dir / TRAJ_FILE).write_text(json.dumps(traj, indent=1), encoding="utf-8")
        # what the planner's load just translated and parsed: every later load reads it
        save_parsed_game(game_dir / PARSED_FILE, game)
        return k, str(game_path), seconds, attempt + 1, cpu_seconds
    raise GenerationError(
        f"could not generate a solvable {task_type} game #{k} of split {split!r} "
        f"in {MAX_ATTEMPTS} attempts (last: {last_error})"
    )


def _generate_chunk(jobs: list[tuple[str, str, int, int, str, int, str]]) -> list[tuple[int, str, float, int, float]]:
    """:func:`_generate_one` for each job of a chunk, in order (one task of a worker)."""
    return [_generate_one(job) for job in jobs]


def _load_and_reset(env: Any, game: dict[str, Any]) -> Any:
    env.load(game)
    return env.reset()


# ---------------------------------------------------------------------------- public API
def generate_games(
    out_dir: str | Path,
    split: str,
    num_games: int,
    seed: int,
    max_receptacles: int,
    task_types: list[str] | tuple[str, ...] | None = None,
    *,
    workers: int = 0,
    progress: bool = False,
    scenes: str | None = None,
) -> list[Path]:
    """Generate ``num_games`` verified games of ``split`` into ``out_dir`` (ALFWorld layout).

    Args:
        out_dir: output root; games go to ``out_dir/json_2.1.1/<split>/...`` (existing games with
            other names are left alone, same names are overwritten).
        split: split name; ``"train"`` draws ALFRED's training floor plans, any other name its
            held-out floor plans.
        num_games: number of games (>= 0).
        seed: base seed; the same arguments give byte-identical games.
        max_receptacles: receptacles kept per scene (>= 2), plus the appliance the task needs.
        task_types: subset of :data:`TASK_TYPES` (None/empty = all six), assigned round robin.
        workers: processes; 0 = one per CPU core (capped by the number of games), 1 = in-process.
        progress: show a tqdm progress bar.
        scenes: floor plans to draw from: ``"train"`` (ALFRED's training floor plans) or
            ``"test"`` (its held-out ones); None = by split name as described above. Games of
            another split name on the training floor plans are still new games (the split name
            enters every game's seed), like ALFWorld's ``valid_seen``.

    Returns:
        Paths of the ``game.tw-pddl`` files, in index order.

    Raises:
        ValueError: bad arguments. GenerationError: a game could not be generated.
    """
    types = tuple(task_types or TASK_TYPES)
    bad = [t for t in types if t not in TASK_TYPES]
    if bad:
        raise ValueError(f"unknown ALFWorld task type(s) {bad}; known: {', '.join(TASK_TYPES)}")
    if num_games < 0:
        raise ValueError("num_games must be >= 0")
    if max_receptacles < 2:
        raise ValueError("max_receptacles must be >= 2")
    if scenes is None:
        scenes = "train" if split == "train" else "test"
    if scenes not in ("train", "test"):
        raise ValueError(f"scenes must be 'train' or 'test', got {scenes!r}")
    out_dir = Path(out_dir)
    jobs = [
        (str(out_dir), split, int(seed), k, types[k % len(types)], int(max_receptacles), scenes)
        for k in range(num_games)
    ]
    if not jobs:
        return []
    n_workers = workers or (os.cpu_count() or 1)
    n_workers = max(1, min(n_workers, math.ceil(len(jobs) / 4)))
    results: list[tuple[int, str, float, int, float]] = []
    bar = _progress(len(jobs), f"generating ALFWorld {split}", progress)
    t0 = time.perf_counter()
    # a stop request (g2po_bench.runtime.shutdown: a trainer's SIGINT/SIGTERM) ends generation between
    # games; the caller's staging folder is removed and the run says "interrupted"
    if n_workers == 1:
        for job in jobs:
            results.append(_generate_one(job))
            bar.update(1)
            check_stop()
    else:
        _warm_up(scenes)  # forked workers inherit the parsed assets and grammar caches
        ex = _pool(n_workers)
        size = max(1, min(4, len(jobs) // (4 * n_workers)))
        chunks = iter([jobs[i:i + size] for i in range(0, len(jobs), size)])
        try:
            # small chunks, at most 2 per worker submitted at a time: a stop waits only for those
            # (ProcessPoolExecutor.map would queue every chunk at once, and the workers go on
            # taking them while this process is slow to look at the first result)
            in_flight = deque(ex.submit(_generate_chunk, c) for c in islice(chunks, 2 * n_workers))
            while in_flight:
                for res in in_flight.popleft().result():
                    results.append(res)
                    bar.update(1)
                check_stop()
                nxt = next(chunks, None)
                if nxt is not None:
                    in_flight.append(ex.submit(_generate_chunk, nxt))
        except (BrokenProcessPool, KeyboardInterrupt):
            # the job's signal reached the workers too (a terminal's Ctrl-C, `timeout`, Slurm
            # signal the whole process group): a stop request, not a generation failure
            check_stop()
            raise
        finally:
            ex.shutdown(wait=True, cancel_futures=True)
    bar.close()
    wall = time.perf_counter() - t0
    results.sort()
    log.info(
        "generated %d ALFWorld games (%s) in %.1f s wall with %d workers; per game %.2f s wall, "
        "%.2f s CPU",
        len(results),
        split,
        wall,
        n_workers,
        sum(r[2] for r in results) / len(results),
        sum(r[4] for r in results) / len(results),
    )
    _LAST_STATS.clear()
    _LAST_STATS.update(
        split=split,
        games=len(results),
        wall_seconds=wall,
        worker_seconds_per_game=sum(r[2] for r in results) / len(results),
        cpu_seconds_per_game=sum(r[4] for r in results) / len(results),
        attempts=sum(r[3] for r in results),
        workers=n_workers,
    )
    return [Path(r[1]) for r in results]


def _warm_up(scenes: str) -> None:
    """Load the wheel assets, the floor plans of ``scenes`` and parse the grammar once."""
    install_caches()
    import textworld.envs.pddl.logic as pddl_logic

    a = _assets()
    for n in _scene_pool(scenes):
        _scene(n)
    pddl_logic.GameLogic(domain=a.domain, grammar=a.grammar)


def _pool(n_workers: int) -> ProcessPoolExecutor:
    """A pool of ``n_workers`` processes that die with this one (:func:`die_with_parent`: a
    trainer killed with SIGKILL leaves no worker behind, blocked on the task queue). Their signal
    dispositions are this process's (the fork hook of :mod:`g2po_bench.runtime.shutdown` gives them
    the defaults in place of the trainer's handlers): a signal to the whole process group ends
    them, and the trainer's own stop request ends generation (``generate_games``)."""
    return ProcessPoolExecutor(max_workers=n_workers, mp_context=_mp_context(), initializer=die_with_parent,
                               initargs=(os.getpid(),))


def _mp_context():
    """``fork`` on Linux (works from any script, no ``__main__`` guard needed; the workers only
    run textworld/fast-downward), ``spawn`` elsewhere."""
    if sys.platform.startswith("linux") and "fork" in get_all_start_methods():
        return get_context("fork")
    return get_context("spawn")


#: statistics of the last :func:`generate_games` call in this process (for logs and benches).
_LAST_STATS: dict[str, Any] = {}


def last_generation_stats() -> dict[str, Any]:
    """Timing of the last :func:`generate_games` call: ``wall_seconds`` (whole call),
    ``worker_seconds_per_game`` (wall time per game inside a worker), ``cpu_seconds_per_game``
    (CPU time per game inside a worker, independent of other load), ``attempts``, ``workers``,
    ``games``, ``split``."""
    return dict(_LAST_STATS)


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


class _LineBar(_NoBar):
    """Progress without a terminal (a log file): one line when generation starts, then one every
    ``every_s`` seconds (games done, elapsed time), and one when it ends."""

    def __init__(self, total: int, desc: str, every_s: float = 30.0):
        self.total, self.desc, self.t0, self.every_s = total, desc, time.time(), every_s
        self.done, self.last = 0, self.t0
        print(f"{desc}: {total} games ...", file=sys.stderr, flush=True)

    def update(self, n: int) -> None:
        self.done += n
        now = time.time()
        if now - self.last >= self.every_s and self.done < self.total:
            self.last = now
            print(f"{self.desc}: {self.done}/{self.total} games, {now - self.t0:.0f} s", file=sys.stderr, flush=True)

    def close(self) -> None:
        print(f"{self.desc}: {self.total} games in {time.time() - self.t0:.0f} s", file=sys.stderr, flush=True)


def _progress(total: int, desc: str, enabled: bool):
    if not enabled:
        return _NoBar()
    if not sys.stderr.isatty():
        return _LineBar(total, desc)
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return _NoBar()
    return tqdm(total=total, desc=desc, unit="game")


def generated_settings(cfg: Any) -> dict[str, Any]:
    """The settings that determine a generated set (recorded in ``manifest.json``).

    Args:
        cfg: an ``EnvConfig`` (uses ``generated_seed``, ``generated_train_games``,
            ``generated_eval_games``, ``generated_max_receptacles``, ``task_types``).
    """
    types = [t for t in TASK_TYPES if t in (cfg.task_types or TASK_TYPES)]
    return {
        "generator_version": GENERATOR_VERSION,
        "seed": int(cfg.generated_seed),
        "train_games": int(cfg.generated_train_games),
        "eval_games": int(cfg.generated_eval_games),
        "max_receptacles": int(cfg.generated_max_receptacles),
        "task_types": types,
        "eval_scenes": str(getattr(cfg, "generated_eval_scenes", "unseen")),
    }


def _read_manifest(root: Path) -> dict[str, Any] | None:
    try:
        return json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _complete(root: Path, manifest: dict[str, Any] | None, settings: dict[str, Any]) -> bool:
    if not manifest or manifest.get("settings") != settings:
        return False
    for split, n in (("train", settings["train_games"]), ("eval", settings["eval_games"])):
        d = root / DATA_FOLDER / split
        have = len(list(d.glob(f"*/*/{GAME_FILE}"))) if d.is_dir() else 0
        if have != n:
            return False
    return True


def ensure_generated(cfg: Any, *, workers: int = 0, progress: bool = True) -> Path:
    """Generate the train (``cfg.generated_train_games``) and eval (``cfg.generated_eval_games``)
    games into ``cfg.generated_dir`` once; return that folder (it holds ``json_2.1.1``).

    The folder is reused when its ``manifest.json`` records the same settings
    (:func:`generated_settings`) and holds that many games. When it holds a complete set of
    *other* settings, those games are left alone (a run may be playing them) and the games of
    these settings live in the sibling folder ``<generated_dir>-<settings hash>``; otherwise
    (no folder, or an incomplete one) everything is generated into a temporary sibling folder
    which then replaces it (atomic rename). Concurrent callers (runs of a sweep sharing one
    cache) take an exclusive ``flock`` on ``<name>.lock`` next to the folder: one generates, the
    others wait and then reuse its games.

    Args:
        cfg: an ``EnvConfig``.
        workers: see :func:`generate_games`.
        progress: show progress bars while generating.

    Returns:
        The games folder: ``Path(cfg.generated_dir)`` or its settings-keyed sibling.
    """
    root = Path(cfg.generated_dir)
    settings = generated_settings(cfg)
    manifest = _read_manifest(root)
    if _complete(root, manifest, settings):
        return _with_parses(root, workers=workers, progress=progress)
    if manifest and _complete(root, manifest, manifest.get("settings")):
        key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:10]
        root = root.with_name(f"{root.name}-{key}")  # never replace games a run may be playing
        if _complete(root, _read_manifest(root), settings):
            return _with_parses(root, workers=workers, progress=progress)
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if _complete(root, _read_manifest(root), settings):  # another process generated them meanwhile
            return root
        return _generate_into(root, settings, workers=workers, progress=progress)


def _with_parses(root: Path, *, workers: int, progress: bool) -> Path:
    """A complete games folder generated before the generator stored each game's parse
    (``manifest.json`` without ``"parsed"``): store them now, once (~0.1 s CPU per game; the
    games themselves do not change, so runs already playing them are unaffected), then record
    ``"parsed"`` in the manifest. Returns ``root``."""
    if (_read_manifest(root) or {}).get("parsed") == PARSED_GAME_FORMAT:
        return root
    with open(root.parent / f"{root.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest = _read_manifest(root) or {}
        if manifest.get("parsed") == PARSED_GAME_FORMAT:
            return root
        games = sorted(str(g) for g in (root / DATA_FOLDER).glob(f"*/*/*/{GAME_FILE}")
                       if not g.with_name(PARSED_FILE).is_file())
        t0 = time.perf_counter()
        n_workers = max(1, min(workers or (os.cpu_count() or 1), math.ceil(len(games) / 16)))
        bar = _progress(len(games), "storing the parse of ALFWorld games generated before it was stored (once)",
                        progress and bool(games))
        stored = 0
        if n_workers == 1:
            results = map(_store_parse, games)
        else:
            install_caches()
            ex = _pool(n_workers)
            results = ex.map(_store_parse, games, chunksize=16)
        try:
            for ok in results:
                stored += ok
                bar.update(1)
        finally:
            if n_workers > 1:
                ex.shutdown(wait=True, cancel_futures=True)
            bar.close()
        log.info("stored the parse of %d of %d ALFWorld games generated before the generator "
                 "stored them (%s), in %.1f s", stored, len(games), root, time.perf_counter() - t0)
        manifest["parsed"] = PARSED_GAME_FORMAT
        tmp = root / f".{MANIFEST}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        os.replace(tmp, root / MANIFEST)
    return root


def _store_parse(game_path: str) -> bool:
    """Load one game (translate and parse it) and write its :data:`PARSED_FILE`."""
    if "parser" not in _WORKER:
        _WORKER["parser"] = make_pddl_env()
    env = _WORKER["parser"]
    game = json.loads(Path(game_path).read_text(encoding="utf-8"))
    env.load(game)
    return save_parsed_game(Path(game_path).with_name(PARSED_FILE), game)


def _generate_into(root: Path, settings: dict[str, Any], *, workers: int, progress: bool) -> Path:
    tmp = root.parent / f".{root.name}.tmp-{os.getpid()}-{time.time_ns()}"
    try:
        t0 = time.perf_counter()
        stats = {}
        for split, n in (("train", settings["train_games"]), ("eval", settings["eval_games"])):
            generate_games(
                tmp,
                split,
                n,
                settings["seed"],
                settings["max_receptacles"],
                settings["task_types"],
                workers=workers,
                progress=progress,
                scenes="train" if split == "train" or settings["eval_scenes"] == "seen" else "test",
            )
            stats[split] = last_generation_stats()
            (tmp / DATA_FOLDER / split).mkdir(parents=True, exist_ok=True)
        total = settings["train_games"] + settings["eval_games"]
        manifest = {
            "settings": settings,
            "splits": {"train": settings["train_games"], "eval": settings["eval_games"]},
            "seconds_total": round(time.perf_counter() - t0, 3),
            "seconds_per_game": round((time.perf_counter() - t0) / max(1, total), 4),
            "generation": stats,
            "alfworld_version": _version("alfworld"),
            "textworld_version": _version("textworld"),
            "layout": f"{DATA_FOLDER}/<split>/<task_type>-<Obj>-None-<Recep>-<floorplan>/trial_gen_<seed>_<k>",
            "parsed": PARSED_GAME_FORMAT,  # every game has its PARSED_FILE
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        old = None
        if root.exists():
            old = root.parent / f".{root.name}.old-{os.getpid()}-{time.time_ns()}"
            os.rename(root, old)
        try:
            os.rename(tmp, root)
        except OSError:
            if not _complete(root, _read_manifest(root), settings):
                raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _version(dist: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:  # noqa: BLE001
        return None
