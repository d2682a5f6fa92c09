"""The response parser: valid format, missing/empty action, missing think, fallback text."""

from benchmarks.parsing import FALLBACK_CHARS, parse_response


def test_valid_response():
    p = parse_response("<think>the apple is on the table</think><action>Go To Table 1</action>")
    assert p.valid and p.action == "go to table 1" and p.reason == ""


def test_last_action_block_wins():
    p = parse_response("<think>x</think><action>look</action> then <action>inventory</action>")
    assert p.valid and p.action == "inventory"


def test_missing_action_is_invalid_with_tail_fallback():
    text = "<think>hmm</think> I will go to the fridge and open it right now please"
    p = parse_response(text)
    assert not p.valid
    assert p.action == text.strip()[-FALLBACK_CHARS:].lower()
    assert "missing <action>" in p.reason


def test_empty_action_is_invalid():
    p = parse_response("<think>x</think><action>   </action>")
    assert not p.valid and "empty" in p.reason


def test_missing_think_is_invalid_but_keeps_action():
    p = parse_response("<action>look</action>")
    assert not p.valid and p.action == "look"
    assert parse_response("<action>look</action>", require_think=False).valid
