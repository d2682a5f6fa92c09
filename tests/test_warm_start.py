"""The warm-start cache: shared by runs of the same warm-start settings, keyed by them."""

import json

import pytest
import torch
from test_train import TOY as TRAIN_TOY

from g2po_bench.algorithms.backends.local.warm_start import warm_start_key, warm_start_settings
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.runconfig import load_config
from g2po_bench.train import run_train

#: the toy training run of test_train.py, shorter (later overrides win)
TOY = [*TRAIN_TOY, "train.iterations=1", "train.group_size=2", "eval.num_tasks=2", "eval.every=0"]


def _cfg(tmp_path, *extra):
    return load_config(None, [*TOY, f"output_dir={tmp_path / 'runs'}",
                              f"train.warm_start_cache={tmp_path / 'ws'}", *extra])


def test_key_ignores_seed_estimator_and_rl_settings_but_not_the_warm_start_settings(tmp_path):
    base = _cfg(tmp_path)
    same = [_cfg(tmp_path, "seed=7"), _cfg(tmp_path, "algorithm.name=grpo"), _cfg(tmp_path, "train.lr=1e-5"),
            _cfg(tmp_path, "eval.num_tasks=3"), _cfg(tmp_path, "train.iterations=9"),
            _cfg(tmp_path, "model.num_threads=2"), _cfg(tmp_path, "env.generated_dir=/elsewhere"),
            _cfg(tmp_path, "env.webshop_reward=lenient"), _cfg(tmp_path, "env.webshop_expert=instruction"),
            _cfg(tmp_path, "env.num_workers=2"),
            _cfg(tmp_path, "env.stop_after_refusals=0")]
    for cfg in same:
        assert warm_start_key(cfg) == warm_start_key(base)
    other = [_cfg(tmp_path, "train.sft_epochs=3"), _cfg(tmp_path, "train.sft_lr=1e-3"),
             _cfg(tmp_path, "model.hidden_size=64"), _cfg(tmp_path, "env.max_steps=5"),
             _cfg(tmp_path, "train.warm_start_seed=1"), _cfg(tmp_path, "env.history_length=1"),
             _cfg(tmp_path, "train.sft_stall_prob=0.2"), _cfg(tmp_path, "train.sft_recovery_prob=0.5"),
             _cfg(tmp_path, "train.sft_detour_open_prob=0.5"), _cfg(tmp_path, "train.sft_micro_batch_size=4"),
             _cfg(tmp_path, "train.sft_first_step_tasks=10"), _cfg(tmp_path, "model.item_tokens=true"),
             _cfg(tmp_path, "env.max_train_tasks=4")]
    keys = {warm_start_key(c) for c in other}
    assert warm_start_key(base) not in keys and len(keys) == len(other)
    assert warm_start_settings(base)["train"]["sft_epochs"] == 2
    # options added later stay out of the key at their neutral value (older caches stay valid)
    assert "sft_stall_prob" not in warm_start_settings(base)["train"]
    assert "sft_detour_open_prob" not in warm_start_settings(_cfg(tmp_path, "train.sft_detour_open_prob=0"))["train"]
    settings = warm_start_settings(base)
    assert {"sft_micro_batch_size", "sft_first_step_tasks"}.isdisjoint(settings["train"])
    assert "item_tokens" not in settings["model"] and "max_train_tasks" not in settings["env"]
    # a benchmark whose demonstrations changed has its revision in the key; the others keep theirs
    assert "demos" not in settings and settings["env"]["name"] != "webshop"
    assert warm_start_settings(_cfg(tmp_path, "env.name=webshop"))["demos"] == 2


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_runs_with_the_same_settings_share_one_warm_start(tmp_path):
    a = run_train(_cfg(tmp_path, "seed=0"))
    b = run_train(_cfg(tmp_path, "seed=1", "algorithm.name=grpo"))
    sa = json.loads((a.root / "setup.json").read_text())
    sb = json.loads((b.root / "setup.json").read_text())
    assert sa["warm_start/reused"] is False and sb["warm_start/reused"] is True
    assert sa["warm_start/key"] == sb["warm_start/key"]
    assert len(list((tmp_path / "ws").glob("*/warm_start.json"))) == 1
    # both runs start RL from the very same policy: their reference policies are identical
    wa, wb = _weights(a.root / "reference"), _weights(b.root / "reference")
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # the evaluation before RL saw the same starting policy (same panel, per-seed sampling)
    assert sb["sft/loss_last"] == sa["sft/loss_last"]

    c = run_train(_cfg(tmp_path, "train.sft_epochs=3"))
    sc = json.loads((c.root / "setup.json").read_text())
    assert sc["warm_start/reused"] is False and sc["warm_start/key"] != sa["warm_start/key"]
    assert len(list((tmp_path / "ws").glob("*/warm_start.json"))) == 2
    assert sc["sft/epochs"] == 3 and len(sc["sft/loss_epochs"]) == 3


