"""ALFWorld step prompt (verl-agent template) and expert responses."""

from __future__ import annotations

import pytest

from g2po_bench.benchmarks.alfworld.prompt import build_prompt, expert_response, format_admissible
from g2po_bench.benchmarks.parsing import parse_response
from g2po_bench.core.protocol import Observation

ROOM = (
    "You are in the middle of a room. Looking quickly around you, you see a desk 1, and a shelf 1."
)
TASK = "look at alarmclock under the desklamp."
INTRO = f"-= Welcome to TextWorld, ALFRED! =-\n\n{ROOM}\n\nYour task is to: {TASK}"


def _obs(text, admissible, **info):
    return Observation(
        text=text, instruction=TASK, admissible_actions=admissible, state_key="k", info=info
    )


def test_step0_uses_the_intro_and_admissible_actions():
    obs = _obs(ROOM, ["go to desk 1", "go to shelf 1", "help", "look"], intro=INTRO)
    p = build_prompt(obs, [], 0)
    assert p.startswith("\nYou are an expert agent operating in the ALFRED Embodied Environment.\n")
    assert f"Your current observation is: {INTRO}\n" in p
    assert (
        "Your admissible actions of the current situation are: ['go to desk 1'\n 'go to shelf 1'\n 'look']."
        in p
    )
    assert "'help'" not in p
    assert "<think> </think>" in p and "<action> </action>" in p
    assert "Prior to this step" not in p
    # without info["intro"] the same text is rebuilt
    assert build_prompt(_obs(ROOM, ["go to desk 1", "go to shelf 1", "help", "look"]), [], 0) == p


def test_history_shows_the_last_two_pairs():
    history = [
        (ROOM, "go to desk 1"),
        (
            "You arrive at desk 1. On the desk 1, you see a alarmclock 1, and a desklamp 1.",
            "take alarmclock 1 from desk 1",
        ),
        ("You pick up the alarmclock 1 from the desk 1.", "inventory"),
    ]
    obs = _obs(
        "You are carrying: a alarmclock 1.", ["examine alarmclock 1", "use desklamp 1", "help"]
    )
    p = build_prompt(obs, history, 3, history_length=2)
    assert f"Your task is to: {TASK}\n" in p
    assert (
        "Prior to this step, you have already taken 3 step(s). Below are the most recent 2 observations"
        in p
    )
    assert (
        "[Observation 2: 'You arrive at desk 1. On the desk 1, you see a alarmclock 1, and a desklamp 1.', "
        "Action 2: 'take alarmclock 1 from desk 1']\n"
        "[Observation 3: 'You pick up the alarmclock 1 from the desk 1.', Action 3: 'inventory']"
    ) in p
    assert "Action 1:" not in p and "go to desk 1'" not in p
    assert (
        "You are now at step 4 and your current observation is: You are carrying: a alarmclock 1.\n"
        in p
    )
    assert "['examine alarmclock 1'\n 'use desklamp 1']" in p


def test_first_history_entry_is_the_full_intro():
    p = build_prompt(_obs("You arrive at desk 1.", ["look"]), [(ROOM, "go to desk 1")], 1)
    assert f"[Observation 1: '{INTRO}', Action 1: 'go to desk 1']" in p
    assert "most recent 1 observations" in p


def test_no_history_variant_and_errors():
    obs = _obs("You arrive at desk 1.", ["look"])
    p = build_prompt(obs, [(ROOM, "go to desk 1")], 1, history_length=0)
    assert "Your current observation is: You arrive at desk 1.\n" in p and "Prior to" not in p
    with pytest.raises(ValueError):
        build_prompt(obs, [(ROOM, "a"), (ROOM, "b")], 1)
    with pytest.raises(ValueError):
        build_prompt(obs, [], -1)
    assert format_admissible(None) == ""


@pytest.mark.parametrize(
    "action",
    [
        "go to desk 1",
        "open drawer 2",
        "take alarmclock 1 from desk 1",
        "heat apple 1 with microwave 1",
        "cool pan 1 with fridge 1",
        "clean cloth 1 with sinkbasin 1",
        "use desklamp 1",
        "move apple 1 to diningtable 2",
        "look",
        "inventory",
    ],
)
def test_expert_response_is_valid_and_deterministic(action):
    obs = _obs(ROOM, [action])
    r = expert_response(action, obs)
    assert r == expert_response(action, obs)
    assert r.startswith("<think>") and r.endswith(f"<action>{action}</action>")
    parsed = parse_response(r)
    assert parsed.valid and parsed.action == action
    assert len(r) < 160
