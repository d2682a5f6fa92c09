"""ALFWorld state keys (docs/design-notes.md "State keys") on observations recorded from the real
engine (valid_seen pick_heat_then_place_in_recep-Apple-None-DiningTable-26 and look/clean/cool games)."""

from __future__ import annotations

import pytest

from g2po_bench.benchmarks.alfworld.state_keys import (
    RawStateKey,
    ReferenceStateKey,
    format_state_text,
    make_state_key,
)

INTRO = (
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 2, a cabinet 1, "
    "a diningtable 2, a diningtable 1, a fridge 1, a microwave 1, and a sinkbasin 1."
)
ADM0 = [
    "go to cabinet 1",
    "go to cabinet 2",
    "go to diningtable 1",
    "go to diningtable 2",
    "go to fridge 1",
    "go to microwave 1",
    "go to sinkbasin 1",
    "help",
    "inventory",
    "look",
]
ARRIVE_TABLE = (
    "You arrive at diningtable 2. On the diningtable 2, you see a apple 1, a bread 3, "
    "a cup 3, and a soapbottle 1."
)
ADM_TABLE = [
    "examine diningtable 2",
    "go to cabinet 1",
    "inventory",
    "look",
    "take apple 1 from diningtable 2",
]
PICK = "You pick up the apple 1 from the diningtable 2."
ADM_HOLD = [
    "examine apple 1",
    "go to microwave 1",
    "inventory",
    "look",
    "move apple 1 to diningtable 2",
]
ARRIVE_MW = "You arrive at microwave 1. The microwave 1 is closed."
ADM_MW = [
    "go to diningtable 2",
    "heat apple 1 with microwave 1",
    "inventory",
    "look",
    "open microwave 1",
]
HEAT = "You heat the apple 1 using the microwave 1."
ARRIVE_TABLE2 = (
    "You arrive at diningtable 2. On the diningtable 2, you see a bread 3, a cup 3, "
    "and a soapbottle 1."
)
NOTHING = "Nothing happens."


def test_format_matches_reference_text():
    text = format_state_text("You arrive at desk 1.", ["go to bed 1", "help", "look"])
    assert text == "You arrive at desk 1.\nAdmissible actions:\n 'go to bed 1'\n 'look'\n"
    assert format_state_text("x", None) == "x\nAdmissible actions:\n \n"


def test_key_holds_observation_and_admissible_actions():
    k = ReferenceStateKey()
    key0 = k.reset(INTRO, ADM0)
    assert key0.startswith(INTRO)
    assert "'go to microwave 1'" in key0 and "'help'" not in key0
    key1 = k.update(ARRIVE_TABLE, ADM_TABLE)
    assert key1 == format_state_text(ARRIVE_TABLE, ADM_TABLE)
    # same text, different admissible actions -> different state
    k2 = ReferenceStateKey()
    k2.reset(INTRO, ADM0)
    assert k2.update(ARRIVE_TABLE, ADM_TABLE[:-1]) != key1


def test_nothing_happens_is_a_self_loop():
    k = ReferenceStateKey()
    key0 = k.reset(INTRO, ADM0)
    assert k.update(NOTHING, ADM0) == key0  # invalid first action: back to the reset state
    key1 = k.update(ARRIVE_TABLE, ADM_TABLE)
    assert k.update(NOTHING, ADM_TABLE) == key1
    assert k.update("Nothing happens. (fallback)", ADM_TABLE) == key1


def test_heat_effect_is_kept_for_one_more_state():
    k = ReferenceStateKey()
    k.reset(INTRO, ADM0)
    k.update(ARRIVE_TABLE, ADM_TABLE)
    k.update(PICK, ADM_HOLD)
    k.update(ARRIVE_MW, ADM_MW)
    heat_key = k.update(HEAT, ADM_MW)
    assert heat_key == format_state_text(HEAT, ADM_MW)  # the heat message itself
    assert k.update(NOTHING, ADM_MW) == heat_key  # self-loop right after the effect
    joined = k.update(ARRIVE_TABLE2, ADM_HOLD)
    assert joined == format_state_text(HEAT, ADM_MW) + " " + format_state_text(
        ARRIVE_TABLE2, ADM_HOLD
    )
    # without the heat, the same arrival is a different (plain) state
    plain = ReferenceStateKey()
    plain.reset(INTRO, ADM0)
    plain.update(PICK, ADM_HOLD)
    assert (
        plain.update(ARRIVE_TABLE2, ADM_HOLD)
        == format_state_text(ARRIVE_TABLE2, ADM_HOLD)
        != joined
    )
    assert k.update(NOTHING, ADM_HOLD) == joined
    # one meaningful step later the effect is no longer in the key
    done = "You move the apple 1 to the diningtable 2."
    assert k.update(done, ADM_TABLE) == format_state_text(done, ADM_TABLE)


@pytest.mark.parametrize(
    "effect",
    [
        "You heat the apple 1 using the microwave 1.",
        "You cool the pan 1 using the fridge 1.",
        "You clean the cloth 1 using the sinkbasin 1.",
        "You turn on the desklamp 1.",
    ],
)
def test_all_invisible_effects_join(effect):
    k = ReferenceStateKey()
    k.reset(INTRO, ADM0)
    k.update(effect, ["look"])
    after = k.update("You arrive at shelf 1. On the shelf 1, you see nothing.", ["look"])
    assert after.startswith(effect) and " You arrive at shelf 1." in after


def test_other_messages_do_not_join():
    k = ReferenceStateKey()
    k.reset(INTRO, ADM0)
    k.update("You open the drawer 1. The drawer 1 is open. In it, you see nothing.", ["look"])
    assert k.update(ARRIVE_MW, ADM_MW) == format_state_text(ARRIVE_MW, ADM_MW)


def test_raw_key_and_factory():
    raw = make_state_key("raw")
    assert isinstance(raw, RawStateKey)
    assert raw.reset(INTRO, ADM0) == INTRO
    assert raw.update(NOTHING, ADM0) == NOTHING
    assert isinstance(make_state_key("reference"), ReferenceStateKey)
    assert isinstance(make_state_key(RawStateKey), RawStateKey)
    with pytest.raises(ValueError, match="unknown ALFWorld state key"):
        make_state_key("bogus")
    with pytest.raises(RuntimeError):
        ReferenceStateKey().update("x", [])