def test_empty_cache_setting_builds_inside_the_run_folder(tmp_path):
    run = run_train(_cfg(tmp_path, "train.warm_start_cache="))
    assert (run.root / "warm_start").is_dir()
    assert not (tmp_path / "ws").exists()


def test_detour_demonstrations_visit_another_receptacle_first_and_still_win(tmp_path):
    """The searching expert of the warm start (train.sft_detour_prob): real ALFWorld games."""
    import numpy as np
    from conftest import require_shared

    from g2po_bench.benchmarks import alfworld
    from g2po_bench.benchmarks.alfworld.env import AlfworldEnv
    from g2po_bench.benchmarks.demos import collect_demonstrations
    from g2po_bench.runtime.workers import EnvPool

    root = require_shared("alfworld")
    tasks = alfworld.find_games(root, "valid_seen", ["pick_and_place_simple"])[:4]
    env = AlfworldEnv()
    rng = np.random.default_rng(0)
    for task in tasks:
        plan = alfworld.expert_actions(task)
        obs = env.reset(task)
        detour = alfworld.expert_detour(plan, obs, rng)
        assert detour[1:] == plan and detour[0].startswith("go to ") and detour[0] != plan[0]
        assert detour[0] in obs.admissible_actions
        for action in detour:
            obs = env.step(action)
        assert obs.won
    env.close()
    cfg = load_config(None, ["env.data_dir=" + str(root), "env.num_workers=1"])
    with EnvPool(get_benchmark("alfworld"), cfg.env, 1) as pool:
        plain, win0 = collect_demonstrations(pool, get_benchmark("alfworld"), tasks, max_steps=50)
        every, win1 = collect_demonstrations(pool, get_benchmark("alfworld"), tasks, max_steps=50, detour_prob=1.0)
    assert win0 == win1 == 1.0
    assert len(every) == len(plain) + len(tasks)  # one extra step per demonstration


def test_detour_opens_a_closed_receptacle_unless_the_walkthrough_does():
    """train.sft_detour_open_prob on hand-written plans: which receptacles, the probability, the RNG."""
    import numpy as np

    from g2po_bench.benchmarks.alfworld import expert_detour
    from g2po_bench.core.protocol import Observation

    def room(*receptacles):
        return Observation(state_key="", text="", instruction="", admissible_actions=[f"go to {r}" for r in receptacles] + ["look"])

    plan = ["go to dresser 1", "take alarmclock 1 from dresser 1", "go to desk 1", "use desklamp 1"]
    closed = room("drawer 1", "dresser 1")
    assert expert_detour(plan, closed, np.random.default_rng(0), open_prob=1.0) == [
        "go to drawer 1", "open drawer 1", *plan]
    assert expert_detour(plan, closed, np.random.default_rng(0), open_prob=0.0) == ["go to drawer 1", *plan]
    assert expert_detour(plan, room("shelf 1", "dresser 1"), np.random.default_rng(0), open_prob=1.0) == [
        "go to shelf 1", *plan]  # an open surface shows what it holds on arrival
    later = ["go to dresser 1", "take mug 1 from dresser 1", "go to drawer 1", "open drawer 1", "move mug 1 to drawer 1"]
    assert expert_detour(later, closed, np.random.default_rng(0), open_prob=1.0) == ["go to drawer 1", *later]
    opened = [len(expert_detour(plan, closed, np.random.default_rng(s), open_prob=0.3)) - len(plan) - 1
              for s in range(2000)]
    assert abs(np.mean(opened) - 0.3) < 0.04
    # open_prob=0 draws exactly what the detour drew before the option existed (one integer)
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    expert_detour(plan, closed, a, open_prob=0.0)
    b.integers(1)
    assert a.random() == b.random()


