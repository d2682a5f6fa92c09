"""The rollout engine and environment pool on the toy corridor environment."""

import random

import numpy as np
import pytest
from faulty_toy import faulty_toy

from g2po_bench.algorithms.registry import rollout_inputs
from g2po_bench.analysis.credit.replay import CreditHooks, EpisodeStart, ReplayMismatch
from g2po_bench.benchmarks.driver import RolloutHooks
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.rollout import collect_rollouts
from g2po_bench.runtime.policy_protocol import Generation
from g2po_bench.runtime.workers import EnvPool


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
    with EnvPool(get_benchmark("toy"), None, 2) as pool:
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
    with EnvPool(get_benchmark("toy"), None, 1) as pool:
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
    with EnvPool(get_benchmark("toy"), None, 1) as pool:
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
    with EnvPool(get_benchmark("toy"), None, 1) as pool:
        rb = collect_rollouts(SequencePolicy(script), pool, TOY, tasks, group_size=1, max_steps=4,
                              temperature=1.0, max_new_tokens=8, seed=0, refused_is_invalid=True)
    # step 1 refused ("jump": Nothing happens), step 3 malformed (and refused: its fallback text)
    assert rb.steps.action_valid.tolist() == [True, False, True, False]


def test_same_seed_same_rollouts():
    tasks = TOY.load_tasks(None, "train")
    pol = ScriptedPolicy([act("go east"), act("go west"), act("look"), "garbage"])
    with EnvPool(get_benchmark("toy"), None, 2) as pool:
        a = collect_rollouts(pol, pool, TOY, tasks, group_size=4, max_steps=6, temperature=1.0,
                             max_new_tokens=8, seed=3)
        b = collect_rollouts(pol, pool, TOY, tasks, group_size=4, max_steps=6, temperature=1.0,
                             max_new_tokens=8, seed=3)
    for k, v in a.steps.to_dict().items():
        np.testing.assert_array_equal(v, b.steps.to_dict()[k])
    assert a.responses == b.responses


def test_crashing_environment_is_restarted_and_its_episode_fails():
    tasks = TOY.load_tasks(None, "train")[3:4]  # corridor of length 5
    with EnvPool(faulty_toy(), None, 1) as pool:
        rb = collect_rollouts(ScriptedPolicy([act("raise error")]), pool, TOY, tasks, group_size=2,
                              max_steps=5, temperature=1.0, max_new_tokens=8, seed=0)
        assert all(t["crashed"] and not t["success"] and t["num_steps"] == 1 for t in rb.trajectories)
        # the pool keeps working after the crash
        ok = collect_rollouts(ScriptedPolicy([act("go east")]), pool, TOY, tasks, group_size=2,
                              max_steps=5, temperature=1.0, max_new_tokens=8, seed=0)
        assert ok.success_rate == 1.0


def test_dead_worker_process_is_restarted():
    tasks = TOY.load_tasks(None, "train")[3:4]
    with EnvPool(faulty_toy(), None, 2) as pool:
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
        "from g2po_bench.runtime.workers import EnvPool\n"
        "from g2po_bench.benchmarks.registry import get_benchmark\n"
        "pool = EnvPool(get_benchmark('toy'), None, 2)\n"
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


# ------------------------------------------------------------------ options of the credit instrument
class MixedPolicy:
    """Per-batch seeded choice among moves, refusals and malformed outputs (the golden rollouts)."""

    def generate(self, prompts, *, temperature, max_new_tokens, top_p=1.0, seed=None):
        rng = random.Random(seed)
        out = []
        for p in prompts:
            a = rng.choice(["go east", "go east", "go west", "look", "jump"])
            out.append(Generation(text=act(a) if rng.random() > 0.1 else "no tags",
                                  prompt_ids=[len(p)], response_ids=[1, 2]))
        return out


def _fingerprint(rb) -> str:
    import hashlib
    import json

    h = hashlib.sha256()
    for k, v in rb.steps.to_dict().items():
        h.update(k.encode())
        h.update(np.ascontiguousarray(v).tobytes())
    trajs = [{k: v for k, v in t.items() if k not in ("start_step", "cut")} for t in rb.trajectories]  # new keys
    h.update(json.dumps([rb.responses, rb.actions, rb.state_texts, rb.prompt_ids, trajs], sort_keys=True).encode())
    return h.hexdigest()


