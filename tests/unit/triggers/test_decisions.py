"""A decision record round-trips through its compact value, and its day and expiry follow the entry id."""

from __future__ import annotations

import msgspec
import pytest

from pidispatch.common.dedup import DAY_MS
from pidispatch.common.models import Job
from pidispatch.triggers import decisions, jobs
from pidispatch.triggers.decisions import Decided

FORGE = jobs.FORGES[0].name
DELIVERY = "72d3162e-1111-2222-3333-444455556666"
OWN = jobs.job_id(FORGE, DELIVERY)
DAY = 20_423
ENTRY = f"{DAY * DAY_MS + 5 * 3600 * 1000}-3"  # 05:00 UTC on day 20,423


def decided(
    outcome: str = "queued", jobs_: list[str] | None = None, reason: str = "", trigger: int | None = 0,
    decided_at: int | None = DAY * DAY_MS + 5,
) -> Decided:
    return Decided(outcome, reason, [OWN] if jobs_ is None else jobs_, trigger, decided_at, ENTRY)


def stored_jobs(value: bytes) -> object:
    return msgspec.msgpack.decode(value)[2]


def round_trip(d: Decided) -> Decided:
    return decisions.decode(FORGE, DELIVERY, decisions.encode(FORGE, DELIVERY, d))


def test_the_own_job_is_stored_as_a_count_and_comes_back_as_its_id() -> None:
    d = decided()
    value = decisions.encode(FORGE, DELIVERY, d)
    assert stored_jobs(value) == 1
    assert msgspec.msgpack.decode(value) == ["queued", "", 1, 0, d.decided_at, ENTRY]
    assert round_trip(d) == d


def test_replicas_are_stored_as_a_count_named_as_fan_out_names_them() -> None:
    job = Job(id=OWN, kind=FORGE, repo="o/r", replicas=3)
    ids = [j.id for j in jobs.fan_out(job)]
    assert decisions.own_ids(FORGE, DELIVERY, 3) == ids
    d = decided(jobs_=ids)
    assert stored_jobs(decisions.encode(FORGE, DELIVERY, d)) == 3
    assert round_trip(d) == d


def test_another_deliverys_job_is_stored_as_its_id() -> None:
    survivor = jobs.job_id(FORGE, "another-delivery")
    d = decided("deduplicated", [survivor])
    assert stored_jobs(decisions.encode(FORGE, DELIVERY, d)) == [survivor]
    assert round_trip(d) == d
    # Own ids out of their order, or only some replicas, are not "the own jobs" either.
    partial = decided(jobs_=[f"{OWN}-r2", f"{OWN}-r1"])
    assert stored_jobs(decisions.encode(FORGE, DELIVERY, partial)) == partial.jobs
    assert round_trip(partial) == partial


@pytest.mark.parametrize(
    "d",
    [
        decided("dropped", [], reason="no-allowlisted-label", trigger=None),
        decided("pending", [], reason="lookup-failed:status-502", trigger=None),
        decided("dead", [], reason="max-deliveries", trigger=None, decided_at=None),
    ],
)
def test_undecided_and_dropped_entries_round_trip(d: Decided) -> None:
    assert stored_jobs(decisions.encode(FORGE, DELIVERY, d)) == 0
    assert round_trip(d) == d


def test_an_entry_without_a_known_forge_keeps_its_ids_as_they_are() -> None:
    d = decided(jobs_=["x-1"])
    assert decisions.decode("?", "?", decisions.encode("?", "?", d)) == d


def test_own_jobs_drops_and_lookup_failures_stay_under_the_listpack_limit() -> None:
    # Redis keeps a hash compact while every value is at most 64 bytes (hash-max-listpack-value).
    common = [
        decided(jobs_=decisions.own_ids(FORGE, DELIVERY, 9), trigger=1999),
        decided("dropped", [], reason="review-author-not-allowed", trigger=None),
        decided("pending", [], reason="lookup-failed:status-502", trigger=None),
        decided("dead", [], reason="processing-failed", trigger=None),
    ]
    assert max(len(decisions.encode(FORGE, DELIVERY, d)) for d in common) <= 64


def test_the_day_is_the_entry_ids_and_a_bucket_lives_seven_full_days_after_it() -> None:
    assert decisions.entry_day(ENTRY) == DAY
    assert decisions.entry_day(f"{(DAY + 1) * DAY_MS - 1}-0") == DAY
    assert decisions.expire_at_s(DAY) * 1000 == (DAY + 8) * DAY_MS
    assert decisions.PROBED_DAYS == 8  # a read by delivery on day DAY + 7 still looks at DAY


def test_an_enqueued_entry_is_queued_unless_every_job_is_carried_by_another() -> None:
    q = decisions.enqueued("5-0", 2, ["j1"], ["pd:jobs"], [["queued", "9-0"]])
    assert (q.outcome, q.reason, q.jobs, q.streams, q.trigger) == ("queued", "", ("j1",), ("pd:jobs",), 2)
    # Its own job from an earlier try of this same entry (a re-processed page) is still queued.
    again = decisions.enqueued("5-0", 2, ["j1"], ["pd:jobs"], [["duplicate", "j1", "5-0"]])
    assert (again.outcome, again.streams) == ("queued", ("pd:jobs",))
    # The same job id from another entry of the delivery (a replay): deduplicated by job id.
    replay = decisions.enqueued("7-0", 2, ["j1"], ["pd:jobs"], [["duplicate", "j1", "5-0"]])
    assert (replay.outcome, replay.reason, replay.jobs) == ("deduplicated", "job-id", ("j1",))
    window = decisions.enqueued("7-0", 2, ["j1"], ["pd:jobs"], [["deduplicated", "j0"]])
    assert (window.outcome, window.reason, window.jobs, window.streams) == (
        "deduplicated", "semantic-window", ("j0",), ("-",)
    )
    # A job hash gone (no origin): the job id exists, nothing says whose; counted as queued, as before.
    assert decisions.enqueued("7-0", 2, ["j1"], ["pd:jobs"], [["duplicate", "j1", ""]]).outcome == "queued"
    replies = [["queued", "1-0"], ["deduplicated", "j0"]]
    mixed = decisions.enqueued("7-0", 2, ["j1", "j2"], ["a", "b"], replies)
    assert (mixed.outcome, mixed.jobs, mixed.streams) == ("queued", ("j1", "j0"), ("a", "-"))