def test_replay_skips_a_conditional_action_the_observation_does_not_admit():
    """g2po_bench.core.protocol.IfAdmissible in a plan: played where admitted, skipped (no step) elsewhere."""
    from types import SimpleNamespace

    from g2po_bench.benchmarks import toy
    from g2po_bench.benchmarks.demos import collect_demonstrations
    from g2po_bench.core.protocol import IfAdmissible
    from g2po_bench.runtime.workers import EnvPool

    task = toy.load_tasks(None, "train")[2]  # corridor of 4 rooms: 3 x go east wins
    plan = [IfAdmissible("open door"), "go east", IfAdmissible("look"), "go east", IfAdmissible("open door"),
            "go east", IfAdmissible("open door")]
    bench = SimpleNamespace(expert_actions=lambda t: list(plan), build_prompt=toy.build_prompt,
                            expert_response=toy.expert_response, parse_response=get_benchmark("toy").parse_response)
    with EnvPool(get_benchmark("toy"), None, 1) as pool:
        demos, win = collect_demonstrations(pool, bench, [task], max_steps=10)
        cut, _ = collect_demonstrations(pool, bench, [task], max_steps=2)
    assert win == 1.0
    assert [d.response.split("<action>")[1].split("</action>")[0] for d in demos] == [
        "go east", "look", "go east", "go east"]
    assert [d.step for d in demos] == [0, 1, 2, 3]
    assert len(cut) == 2  # the step limit counts played actions, not skipped ones


def test_opening_detours_on_real_games_show_the_contents_then_leave():
    """The searching expert looks inside the closed receptacle it detours to, sees no target, goes on;
    every replay still wins, with and without a recovery from a refused take there."""
    from conftest import require_shared

    from g2po_bench.benchmarks import alfworld
    from g2po_bench.benchmarks.demos import collect_demonstrations
    from g2po_bench.runtime.workers import EnvPool

    root = require_shared("alfworld")
    tasks = alfworld.find_games(root, "valid_seen")[::7][:20]
    cfg = load_config(None, ["env.data_dir=" + str(root), "env.num_workers=1"])
    with EnvPool(get_benchmark("alfworld"), cfg.env, 1) as pool:
        walk, _ = collect_demonstrations(pool, get_benchmark("alfworld"), tasks, max_steps=50, detour_prob=1.0)
        look, win = collect_demonstrations(pool, get_benchmark("alfworld"), tasks, max_steps=50, detour_prob=1.0,
                                           detour_open_prob=1.0)
        slip, win_slip = collect_demonstrations(pool, get_benchmark("alfworld"), tasks, max_steps=50, detour_prob=1.0,
                                                detour_open_prob=1.0, recovery_prob=1.0)
    assert win == win_slip == 1.0
    opens = [d for d in look if d.step == 1 and "<action>open " in d.response]
    assert opens, "no detour to a closed receptacle among these games: pick others"
    assert len(look) == len(walk) + len(opens)  # one extra step per opened detour receptacle
    by_step = {(d.task_id, d.step): d for d in look}
    for d in opens:
        after = by_step[(d.task_id, 2)]  # the reply to "open": the contents, then the expert leaves
        receptacle = d.response.split("<action>open ")[1].split("</action>")[0]
        assert f"You open the {receptacle}." in after.prompt and "<action>go to " in after.response
    # with a recovery: open, the refused take there (played at step 2, not recorded), then the walkthrough
    slip_opens = {d.task_id for d in slip if d.step == 1 and "<action>open " in d.response}
    after_slip = [d for d in slip if d.task_id in slip_opens and d.step == 3]
    assert slip_opens and len(after_slip) == len(slip_opens)
    assert all("Nothing happens." in d.prompt and "<action>go to " in d.response for d in after_slip)
    assert not any(d.step == 2 for d in slip if d.task_id in slip_opens)


def test_stall_inserts_examines_of_the_current_receptacle_within_the_step_limit():
    """The dawdling expert (train.sft_stall_prob) on a hand-written plan: where, how many, the cap."""
    import numpy as np

    from g2po_bench.benchmarks.alfworld import expert_stall

    plan = ["go to shelf 1", "take book 1 from shelf 1", "go to desk 1", "use desklamp 1"]
    assert expert_stall(plan, np.random.default_rng(0), 0.0, 15) == plan
    for seed in range(20):
        out = expert_stall(plan, np.random.default_rng(seed), 0.7, 9)
        assert [a for a in out if not a.startswith("examine ")] == plan
        assert len(out) <= 9
        assert out[0] == "go to shelf 1"  # nothing to examine before the first move
        where = None
        for a in out:  # every stall examines the receptacle the expert stands at
            if a.startswith("examine "):
                assert a == f"examine {where}"
            elif a.startswith("go to "):
                where = a[len("go to "):]
    lens = [len(expert_stall(plan, np.random.default_rng(s), 0.5, 100)) - len(plan) for s in range(2000)]
    assert abs(np.mean(lens) - 3 * 0.5 / 0.5) < 0.15  # 3 opportunities x mean prob/(1-prob) = 3
    assert expert_stall(plan, np.random.default_rng(0), 0.9, len(plan)) == plan  # no room: unchanged


