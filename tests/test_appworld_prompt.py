"""AppWorld prompt, ``<code>`` extraction, refusals and scenario score (no AppWorld needed)."""

from __future__ import annotations

import pytest

from g2po_bench.benchmarks.appworld import episode_set_score, expert_actions
from g2po_bench.benchmarks.appworld.env import ELLIPSIS_REFUSAL, TRY_EXCEPT_REFUSAL, refusal
from g2po_bench.benchmarks.appworld.prompt import (
    MAX_HISTORY_CHARS,
    TEMPLATE,
    TEMPLATE_NO_HISTORY,
    build_prompt,
    expert_response,
    parse_response,
)
from g2po_bench.benchmarks.appworld.synthetic import smoke_specs
from g2po_bench.core.protocol import Observation, Task

SUP = {"first_name": "Ada", "last_name": "Lovelace", "email": "ada@example.com", "phone_number": "5550100"}


def _obs(text: str, key: str | None = None) -> Observation:
    return Observation(text=text, instruction="Count my notes.", admissible_actions=None,
                       state_key=text if key is None else key, info={"supervisor": SUP})


@pytest.mark.parametrize("response, action, valid", [
    ("<think>plan</think>\n<code>print(1)</code>", "print(1)", True),
    ("<think>a</think><code>\n x = 1\n</code><code>y</code>", "\n x = 1\n", True),  # first block, unstripped
    ("<code>print(1)</code><think>late</think>", "print(1)", True),  # the tags in any order
    ("<think>a</think></code>oops<code>", "", True),  # </code> first: empty code, as in the reference
    ("<code>print(1)</code>", "print(1)", False),  # no <think>: invalid, the code is still sent
    ("<THINK>a</THINK><code>z</code>", "z", False),  # case-sensitive
    ("<think>a</think> print(2)", "<think>a</think> print(2)", False),  # no <code>: the text (< 100 chars)
])
def test_parse_response_follows_the_reference_projection(response, action, valid):
    p = parse_response(response)
    assert (p.action, p.valid) == (action, valid)


def test_parse_response_without_code_sends_the_last_100_characters():
    text = "x" * 150 + "y" * 100
    p = parse_response(text)
    assert p.action == "y" * 100 and not p.valid and "code" in p.reason


def test_refusal_rules():
    assert refusal("print('a')") is None
    assert refusal("x = [1, ...]") == ELLIPSIS_REFUSAL
    assert refusal("try:\n  f()\nexcept KeyError:\n  pass") == TRY_EXCEPT_REFUSAL
    assert refusal("print('no EXCEPTions here')") == TRY_EXCEPT_REFUSAL  # the reference's substring test
    assert refusal("a = '...'; b = 'except'") == ELLIPSIS_REFUSAL  # the ellipsis test comes first


def test_first_prompt_is_the_reference_template():
    p = build_prompt(_obs("Count my notes.", ""), [], 0)
    assert p == TEMPLATE_NO_HISTORY.format(task_description="Count my notes.", supervisor_first_name="Ada",
                                           supervisor_last_name="Lovelace", supervisor_email="ada@example.com",
                                           supervisor_phone_number="5550100")
    assert p.startswith("\nI am your supervisor and you are a super intelligent AI Assistant")
    assert "My name is: Ada Lovelace. My personal email is ada@example.com and phone number is 5550100." in p
    assert "Your task is: Count my notes.\n\nNow it's your turn to generate code to solve the task." in p
    assert "Result 1: \n[\n  {\n" in p  # literal braces of the example survive formatting
    assert p.endswith("present the solution code body within <code> </code> tags.\n")


