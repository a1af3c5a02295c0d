"""Exit-line telemetry: the runner's last ``{"event":"exit", ...}`` JSON line.

Only the last 8 KiB of combined output is kept, and only validated numbers leave this module: the
output is the agent's, so nothing it prints may reach a record as free text. Telemetry never changes
how a run is classified.
"""

from __future__ import annotations

import json
import math
from typing import Any, NamedTuple

TAIL_BYTES = 8 * 1024
ANCHOR = '{"event":"'
TOKEN_FIELDS = ("input", "output", "total", "cost")


class Tail:
    """The last ``limit`` bytes of a stream, fed chunk by chunk."""

    __slots__ = ("_buf", "limit")

    def __init__(self, limit: int = TAIL_BYTES) -> None:
        self.limit = limit
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> None:
        self._buf += chunk
        if len(self._buf) > self.limit:
            del self._buf[: len(self._buf) - self.limit]

    def bytes(self) -> bytes:
        return bytes(self._buf)


# The labelled reasons a runner may give for exit 2; anything else is
# `runner-policy`. Exact-case match: the exit line is the agent's output, never trusted to widen this.
RUNNER_POLICY_REASONS = frozenset({
    "provider-auth-refused", "cost-cap", "model-not-allowed", "cost-cap-unenforceable",
    "model-policy-unenforceable",
})


class ExitInfo(NamedTuple):
    turns: int | None
    tokens: dict[str, int | float] | None
    exit_reason: str | None = None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _exit_object(line: str) -> dict[str, Any] | None:
    """The exit object on one line, repairing stray bytes glued before the anchor (suffixes, left first)."""
    obj = _object(line)
    if obj is not None:
        return obj if obj.get("event") == "exit" else None
    start = line.find(ANCHOR)
    while start != -1:
        obj = _object(line[start:])
        if obj is not None and obj.get("event") == "exit":
            return obj
        start = line.find(ANCHOR, start + 1)
    return None


def _turns(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _tokens(value: Any) -> dict[str, int | float] | None:
    """Only the known counters, only finite non-negative numbers; a total is required."""
    if not isinstance(value, dict) or not _number(value.get("total")) or value["total"] < 0:
        return None
    return {k: value[k] for k in TOKEN_FIELDS if _number(value.get(k)) and value[k] >= 0}


def parse_exit_line(tail: bytes) -> ExitInfo | None:
    """The last exit object in ``tail`` (the last 8 KiB are scanned), or None when there is none."""
    text = tail[-TAIL_BYTES:].decode("utf-8", errors="replace")
    for raw in reversed(text.splitlines()):
        line = raw.strip()
        if '"event"' not in line:
            continue
        obj = _exit_object(line)
        if obj is not None:
            reason = obj.get("exitReason")
            return ExitInfo(
                turns=_turns(obj.get("turns")),
                tokens=_tokens(obj.get("tokens")),
                exit_reason=reason if isinstance(reason, str) and reason in RUNNER_POLICY_REASONS else None,
            )
    return None
