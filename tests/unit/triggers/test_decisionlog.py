"""The decision log's lines: one readable member per decision, parsed back field for field."""

from __future__ import annotations

import pytest

from pidispatch.triggers import decisionlog
from pidispatch.triggers.decision import Subject
from pidispatch.triggers.decisionlog import Logged

AT = 1_764_583_200_123  # 2025-12-01T10:00:00.123Z


def test_a_queued_decision_reads_as_one_line_and_parses_back() -> None:
    d = decisionlog.logged(
        Subject("issues", "labeled", "acme/app#7"), "github", "d-1", "1764583200000-0", "queued", AT,
        jobs=["gh-d-1"], streams=["pd:jobs:host-a"], trigger=0,
    )
    line = decisionlog.line(d)
    assert line == (
        "2025-12-01T10:00:00.123Z queued github issues/labeled acme/app#7 delivery=d-1 jobs=gh-d-1 "
        "stream=pd:jobs:host-a trigger=0 entry=1764583200000-0"
    )
    assert decisionlog.parse(line, float(AT)) == d


def test_a_deduplicated_decision_names_why_and_the_surviving_job_but_no_stream() -> None:
    d = decisionlog.logged(
        Subject("issues", "labeled", None), "github", "d-2", "1-0", "deduplicated", AT,
        reason="semantic-window", jobs=["gh-d-1"], streams=["-"], trigger=0, replay=True,
    )
    line = decisionlog.line(d)
    assert " - delivery=d-2 reason=semantic-window jobs=gh-d-1 trigger=0 replay=yes entry=1-0" in line
    assert decisionlog.parse(line, float(AT)) == d


@pytest.mark.parametrize("odd", ["My Project/repo!1", "100%/x#1"])
def test_a_value_with_a_space_or_percent_stays_one_token_and_comes_back_whole(odd: str) -> None:
    about = Subject("git.pullrequest.created", "created", odd)
    d = decisionlog.logged(about, "azure", "d-3", "1-0", "dropped", AT, reason="no-trigger")
    line = decisionlog.line(d)
    assert len(line.split(" ")) == 8
    assert decisionlog.parse(line, float(AT)) == d


def test_a_member_the_log_did_not_write_is_skipped() -> None:
    assert decisionlog.parse("hello world", 1.0) is None
    assert decisionlog.parse("", 1.0) is None


def test_every_field_has_a_place_in_the_line() -> None:
    # A field added to Logged without a place in line() and parse() would be lost in Redis.
    full = Logged(decided_at=AT, outcome="queued", forge="f", event="e", action="a", target="t", delivery="d",
                  reason="r", jobs=("j1", "j2"), streams=("s1", "s2"), trigger=3, replay=True, healed=True,
                  entry="1-0")
    assert decisionlog.parse(decisionlog.line(full), float(AT)) == full


def test_a_delivery_the_healer_asked_for_is_marked_healed() -> None:
    d = decisionlog.logged(Subject("issues", "labeled", "acme/app#7"), "github", "d-4", "1-0", "queued", AT,
                           jobs=["gh-d-4"], streams=["pd:jobs"], trigger=0, healed=True)
    line = decisionlog.line(d)
    assert line.endswith(" trigger=0 healed=yes entry=1-0")
    assert decisionlog.parse(line, float(AT)) == d
