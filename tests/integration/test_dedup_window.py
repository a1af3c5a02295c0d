"""Exact dedup with a real Redis: a redelivery inside the window is refused, one after it is accepted."""

from __future__ import annotations

from pidispatch.common.dedup import DAY_MS, WINDOW_DAYS, remembered
from pidispatch.common.keys import DEDUP_WINDOW_MS, Keys
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.scripts import ENQUEUE, INGEST

FIELDS = ["forge", "github", "event", "issues", "delivery", "d-1", "received_at", "0", "body", "{}"]


async def _ingest(redis: Redis, keys: Keys, delivery: str, at_ms: int) -> bool:
    seen = remembered(keys.seen, f"github:{delivery}", at_ms)
    entry = await INGEST(redis, [*seen.buckets, keys.events], [seen.digest, seen.expire_at_s, *FIELDS])
    return entry is not None


async def _enqueue(redis: Redis, keys: Keys, job_id: str, semantic: str, at_ms: int) -> str:
    known = remembered(keys.jobid, job_id, at_ms)
    status, _ = await ENQUEUE(
        redis, [*known.buckets, keys.dedup(semantic), keys.jobs],
        [job_id, known.digest, known.expire_at_s, DEDUP_WINDOW_MS, "id", job_id],
    )
    return status.decode()


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
    first = remembered(keys.seen, "github:x", today)
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
