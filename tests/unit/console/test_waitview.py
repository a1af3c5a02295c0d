"""``pi-dispatch waits``: the rows and the table from hold states, the ``status`` line, and how a stored
hold hash parses."""

from __future__ import annotations

from typing import Any

import msgspec

from pidispatch.console.control import format_status
from pidispatch.console.waitview import EMPTY, ROW_KEYS, parse_conditions, render_table, wait_rows
from pidispatch.worker.waits.state import HoldState, conditions_json, parse_hold

SINCE = 1_780_000_000_000  # 2026-05-28T20:26:40.000Z
CONDITIONS = conditions_json([{"after": "2026-05-29T06:00:00Z"}, {"profile": "ci-green"}])


def hold(job: str = "gh-1", **over: Any) -> HoldState:
    base = HoldState(job=job, since=SINCE, target="owner/app#12", dedup_id="d1", conditions=CONDITIONS,
                     checks=3, faults=1, next=SINCE + 60_123)  # fmt: skip
    return msgspec.structs.replace(base, **over)


def test_a_row_has_exactly_the_documented_keys_in_order_with_iso_times() -> None:
    [row] = wait_rows([hold()])
    assert tuple(row) == ROW_KEYS
    assert row == {
        "job": "gh-1", "target": "owner/app#12",
        "conditions": [{"after": "2026-05-29T06:00:00Z"}, {"profile": "ci-green"}],
        "since": "2026-05-28T20:26:40.000Z", "checks": 3, "faults": 1, "next": "2026-05-28T20:27:40.123Z",
    }  # fmt: skip


def test_rows_keep_the_given_order_and_a_hold_without_a_wake_has_next_null() -> None:
    rows = wait_rows([hold("gh-old"), hold("gh-new", since=SINCE + 1, next=None)])
    assert [r["job"] for r in rows] == ["gh-old", "gh-new"]
    assert rows[1]["next"] is None


def test_conditions_that_are_not_a_json_list_read_as_none() -> None:
    assert parse_conditions("{not json") == []
    assert parse_conditions('{"after": "x"}') == []
    assert parse_conditions("[]") == []
    assert wait_rows([hold(conditions="")])[0]["conditions"] == []


def test_the_table_has_a_header_and_dashes_for_empty_cells() -> None:
    rows = wait_rows([hold(), hold("gh-bare", target="", conditions="[]", next=None, checks=0, faults=0)])
    assert render_table(rows).splitlines() == [
        "JOB      TARGET        SINCE                     NEXT                      CHECKS  FAULTS  "
        "CONDITIONS",
        "gh-1     owner/app#12  2026-05-28T20:26:40.000Z  2026-05-28T20:27:40.123Z  3       1       "
        "after=2026-05-29T06:00:00Z, profile=ci-green",
        "gh-bare  -             2026-05-28T20:26:40.000Z  -                         0       0       -",
    ]


def test_a_condition_that_is_not_a_string_map_is_shown_as_json() -> None:
    rows = wait_rows([hold(conditions='[{"checks": 2, "profile": "ci"}, "odd"]')])
    assert render_table(rows).splitlines()[1].endswith('checks=2 profile=ci, "odd"')


def test_an_empty_table_says_no_job_waits() -> None:
    assert render_table([]) == EMPTY == "no job is waiting on a condition"


def test_status_has_a_waiting_line_after_windowed() -> None:
    status = {
        "paused": False, "pausedHosts": [], "queued": 0, "running": 0, "delayed": 3, "dead": 0,
        "hosts": ["a", "b"], "heldByWindow": 1, "heldByWait": 2, "imageMissing": [], "egressOff": [],
    }  # fmt: skip
    lines = format_status(status).splitlines()
    at = lines.index("windowed 1 of the delayed wait for a quiet-hours window")
    assert lines[at + 1] == "waiting  2 of the delayed wait for a condition (pi-dispatch waits)"
    assert lines[-1] == "hosts    a, b"
    # A host whose worker found its job image missing at start is named, with the fix.
    status["imageMissing"] = ["b"]
    assert format_status(status).splitlines()[-1] == (
        "image    missing on b: every job there is refused job-image-missing "
        "(build it: pi-dispatch job-image build)")
    # So is one running its jobs unfiltered.
    status["egressOff"] = ["a"]
    assert format_status(status).splitlines()[-1] == (
        "egress   off on a: jobs there reach the whole network (PI_EGRESS=0)")


def test_a_hash_without_since_is_no_hold_and_bad_numbers_read_as_zero_or_no_wake() -> None:
    assert parse_hold("gh-1", {}) is None
    assert parse_hold("gh-1", {"checks": "2", "faults": "1"}) is None  # counters outliving a release
    parsed = parse_hold("gh-1", {"since": "12", "checks": "x", "faults": "-1", "next": "soon", "held": "yes"})
    assert parsed == HoldState(job="gh-1", since=12, checks=0, faults=0, next=None, held=False)
    full = parse_hold("gh-1", {"since": "5", "target": "t", "dedupId": "d", "conditions": CONDITIONS,
                               "checks": "4", "faults": "2", "throttles": "1", "next": "99", "held": "1"})
    assert full == HoldState(job="gh-1", since=5, target="t", dedup_id="d", conditions=CONDITIONS, checks=4,
                             faults=2, throttles=1, next=99, held=True)  # fmt: skip