def test_later_prompts_show_the_last_code_result_pairs():
    # engine history: (observation before the action, action); results are the next observations
    history = [("Count my notes.", "c1"), ("out1\n", "c2"), ("out2\n", "c3")]
    p = build_prompt(_obs("out3\n"), history, 3, history_length=2)
    assert "Prior to this step, you have already taken 3 step(s). Below are the most recent 2 codes" in p
    # blocks "\nCode k: \n<code>\n\nResult k: \n<output>\n" joined, then stripped
    assert ("environment return: \nCode 2: \nc2\n\nResult 2: \nout2\n\n\nCode 3: \nc3\n\nResult 3: \nout3"
            "\n\nNow you are at step 4") in p
    assert "Code 1:" not in p.split("Your task is: Count my notes.")[1]
    assert "Now you are at step 4 and it's your turn to generate code for this step." in p
    assert p.endswith("present the solution code body within <code> </code> tags.\n\n")
    assert p.startswith(TEMPLATE[:200])
    one = build_prompt(_obs("out1\n"), history[:1], 1, history_length=2)
    assert "the most recent 1 codes" in one and "Code 1: \nc1\n\nResult 1: \nout1\n\nNow you are at step 2" in one


def test_long_history_keeps_its_last_27000_characters():
    big = "z" * (MAX_HISTORY_CHARS + 500)
    p = build_prompt(_obs("tail-output"), [("Count my notes.", "c1"), (big, "c2")], 2, history_length=2)
    hist = p.split("environment return: \n")[1].split("\n\nNow you are at step")[0]
    assert hist.startswith("... ") and len(hist) <= MAX_HISTORY_CHARS + 4
    assert hist.endswith("Result 2: \ntail-output")


def test_expert_responses_parse_as_valid_and_keep_the_code():
    for spec in smoke_specs():
        for cell in spec["solution"]:
            p = parse_response(expert_response(cell))
            assert p.valid and p.action == cell.strip()
        assert expert_actions(Task(spec["task_id"], "appworld", "appworld", {"solution": spec["solution"]})) == \
            spec["solution"]
    assert expert_actions(Task("abc_1", "appworld", "appworld", {"difficulty": 1})) == []


def test_smoke_specs_splits_and_ids():
    specs = smoke_specs()
    assert [s["task_id"] for s in specs if s["split"] == "test_normal"] == ["notecount_3", "notetitle_3",
                                                                           "notecreate_3"]
    assert sum(s["split"] == "train" for s in specs) == 6
    assert all(s["task_id"].count("_") == 1 for s in specs)


def test_episode_set_score_is_scenario_goal_completion():
    trajs = [{"task_id": "a_1", "success": True}, {"task_id": "a_2", "success": True},
             {"task_id": "b_1", "success": True}, {"task_id": "b_2", "success": False},
             {"task_id": "c_1", "success": False}]
    assert episode_set_score(trajs) == pytest.approx(100 / 3)
    assert episode_set_score([]) is None


@pytest.mark.parametrize("text, code, valid", [
    ("<think>look</think><code>print(apis.supervisor.show_profile())</code>", "print(apis.supervisor.show_profile())", True),
    ("<code>X = 1\nprint(X)</code>", "X = 1\nprint(X)", True),  # no lowercasing, thought optional
    ("<think>t</think><code>print('Open')\n", "print('Open')\n", True),  # stop string dropped by the server
    ("<think>t</think><code>   </code>", "   ", False),
    ("no tags at all", "no tags at all", False),
])
def test_react_parse_step_for_code_cells(text, code, valid):
    from g2po_bench.baselines.agents import parse_step, stop_strings

    _, p = parse_step(text, "appworld")
    assert (p.action, p.valid) == (code, valid)
    assert stop_strings("appworld")[0] == "</code>" and stop_strings("alfworld")[0] == "</action>"


def test_react_prompt_for_appworld_asks_for_code():
    from g2po_bench.baselines.prompts import StepView, render_react_prompt

    p = render_react_prompt("appworld", instruction="Count my notes.", first_observation="My name is: A B.",
                            steps=[StepView("log in", "token = 1\nprint(token)", "1\n")], current_observation="1\n",
                            admissible_actions=None, step=1, max_steps=4)
    assert "apis.api_docs.show_app_descriptions()" in p and "<code>token = 1\nprint(token)</code>" in p
    assert p.endswith("give exactly one Python code cell inside <code> </code>.")
