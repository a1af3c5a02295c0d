"""The status page's pure parts: rendering (escaping, empty states, links) and its exposure rules."""

from __future__ import annotations

import pytest

from pidispatch.common.models import RunRecord
from pidispatch.common.registry import HostRow
from pidispatch.console import statushtml as h
from pidispatch.console.events import Delivery
from pidispatch.console.statusdata import DeliveryTrace, Overview, QueueRow, RunRow
from pidispatch.triggers.decisions import Decided

EVIL = "<script>alert(1)</script>"


def record(job_id: str, **kw: object) -> RunRecord:
    fields: dict[str, object] = {
        "kind": "local", "target": "local:app", "flow": None, "started_at": "2026-12-01T10:00:00.000Z",
        "ended_at": "2026-12-01T10:02:05.500Z", "outcome": "completed", "reason": None, "exit_code": 0,
        "host": "mini1", **kw,
    }
    return RunRecord(job_id=job_id, **fields)  # type: ignore[arg-type]


def assert_inert(body: str) -> None:
    assert "<script" not in body.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_a_hostile_value_in_every_page_is_escaped() -> None:
    overview = Overview(
        queues=[QueueRow(EVIL, "workers", 3, 1, 2)], delayed_key="pd:delayed", delayed=0, dead_key="pd:dead",
        dead=0, hosts=[HostRow(name="mini1", caps=frozenset({"s:prod"}), version=EVIL, stale_ms=1000)],
        paused=False,
    )
    assert_inert(h.overview_html(overview))
    assert_inert(h.runs_html([RunRow(record(EVIL, reason=EVIL, host=EVIL), has_output=True)]))
    assert_inert(h.deliveries_html([Delivery(entry="1-0", forge="github", event=EVIL, delivery=EVIL,
                                             received_at=1, outcome="dropped", reason=EVIL)]))
    stored = Decided(outcome=EVIL, reason=EVIL, jobs=[EVIL], trigger=None, decided_at=None, entry="1-0")
    assert_inert(h.trace_html(DeliveryTrace("github", EVIL, stored, None, EVIL)))
    rows = [{"id": EVIL, "pattern": EVIL, "tz": "UTC", "hosts": [EVIL], "next": EVIL, "last": None,
             "stalls": 0, "state": "active"}]
    assert_inert(h.schedules_html(rows, EVIL))
    waits = [{"job": EVIL, "target": EVIL, "conditions": [{"profile": EVIL}], "since": "x", "checks": 1,
              "faults": 0, "next": None}]
    assert_inert(h.waits_html(waits))
    assert_inert(h.page(EVIL, "", "", banner=EVIL))


def test_links_quote_every_segment_so_an_id_cannot_add_a_level() -> None:
    body = h.runs_html([RunRow(record("../../etc/passwd"), has_output=True)])
    assert 'href="/runs/..%2F..%2Fetc%2Fpasswd/output"' in body
    body = h.runs_html([RunRow(record('x" onmouseover="y'), has_output=True)])
    assert 'href="/runs/x%22%20onmouseover%3D%22y/output"' in body and 'onmouseover="' not in body
    delivery = Delivery(entry="1-0", forge="github", event="issues", delivery="a/b?c#d", received_at=1)
    assert 'href="/deliveries/github/a%2Fb%3Fc%23d"' in h.deliveries_html([delivery])


def test_a_run_without_captured_output_has_no_link() -> None:
    body = h.runs_html([RunRow(record("job-1"), has_output=False), RunRow(record("job-2"), has_output=True)])
    assert "/runs/job-1/output" not in body and 'href="/runs/job-2/output"' in body
    assert "2m05s" in body and "2026-12-01 10:02:05" in body


def test_empty_states_say_so() -> None:
    empty = Overview(queues=[], delayed_key="pd:delayed", delayed=0, dead_key="pd:dead", dead=0, hosts=[],
                     paused=False)
    assert "no live hosts" in h.overview_html(empty)
    assert "no runs recorded yet" in h.runs_html([])
    assert "no stored deliveries" in h.deliveries_html([])
    assert "no cron triggers in PI_TRIGGERS_FILE" in h.schedules_html([])
    assert "no job is waiting on a condition" in h.waits_html([])


def test_every_page_refreshes_itself_links_the_others_and_carries_no_script() -> None:
    for body in (h.runs_html([]), h.deliveries_html([]), h.waits_html([]), h.overview_html(None, "down")):
        assert '<meta http-equiv="refresh" content="5">' in body
        for path in ("/", "/runs", "/deliveries", "/schedules", "/waits"):
            assert f'href="{path}"' in body
        assert "<script" not in body


def test_the_banner_is_shown_only_when_given() -> None:
    assert 'class="banner"' not in h.waits_html([])
    assert h.REDIS_DOWN in h.waits_html([], h.REDIS_DOWN)


@pytest.mark.parametrize(("started", "ended", "shown"), [
    ("2026-12-01T10:00:00.000Z", "2026-12-01T10:00:04.200Z", "4.2s"),
    ("2026-12-01T10:00:00.000Z", "2026-12-01T11:02:03.000Z", "1h02m03s"),
    ("2026-12-01T10:00:00.000Z", "garbage", None),
    ("2026-12-01T10:00:05.000Z", "2026-12-01T10:00:00.000Z", None),
])
def test_duration(started: str, ended: str, shown: str | None) -> None:
    assert h.duration(started, ended) == shown


