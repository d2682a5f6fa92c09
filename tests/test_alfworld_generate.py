"""Offline ALFWorld game generator: solvable games of all six types whose walkthrough wins,
deterministic, train/eval floor plans disjoint, cached generation for the embedded default."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from g2po_bench.benchmarks.alfworld import TASK_TYPES, expert_actions, load_tasks
from g2po_bench.benchmarks.alfworld.env import AlfworldEnv
from g2po_bench.benchmarks.alfworld.games import find_games
from g2po_bench.benchmarks.alfworld.generate import ensure_generated, generate_games
from g2po_bench.core.config import EnvConfig

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("alfgen")
    paths = generate_games(out, "train", 6, seed=3, max_receptacles=4, workers=1)
    return out, paths


def test_all_six_types_solvable_and_winning(generated):
    out, paths = generated
    assert len(paths) == 6
    tasks = find_games(out, "train")
    assert [
        t.task_type for t in sorted(tasks, key=lambda t: int(t.task_id.rsplit("_", 1)[1]))
    ] == list(TASK_TYPES)
    env = AlfworldEnv()
    for task in tasks:
        game = json.loads(Path(task.payload).read_text())
        assert set(game) == {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
        assert game["solvable"] is True and game["walkthrough"]
        assert "UNKNOWN GOAL" not in game["grammar"] and "(:goal" in game["pddl_problem"]
        traj = json.loads((Path(task.payload).parent / "traj_data.json").read_text())
        assert traj["task_type"] == task.task_type
        assert traj["pddl_params"]["object_target"] in task.task_id
        assert traj["scene"]["floor_plan"].startswith("FloorPlan")
        obs = env.reset(task)
        assert obs.text.startswith("You are in the middle of a room.")
        n_receptacles = len(re.findall(r" \d+[,.]", obs.text))
        assert n_receptacles <= 4 + 1, (task.task_id, obs.text)  # max_receptacles + appliance
        assert not obs.won
        for action in expert_actions(task):
            assert action in obs.admissible_actions
            obs = env.step(action)
        assert obs.won and obs.done and obs.reward == 1.0
    env.close()


def test_sink_basin_naming(generated):
    out, _ = generated
    clean = find_games(out, "train", ["pick_clean_then_place_in_recep"])[0]
    text = AlfworldEnv().reset(clean).text
    assert "sinkbasin 1" in text and "sinkbasinbasin" not in text


def test_deterministic(generated, tmp_path):
    out, paths = generated
    again = generate_games(tmp_path, "train", 2, seed=3, max_receptacles=4, workers=1)
    for a, b in zip(paths[:2], again):
        assert a.relative_to(out) == b.relative_to(tmp_path)
        assert a.read_bytes() == b.read_bytes()
        assert (
            json.loads((a.parent / "traj_data.json").read_text())["pddl_params"]
            == json.loads((b.parent / "traj_data.json").read_text())["pddl_params"]
        )
    other = generate_games(tmp_path / "other", "train", 1, seed=4, max_receptacles=4, workers=1)
    assert other[0].read_bytes() != paths[0].read_bytes()


def _floor_plan(path: Path) -> int:
    return int(re.search(r"-(\d+)$", path.parent.parent.name).group(1))


def test_ensure_generated_cache_and_split_plans(tmp_path):
    cfg = EnvConfig(
        generated_dir=str(tmp_path / "gen"),
        generated_train_games=3,
        generated_eval_games=2,
        generated_max_receptacles=3,
        generated_eval_scenes="unseen",
        task_types=["pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep"],
    )
    root = ensure_generated(cfg, workers=1, progress=False)
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["settings"]["train_games"] == 3 and manifest["seconds_per_game"] > 0
    train = load_tasks(cfg, "train")
    evals = load_tasks(cfg, "eval")
    assert len(train) == 3 and len(evals) == 2
    assert load_tasks(cfg, "valid_seen") == evals  # official split names alias the eval split
    assert {t.task_type for t in train} == set(cfg.task_types)
    train_plans = {_floor_plan(Path(t.payload)) for t in train}
    eval_plans = {_floor_plan(Path(t.payload)) for t in evals}
    assert train_plans.isdisjoint(eval_plans)
    assert eval_plans <= {1, 2, 3, 4, 5, 6}  # ALFRED's held-out kitchens
    stamp = (root / "manifest.json").stat().st_mtime_ns
    assert ensure_generated(cfg, workers=1, progress=False) == root  # cached
    assert (root / "manifest.json").stat().st_mtime_ns == stamp
    first_games = sorted(p.name for p in (root / "json_2.1.1" / "eval").glob("*/*"))
    cfg.generated_eval_games = 1  # settings changed -> a settings-keyed sibling folder
    other = ensure_generated(cfg, workers=1, progress=False)
    assert other != root and other.name.startswith("gen-")
    assert len(load_tasks(cfg, "eval")) == 1
    # the first settings' games are untouched (a run may be playing them) and still reused
    assert sorted(p.name for p in (root / "json_2.1.1" / "eval").glob("*/*")) == first_games
    assert (root / "manifest.json").stat().st_mtime_ns == stamp
    assert ensure_generated(cfg, workers=1, progress=False) == other  # the sibling is reused
    assert not list(tmp_path.glob(".gen*"))  # temporary folders cleaned up


def test_concurrent_callers_generate_once(tmp_path, monkeypatch):
    """Two callers on one cache folder: one generates under the lock, the other waits and
    reuses its games (without the lock both would generate and swap folders under each other)."""
    import fcntl
    import threading

    from g2po_bench.benchmarks.alfworld import generate as gen

    calls = []
    real = gen._generate_into
    monkeypatch.setattr(gen, "_generate_into", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    cfg = EnvConfig(generated_dir=str(tmp_path / "gen"), generated_train_games=1, generated_eval_games=1,
                    generated_max_receptacles=3, task_types=["pick_and_place_simple"])
    results = []
    with open(tmp_path / "gen.lock", "a+") as held:  # a third party holds the lock first
        fcntl.flock(held, fcntl.LOCK_EX)
        threads = [threading.Thread(target=lambda: results.append(ensure_generated(cfg, workers=1, progress=False)))
                   for _ in range(2)]
        for t in threads:
            t.start()
        threads[0].join(timeout=1.0)
        assert all(t.is_alive() for t in threads) and not (tmp_path / "gen").exists()  # both wait
    for t in threads:
        t.join(timeout=300)
    assert results == [tmp_path / "gen"] * 2 and len(calls) == 1
    assert len(load_tasks(cfg, "train")) == 1 and len(load_tasks(cfg, "eval")) == 1


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError):
        generate_games(tmp_path, "train", 1, 0, 4, ["bogus"])
    with pytest.raises(ValueError):
        generate_games(tmp_path, "train", 1, 0, 1)
    assert generate_games(tmp_path, "train", 0, 0, 4) == []


def test_seen_eval_games_are_new_games_on_training_floor_plans(tmp_path):
    """generated_eval_scenes=seen (the CPU default, like valid_seen): eval games are drawn from
    ALFRED's training floor plans but are different games from the training split."""
    from g2po_bench.benchmarks.alfworld.generate import _scene_pool

    cfg = EnvConfig(generated_dir=str(tmp_path / "gen"), generated_train_games=4, generated_eval_games=4,
                    generated_max_receptacles=3, generated_eval_scenes="seen",
                    task_types=["pick_and_place_simple"])
    ensure_generated(cfg, workers=1, progress=False)
    train, evals = load_tasks(cfg, "train"), load_tasks(cfg, "eval")
    train_pool = set(_scene_pool("train"))
    assert {_floor_plan(Path(t.payload)) for t in evals} <= train_pool
    train_problems = {json.loads(Path(t.payload).read_text())["pddl_problem"] for t in train}
    assert all(json.loads(Path(t.payload).read_text())["pddl_problem"] not in train_problems for t in evals)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_stop_request_ends_generation_between_games(tmp_path, workers, dispositions):
    """Under a trainer's signal guard, a stop request (SIGTERM here) ends generation after the
    game (or small chunk) in flight, with ShutdownRequested, not after all the games."""
    import os
    import signal

    from g2po_bench.runtime.shutdown import GracefulShutdown, ShutdownRequested

    dispositions(signal.SIGTERM, signal.SIG_DFL)

    with GracefulShutdown(log=lambda m: None):
        os.kill(os.getpid(), signal.SIGTERM)  # recorded by the guard: a stop request
        with pytest.raises(ShutdownRequested):
            generate_games(tmp_path, "train", 100, seed=0, max_receptacles=2, workers=workers)
    written = len(list(tmp_path.rglob("game.tw-pddl")))
    # in-process: the one game in flight; workers: the chunks of 4 games already handed to them
    assert 1 <= written <= (1 if workers == 1 else 4 * (2 * workers + 2)), written


