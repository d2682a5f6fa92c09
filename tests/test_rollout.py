"""The rollout engine and environment pool on the toy corridor environment."""

import random

import numpy as np
from faulty_toy import faulty_toy

from g2po_bench.benchmarks.policy import Generation
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.rollout import collect_rollouts
from g2po_bench.benchmarks.workers import EnvPool


class ScriptedPolicy:
    """Answers each prompt with a seeded random choice among fixed responses."""

    def __init__(self, responses):
        self.responses = responses

    def generate(self, prompts, *, temperature, max_new_tokens, top_p=1.0, seed=None):
        rng = random.Random(seed)
        return [Generation(text=rng.choice(self.responses)) for _ in prompts]


def act(a):
    return f"<think>t</think><action>{a}</action>"


TOY = get_benchmark("toy")


def test_groups_ids_rewards_and_success():
    tasks = TOY.load_tasks(None, "train")[:2]  # corridors of length 2 and 3
    with EnvPool("toy", None, 2) as pool:
        rb = collect_rollouts(ScriptedPolicy([act("go east")]), pool, TOY, tasks, group_size=3,
                              max_steps=5, temperature=1.0, max_new_tokens=8, seed=0, group_offset=10)
    s = rb.steps
    assert rb.success_rate == 1.0
    assert sorted(set(s.group_id.tolist())) == [10, 11]
    assert len(set(s.traj_id.tolist())) == 6
    # length-2 corridor: one step; length-3: two steps -> 3*1 + 3*2 rows
    assert len(s) == 9
    # reward 10 only on the final step of each (successful) trajectory
    assert s.reward.sum() == 60.0
    last = np.r_[s.traj_id[1:] != s.traj_id[:-1], True]
    assert np.all(s.reward[last] == 10.0) and np.all(s.reward[~last] == 0.0)
    assert all(t["task_type"] == "corridor" for t in rb.trajectories)


def test_invalid_output_is_penalised_and_the_episode_goes_on():
    tasks = TOY.load_tasks(None, "train")[:1]
    with EnvPool("toy", None, 1) as pool:
        rb = collect_rollouts(ScriptedPolicy(["I refuse to use tags"]), pool, TOY, tasks, group_size=2,
                              max_steps=4, temperature=1.0, max_new_tokens=8, seed=0)
    assert len(rb.steps) == 8  # both episodes ran to the step limit
    assert not rb.steps.action_valid.any()
    assert all(t["truncated"] and not t["success"] for t in rb.trajectories)
    # "Nothing happens" keeps the state: every step is taken from the same state key
    assert len(set(rb.steps.state_key.tolist())) == 1


class SequencePolicy:
    """Answers step t of every episode with ``responses[t]`` (the step is read from the seed)."""

    def __init__(self, responses):
        self.responses = responses

    def generate(self, prompts, *, temperature, max_new_tokens, top_p=1.0, seed=None):
        return [Generation(text=self.responses[seed % 1000]) for _ in prompts]


def test_stop_after_refusals_ends_a_stuck_episode_as_a_failure():
    tasks = TOY.load_tasks(None, "train")[3:4]  # corridor of length 5: four "go east" win
    # east, refused, refused, east, refused x3 -> stuck after step index 6 with stop_after_refusals=3
    script = [act("go east"), act("jump"), act("jump"), act("go east")] + [act("jump")] * 6
    with EnvPool("toy", None, 1) as pool:
        rb = collect_rollouts(SequencePolicy(script), pool, TOY, tasks, group_size=2, max_steps=10,
                              temperature=1.0, max_new_tokens=8, seed=0, stop_after_refusals=3)
        off = collect_rollouts(SequencePolicy(script), pool, TOY, tasks, group_size=2, max_steps=10,
                               temperature=1.0, max_new_tokens=8, seed=0)
    # two refusals in a row (steps 1-2) do not stop it; three (steps 4-6) do, after step 6
    assert [t["num_steps"] for t in rb.trajectories] == [7, 7]
    assert all(t["stuck"] and not t["success"] and not t["truncated"] for t in rb.trajectories)
    assert len(rb.steps) == 14 and rb.steps.reward.sum() == 0.0
    # off (the default): the step limit ends it
    assert [t["num_steps"] for t in off.trajectories] == [10, 10]
    assert all(t["truncated"] and not t["stuck"] for t in off.trajectories)
    # a refused action is a well-formed one: valid unless refused_is_invalid
    assert rb.steps.action_valid.all()


