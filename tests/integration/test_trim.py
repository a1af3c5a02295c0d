"""Trimming with a real Redis: unfinished entries survive any cut, finished ones go, no entry is read."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from pidispatch.common.keys import ROUTER_GROUP, WORKER_GROUP, Keys
from pidispatch.common.models import Event
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.streams import ensure_group, read_group
from pidispatch.router.trim import trim_all, trim_events, trim_job_streams
from tests.support.payloads import FIXTURES
from tests.support.polling import wait_for
from tests.support.processes import ServiceProcess


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


async def test_a_backlog_ten_times_the_cap_is_at_the_cap_within_a_minute_of_the_router_catching_up(
    redis: Redis, keys: Keys, base_env: dict[str, str], tmp_path: Path
) -> None:
    # 2,000 deliveries (an outage, a router down) arrive before the router reads one; nothing comes after.
    if int((await redis.info("server"))["redis_version"].split(".")[0]) < 7:  # no entries-read to mark
        if os.environ.get("PD_REQUIRE_REDIS7") == "1":
            pytest.fail("PD_REQUIRE_REDIS7=1 but the test Redis is older than 7 (install redis-server)")
        pytest.skip("Redis 6.2 reports no entries-read: a backlog is cut only after the cap more arrivals")
    cap = 200
    rule = {"on": {"type": "label", "any": ["never-put-on-anything"]}, "run": {"kind": "github", "flow": "x"}}
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": [rule]}))
    body = (FIXTURES / "github" / "issues.labeled.json").read_text()
    async with redis.pipeline(transaction=False) as pipe:
        for n in range(10 * cap):
            event = Event(forge="github", event="issues", delivery=f"d-{n}", received_at=now_ms(), body=body)
            pipe.xadd(keys.events, event.to_fields())  # type: ignore[arg-type]
        await pipe.execute()
    router = ServiceProcess("router", {**base_env, "PD_EVENTS_MAXLEN": str(cap)}, tmp_path / "router.log")
    router.start()
    try:
        await wait_for(lambda: _caught_up(redis, keys, 10 * cap), 60, what="the router through the backlog")
        caught_up = time.monotonic()
        # Whole nodes go (stream-node-max-entries, 100 by default): the cap, plus less than a node, plus
        # the marks' spacing (cap / 64).
        length = await wait_for(lambda: _within(redis, keys, cap, cap + 100 + cap // 64), 60,
                                what="pd:events back at its cap")
        took = time.monotonic() - caught_up
    finally:
        router.stop()
    assert length >= cap and took < 60


async def _caught_up(redis: Redis, keys: Keys, total: int) -> bool:
    groups = [g for g in await redis.xinfo_groups(keys.events) if _s(g["name"]) == ROUTER_GROUP]
    return bool(groups) and groups[0].get("entries-read") == total and int(groups[0]["pending"]) == 0


async def _within(redis: Redis, keys: Keys, low: int, high: int) -> int | None:
    length = int(await redis.xlen(keys.events))
    return length if low <= length <= high else None
