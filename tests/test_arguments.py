"""Value types of command-line options (g2po_bench.core.arguments)."""

import argparse

import pytest

from g2po_bench.core.arguments import int_at_least, non_negative_int, positive_int


def test_whole_numbers_at_their_bounds():
    assert positive_int("1") == 1
    assert positive_int("16") == 16
    assert non_negative_int("0") == 0
    assert non_negative_int("7") == 7
    assert int_at_least(2)("2") == 2


@pytest.mark.parametrize("fn, text, message", [
    (positive_int, "0", "'0' must be >= 1"),
    (positive_int, "-3", "'-3' must be >= 1"),
    (non_negative_int, "-1", "'-1' must be >= 0"),
    (positive_int, "2.5", "'2.5' is not a whole number"),
    (non_negative_int, "abc", "'abc' is not a whole number"),
    (int_at_least(2), "1", "'1' must be >= 2"),
    (int_at_least(2), "x", "'x' is not a whole number"),
])
def test_bad_values_are_named(fn, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as info:
        fn(text)
    assert str(info.value) == message