def test_engine_options_off_give_the_rollouts_of_the_engine_before_them():
    """The digest was computed with the engine before starts / sample_seeds / key_rules existed
    (same tasks, policy and seed): without hooks, or with the default hooks, nothing changed."""
    tasks = TOY.load_tasks(None, "train")
    kw = dict(group_size=4, max_steps=7, temperature=1.0, max_new_tokens=8, seed=5, group_offset=3,
              stop_after_refusals=2, refused_is_invalid=True)
    with EnvPool(get_benchmark("toy"), None, 2) as pool:
        rb = collect_rollouts(MixedPolicy(), pool, TOY, tasks, **kw)
        explicit = collect_rollouts(MixedPolicy(), pool, TOY, tasks, hooks=RolloutHooks(), **kw)
        credit_off = collect_rollouts(MixedPolicy(), pool, TOY, tasks, hooks=CreditHooks(TOY), **kw)
    assert len(rb.steps) == 89
    assert _fingerprint(rb) == "bd36693f2100bf16c7d997f45b39088e87bd7b861847e3e5f778c8c9b5b9ca5f"
    assert _fingerprint(explicit) == _fingerprint(rb) == _fingerprint(credit_off)
    # the new records: observation texts, refusal flags, no replayed rows, no other key rules
    assert rb.observations[0] == "You are in room 0 of 2." and len(rb.observations) == 89
    assert rb.refused.tolist() == [a == "jump" or not v for a, v in zip(rb.actions, [r != "no tags" for r in
                                                                                       rb.responses])]
    assert not rb.replayed.any() and rb.state_texts_by_rule == {}
    assert all(t["start_step"] == 0 and not t["cut"] for t in rb.trajectories)


class PromptRecorder:
    """Records every prompt; answers from a script indexed by the prompt's step number."""

    def __init__(self, script):
        self.script, self.prompts = script, []

    def generate(self, prompts, *, temperature, max_new_tokens, top_p=1.0, seed=None, seeds=None):
        self.prompts += prompts
        return [Generation(text=self.script[int(p.split(" Step ")[1].split(".")[0])]) for p in prompts]


def test_an_episode_started_from_a_prefix_has_its_history_step_counter_and_refusals():
    tasks = TOY.load_tasks(None, "train")[3:4]  # corridor of length 5
    prefix = EpisodeStart(["go east", "jump"],
                          ["You are in room 0 of 5.", "You are in room 1 of 5.", "Nothing happens."], [True, True])
    pol = PromptRecorder([act("go east"), act("jump"), act("jump"), act("go east")])
    with EnvPool(get_benchmark("toy"), None, 1) as pool:
        rb = collect_rollouts(pol, pool, TOY, tasks, group_size=1, max_steps=6, temperature=1.0, max_new_tokens=8,
                              seed=0, stop_after_refusals=2, hooks=CreditHooks(TOY, starts=[prefix]))
    # the policy took over at step 2, with the replayed history in its prompt
    assert len(pol.prompts) == 1
    assert "Step 2." in pol.prompts[0]
    assert "[You are in room 1 of 5. -> jump]" in pol.prompts[0] and "Now: Nothing happens." in pol.prompts[0]
    # the refusal count was restored: one more refusal (the script's step 2) ends it as stuck
    tr = rb.trajectories[0]
    assert tr["stuck"] and not tr["success"] and tr["num_steps"] == 3 and tr["start_step"] == 2
    assert rb.steps.step.tolist() == [0, 1, 2] and rb.replayed.tolist() == [True, True, False]
    assert rb.actions == ["go east", "jump", "jump"] and rb.prompt_ids[0] == []
    # the step limit counts from the reset: a 4-step limit leaves the policy steps 2 and 3
    pol = PromptRecorder([act("look")] * 6)
    with EnvPool(get_benchmark("toy"), None, 1) as pool:
        rb = collect_rollouts(pol, pool, TOY, tasks, group_size=1, max_steps=4, temperature=1.0, max_new_tokens=8,
                              seed=0, hooks=CreditHooks(TOY, starts=[prefix]))
    assert rb.trajectories[0]["num_steps"] == 4 and rb.trajectories[0]["truncated"] and len(pol.prompts) == 2


