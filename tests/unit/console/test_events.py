"""The ``events`` listing from the decision log and the entries still waiting for a decision."""

from __future__ import annotations

from typing import Any

from pidispatch.console.events import listing, shown_outcome
from pidispatch.triggers.decisionlog import Logged


def _line(entry: str, outcome: str, at: int, **extra: Any) -> Logged:
    return Logged(decided_at=at, outcome=outcome, forge="github", event="issues", delivery=f"d-{entry}",
                  entry=entry, **extra)


def test_each_entry_shows_its_newest_decision_and_waiting_entries_show_undecided() -> None:
    decided = [  # newest first, as the log reads
        _line("30-0", "queued", 40, jobs=("gh-d",)),
        _line("20-0", "dropped", 35, reason="no-allowlisted-label"),
        _line("30-0", "pending", 31, reason="lookup-failed:timeout"),
    ]
    waiting = [("50-0", {"forge": "github", "event": "issues", "delivery": "d-new", "receivedAt": "50"}),
               ("10-0", {"forge": "github", "event": "push", "delivery": "d-old", "received_at": "10",
                         "replayed_at": "11"})]
    rows = listing(decided, waiting, limit=10)
    assert [(r.entry, r.outcome) for r in rows] == [
        ("50-0", None), ("30-0", "queued"), ("20-0", "dropped"), ("10-0", None)
    ]
    assert rows[1].received_at == 30 and rows[1].jobs == ["gh-d"]
    # An older receiver's names still read: its receive time, and that it was a replay.
    assert (rows[3].received_at, rows[3].replay, shown_outcome(rows[3])) == (10, True, "replay: not decided")
    assert [r.entry for r in listing(decided, waiting, limit=2)] == ["50-0", "30-0"]


def test_an_entry_waiting_that_was_decided_meanwhile_shows_the_decision() -> None:
    rows = listing([_line("30-0", "queued", 40)], [("30-0", {"delivery": "d-30-0"})], limit=5)
    assert [(r.entry, r.outcome) for r in rows] == [("30-0", "queued")]