def test_refused_is_invalid_marks_refused_actions_for_the_invalid_penalty():
    tasks = TOY.load_tasks(None, "train")[3:4]
    script = [act("go east"), act("jump"), act("go east"), "no tags at all"]
    with EnvPool("toy", None, 1) as pool:
        rb = collect_rollouts(SequencePolicy(script), pool, TOY, tasks, group_size=1, max_steps=4,
                              temperature=1.0, max_new_tokens=8, seed=0, refused_is_invalid=True)
    # step 1 refused ("jump": Nothing happens), step 3 malformed (and refused: its fallback text)
    assert rb.steps.action_valid.tolist() == [True, False, True, False]


def test_same_seed_same_rollouts():
    tasks = TOY.load_tasks(None, "train")
    pol = ScriptedPolicy([act("go east"), act("go west"), act("look"), "garbage"])
    with EnvPool("toy", None, 2) as pool:
        a = collect_rollouts(pol, pool, TOY, tasks, group_size=4, max_steps=6, temperature=1.0,
                             max_new_tokens=8, seed=3)
        b = collect_rollouts(pol, pool, TOY, tasks, group_size=4, max_steps=6, temperature=1.0,
                             max_new_tokens=8, seed=3)
    for k, v in a.steps.to_dict().items():
        np.testing.assert_array_equal(v, b.steps.to_dict()[k])
    assert a.responses == b.responses


def test_crashing_environment_is_restarted_and_its_episode_fails():
    tasks = TOY.load_tasks(None, "train")[3:4]  # corridor of length 5
    with EnvPool(faulty_toy().name, None, 1) as pool:
        rb = collect_rollouts(ScriptedPolicy([act("raise error")]), pool, TOY, tasks, group_size=2,
                              max_steps=5, temperature=1.0, max_new_tokens=8, seed=0)
        assert all(t["crashed"] and not t["success"] and t["num_steps"] == 1 for t in rb.trajectories)
        # the pool keeps working after the crash
        ok = collect_rollouts(ScriptedPolicy([act("go east")]), pool, TOY, tasks, group_size=2,
                              max_steps=5, temperature=1.0, max_new_tokens=8, seed=0)
        assert ok.success_rate == 1.0


def test_dead_worker_process_is_restarted():
    tasks = TOY.load_tasks(None, "train")[3:4]
    with EnvPool(faulty_toy().name, None, 2) as pool:
        rb = collect_rollouts(ScriptedPolicy([act("kill process")]), pool, TOY, tasks, group_size=2,
                              max_steps=5, temperature=1.0, max_new_tokens=8, seed=0)
        assert all(t["crashed"] and not t["success"] for t in rb.trajectories)
        assert pool.restarts >= 1
        ok = collect_rollouts(ScriptedPolicy([act("go east")]), pool, TOY, tasks, group_size=2,
                              max_steps=5, temperature=1.0, max_new_tokens=8, seed=0)
        assert ok.success_rate == 1.0


def test_workers_exit_when_the_parent_is_killed(tmp_path):
    """A SIGKILLed trainer leaves no orphaned environment workers behind."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import time\n"
        "from g2po_bench.benchmarks.workers import EnvPool\n"
        "pool = EnvPool('toy', None, 2)\n"
        "print(' '.join(str(w.process.pid) for w in pool._workers), flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 10
    alive = pids
    while alive and time.time() < deadline:
        alive = [p for p in alive if os.path.exists(f"/proc/{p}") and
                 "Z" not in open(f"/proc/{p}/stat").read().split()[2]]
        time.sleep(0.1)
    assert alive == []
