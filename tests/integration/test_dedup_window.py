"""Exact dedup with a real Redis: a redelivery inside the window is refused, one after it is accepted, a
shard's table grows and reuses the slots of days gone, and an upgrade's old day buckets are still read."""

from __future__ import annotations

import time

import msgspec

from pidispatch.common.dedup import DAY_MS, LEGACY_SHARDS, WINDOW_DAYS, digest, remembered, upgrade_until
from pidispatch.common.keys import DEDUP_WINDOW_MS, JOB_STATE_TTL_S, Keys
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.scripts import ENQUEUE, INGEST
from tests.support.dedup import table_slots

FIELDS = ["forge", "github", "event", "issues", "delivery", "d-1", "received_at", "0", "body", "{}"]


async def _ingest(redis: Redis, keys: Keys, delivery: str, at_ms: int) -> bool:
    seen = remembered(keys.deliveries, f"github:{delivery}", at_ms)
    entry = await INGEST(redis, [*seen.keys, keys.events], [*seen.args, *FIELDS])
    return entry is not None


async def _enqueue_reply(
    redis: Redis, keys: Keys, job_id: str, semantic: str, at_ms: int, event_entry: str = "", *,
    before: bool = False,
) -> list[str]:
    known = remembered(keys.jobids, job_id, at_ms, before=before)
    reply = await ENQUEUE(
        redis, [*known.keys, keys.dedup(semantic), keys.job(job_id), keys.jobs],
        [*known.args, job_id, DEDUP_WINDOW_MS, JOB_STATE_TTL_S, event_entry,
         msgspec.msgpack.encode(["id", job_id])],
    )
    return [r.decode() for r in reply]


async def _enqueue(
    redis: Redis, keys: Keys, job_id: str, semantic: str, at_ms: int, *, before: bool = False
) -> str:
    return (await _enqueue_reply(redis, keys, job_id, semantic, at_ms, before=before))[0]


async def test_a_redelivery_inside_the_window_is_refused_and_after_it_accepted(
    redis: Redis, keys: Keys
) -> None:
    today = now_ms()
    assert await _ingest(redis, keys, "d-1", today)
    assert not await _ingest(redis, keys, "d-1", today)
    assert not await _ingest(redis, keys, "d-1", today + WINDOW_DAYS * DAY_MS)  # the window's last day
    assert await _ingest(redis, keys, "d-1", today + (WINDOW_DAYS + 1) * DAY_MS)  # past it: new again
    assert await _ingest(redis, keys, "d-2", today)  # another delivery in the same shard's bucket
    assert await redis.xlen(keys.events) == 3


async def _ingest_into(redis: Redis, keys: Keys, table: str, identity: str, at_ms: int) -> bool:
    """INGEST with every identity kept in one table: how a busy shard's table fills."""
    seen = remembered(keys.deliveries, identity, at_ms)
    entry = await INGEST(redis, [table, keys.events], [*seen.args, *FIELDS])
    return entry is not None


async def test_a_busy_table_grows_and_forgets_nothing_inside_the_window(redis: Redis, keys: Keys) -> None:
    table, today = f"{keys.prefix}:table-under-test", now_ms()
    ids = [f"github:d-{n}" for n in range(3000)]
    for n, identity in enumerate(ids):
        assert await _ingest_into(redis, keys, table, identity, today + (n % 20) * DAY_MS)
    size, slots = table_slots(await redis.get(table))  # every digest in its neighbourhood, once
    assert len(slots) == 3000 and 3000 < size <= 3000 * 4
    late = today + 19 * DAY_MS
    assert not any([await _ingest_into(redis, keys, table, identity, late) for identity in ids])


