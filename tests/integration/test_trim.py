"""Trimming with a real Redis: unfinished entries survive any cut, finished ones go, no entry is read."""

from __future__ import annotations

from pidispatch.common.keys import ROUTER_GROUP, WORKER_GROUP, Keys
from pidispatch.common.redis import Redis
from pidispatch.common.streams import ensure_group, read_group
from pidispatch.router.trim import trim_all, trim_events, trim_job_streams


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


async def _add(redis: Redis, stream: str, n: int) -> list[str]:
    return [_s(await redis.xadd(stream, {"n": str(i)})) for i in range(n)]


async def _oldest(redis: Redis, stream: str) -> str:
    return _s((await redis.xrange(stream, count=1))[0][0])


async def test_trim_never_removes_pending_or_undelivered_entries_of_a_stream_over_its_cap(
    redis: Redis, keys: Keys
) -> None:
    stream = keys.events
    ids = await _add(redis, stream, 100)
    await trim_events(redis, keys, 50, approximate=False)  # marks (100 added, ids[99])
    ids += await _add(redis, stream, 200)
    assert await trim_events(redis, keys, 50, approximate=False) == (None, 0)  # no group: all unread
    assert await redis.xlen(stream) == 300

    await ensure_group(redis, stream, ROUTER_GROUP)
    assert await trim_events(redis, keys, 50, approximate=False) == (None, 0)  # nothing delivered yet
    read = await read_group(redis, ROUTER_GROUP, "c", {stream: ">"}, count=250)
    await redis.xack(stream, ROUTER_GROUP, *[entry_id for _, entry_id, _ in read[:50]])
    # The cap (the mark 250 additions back) would cut at ids[99]; the oldest pending entry stops it.
    assert await trim_events(redis, keys, 50, approximate=False) == (ids[50], 50)
    assert await _oldest(redis, stream) == ids[50]

    await redis.xack(stream, ROUTER_GROUP, *[entry_id for _, entry_id, _ in read[50:]])
    ids += await _add(redis, stream, 100)  # 400 added: the mark at 300 is now a cap
    assert await trim_events(redis, keys, 50, approximate=False) == (ids[249], 199)  # last delivered
    assert await redis.xlen(stream) == 151


async def test_events_keep_about_their_cap_of_finished_entries(redis: Redis, keys: Keys) -> None:
    stream = keys.events
    await ensure_group(redis, stream, ROUTER_GROUP)
    for _ in range(6):  # traffic between passes, each page read and acked
        await _add(redis, stream, 100)
        read = await read_group(redis, ROUTER_GROUP, "c", {stream: ">"}, count=1000)
        await redis.xack(stream, ROUTER_GROUP, *[entry_id for _, entry_id, _ in read])
        await trim_events(redis, keys, 250, approximate=False)
    # A cut keeps at least the cap, and at most what came in since the mark it used.
    assert 250 <= await redis.xlen(stream) <= 350
    assert int(await redis.get(keys.events_trimmed) or 0) == 600 - await redis.xlen(stream)


async def test_trimming_reads_no_entry(redis: Redis, keys: Keys) -> None:
    stream = keys.events
    await ensure_group(redis, stream, ROUTER_GROUP)
    for _ in range(3):
        await _add(redis, stream, 200)
        read = await read_group(redis, ROUTER_GROUP, "c", {stream: ">"}, count=1000)
        await redis.xack(stream, ROUTER_GROUP, *[entry_id for _, entry_id, _ in read])
        await trim_all(redis, keys, 100)

    async def ranges() -> int:
        stats = await redis.info("commandstats")
        return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("xrange", "xrevrange"))

    before = await ranges()
    await _add(redis, stream, 200)
    await trim_all(redis, keys, 100)
    assert await ranges() == before
    assert await redis.xlen(stream) < 600  # and it did trim


async def test_a_bounded_step_removes_whole_nodes_and_never_past_the_cut(redis: Redis, keys: Keys) -> None:
    stream = keys.events
    await ensure_group(redis, stream, ROUTER_GROUP)
    ids = await _add(redis, stream, 1000)
    await trim_events(redis, keys, 100)
    ids += await _add(redis, stream, 1000)
    read = await read_group(redis, ROUTER_GROUP, "c", {stream: ">"}, count=2000)
    await redis.xack(stream, ROUTER_GROUP, *[entry_id for _, entry_id, _ in read])
    minid, removed = await trim_events(redis, keys, 100)  # approximate: whole nodes only
    assert minid == ids[999] and removed > 0
    oldest = await _oldest(redis, stream)
    assert ids.index(oldest) <= 999  # nothing at or past the cut went
    assert await redis.xlen(stream) == 2000 - removed


async def test_job_streams_shrink_once_their_entries_are_acked(redis: Redis, keys: Keys) -> None:
    shared, host = keys.jobs, keys.host_jobs("w1")
    await redis.sadd(keys.hosts, "w1")
    ids: dict[str, list[str]] = {}
    for stream in (shared, host):
        await ensure_group(redis, stream, WORKER_GROUP)
        ids[stream] = await _add(redis, stream, 400)
        read = await read_group(redis, WORKER_GROUP, "w", {stream: ">"}, count=350)
        await redis.xack(stream, WORKER_GROUP, *[entry_id for _, entry_id, _ in read[:300]])
    await trim_all(redis, keys, 100)
    for stream in (shared, host):
        assert await redis.xlen(stream) < 400  # acked entries went, whole nodes at a time
        # The 50 read and not acked (running jobs) and the 50 never delivered all stay.
        left = [_s(entry_id) for entry_id, _ in await redis.xrange(stream, ids[stream][300], "+")]
        assert left == ids[stream][300:]
        assert len(await redis.xpending_range(stream, WORKER_GROUP, "-", "+", 100)) == 50
    assert await trim_job_streams(redis, keys, [shared], approximate=False) == 0  # nothing more to cut
