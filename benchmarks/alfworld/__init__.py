"""ALFWorld benchmark: the interface the rollout engine uses.

- :func:`load_tasks` (``cfg: EnvConfig, split``) -> tasks: official/downloaded games from
  ``cfg.data_dir`` (ALFWorld layout, e.g. ``../shared/data/alfworld``), or, when
  ``cfg.data_dir`` is None, games generated offline into ``cfg.generated_dir``
  (splits ``"train"`` and ``"eval"``; see :mod:`g2po_bench.benchmarks.alfworld.generate`).
- :func:`make_env` (``cfg``) -> :class:`AlfworldEnv` (the real textworld/alfworld engine).
- :func:`build_prompt`, :func:`expert_response`: the verl-agent step prompt and short expert
  responses for supervised warm starts; :func:`expert_actions`: a game's walkthrough.
- :data:`TASK_TYPES` (Pick, Look, Clean, Heat, Cool, Pick2 order) and :data:`SHORT_NAMES`.
- :data:`BENCHMARK`: all of it as the suite's :class:`~g2po_bench.benchmarks.base.Benchmark`.

Importing this package is cheap: alfworld/textworld are imported only when an engine is built
or games are generated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from g2po_bench.benchmarks.alfworld import engine
from g2po_bench.benchmarks.alfworld.download import EXPECTED_SPLITS, download_alfworld
from g2po_bench.benchmarks.alfworld.env import AlfworldEnv
from g2po_bench.benchmarks.alfworld.games import (
    SHORT_NAMES,
    TASK_TYPES,
    AlfworldDataError,
    available_splits,
    find_games,
    load_walkthrough,
    scan_games,
)
from g2po_bench.benchmarks.alfworld.generate import ensure_generated, generate_games
from g2po_bench.benchmarks.alfworld.prompt import build_prompt, expert_response, plan_sentence
from g2po_bench.benchmarks.alfworld.speed import main as speed_benchmark_main
from g2po_bench.benchmarks.alfworld.state_keys import ObservationKeys
from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.benchmarks.loading import check_split_count, require_at_least
from g2po_bench.core.config import require
from g2po_bench.core.protocol import IfAdmissible, Mistake, Task, state_key_rule

if TYPE_CHECKING:  # pragma: no cover
    from g2po_bench.core.config import EnvConfig

__all__ = [
    "TASK_TYPES",
    "PROJECTION",
    "SHORT_NAMES",
    "GENERATED_SPLIT_ALIASES",
    "AlfworldEnv",
    "AlfworldDataError",
    "available_splits",
    "find_games",
    "load_walkthrough",
    "load_tasks",
    "make_env",
    "build_prompt",
    "expert_actions",
    "expert_detour",
    "expert_stall",
    "expert_mistake",
    "OPENABLE_RECEPTACLES",
    "expert_response",
    "data_root",
    "ensure_generated",
    "generate_games",
    "download_alfworld",
    "AlfworldBenchmark",
    "BENCHMARK",
]

#: the reference action projection (verl-agent ``alfworld_projection``: 30-character fallback)
PROJECTION = "alfworld"

#: for generated games (``cfg.data_dir`` None) these official split names select the generated
#: held-out split ``"eval"`` (its floor plans are disjoint from ``"train"``'s), so configs written
#: for the official data (``eval_split: valid_seen``) run unchanged on the embedded default.
GENERATED_SPLIT_ALIASES = {"valid_seen": "eval", "valid_unseen": "eval"}


def data_root(cfg: EnvConfig) -> Path:
    """The games folder for ``cfg``: ``cfg.data_dir``, or the generated folder (generating the
    games once if needed, see :func:`g2po_bench.benchmarks.alfworld.generate.ensure_generated`)."""
    if cfg.data_dir is not None:
        return Path(cfg.data_dir)
    return ensure_generated(cfg)


def load_tasks(cfg: EnvConfig, split: str) -> list[Task]:
    """Tasks of ``split``, filtered by ``cfg.task_types`` (empty = all six), sorted by task id.

    Args:
        cfg: the run's ``EnvConfig``.
        split: a split folder name (``"valid_seen"``, ``"train"``, ...). With generated games the
            splits are ``"train"`` and ``"eval"``; ``"valid_seen"``/``"valid_unseen"`` map to
            ``"eval"`` (:data:`GENERATED_SPLIT_ALIASES`).

    Raises:
        AlfworldDataError: folder/split missing or no games (the message says what to run).
        g2po_bench.benchmarks.loading.SplitTooSmallError: fewer games load than the folder's manifest
            (generated games) or download record (``g2po data download``) says it holds.
        g2po_bench.benchmarks.loading.SplitCountError: ``split`` is ``cfg.eval_split``, an official
            split (``data_dir`` set, no ``task_types`` filter) that loads another number of games
            than the official count, and ``cfg.allow_incomplete_eval_split`` is false; for any
            other split a :class:`~g2po_bench.benchmarks.loading.SplitCountWarning` names the games
            left out instead.
    """
    root = data_root(cfg)
    if cfg.data_dir is None:
        split = GENERATED_SPLIT_ALIASES.get(split, split)
    scan = scan_games(root, split, cfg.task_types or None)
    tasks = scan.tasks
    _check_manifest(root, split, len(tasks), generated=cfg.data_dir is None, filtered=bool(cfg.task_types))
    if cfg.data_dir is not None and not cfg.task_types:
        _check_official_count(cfg, root, split, scan)
    return tasks


def _check_official_count(cfg: EnvConfig, root: Path, split: str, scan) -> None:
    """An official split (``download.EXPECTED_SPLITS``: train 3553, valid_seen 140, valid_unseen 134
    games) that loads another number of games: a warning naming the games left out (not marked
    solvable, or failing to load), or an error for the run's evaluation split unless
    ``env.allow_incomplete_eval_split`` (:func:`g2po_bench.benchmarks.loading.check_split_count`)."""
    expected = EXPECTED_SPLITS.get(split)
    if expected is None:
        return
    strict = split == cfg.eval_split and not getattr(cfg, "allow_incomplete_eval_split", False)
    check_split_count(len(scan.tasks), expected, f"ALFWorld split {split!r} of {str(root)!r}",
                      [*scan.left_out, *scan.skipped], strict=strict,
                      accept="env.allow_incomplete_eval_split=true", noun="games")


def _check_manifest(root: Path, split: str, have: int, *, generated: bool, filtered: bool) -> None:
    """A split that loads fewer games than its manifest records is an error: the generator's
    ``manifest.json`` (``splits``), or the download's ``g2po_download.json`` (``games``, only
    without a task-type filter)."""
    name, key, fix = (("manifest.json", "splits", "delete the folder and run `g2po data generate alfworld` "
                       "with the same settings to generate them again") if generated else
                      ("g2po_download.json", "games", "run `g2po data download alfworld` again "
                       "(it re-fetches an incomplete copy)"))
    if not generated and filtered:
        return
    try:
        manifest = json.loads((root / name).read_text(encoding="utf-8"))
        expected = int(manifest[key][split])
    except (OSError, ValueError, KeyError, TypeError):
        return  # no manifest, or none for this split: nothing to compare with
    require_at_least(have, expected, f"ALFWorld split {split!r} of {str(root)!r} ({name} records {expected} games)",
                     fix)


def make_env(cfg: EnvConfig) -> AlfworldEnv:
    """A fresh :class:`AlfworldEnv` with ``cfg.state_key`` ("reference" or "raw"; "auto" =
    reference, :func:`g2po_bench.core.protocol.state_key_rule`); cheap, no I/O."""
    return AlfworldEnv(state_key=state_key_rule(cfg))


def expert_actions(task: Task) -> list[str]:
    """The walkthrough stored in the task's game file (replaying it wins)."""
    return load_walkthrough(task)