async def test_slots_of_days_out_of_the_window_are_used_again_and_the_table_does_not_grow(
    redis: Redis, keys: Keys
) -> None:
    table, first = f"{keys.prefix}:table-under-test", now_ms()
    for n in range(500):
        assert await _ingest_into(redis, keys, table, f"github:old-{n}", first)
    length = await redis.strlen(table)
    later = first + (WINDOW_DAYS + 1) * DAY_MS  # every one of them has left the window
    for n in range(500):
        assert await _ingest_into(redis, keys, table, f"github:new-{n}", later)
    assert await redis.strlen(table) == length
    assert later // DAY_MS in set(table_slots(await redis.get(table))[1].values())
    assert await _ingest_into(redis, keys, table, "github:old-7", later)  # forgotten: new again
    # The table lives as long as its newest day counts.
    expires_in = (later // DAY_MS + WINDOW_DAYS + 1) * DAY_MS // 1000 - int(time.time())
    assert expires_in - 2 <= await redis.ttl(table) <= expires_in


async def test_an_upgraded_installations_job_id_buckets_are_read_until_they_expire(
    redis: Redis, keys: Keys
) -> None:
    today, spaces = now_ms(), (keys.deliveries, keys.jobids)
    shard, stored = digest("gh-before")
    shard %= LEGACY_SHARDS  # the day buckets had 16,384 shards
    # What the layout before left: digests end to end in a string per day and shard.
    await redis.set(f"{keys.prefix}:jobid:{today // DAY_MS - WINDOW_DAYS}:{shard}", b"\x01" * 6 + stored)
    until = await upgrade_until(redis, keys.dedup_layout, spaces, today)
    assert 0 < until - today <= (WINDOW_DAYS + 1) * DAY_MS
    assert abs(await upgrade_until(redis, keys.dedup_layout, spaces, today) - until) < 1000  # a restart
    assert await _enqueue(redis, keys, "gh-before", "o/r#1:fix", today, before=True) == "duplicate"
    # A digest spanning two stored ones is not a match.
    shard, stored = digest("gh-spanning")
    shard %= LEGACY_SHARDS
    await redis.set(f"{keys.prefix}:jobid:{today // DAY_MS}:{shard}", b"\x00" * 3 + stored + b"\x00" * 3)
    assert await _enqueue(redis, keys, "gh-spanning", "o/r#2:fix", today, before=True) == "queued"


async def test_a_fresh_installation_reads_no_old_buckets(redis: Redis, keys: Keys) -> None:
    assert await upgrade_until(redis, keys.dedup_layout, (keys.deliveries, keys.jobids), now_ms()) == 0
    assert not await redis.exists(keys.dedup_upgraded) and await redis.exists(keys.dedup_layout)


async def test_a_job_id_is_queued_once_in_its_window(redis: Redis, keys: Keys) -> None:
    today = now_ms()
    assert await _enqueue(redis, keys, "gh-1", "o/r#1:fix", today) == "queued"
    assert await _enqueue(redis, keys, "gh-1", "o/r#1:fix", today) == "duplicate"
    await redis.delete(keys.dedup("o/r#1:fix"))  # the semantic window (minutes) has passed
    assert await _enqueue(redis, keys, "gh-1", "o/r#1:fix", today + DAY_MS) == "duplicate"
    assert await _enqueue(redis, keys, "gh-1", "o/r#1:fix", today + (WINDOW_DAYS + 1) * DAY_MS) == "queued"
    assert await redis.xlen(keys.jobs) == 2


async def test_a_queued_job_says_where_it_is_and_a_duplicate_which_event_made_it(
    redis: Redis, keys: Keys
) -> None:
    today = now_ms()
    status, entry = await _enqueue_reply(redis, keys, "gh-7", "o/r#7:fix", today, event_entry="5-1")
    assert status == "queued"
    state = await redis.hgetall(keys.job("gh-7"))
    assert state == {b"state": b"queued", b"stream": keys.jobs.encode(), b"entry": entry.encode(),
                     b"eventEntry": b"5-1"}
    assert [e.decode() for e, _ in await redis.xrange(keys.jobs, entry, entry)] == [entry]
    assert 0 < await redis.ttl(keys.job("gh-7")) <= JOB_STATE_TTL_S
    # A re-processed event entry learns the job already exists, and from which entry it came.
    assert await _enqueue_reply(redis, keys, "gh-7", "o/r#7:fix", today, event_entry="6-0") == [
        "duplicate", "gh-7", "5-1"
    ]
    assert await redis.hget(keys.job("gh-7"), "eventEntry") == b"5-1"  # the duplicate wrote nothing
    await redis.delete(keys.job("gh-7"))  # its state expired: the duplicate answer still has three parts
    assert await _enqueue_reply(redis, keys, "gh-7", "o/r#7:fix", today) == ["duplicate", "gh-7", ""]
    # Semantically deduplicated: no hash for the job that was never queued.
    assert await _enqueue_reply(redis, keys, "gh-8", "o/r#7:fix", today) == ["deduplicated", "gh-7"]
    assert not await redis.exists(keys.job("gh-8"))