def test_a_replay_that_does_not_reproduce_the_recorded_observation_fails_in_one_line():
    from g2po_bench.core.protocol import Task

    wrong = EpisodeStart(["go east"], ["You are in room 0 of 5.", "You are in room 2 of 5."])
    tasks = TOY.load_tasks(None, "train")[3:4]
    with EnvPool(get_benchmark("toy"), None, 1) as pool:
        with pytest.raises(ReplayMismatch) as err:
            collect_rollouts(ScriptedPolicy([act("look")]), pool, TOY, tasks, group_size=1, max_steps=4,
                             temperature=1.0, max_new_tokens=8, seed=0, hooks=CreditHooks(TOY, starts=[wrong]))
        msg = str(err.value)
        assert "\n" not in msg and "train/corridor-5" in msg and "step 1" in msg
        assert "'You are in room 2 of 5.'" in msg and "'You are in room 1 of 5.'" in msg
    # a slippery corridor (test support) is not deterministic: replaying its own recorded actions fails
    slippery = [Task("train/slippery-5", "corridor", faulty_toy().name, {"length": 5, "slip": 0.5})]
    with EnvPool(faulty_toy(), None, 1) as pool:
        rec = collect_rollouts(ScriptedPolicy([act("go east")]), pool, faulty_toy(), slippery, group_size=1,
                               max_steps=8, temperature=1.0, max_new_tokens=8, seed=0)
        assert len(rec.actions) >= 4
        # every replayed move slips alike with probability 1/2: 20 replays of >= 3 moves all match
        # with probability <= 2^-60
        replay = EpisodeStart(rec.actions[:-1], rec.observations)
        with pytest.raises(ReplayMismatch, match="train/slippery-5"):
            for _ in range(20):
                collect_rollouts(ScriptedPolicy([act("go east")]), pool, faulty_toy(), slippery, group_size=1,
                                 max_steps=8, temperature=1.0, max_new_tokens=8, seed=0,
                                 hooks=CreditHooks(faulty_toy(), starts=[replay]))