def test_stall_demonstrations_still_win_on_real_games():
    from conftest import require_shared

    from g2po_bench.benchmarks import alfworld
    from g2po_bench.benchmarks.demos import collect_demonstrations
    from g2po_bench.runtime.workers import EnvPool

    root = require_shared("alfworld")
    tasks = alfworld.find_games(root, "valid_seen", ["pick_and_place_simple"])[:4]
    cfg = load_config(None, ["env.data_dir=" + str(root), "env.num_workers=1"])
    with EnvPool(get_benchmark("alfworld"), cfg.env, 1) as pool:
        plain, win0 = collect_demonstrations(pool, get_benchmark("alfworld"), tasks, max_steps=30)
        stalled, win1 = collect_demonstrations(pool, get_benchmark("alfworld"), tasks, max_steps=30, stall_prob=0.6, seed=1)
    assert win0 == win1 == 1.0
    extra = [d for d in stalled if "examine " in d.response]
    assert len(stalled) == len(plain) + len(extra) and extra
    assert max(d.step for d in stalled) < 30


def test_mistake_is_inserted_after_the_detour_and_never_imitated():
    """The recovery demonstrations (train.sft_recovery_prob): the plan, then the replay on real games."""
    from conftest import require_shared

    from g2po_bench.benchmarks import alfworld
    from g2po_bench.benchmarks.demos import collect_demonstrations
    from g2po_bench.core.protocol import Mistake
    from g2po_bench.runtime.workers import EnvPool

    detour = ["go to drawer 1", "go to dresser 1", "take alarmclock 1 from dresser 1", "use desklamp 1"]
    out = alfworld.expert_mistake(detour)
    assert out == ["go to drawer 1", "take alarmclock 1 from drawer 1", *detour[1:]]
    assert isinstance(out[1], Mistake) and not any(isinstance(a, Mistake) for a in out[:1] + out[2:])
    assert alfworld.expert_mistake(detour[1:]) == detour[1:]  # no detour: unchanged
    assert alfworld.expert_mistake(["go to a 1", "go to b 1", "use desklamp 1"]) == ["go to a 1", "go to b 1",
                                                                                   "use desklamp 1"]
    opened = ["go to drawer 1", "open drawer 1", *detour[1:]]  # the detour looked inside first
    assert alfworld.expert_mistake(opened) == [*opened[:2], "take alarmclock 1 from drawer 1", *opened[2:]]

    root = require_shared("alfworld")
    tasks = alfworld.find_games(root, "valid_seen", ["pick_and_place_simple"])[:4]
    cfg = load_config(None, ["env.data_dir=" + str(root), "env.num_workers=1"])
    with EnvPool(get_benchmark("alfworld"), cfg.env, 1) as pool:
        plain, _ = collect_demonstrations(pool, get_benchmark("alfworld"), tasks, max_steps=50, detour_prob=1.0)
        slips, win = collect_demonstrations(pool, get_benchmark("alfworld"), tasks, max_steps=50, detour_prob=1.0,
                                            recovery_prob=1.0)
    assert win == 1.0
    assert len(slips) == len(plain)  # the mistake step is played but not recorded
    after = [d for d in slips if d.step == 2]  # the step after the refused attempt
    assert len(after) == len(tasks)
    for d in after:
        assert "Nothing happens." in d.prompt and "go to " in d.response
    assert not any("Nothing happens." in d.prompt for d in plain)
    assert [d.step for d in slips if d.task_id == tasks[0].task_id][:3] == [0, 2, 3]


def _tasks(n):
    from types import SimpleNamespace

    return [SimpleNamespace(task_id=f"t{i:02d}") for i in range(n)]


