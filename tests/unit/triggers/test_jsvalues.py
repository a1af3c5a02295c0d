"""JavaScript's readings: trim and \\s on its own whitespace set, Number.isInteger ids."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from pidispatch.triggers.jsvalues import JS_NON_SPACE, JS_SPACE, JS_WHITESPACE, js_int, js_trim

# Where Python and JavaScript disagree: Python strips the information separators, JS strips the BOM.
NOT_JS_SPACE = ["\x1c", "\x1d", "\x1e", "\x1f"]
JS_ONLY_SPACE = ["\ufeff"]
SHARED_SPACE = ["\xa0", "\u3000", "\t", "\u2028"]


@pytest.mark.parametrize("char", NOT_JS_SPACE)
def test_the_information_separators_are_text_not_whitespace(char: str) -> None:
    assert char.isspace()  # the Python reading this module exists to avoid
    assert js_trim(f" {char} ") == char
    assert re.fullmatch(JS_NON_SPACE, char) and not re.fullmatch(JS_SPACE, char)


@pytest.mark.parametrize("char", JS_ONLY_SPACE + SHARED_SPACE)
def test_the_bom_no_break_and_ideographic_spaces_are_whitespace(char: str) -> None:
    assert js_trim(f"{char}go{char}") == "go"
    assert js_trim(char * 3) == ""
    assert re.fullmatch(JS_SPACE, char) and not re.fullmatch(JS_NON_SPACE, char)


def test_the_set_is_exactly_javascripts() -> None:
    expected = {*"\t\n\x0b\x0c\r \xa0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff",
                *(chr(c) for c in range(0x2000, 0x200B))}
    assert set(JS_WHITESPACE) == expected
    assert len(JS_WHITESPACE) == len(expected)


@pytest.mark.parametrize(("value", "expected"), [
    (7, 7), (7.0, 7), (-3.0, -3), (0.0, 0), (2.0**53, 2**53),
    (7.5, None), (True, None), (False, None), (math.nan, None), (math.inf, None), (-math.inf, None),
    ("7", None), (None, None), ([7], None),
])
def test_an_integer_is_numbers_whole_and_finite_and_never_a_bool(value: Any, expected: int | None) -> None:
    got = js_int(value)
    assert got == expected
    assert got is None or type(got) is int  # formatted as 7, never 7.0