def test_per_sample_seeds_make_an_episode_independent_of_its_batch():
    from g2po_bench.benchmarks.toy.scripted_policy import ScriptedCorridorPolicy

    tasks = TOY.load_tasks(None, "train")[2:4]
    pol = ScriptedCorridorPolicy()
    kw = dict(max_steps=8, temperature=1.0, max_new_tokens=8, seed=0, stop_after_refusals=2)
    with EnvPool(get_benchmark("toy"), None, 2) as pool:
        together = collect_rollouts(pol, pool, TOY, tasks, group_size=3,
                                    hooks=CreditHooks(TOY, sample_seeds=[11, 12, 13, 21, 22, 23]), **kw)
        alone = [collect_rollouts(pol, pool, TOY, [tasks[i // 3]], group_size=1,
                                  hooks=CreditHooks(TOY, sample_seeds=[s]), **kw)
                 for i, s in enumerate([11, 12, 13, 21, 22, 23])]
        with pytest.raises(ValueError, match="seeds"):
            collect_rollouts(ScriptedPolicy([act("look")]), pool, TOY, tasks, group_size=1,
                             hooks=CreditHooks(TOY, sample_seeds=[1, 2]), **kw)
    by_traj = {}
    for r, t in enumerate(together.steps.traj_id):
        by_traj.setdefault(int(t), []).append(together.actions[r])
    assert [by_traj[i] for i in range(6)] == [a.actions for a in alone]
    assert len({tuple(v) for v in by_traj.values()}) > 1  # the seeds do differ


def test_state_keys_of_both_rules_are_recorded_on_the_same_rollouts():
    tasks = TOY.load_tasks(None, "train")[2:3]
    with EnvPool(get_benchmark("toy"), None, 1) as pool:
        rb = collect_rollouts(SequencePolicy([act("go east"), act("jump"), act("go east"), act("go east")]), pool,
                              TOY, tasks, group_size=1, max_steps=4, temperature=1.0, max_new_tokens=8, seed=0,
                              hooks=CreditHooks(TOY, key_rules=("raw", "reference")))
    # the corridor has one rule: both name its own key ("Nothing happens" keeps the room)
    assert rb.state_texts_by_rule["raw"] == rb.state_texts_by_rule["reference"] == rb.state_texts
    assert rb.state_texts == ["room 0", "room 1", "room 1", "room 2"]
    np.testing.assert_array_equal(rb.state_keys_by_rule("raw"), rb.steps.state_key)
    with EnvPool(get_benchmark("toy"), None, 1) as pool:
        plain = collect_rollouts(SequencePolicy([act("go east")] * 4), pool, TOY, tasks, group_size=1, max_steps=2,
                                 temperature=1.0, max_new_tokens=8, seed=0)
    with pytest.raises(KeyError, match="not recorded"):
        plain.state_keys_by_rule("raw")


def test_each_step_records_the_state_it_led_to_and_the_last_one_where_the_episode_ended():
    tasks = TOY.load_tasks(None, "train")[2:3]  # a corridor of length 4: rooms 0..3, success in room 3
    script = [act("go east"), act("jump"), act("go east")]
    with EnvPool(get_benchmark("toy"), None, 1) as pool:
        rb = collect_rollouts(SequencePolicy(script), pool, TOY, tasks, group_size=1, max_steps=3, temperature=1.0,
                              max_new_tokens=8, seed=0, hooks=CreditHooks(TOY, key_rules=("raw",)))
    # truncated at the step limit in room 2: its last step led to room 2, seen nowhere as an anchor
    assert rb.state_texts == ["room 0", "room 1", "room 1"]
    assert rb.next_state_texts == ["room 1", "room 1", "room 2"]
    assert rb.next_state_texts_by_rule["raw"] == rb.next_state_texts
    np.testing.assert_array_equal(rb.next_state_keys[:-1], rb.steps.state_key[1:])
    np.testing.assert_array_equal(rb.next_state_keys_by_rule("raw"), rb.next_state_keys)
    assert not rb.trajectories[0]["success"] and rb.trajectories[0]["truncated"]
    # the estimator input comes from it with no estimator-specific code
    np.testing.assert_array_equal(rollout_inputs("graphgpo", {}, rb)["next_state_key"], rb.next_state_keys)


# ------------------------------------------------------------------ the benchmark's reward, the driver's hooks
class ProgressRewardToy(type(TOY)):
    """The toy corridor with a reward of its own: 1 per room gained toward the goal (the room
    number read from the state key), -0.5 for a refused action, ``success_reward`` on the win."""

    def step_reward(self, observation, success_reward):
        if observation.won:
            return success_reward
        if observation.info.get("refused"):
            return -0.5
        return 1.0 if observation.text.startswith("You are in room") else 0.0


def test_a_benchmark_defines_the_reward_of_its_steps():
    tasks = TOY.load_tasks(None, "train")[3:4]  # corridor of length 5
    script = [act("go east"), act("jump"), act("look"), act("go east"), act("go east"), act("go east")]
    with EnvPool(get_benchmark("toy"), None, 1) as pool:
        rb = collect_rollouts(SequencePolicy(script), pool, ProgressRewardToy(), tasks, group_size=1, max_steps=6,
                              temperature=1.0, max_new_tokens=8, seed=0, success_reward=7.0)
        plain = collect_rollouts(SequencePolicy(script), pool, TOY, tasks, group_size=1, max_steps=6,
                                 temperature=1.0, max_new_tokens=8, seed=0, success_reward=7.0)
    assert rb.actions == ["go east", "jump", "look", "go east", "go east", "go east"]
    # east (room 1), refused, look (the room again), east, east, east (room 4: the win)
    assert rb.steps.reward.tolist() == [1.0, -0.5, 1.0, 1.0, 1.0, 7.0]
    # the default rule: success_reward on the winning step, else 0
    assert plain.steps.reward.tolist() == [0.0, 0.0, 0.0, 0.0, 0.0, 7.0]
    assert rb.actions == plain.actions and rb.trajectories[0]["success"]


class StopAfter(RolloutHooks):
    """Stops every episode once it has taken ``n`` actions (a known end), and records every call."""

    def __init__(self, n):
        self.n, self.calls = n, []

    def should_stop(self, episode):
        self.calls.append((episode.index, episode.actions))
        return episode.num_steps >= self.n


def test_hooks_add_to_the_episodes_and_the_default_adds_nothing():
    import inspect

    # the training path carries no feature of the credit instrument: they are hooks
    params = inspect.signature(collect_rollouts).parameters
    assert not {"starts", "sample_seeds", "key_rules", "known_end"} & set(params) and "hooks" in params
    tasks = TOY.load_tasks(None, "train")[3:5]  # corridors of length 5 and 6
    hooks = StopAfter(2)
    with EnvPool(get_benchmark("toy"), None, 2) as pool:
        rb = collect_rollouts(SequencePolicy([act("go east")] * 6), pool, TOY, tasks, group_size=2, max_steps=6,
                              temperature=1.0, max_new_tokens=8, seed=0, hooks=hooks)
    assert [t["num_steps"] for t in rb.trajectories] == [2, 2, 2, 2]
    assert all(t["cut"] and not t["success"] and not t["truncated"] for t in rb.trajectories)
    assert hooks.calls[:4] == [(0, ()), (1, ()), (2, ()), (3, ())]
    assert hooks.calls[-4:] == [(i, ("go east", "go east")) for i in range(4)]
    assert rb.state_texts_by_rule == {} and not rb.replayed.any()