def test_demonstration_tasks_are_evenly_spread_and_rl_can_leave_them_out(tmp_path):
    import pytest

    from g2po_bench.algorithms.backends.common import demonstration_tasks, rl_tasks

    cfg = _cfg(tmp_path, "train.sft_max_tasks=4")
    tasks = _tasks(10)
    # linspace(0, 9, 4) rounded: 0, 3, 6, 9
    assert [t.task_id for t in demonstration_tasks(cfg, tasks)] == ["t00", "t03", "t06", "t09"]
    assert rl_tasks(cfg, tasks) == tasks  # the default: RL draws from every training task
    unseen = _cfg(tmp_path, "train.sft_max_tasks=4", "train.rl_tasks=without_demos")
    assert [t.task_id for t in rl_tasks(unseen, tasks)] == ["t01", "t02", "t04", "t05", "t07", "t08"]
    # the RL task pool is an RL setting: it does not change the warm start
    assert warm_start_key(unseen) == warm_start_key(cfg)
    every = _cfg(tmp_path, "train.sft_max_tasks=10", "train.rl_tasks=without_demos")
    with pytest.raises(ValueError, match="sft_max_tasks below 10"):
        rl_tasks(every, tasks)
    with pytest.raises(ValueError, match="train.rl_tasks"):
        _cfg(tmp_path, "train.rl_tasks=unseen")
    # on the CPU default's generated games the empty pool is a config error, before any work
    with pytest.raises(ValueError, match="without_demos leaves no training task"):
        load_config(None, ["train.rl_tasks=without_demos"])
    assert load_config(None, ["train.rl_tasks=without_demos", "train.sft_max_tasks=600"]).train.rl_tasks == "without_demos"


def test_rl_without_demos_never_plays_a_demonstration_task(tmp_path):
    import pandas as pd

    from g2po_bench.algorithms.backends.common import demonstration_tasks, load_task_splits
    from g2po_bench.benchmarks.registry import get_benchmark

    cfg = _cfg(tmp_path, "train.sft_max_tasks=3", "train.rl_tasks=without_demos", "train.iterations=2",
               "train.groups_per_batch=4")
    run = run_train(cfg)
    train_tasks, _ = load_task_splits(cfg, get_benchmark(cfg.env.name))
    demo_ids = {t.task_id for t in demonstration_tasks(cfg, train_tasks)}
    played = set()
    for f in sorted((run.root / "steps").glob("iter_*.parquet")):
        played |= set(pd.read_parquet(f).task_id)
    assert played and not played & demo_ids


def test_max_train_tasks_trains_and_imitates_only_the_first_tasks_of_the_split(tmp_path):
    import pandas as pd

    from g2po_bench.algorithms.backends.common import load_task_splits, training_tasks
    from g2po_bench.benchmarks.registry import get_benchmark

    cfg = _cfg(tmp_path, "env.max_train_tasks=2", "train.iterations=2", "train.groups_per_batch=4")
    bench = get_benchmark(cfg.env.name)
    every = bench.load_tasks(cfg.env, cfg.env.train_split)
    assert len(every) > 2 and [t.task_id for t in training_tasks(cfg, bench)] == [t.task_id for t in every[:2]]
    assert load_task_splits(cfg, bench)[0] == training_tasks(cfg, bench)
    run = run_train(cfg)
    played = set()
    for f in sorted((run.root / "steps").glob("iter_*.parquet")):
        played |= set(pd.read_parquet(f).task_id)
    assert played == {t.task_id for t in every[:2]}
    setup = json.loads((run.root / "setup.json").read_text())
    assert setup["demo/tasks"] == 2
    with pytest.raises(ValueError, match="env.max_train_tasks"):
        _cfg(tmp_path, "env.max_train_tasks=-1")


def test_a_stop_request_during_sft_ends_the_run_cleanly_without_caching_a_half_warm_start(tmp_path, monkeypatch,
                                                                                        dispositions):
    """SIGTERM while the warm start trains: SFT stops at the next batch, nothing enters the cache
    (the staging folder is removed) and the run says "interrupted" before RL started."""
    import os
    import signal

    import pytest

    from g2po_bench.algorithms.backends.local import sft

    dispositions(signal.SIGTERM, signal.SIG_DFL)
    real = sft.supervised_finetune
    calls = []

    def finetune_then_signal(*args, progress=None, **kwargs):
        def on_batch(done, total, loss):
            calls.append(done)
            if done == 1:
                os.kill(os.getpid(), signal.SIGTERM)  # the trainer's guard records a stop request
            progress(done, total, loss)

        return real(*args, progress=on_batch, **kwargs)

    monkeypatch.setattr(sft, "supervised_finetune", finetune_then_signal)
    cfg = _cfg(tmp_path, "train.sft_epochs=4")
    with pytest.raises(SystemExit) as stopped:
        run_train(cfg)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert calls == [1]  # stopped at the first batch, not after 4 epochs
    assert not (tmp_path / "ws" / warm_start_key(cfg)).exists()
    assert not [p for p in (tmp_path / "ws").iterdir() if p.is_dir()]  # no staging folder left
    (run_dir,) = (tmp_path / "runs").iterdir()
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "interrupted" and "before RL started" in status["error"], status