#: receptacle types that start closed in ALFWorld games and must be opened to see inside
#: (``alfworld.gen.constants.OPENABLE_CLASS_LIST``, lowercased as the text shows them)
OPENABLE_RECEPTACLES = frozenset({"fridge", "cabinet", "microwave", "drawer", "safe", "box"})


def expert_detour(plan: list[str], first_obs, rng, open_prob: float = 0.0) -> list[str]:
    """The walkthrough with a search detour: one visit to another receptacle before the first.

    The planner's walkthrough goes straight to the receptacle that holds the target object: it
    knows the hidden state, which the agent does not. A warm start trained only on such
    walkthroughs never sees what to do at a receptacle without the target (the CPU proxy's
    ``train.sft_detour_prob``). This variant first goes to another receptacle of the room, chosen
    at random from the admissible ``go to`` commands of the first observation (never the one the
    walkthrough goes to), then follows the walkthrough: it still wins, one step later.

    A closed receptacle (:data:`OPENABLE_RECEPTACLES`) hides what it holds: with probability
    ``open_prob`` the detour opens it ("open drawer 1": the reply lists its contents, without the
    target) before going on, two steps later (``train.sft_detour_open_prob``). Without that, every
    "open" a demonstration shows is followed by taking the target, and a warm start learns to take
    the task's object from whatever it opens. The "open" is an :class:`~g2po_bench.core.protocol.IfAdmissible`
    action (skipped where the receptacle turns out to be open: some official games have drawers
    without doors), and none is added when the walkthrough itself opens that receptacle later
    (it would find it open and be refused).

    Args:
        plan: the walkthrough (:func:`expert_actions`).
        first_obs: the reset :class:`~g2po_bench.core.protocol.Observation` (its admissible actions).
        rng: a ``numpy.random.Generator`` (one draw for the receptacle, one more for an openable
            one when ``open_prob`` > 0).
        open_prob: probability in [0, 1] of opening a closed detour receptacle.

    Returns:
        The new plan; ``plan`` unchanged when it does not start with ``go to`` or the room has
        no other receptacle.
    """
    if not plan or not plan[0].startswith("go to "):
        return list(plan)
    others = sorted(a for a in (first_obs.admissible_actions or ()) if a.startswith("go to ") and a != plan[0])
    if not others:
        return list(plan)
    first = others[int(rng.integers(len(others)))]
    receptacle = first[len("go to "):]
    look_inside = f"open {receptacle}"
    if (open_prob > 0 and receptacle.split()[0] in OPENABLE_RECEPTACLES and look_inside not in plan
            and rng.random() < open_prob):
        return [first, IfAdmissible(look_inside), *plan]
    return [first, *plan]


