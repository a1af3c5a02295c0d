"""Exact dedup with a real Redis: a redelivery inside the window is refused, one after it is accepted."""

from __future__ import annotations

from pidispatch.common.dedup import DAY_MS, WINDOW_DAYS, remembered
from pidispatch.common.keys import DEDUP_WINDOW_MS, JOB_STATE_TTL_S, Keys
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.scripts import ENQUEUE, INGEST

FIELDS = ["forge", "github", "event", "issues", "delivery", "d-1", "received_at", "0", "body", "{}"]


async def _ingest(redis: Redis, keys: Keys, delivery: str, at_ms: int) -> bool:
    seen = remembered(keys.seen_window, f"github:{delivery}", at_ms)
    entry = await INGEST(redis, [*seen.buckets, keys.events], [seen.digest, seen.expire_at_s, *FIELDS])
    return entry is not None


async def _enqueue_reply(
    redis: Redis, keys: Keys, job_id: str, semantic: str, at_ms: int, event_entry: str = ""
) -> list[str]:
    known = remembered(keys.jobid_window, job_id, at_ms)
    reply = await ENQUEUE(
        redis, [*known.buckets, keys.dedup(semantic), keys.job(job_id), keys.jobs],
        [job_id, known.digest, known.expire_at_s, DEDUP_WINDOW_MS, JOB_STATE_TTL_S, event_entry,
         "id", job_id],
    )
    return [r.decode() for r in reply]


async def _enqueue(redis: Redis, keys: Keys, job_id: str, semantic: str, at_ms: int) -> str:
    return (await _enqueue_reply(redis, keys, job_id, semantic, at_ms))[0]


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


async def test_a_digest_spanning_two_stored_ones_is_not_a_match(redis: Redis, keys: Keys) -> None:
    today = now_ms()
    first = remembered(keys.seen_window, "github:x", today)
    # Two digests whose junction spells a third: only a digest that starts on a boundary may match.
    await redis.set(first.buckets[0], b"\x00" * 3 + first.digest + b"\x00" * 3)
    assert await _ingest(redis, keys, "x", today)


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
