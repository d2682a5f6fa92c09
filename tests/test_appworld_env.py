"""AppWorld environment tests on worlds built from the ``appworld`` package's own app factories.

The tasks are defined here (SimpleNote tasks: an answer question and a state change, with
AppWorld evaluation code); no AppWorld task data is needed. They need the AppWorld
interpreter (``$G2PO_APPWORLD_PYTHON``, see docs/benchmarks.md "AppWorld"): skipped with the reason
without it, failed in CI. ``test_real_data_*`` run where ``$APPWORLD_ROOT`` holds the official
data and are skipped otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from g2po_bench.benchmarks.appworld import load_tasks, make_env
from g2po_bench.benchmarks.appworld.env import ELLIPSIS_REFUSAL, TRY_EXCEPT_REFUSAL, AppWorldEnv
from g2po_bench.benchmarks.appworld.runtime import (
    AppWorldDataMissing,
    AppWorldUnavailable,
    check_data_root,
    find_python,
)
from g2po_bench.benchmarks.appworld.synthetic import LOGIN_CELL, build_tasks, create_note_spec
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.core.config import EnvConfig
from g2po_bench.core.protocol import Task

COUNT_CELL = "notes = apis.simple_note.search_notes(access_token=token, page_limit=20)\nprint(len(notes))"

_EVAL = '''
import json


def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    task = models.end.supervisor.Task.all()[0]
    with test("marked complete"):
        test.case(task.status, "==", "success")
    with test("answer"):
        test.answer(json.loads(task.answer), ground_truth_answer)
'''


def _count_spec(task_id: str, split: str, titles: list[str]) -> dict:
    return {
        "task_id": task_id, "split": split, "seed": 7, "difficulty": 1,
        "instruction": "How many notes do I have?",
        "notes": [{"title": t, "content": f"about {t}", "tags": ["home"]} for t in titles],
        "answer": len(titles), "requirements": ["marked complete", "answer"], "evaluation": _EVAL,
        "solution": [LOGIN_CELL, COUNT_CELL, "apis.supervisor.complete_task(answer=len(notes))"],
    }


SPECS = [
    _count_spec("tcount_1", "train", ["Alpha", "Beta", "Gamma"]),
    create_note_spec("tcreate_1", "train", seed=3, num_notes=2),
    dict(_count_spec("tcount_2", "test_normal", ["Delta", "Epsilon"]), difficulty=3),
]


@pytest.fixture(scope="module")
def appworld_python() -> str:
    try:
        return find_python(None)
    except AppWorldUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(f"no AppWorld interpreter: {exc}")


@pytest.fixture(scope="module")
def root(appworld_python, tmp_path_factory) -> Path:
    return build_tasks(tmp_path_factory.mktemp("appworld_root"), SPECS, appworld_python)


def _task(task_id: str) -> Task:
    return Task(task_id=task_id, task_type="appworld", env="appworld")


@pytest.fixture(scope="module")
def shared_env(root, appworld_python):
    e = AppWorldEnv(root, python=appworld_python, timeout_seconds=20, cell_timeout=120)
    yield e
    e.close()


@pytest.fixture
def env(shared_env):
    """The module's environment (one world server for most tests: starting one costs seconds),
    its settings restored after each test."""
    saved = (shared_env.max_interactions, shared_env.timeout_seconds, shared_env.cell_timeout)
    yield shared_env
    shared_env.max_interactions, shared_env.timeout_seconds, shared_env.cell_timeout = saved


def _play(env: AppWorldEnv, cells: list[str]):
    out = []
    for c in cells:
        o = env.step(c)
        out.append(o)
        if o.done:
            break
    return out


def test_solution_wins_with_reward_10_and_raw_output_keys(env):
    o = env.reset(_task("tcount_1"))
    assert (o.instruction, o.state_key, o.done) == ("How many notes do I have?", "", False)
    sup = o.info["supervisor"]
    assert set(sup) == {"first_name", "last_name", "email", "phone_number"} and "@" in sup["email"]
    assert o.text == (f"My name is: {sup['first_name']} {sup['last_name']}. My personal email is {sup['email']} "
                      f"and phone number is {sup['phone_number']}.\n\nYour task is: How many notes do I have?")
    steps = _play(env, [LOGIN_CELL, COUNT_CELL, "apis.supervisor.complete_task(answer=len(notes))"])
    assert [s.done for s in steps] == [False, False, True]
    assert steps[1].text == "3\n" and steps[1].state_key == "3\n"  # the raw execution output
    assert steps[2].won and steps[2].reward == 10.0
    assert steps[2].info["pass_count"] == steps[2].info["num_tests"] == 2


def test_wrong_answer_and_state_change_are_evaluated(env):
    env.reset(_task("tcount_1"))
    last = _play(env, [LOGIN_CELL, "apis.supervisor.complete_task(answer=4)"])[-1]
    assert last.done and not last.won and last.reward == 0.0
    assert (last.info["pass_count"], last.info["num_tests"]) == (1, 2)
    spec = SPECS[1]
    env.reset(_task("tcreate_1"))
    assert _play(env, spec["solution"])[-1].won
    env.reset(_task("tcreate_1"))  # completing without creating the note fails
    last = _play(env, [LOGIN_CELL, "apis.supervisor.complete_task()"])[-1]
    assert last.done and not last.won and last.info["pass_count"] == 1


def test_refusals_use_the_fixed_messages_and_do_not_run(env):
    env.reset(_task("tcount_1"))
    o = env.step("x = [1, 2, ...]\nprint(x)")
    assert (o.text, o.state_key, o.done) == (ELLIPSIS_REFUSAL, ELLIPSIS_REFUSAL, False)
    o = env.step("try:\n    y = 1\nexcept Exception:\n    y = 2\nprint(y)")
    assert o.text == TRY_EXCEPT_REFUSAL and not o.done
    assert env.step("print(x)").text.startswith("Execution failed")  # the refused cell never ran
    assert env.steps == 3


def test_step_limit_ends_and_evaluates_the_episode(env):
    env.max_interactions = 2
    env.reset(_task("tcount_1"))
    first = env.step("print('hi')")
    assert (first.text, first.done) == ("hi\n", False)
    second = env.step("x = ...")  # a refused cell counts as an interaction too
    assert second.done and not second.won and second.info["num_tests"] == 2
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("print(1)")


def test_appworld_own_timeout_answers_and_continues(env):
    env.timeout_seconds = 1  # passed to AppWorld at reset
    env.reset(_task("tcount_1"))
    o = env.step("while True:\n    pass")
    assert "timed out after 1 seconds" in o.text and not o.done
    assert env.step("print(2)").text == "2\n"


def test_hanging_cell_fails_the_episode_and_restarts_the_server(env):
    # a catastrophic regular expression runs in C: AppWorld's alarm cannot interrupt it
    env.timeout_seconds, env.cell_timeout = 100, 3
    env.reset(_task("tcount_1"))
    old, restarts = env.server, env.restarts
    o = env.step("import re\nprint(re.match(r'(a+)+$', 'a' * 64 + '!'))")
    assert o.done and not o.won and o.reward == 0.0
    assert o.info["crashed"] and o.info["timeout"]
    assert not old.alive and old.proc.poll() is not None
    assert not Path(old.private_root).exists()  # its databases are gone with it
    env.cell_timeout = 120
    o = env.reset(_task("tcount_1"))  # a fresh server, a fresh world
    assert env.restarts == restarts + 1 and env.server is not old and o.state_key == ""
    assert _play(env, [LOGIN_CELL, COUNT_CELL])[-1].text == "3\n"


def test_crashing_cell_fails_the_episode_and_restarts_the_server(env):
    env.reset(_task("tcount_1"))
    restarts = env.restarts
    o = env.step("import os\nos.abort()")
    assert o.done and not o.won and o.info["crashed"] and not o.info["timeout"]
    assert "died" in o.info["error"]
    env.reset(_task("tcount_1"))
    assert env.restarts == restarts + 1 and env.step("print(40 + 2)").text == "42\n"


def test_group_members_start_from_identical_worlds(env, root, appworld_python):
    a = env
    b = AppWorldEnv(root, python=appworld_python)
    try:
        oa, ob = a.reset(_task("tcount_1")), b.reset(_task("tcount_1"))
        assert (oa.text, oa.state_key, oa.info["supervisor"]) == (ob.text, ob.state_key, ob.info["supervisor"])
        read = "print(apis.supervisor.show_profile())"
        assert a.step(read).text == b.step(read).text
        a.step(LOGIN_CELL)
        a.step("apis.simple_note.create_note(access_token=token, title='Zeta', content='z')")
        assert a.step(COUNT_CELL).text == "4\n"
        b.step(LOGIN_CELL)
        assert b.step(COUNT_CELL).text == "3\n"  # a's change is invisible to b
    finally:
        b.close()


def test_no_state_is_shared_between_episodes(env):
    env.reset(_task("tcount_1"))
    env.step(LOGIN_CELL)
    env.step("apis.simple_note.create_note(access_token=token, title='Zeta', content='z')")
    env.step("leftover = 123")
    outputs = Path(env.server.private_root) / "experiments" / "outputs"
    first = {p.name for p in outputs.iterdir()}
    assert len(first) == 1  # the episode's on-disk databases
    env.reset(_task("tcount_1"))
    assert env.step("print(leftover)").text.startswith("Execution failed")  # fresh shell
    env.step(LOGIN_CELL)
    assert env.step(COUNT_CELL).text == "3\n"  # fresh databases
    second = {p.name for p in outputs.iterdir()}
    assert len(second) == 1 and not (first & second)  # the previous episode's databases were deleted


def test_load_tasks_splits_difficulties_and_payload(root, appworld_python):
    cfg = EnvConfig(name="appworld", data_dir=str(root), appworld_python=appworld_python)
    train = load_tasks(cfg, "train")
    assert [t.task_id for t in train] == ["tcount_1", "tcreate_1"]
    assert train[0].payload["solution"] == SPECS[0]["solution"] and train[0].payload["scenario"] == "tcount"
    assert [t.task_id for t in load_tasks(cfg, "test_normal")] == ["tcount_2"]
    cfg.appworld_difficulties = [1, 2]
    assert [t.payload["difficulty"] for t in load_tasks(cfg, "train")] == [1, 2]
    with pytest.raises(ValueError, match="no task with difficulty"):
        load_tasks(cfg, "test_normal")
    with pytest.raises(ValueError, match="unknown AppWorld split 'dev'.*test_normal, train"):
        load_tasks(cfg, "dev")
    env = make_env(cfg)
    assert isinstance(env, AppWorldEnv) and env.max_interactions == 50 and env.timeout_seconds == 50


def test_missing_data_names_the_download_command(tmp_path):
    with pytest.raises(AppWorldDataMissing, match="g2po data download appworld.*appworld download data"):
        check_data_root(tmp_path)
    with pytest.raises(AppWorldDataMissing, match="data/tasks is missing"):
        load_tasks(EnvConfig(name="appworld", data_dir=str(tmp_path)), "train")


def test_unknown_interpreter_names_the_install_commands(tmp_path):
    with pytest.raises(AppWorldUnavailable, match="(?s)does not exist.*pip install appworld"):
        find_python(str(tmp_path / "nope" / "python"))


# ------------------------------------------------------------------ official data (optional)
def _real_root() -> Path:
    root = os.environ.get("APPWORLD_ROOT")
    if not root or not (Path(root) / "data" / "tasks").is_dir():
        pytest.skip("official AppWorld data not found: set APPWORLD_ROOT to a folder holding data/ "
                    "(g2po data download appworld)")
    return Path(root)


def test_real_data_train_task_plays(appworld_python):
    root = _real_root()
    cfg = EnvConfig(name="appworld", data_dir=str(root), appworld_python=appworld_python,
                    appworld_difficulties=[1, 2])
    tasks = load_tasks(cfg, "train")
    assert tasks and all(t.payload["difficulty"] in (1, 2) for t in tasks)
    assert load_tasks(cfg, "test_normal")
    env = make_env(cfg)
    try:
        o = env.reset(tasks[0])
        assert o.instruction and o.state_key == "" and o.info["supervisor"]["email"]
        o = env.step("print(apis.api_docs.show_app_descriptions())")
        assert "supervisor" in o.text and not o.done
        o = env.step("apis.supervisor.complete_task(status='fail')")
        assert o.done and not o.won and o.reward == 0.0
    finally:
        env.close()


# ------------------------------------------------------------------ the harness on AppWorld
class _ExpertPolicy:
    """Answers step t of every prompt with the expert response of the task's t-th solution cell
    (the task is recognised by its instruction; the step by the prompt's step counter)."""

    def __init__(self, by_instruction: dict[str, list[str]], step_re: str):
        import re

        self.by_instruction, self.step_re = by_instruction, re.compile(step_re)

    def generate(self, prompts, *, temperature, max_new_tokens, top_p=1.0, seed=None):
        from g2po_bench.benchmarks.appworld.prompt import expert_response
        from g2po_bench.runtime.policy_protocol import Generation

        out = []
        for p in prompts:
            cells = next(c for instr, c in self.by_instruction.items() if f"Task: {instr}" in p or
                         f"Your task is: {instr}" in p)
            m = self.step_re.search(p)
            t = int(m.group(1)) - 1 if m else 0
            out.append(Generation(expert_response(cells[min(t, len(cells) - 1)])))
        return out


def test_rollout_engine_groups_start_identically_and_win(root, appworld_python):
    import numpy as np

    from g2po_bench.benchmarks.appworld import BENCHMARK as bench
    from g2po_bench.benchmarks.rollout import collect_rollouts
    from g2po_bench.runtime.workers import EnvPool

    cfg = EnvConfig(name="appworld", data_dir=str(root), appworld_python=appworld_python, num_workers=1)
    task = next(t for t in load_tasks(cfg, "train") if t.task_id == "tcount_1")
    policy = _ExpertPolicy({"How many notes do I have?": SPECS[0]["solution"]}, r"Now you are at step (\d+)")
    with EnvPool(get_benchmark("appworld"), cfg, num_workers=1) as pool:
        rb = collect_rollouts(policy, pool, bench, [task], group_size=2, max_steps=5, temperature=1.0,
                              max_new_tokens=8, seed=0)
    assert [t["success"] for t in rb.trajectories] == [True, True]
    assert len(rb.steps) == 6 and rb.steps.action_valid.all()
    # anchors: "" at reset, then the raw outputs (the login cell prints 8 characters of a token)
    assert rb.state_texts[0] == "" and len(rb.state_texts[1]) == 9 and rb.state_texts[2] == "3\n"
    assert rb.state_texts[:3] == rb.state_texts[3:]  # identical worlds within the group
    assert np.allclose(rb.steps.reward, [0, 0, 10, 0, 0, 10])


def test_react_baseline_plays_appworld(root, appworld_python):
    from g2po_bench.baselines.agents import run_react
    from g2po_bench.runtime.workers import EnvPool

    cfg = EnvConfig(name="appworld", data_dir=str(root), appworld_python=appworld_python, num_workers=1)
    tasks = load_tasks(cfg, "train")
    policy = _ExpertPolicy({"How many notes do I have?": SPECS[0]["solution"],
                            SPECS[1]["instruction"]: SPECS[1]["solution"]}, r"You are at step (\d+) of at most")
    with EnvPool(get_benchmark("appworld"), cfg, num_workers=1) as pool:
        ev = run_react(policy, pool, "appworld", tasks, max_steps=5, temperature=0.0, max_new_tokens=8, seed=0)
    assert ev["success_rate"] == 1.0 and ev["num_episodes"] == 2 and ev["invalid_frac"] == 0.0
    assert ev["mean_steps"] == 3.0