def expert_mistake(plan: list[str]) -> list[str]:
    """A detour plan (:func:`expert_detour`) with a mistake and its recovery at the wrong receptacle.

    At the receptacle the detour visits (after opening it, when the detour does), the expert
    first tries to take the task's object there ("take <object> from <receptacle>": refused with
    "Nothing happens.", the object is elsewhere), then goes on with the walkthrough. The attempt
    is a :class:`~g2po_bench.core.protocol.Mistake`: played and shown in the history, never imitated, so
    the warm start sees what to do after a refused action (the state a policy gets stuck in),
    which the planner's walkthroughs never show (the CPU proxy's ``train.sft_recovery_prob``).

    Args:
        plan: a detour plan: ``go to`` the detour receptacle (optionally ``open`` it), then the
            walkthrough, which starts with ``go to`` and takes an object ("take <object> from
            <receptacle>").

    Returns:
        The plan with the mistake after the detour; ``plan`` unchanged when it has no detour or
        takes nothing.
    """
    take = next((a for a in plan if a.startswith("take ") and " from " in a), None)
    if len(plan) < 2 or not plan[0].startswith("go to ") or take is None:
        return list(plan)
    receptacle = plan[0][len("go to "):]
    at = 2 if plan[1] == f"open {receptacle}" else 1
    if len(plan) <= at or not plan[at].startswith("go to "):
        return list(plan)
    obj = take[len("take "):].split(" from ")[0]
    return [*plan[:at], Mistake(f"take {obj} from {receptacle}"), *plan[at:]]


