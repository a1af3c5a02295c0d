"""The bytes and the JSON of ``triggers.json``: read from a regular file up to a cap, decoded strictly.

Strict because the reviewed file and the running rules must not differ: a duplicated key (JSON keeps the
last silently) and the non-JSON constants ``NaN``/``Infinity`` are refused, not read.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

from pidispatch.triggers.refusal import TriggerRefusal

# A rules file is a few KiB; the cap bounds what a mistaken path (a log, an image) can cost to read.
TRIGGERS_MAX_BYTES = 1024 * 1024


def decode(text: str) -> Any:
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out and not duplicates:
                duplicates.append(key)
            out[key] = value
        return out

    def constant(word: str) -> NoReturn:
        raise ValueError(f"{word} is not JSON")

    try:
        data = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except RecursionError:
        raise TriggerRefusal("is nested too deeply; accepted: one JSON object") from None
    except ValueError as exc:
        where = f" (line {exc.lineno} column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise TriggerRefusal(f"is not valid JSON{where}; accepted: one JSON object") from None
    if duplicates:
        # JSON keeps the last value silently, so the reviewed file and the running one would differ.
        raise TriggerRefusal(f"key {duplicates[0]!r} is duplicated; accepted: each key once per object")
    return data
