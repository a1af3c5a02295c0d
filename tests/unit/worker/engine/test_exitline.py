"""Exit-line telemetry: the last exit object in the last 8 KiB, repaired when bytes are glued before it."""

from __future__ import annotations

import json

from pidispatch.worker.engine.exitline import TAIL_BYTES, ExitInfo, Tail, parse_exit_line

EXIT = '{"event":"exit","turns":3,"tokens":{"input":10,"output":5,"total":15,"cost":0.01}}'


def test_reads_turns_and_tokens_from_the_exit_line() -> None:
    out = f"starting\n{EXIT}\n".encode()
    tokens = {"input": 10, "output": 5, "total": 15, "cost": 0.01}
    assert parse_exit_line(out) == ExitInfo(turns=3, tokens=tokens)


def test_no_exit_line_gives_none() -> None:
    assert parse_exit_line(b"") is None
    assert parse_exit_line(b'hello\n{"event":"turn","n":1}\nnot json {\n') is None


def test_the_last_exit_line_wins() -> None:
    first = EXIT.replace('"turns":3', '"turns":1')
    assert parse_exit_line(f"{first}\nmore output\n{EXIT}\ntrailing noise\n".encode()).turns == 3  # type: ignore[union-attr]


def test_stray_bytes_glued_before_the_anchor_are_repaired() -> None:
    glued = f'\x1b[0mprogress 99%{{"event":"partial"{EXIT}'
    info = parse_exit_line(f"{glued}\n".encode())
    assert info is not None and info.turns == 3


def test_binary_garbage_before_the_exit_line_is_tolerated() -> None:
    out = b"\xff\xfe\x00garbage" + EXIT.encode() + b"\n"
    assert parse_exit_line(out) == parse_exit_line(EXIT.encode())


def test_only_numeric_counters_reach_the_tokens() -> None:
    line = json.dumps({"event": "exit", "turns": 2, "tokens": {"total": 4, "input": "leak me", "note": "x",
                                                                "output": -1}})
    assert parse_exit_line(line.encode()) == ExitInfo(turns=2, tokens={"total": 4})


def test_invalid_turns_and_tokens_become_none() -> None:
    for turns, tokens in [("3", {"total": "9"}), (True, {"input": 1}), (-1, {"total": -5}), (1.5, [1])]:
        line = json.dumps({"event": "exit", "turns": turns, "tokens": tokens})
        assert parse_exit_line(line.encode()) == ExitInfo(turns=None, tokens=None)


def test_an_exit_line_older_than_the_last_8_kib_is_not_seen() -> None:
    out = EXIT.encode() + b"\n" + b"x" * TAIL_BYTES
    assert parse_exit_line(out) is None


def test_tail_keeps_only_the_last_bytes() -> None:
    tail = Tail(limit=10)
    for chunk in (b"0123456", b"789ab", b"cdef"):
        tail.feed(chunk)
    assert tail.bytes() == b"6789abcdef"