def expert_stall(plan: list[str], rng, prob: float, max_len: int) -> list[str]:
    """The plan of a dawdling expert: it re-examines the receptacle it stands at, now and then.

    Before each action after the first ``go to``, the expert first examines its current
    location ("examine <receptacle>": valid, never refused, changes nothing) with probability
    ``prob``, again and again (a geometric number of times, mean ``prob / (1 - prob)``), while
    the plan stays within ``max_len`` actions, so every demonstration still wins. A warm start
    trained on such demonstrations wastes steps the same way on any game, which the step limit
    turns into failures: the CPU proxy's ``train.sft_stall_prob``, what RL has to learn there
    is which steps waste the budget (step-level credit over a long episode; repeated examines
    are self-loops of the state graph). The CPU-proxy design and its figures: docs/cpu-proxy.md.

    Args:
        plan: the walkthrough (:func:`expert_actions`, possibly with :func:`expert_detour`).
        rng: a ``numpy.random.Generator``.
        prob: stall probability per opportunity in [0, 1).
        max_len: the step limit; stalls are only inserted while the plan fits in it.

    Returns:
        The new plan (``plan`` itself when ``prob`` is 0 or nothing fits).
    """
    out: list[str] = []
    where = None
    budget = max_len - len(plan)
    for action in plan:
        while where is not None and budget > 0 and rng.random() < prob:
            out.append(f"examine {where}")
            budget -= 1
        out.append(action)
        if action.startswith("go to "):
            where = action[len("go to "):]
    return out


class AlfworldBenchmark(Benchmark):
    """ALFWorld (Shridhar et al., ICLR 2021) as the suite's benchmark: the functions of this
    package, the compact prompt for the tiny CPU model, offline game generation and the
    official download."""

    name = "alfworld"
    task_types = TASK_TYPES
    projection = PROJECTION
    prompt_styles = ("reference", "compact")
    reference_max_steps = 50  # the papers' step limit (the GPU presets' env.max_steps)
    agent_intro = (
        'You are an expert agent operating in the ALFRED Embodied Environment, a text-based '
        'household. You solve a task by interacting with the environment one step at a time; the '
        'environment answers every action with an observation.'
    )
    downloads = True
    generates = True
    expert_detour = staticmethod(expert_detour)
    expert_stall = staticmethod(expert_stall)
    expert_mistake = staticmethod(expert_mistake)

    # the package's functions are the protocol's required parts
    load_tasks = staticmethod(load_tasks)
    make_env = staticmethod(make_env)
    build_prompt = staticmethod(build_prompt)
    expert_actions = staticmethod(expert_actions)
    expert_response = staticmethod(expert_response)

    def validate_config(self, cfg) -> None:
        """The task types and prompt styles (the base checks), the generated games' settings,
        and ``train.rl_tasks=without_demos`` leaving tasks to train on."""
        super().validate_config(cfg)
        env, t = cfg.env, cfg.train
        require(env.generated_eval_scenes in ("seen", "unseen"), "env.generated_eval_scenes", "choose seen or unseen")
        require(env.generated_max_receptacles >= 0, "env.generated_max_receptacles", "must be >= 0")
        require(not (t.rl_tasks == "without_demos" and env.data_dir is None
                     and env.generated_train_games <= t.sft_max_tasks), "train.rl_tasks",
                f"without_demos leaves no training task: the warm start imitates all {env.generated_train_games} "
                f"generated training games (train.sft_max_tasks={t.sft_max_tasks}); lower train.sft_max_tasks or raise "
                "env.generated_train_games")

    def default_prompt_style(self, cfg) -> str:
        """``compact`` for the tiny CPU model (``model.path`` unset, or a folder of it: a warm start
        or checkpoint policy, marked by ``g2po_tiny.json``), ``reference`` for real models."""
        tiny = cfg.model.path is None or (Path(cfg.model.path) / "g2po_tiny.json").is_file()
        return "compact" if tiny else "reference"

    def make_state_key_rule(self, rule):
        """ALFWorld keys by the reference rule or the raw observation
        (:class:`~g2po_bench.benchmarks.alfworld.state_keys.ObservationKeys`)."""
        return ObservationKeys(rule)

    def preload_worker_modules(self) -> None:
        engine.preload_worker_modules()

    def generate(self, cfg):
        return ensure_generated(cfg)

    def download(self, dest):
        return download_alfworld(dest)

    def speed_benchmark(self, argv):
        return int(speed_benchmark_main(list(argv), prog="g2po bench alfworld") or 0)

    def plan_sentence(self, task, actions, instruction):
        return plan_sentence(task, actions)


BENCHMARK = AlfworldBenchmark()