JOB = r"""
import signal, sys
# a process started from a terminal, as the test means it (whoever started pytest: nohup's or a
# script's `&` pass SIGINT on ignored, and the guard would keep it ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
from g2po_bench.benchmarks.alfworld.generate import generate_games
from g2po_bench.runtime.shutdown import GracefulShutdown, ShutdownRequested
with GracefulShutdown(log=lambda m: None):
    try:
        generate_games(sys.argv[1], "train", 400, seed=0, max_receptacles=2, workers=2, progress=True)
    except ShutdownRequested as exc:
        print(f"stopped by signal {exc.signum}", flush=True)
        sys.exit(0)
print("generated everything", flush=True)
"""


def test_the_jobs_signal_to_the_whole_process_group_is_a_stop_not_a_crash(tmp_path):
    """`timeout`, a terminal's Ctrl-C and Slurm signal every process of the job, generation workers
    included: the trainer sees a stop request (status "interrupted"), not a BrokenProcessPool or
    KeyboardInterrupt traceback (status "failed")."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parents[1]
    for sig in (signal.SIGTERM, signal.SIGINT):
        out = tmp_path / sig.name
        proc = subprocess.Popen([sys.executable, "-c", JOB, str(out)], cwd=root, text=True, start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 120
        while time.time() < deadline and len(list(out.rglob("game.tw-pddl"))) < 4:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, sig)  # the parent and its workers, as `timeout` and Ctrl-C do
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0 and stdout.strip() == f"stopped by signal {int(sig)}", (sig, stdout, stderr[-3000:])
        assert "BrokenProcessPool" not in stderr and "Traceback" not in stderr, stderr[-3000:]


def test_generation_workers_die_with_a_killed_parent(tmp_path):
    """SIGKILL to the generating process alone (OOM killer, the end of Slurm's grace time): its
    pool workers end too (they die with their parent) instead of waiting on the task queue."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from g2po_bench.sweeps.scheduler import ProcessTree

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-c", JOB, str(tmp_path)], cwd=root, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tree = ProcessTree(proc.pid)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(list(tmp_path.rglob("game.tw-pddl"))) < 4:
            time.sleep(0.2)
        workers = [p for p in tree.alive() if p != proc.pid]
        assert proc.poll() is None and len(workers) >= 2, workers
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
        deadline = time.time() + 30
        while time.time() < deadline and tree.alive():
            time.sleep(0.1)
        assert tree.alive() == [], tree.describe()
    finally:
        for p in tree.alive():
            os.kill(p, signal.SIGKILL)
