"""Decision records in a real Redis: written in a MULTI, found by entry or by delivery within their week,
gone after it, and each bucket expiring at the end of its day + 7."""

from __future__ import annotations

import time

from pidispatch.common.dedup import DAY_MS
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.triggers import decisionlog, decisions, jobs
from pidispatch.triggers.decision import Subject
from pidispatch.triggers.decisions import RouteOutcome
from tests.support.decisions import bucket_of

FORGE = jobs.FORGES[0].name
LOG = decisions.Logging(Subject("issues", "labeled", "acme/app#1"), replay=False)


def entry_at(ms: int, seq: int = 0) -> str:
    return f"{ms}-{seq}"


async def write(redis: Redis, keys: Keys, delivery: str, entry: str, outcome: RouteOutcome) -> None:
    page = decisions.Page()
    decided_at = int(entry.partition("-")[0]) + 7
    decisions.record(page, keys, FORGE, delivery, entry, outcome, decided_at, LOG)
    await decisions.write(redis, keys, page, 100)


async def test_a_decision_is_found_by_its_entry_and_by_its_delivery(redis: Redis, keys: Keys) -> None:
    entry = entry_at(now_ms())
    own = decisions.own_ids(FORGE, "d-1", 2)
    await write(redis, keys, "d-1", entry, RouteOutcome("queued", jobs=tuple(own), trigger=4))
    by_entry = await decisions.read(redis, keys, FORGE, "d-1", entry)
    assert by_entry == await decisions.read(redis, keys, FORGE, "d-1", None)
    assert by_entry is not None
    assert (by_entry.outcome, by_entry.reason, by_entry.jobs, by_entry.trigger) == ("queued", "", own, 4)
    assert (by_entry.decided_at, by_entry.entry) == (int(entry.partition("-")[0]) + 7, entry)
    assert await decisions.read(redis, keys, FORGE, "d-2", None) is None


async def test_each_entry_reads_its_own_days_decision_and_by_delivery_alone_the_newest_wins(
    redis: Redis, keys: Keys
) -> None:
    today = now_ms()
    old, new = entry_at(today - 2 * DAY_MS), entry_at(today)
    survivor = jobs.job_id(FORGE, "d-0")
    await write(redis, keys, "d-1", old, RouteOutcome("dropped", reason="no-allowlisted-label"))
    await write(redis, keys, "d-1", new, RouteOutcome("deduplicated", "semantic-window", (survivor,), 0))
    asked = [("d-1", new), ("d-1", old), ("d-3", new)]
    found = [await decisions.read(redis, keys, FORGE, delivery, entry) for delivery, entry in asked]
    assert [d.outcome if d else None for d in found] == ["deduplicated", "dropped", None]
    assert found[0] is not None and (found[0].jobs, found[0].reason) == ([survivor], "semantic-window")
    latest = await decisions.read(redis, keys, FORGE, "d-1", None)
    assert latest is not None and latest.entry == new


async def test_a_read_by_delivery_finds_a_decision_inside_its_week_and_not_after(
    redis: Redis, keys: Keys
) -> None:
    day = now_ms() // DAY_MS - 3
    entry = entry_at(day * DAY_MS + 3_600_000)
    await write(redis, keys, "d-1", entry, RouteOutcome("dropped", reason="self"))
    last_probe = (day + 8) * DAY_MS - 1  # the last moment of day + 7
    found = await decisions.read(redis, keys, FORGE, "d-1", None, now_ms=last_probe)
    assert found is not None and found.reason == "self"
    assert await decisions.read(redis, keys, FORGE, "d-1", None, now_ms=last_probe + 1) is None


async def test_buckets_expire_at_the_end_of_their_day_plus_seven(redis: Redis, keys: Keys) -> None:
    day = now_ms() // DAY_MS - 2
    entry = entry_at(day * DAY_MS + 1)
    await write(redis, keys, "d-1", entry, RouteOutcome("pending", reason="lookup-failed:status-502"))
    bucket = bucket_of(keys, FORGE, "d-1", entry)
    expected_s = (day + 8) * DAY_MS / 1000 - time.time()
    assert abs(await redis.ttl(bucket) - expected_s) <= 2
    assert (await redis.object("encoding", bucket)) in (b"listpack", b"ziplist")  # compact, as sized
    # Past its week when written: EXPIREAT in the past removes the bucket at once.
    stale = entry_at((now_ms() // DAY_MS - 8) * DAY_MS)
    await write(redis, keys, "d-2", stale, RouteOutcome("dropped", reason="self"))
    assert not await redis.exists(bucket_of(keys, FORGE, "d-2", stale))


async def test_a_parked_entry_is_dead_with_its_pending_time_and_last_reason(redis: Redis, keys: Keys) -> None:
    entry = entry_at(now_ms())
    await write(redis, keys, "d-1", entry, RouteOutcome("pending", reason="lookup-failed:network"))
    assert await decisions.parked_reason(redis, keys, FORGE, "d-1", entry) == "lookup-failed"
    assert await decisions.parked_reason(redis, keys, FORGE, "d-2", entry) == "max-deliveries"
    pending = await decisions.read(redis, keys, FORGE, "d-1", entry)
    for delivery, reason in [("d-1", "lookup-failed"), ("d-2", "malformed-event")]:
        await decisions.record_dead(redis, keys, FORGE, delivery, entry, reason, LOG, 100)
    dead = await decisions.read(redis, keys, FORGE, "d-1", entry)
    assert pending is not None and dead is not None
    assert (dead.outcome, dead.reason, dead.jobs, dead.trigger) == ("dead", "lookup-failed", [], None)
    assert dead.decided_at == pending.decided_at and dead.entry == entry
    never = await decisions.read(redis, keys, FORGE, "d-2", None)
    assert never is not None and (never.outcome, never.decided_at) == ("dead", None)
    assert 0 < await redis.ttl(bucket_of(keys, FORGE, "d-2", entry)) <= 8 * 24 * 3600
    logged = await decisionlog.newest(redis, keys, 10)
    assert sorted((d.delivery, d.outcome, d.reason) for d in logged) == [
        ("d-1", "dead", "lookup-failed"), ("d-1", "pending", "lookup-failed:network"),
        ("d-2", "dead", "malformed-event"),
    ]
