"""scripts/alfworld_failures.py: the category of a failed episode's first refused action."""

import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "alfworld_failures.py"
sys.path.insert(0, str(SCRIPT.parent))
try:
    import alfworld_failures as af
finally:
    sys.path.pop(0)


def _step(obs: str, action: str, admissible: list[str]) -> dict:
    state = f"{obs}\nAdmissible actions: " + ", ".join(f"'{a}'" for a in admissible)
    return {"state": state, "action": action, "admitted": action in af.admissible(state)}


def test_admissible_reads_the_listed_actions_and_refuses_a_state_without_them():
    assert af.admissible("You arrive at sofa 1.\nAdmissible actions: 'go to bed 1', 'take pen 2 from sofa 1'") == [
        "go to bed 1", "take pen 2 from sofa 1"]
    with pytest.raises(ValueError, match="state_key=reference"):
        af.admissible("You arrive at sofa 1.")


def test_first_refusal_names_the_first_refused_action():
    start = "You are in the middle of a room."
    go = _step(start, "go to drawer 1", ["go to drawer 1", "go to sofa 1"])
    at_drawer = "You arrive at drawer 1. The drawer 1 is closed."
    take_absent = _step(at_drawer, "take pen 1 from drawer 1", ["open drawer 1", "go to sofa 1"])
    assert af.first_refusal([go, take_absent]) == "take-wrong"
    # the agent stands at drawer 1 (arrived two steps before): going there again is "goto-here"
    opened = _step("You open the drawer 1. The drawer 1 is open. In it, you see nothing.", "go to drawer 1",
                   ["close drawer 1", "go to sofa 1"])
    assert af.first_refusal([go, _step(at_drawer, "open drawer 1", ["open drawer 1"]), opened]) == "goto-here"
    assert af.first_refusal([_step(start, "go to shelf 9", ["go to sofa 1"])]) == "goto-nonexistent"
    assert af.first_refusal([go, _step(at_drawer, "heat pen 1 with microwave 1", ["open drawer 1"])]) == "other:heat"
    assert af.first_refusal([go]) == "no-refusal"
