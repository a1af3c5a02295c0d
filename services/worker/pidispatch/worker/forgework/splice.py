"""Add one key to one trigger's ``on`` object in the operator's ``triggers.json`` text, keeping every other
byte. Pure.

The file is reviewed by people, so it is never re-serialised: a scan that knows JSON strings and their
escapes finds ``triggers[index].on``, the new member is inserted after its last one (in the layout the
object already uses), and the result is re-parsed to prove that only that key changed. Any doubt returns
None: the caller then writes nothing.
"""

from __future__ import annotations

import json
from typing import Any

_WS = " \t\n\r"


class _Unsafe(Exception):
    """The text is not the JSON shape the splice expects."""


def _ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _string_end(text: str, i: int) -> int:
    """The offset after the string token starting at ``i`` (a quote); a backslash escapes the next char."""
    if text[i] != '"':
        raise _Unsafe("not a string")
    i += 1
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == '"':
            return i + 1
        i += 1
    raise _Unsafe("unterminated string")


def _value_end(text: str, i: int) -> int:
    """The offset after the value starting at ``i``: strings are skipped whole, so a brace inside one
    never counts; brackets are counted with a stack (no recursion, whatever the nesting)."""
    i = _ws(text, i)
    if i >= len(text):
        raise _Unsafe("missing value")
    if text[i] == '"':
        return _string_end(text, i)
    if text[i] not in "{[":
        end = i
        while end < len(text) and text[end] not in _WS + ",]}":
            end += 1
        if end == i:
            raise _Unsafe("missing value")
        return end
    stack: list[str] = []
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i = _string_end(text, i)
            continue
        if ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                raise _Unsafe("unbalanced brackets")
            if not stack:
                return i + 1
        i += 1
    raise _Unsafe("unterminated value")


def _members(text: str, i: int) -> list[tuple[str, int, int, int]]:
    """The members of the object at ``i``: (decoded key, key start, value start, value end)."""
    if text[i] != "{":
        raise _Unsafe("not an object")
    out: list[tuple[str, int, int, int]] = []
    i = _ws(text, i + 1)
    if text[i] == "}":
        return out
    while True:
        key_start = i
        key_end = _string_end(text, i)
        key = json.loads(text[key_start:key_end])  # the escapes decoded: "\u006fn" is "on"
        i = _ws(text, key_end)
        if text[i] != ":":
            raise _Unsafe("missing colon")
        value_start = _ws(text, i + 1)
        value_end = _value_end(text, value_start)
        out.append((key, key_start, value_start, value_end))
        i = _ws(text, value_end)
        if text[i] == "}":
            return out
        if text[i] != ",":
            raise _Unsafe("missing comma")
        i = _ws(text, i + 1)


def _elements(text: str, i: int) -> list[int]:
    """The start offsets of the elements of the array at ``i``."""
    if text[i] != "[":
        raise _Unsafe("not an array")
    out: list[int] = []
    i = _ws(text, i + 1)
    if text[i] == "]":
        return out
    while True:
        out.append(i)
        i = _ws(text, _value_end(text, i))
        if text[i] == "]":
            return out
        if text[i] != ",":
            raise _Unsafe("missing comma")
        i = _ws(text, i + 1)


def _member(members: list[tuple[str, int, int, int]], key: str) -> tuple[str, int, int, int]:
    found = [m for m in members if m[0] == key]
    if len(found) != 1:
        raise _Unsafe(f"{key!r} is missing or duplicated")
    return found[0]


def _insertion(text: str, index: int, key: str) -> tuple[int, str]:
    """Where the new member goes in ``triggers[index].on`` and the separator to put before it."""
    top = _members(text, _ws(text, 0))
    elements = _elements(text, _member(top, "triggers")[2])
    if not 0 <= index < len(elements):
        raise _Unsafe("no entry at that index")
    on = _members(text, _member(_members(text, elements[index]), "on")[2])
    if not on or any(name == key for name, *_ in on):
        raise _Unsafe("empty on, or the key is already there")
    # The layout before the last member (", " or ",\n    "), so the new one reads like its neighbours.
    last_key_start, last_value_end = on[-1][1], on[-1][3]
    before = text[:last_key_start]
    gap = before[len(before.rstrip(_WS)):]
    return last_value_end, "," + gap


def _strict(text: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({k for k, _ in items}) != len(items):
            raise _Unsafe("duplicate key")
        return dict(items)

    def constant(word: str) -> Any:
        raise _Unsafe(f"{word} is not JSON")

    return json.loads(text, object_pairs_hook=pairs, parse_constant=constant)


def add_on_key(text: str, index: int, key: str, value: Any) -> str | None:
    """``text`` with ``"key": value`` added to ``triggers[index].on``, or None when that cannot be done
    safely (not the expected shape, the key already there, or the re-parse shows any other change)."""
    try:
        before = _strict(text)
        at, separator = _insertion(text, index, key)
        member = separator + json.dumps(key) + ": " + json.dumps(value, separators=(", ", ": "))
        spliced = text[:at] + member + text[at:]
        after = _strict(spliced)
        before["triggers"][index]["on"][key] = value
    except (_Unsafe, ValueError, RecursionError, KeyError, TypeError, IndexError):
        return None
    return spliced if after == before else None
