"""The response parser against the reference projections (verl-agent ``projection.py`` of
ALFWorld, WebShop and AppWorld): first block, empty action valid, fallback tail of the
unstripped lowercased text, case-sensitive think check in any order, CJK rejection."""

import pytest

from g2po_bench.benchmarks.parsing import FALLBACK_CHARS, PROJECTIONS, parse_response


def test_valid_response():
    p = parse_response("<think>the apple is on the table</think><action>Go To Table 1</action>")
    assert p.valid and p.action == "go to table 1" and p.reason == ""


def test_first_action_block_wins():
    p = parse_response("<think>x</think><action>look</action> then <action>inventory</action>")
    assert p.valid and p.action == "look"


def test_missing_action_is_invalid_with_tail_fallback():
    text = "<think>hmm</think> I will go to the fridge and open it right now please  \n"
    p = parse_response(text)
    assert not p.valid
    # the last 30 characters of the lowercased, unstripped text (trailing blanks included)
    assert FALLBACK_CHARS == 30 and p.action == "nd open it right now please  \n"
    assert "missing <action>" in p.reason


def test_empty_action_is_valid_and_sent_empty():
    p = parse_response("<think>x</think><action>   </action>")
    assert p.valid and p.action == ""


def test_missing_think_is_invalid_but_keeps_action():
    p = parse_response("<action>look</action>")
    assert not p.valid and p.action == "look" and "think" in p.reason
    assert parse_response("<action>look</action>", require_think=False).valid


@pytest.mark.parametrize("text, action, valid", [
    # tags are found in the lowercased text, so their case does not matter ...
    ("<think>x</think><ACTION>Open Fridge 1</ACTION>", "open fridge 1", True),
    # ... but the think check reads the original text, case-sensitively
    ("<THINK>x</THINK><action>look</action>", "look", False),
    # both think tags present in any order count
    ("</think>x<think><action>look</action>", "look", True),
    ("<action>look</action><think>after</think>", "look", True),
    # only one think tag: invalid
    ("<think>x<action>look</action>", "look", False),
    # a close tag before the first open tag: the slice is empty, and valid (as the reference)
    ("<think>x</think></action> <action>look</action>", "", True),
    # unclosed action: fallback tail
    ("<think>x</think><action>look", "<think>x</think><action>look"[-30:], False),
    # CJK characters make a well-formed response invalid; the action is still sent
    ("<think>\u6211\u60f3</think><action>look</action>", "look", False),
    # other non-ASCII text is fine
    ("<think>caf\u00e9</think><action>look</action>", "look", True),
])
def test_reference_edge_cases_alfworld(text, action, valid):
    p = parse_response(text)
    assert (p.action, p.valid) == (action, valid)


def test_webshop_and_appworld_projections():
    text = "<think>x</think> I would click on the first result here"
    assert parse_response(text, projection="webshop").action == text.lower()[-20:]
    assert PROJECTIONS["webshop"].reject_cjk
    assert not parse_response("<think>\u4f60</think><action>search[shoes]</action>", projection="webshop").valid
    # AppWorld: <code> blocks, no lowercasing, no strip, 100-character fallback, no CJK check
    p = parse_response("<think>t</think><code> print(Apis.spotify.Login()) </code>", projection="appworld")
    assert p.valid and p.action == " print(Apis.spotify.Login()) "
    assert parse_response("<think>\u4f60</think><code>x</code>", projection="appworld").valid
    long = "<think>t</think>" + "A" * 150
    assert parse_response(long, projection="appworld").action == "A" * 100
    with pytest.raises(KeyError):
        parse_response("x", projection="sokoban")
