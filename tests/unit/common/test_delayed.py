"""Delayed jobs against a real redis-server: schedule (ack + delay in one step), promotion by the server's
clock, no double promotion under concurrency, the promoter loop, and lookup/removal for cancel."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import structlog

from pidispatch.common import delayed
from pidispatch.common.delayed import UNUSABLE_ENVELOPE, Envelope
from pidispatch.common.keys import JOB_STATE_TTL_S, WORKER_GROUP, Keys
from pidispatch.common.redis import Redis, create_redis
from pidispatch.common.streams import ensure_group, read_group
from tests.support.polling import wait_for
from tests.support.processes import RedisProcess


def entry_fields(job_id: str, attempt: int = 2, **extra: str) -> dict[str, str]:
    body = json.dumps({"id": job_id, "kind": "github", "repo": "Codertocat/Hello-World"})
    return {"id": job_id, "kind": "github", "repo": "Codertocat/Hello-World", "attempt": str(attempt),
            "job": body, **extra}


async def server_ms(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return seconds * 1000 + micros // 1000


async def pending_entry(redis: Redis, keys: Keys, job_id: str) -> str:
    """A job entry read by a consumer of the worker group, so it is pending as a worker would hold it."""
    await ensure_group(redis, keys.jobs, WORKER_GROUP)
    await redis.xadd(keys.jobs, entry_fields(job_id, attempt=1))
    [(_, entry_id, _)] = await read_group(redis, WORKER_GROUP, "w1", {keys.jobs: ">"}, count=1)
    return entry_id


async def schedule_entry(redis: Redis, keys: Keys, job_id: str, delay_ms: int) -> int | None:
    entry_id = await pending_entry(redis, keys, job_id)
    return await delayed.schedule(
        redis, keys, source=keys.jobs, group=WORKER_GROUP, entry_id=entry_id, stream=keys.jobs,
        fields=entry_fields(job_id), job_id=job_id, attempt=2, delay_ms=delay_ms,
    )


def due_envelope(job_id: str, stream: str) -> str:
    return Envelope.build(job_id=job_id, attempt=2, stream=stream, fields=entry_fields(job_id)).member


async def test_schedule_acks_the_entry_and_adds_the_envelope_in_one_step(redis: Redis, keys: Keys) -> None:
    before = await server_ms(redis)
    due = await schedule_entry(redis, keys, "gh-1", delay_ms=60_000)
    after = await server_ms(redis)

    assert due is not None and before + 60_000 <= due <= after + 60_000
    assert (await redis.xpending(keys.jobs, WORKER_GROUP))["pending"] == 0
    [(member, score)] = await redis.zrange(keys.delayed, 0, -1, withscores=True)
    assert int(score) == due
    envelope = Envelope.parse(member)
    assert envelope is not None
    assert (envelope.id, envelope.attempt, envelope.stream) == ("gh-1", 2, keys.jobs)
    assert envelope.fields == entry_fields("gh-1")
    assert list(json.loads(member)) == ["attempt", "fields", "id", "stream"]  # compact, sorted keys
    state = await redis.hgetall(keys.job("gh-1"))
    # While it waits the job has no entry: its hash names the zset as where it is.
    assert state == {b"state": b"delayed", b"dueAt": str(due).encode(), b"stream": keys.delayed.encode()}
    assert 0 < await redis.ttl(keys.job("gh-1")) <= JOB_STATE_TTL_S


async def test_schedule_of_an_entry_no_longer_pending_schedules_nothing(redis: Redis, keys: Keys) -> None:
    entry_id = await pending_entry(redis, keys, "gh-2")
    await redis.xack(keys.jobs, WORKER_GROUP, entry_id)  # a peer finished it meanwhile
    due = await delayed.schedule(
        redis, keys, source=keys.jobs, group=WORKER_GROUP, entry_id=entry_id, stream=keys.jobs,
        fields=entry_fields("gh-2"), job_id="gh-2", attempt=2, delay_ms=0,
    )
    assert due is None
    assert await redis.zcard(keys.delayed) == 0
    assert not await redis.exists(keys.job("gh-2"))


async def test_only_due_members_are_promoted_with_fields_in_order_and_state_queued(
    redis: Redis, keys: Keys
) -> None:
    await schedule_entry(redis, keys, "later", delay_ms=3_600_000)
    await schedule_entry(redis, keys, "now", delay_ms=0)
    # Extra fields follow the fixed five, sorted, whatever order the caller gave them in.
    fields = {"zz": "1", **entry_fields("extra"), "aa": "2"}
    extra = Envelope.build(job_id="extra", attempt=2, stream=keys.host_jobs("h1"), fields=fields)
    await redis.zadd(keys.delayed, {extra.member: 0})
    stream_before = await redis.xlen(keys.jobs)

    assert await delayed.promote_due(redis, keys) == 2

    later = await delayed.find_delayed(redis, keys, "later")
    assert later is not None
    assert await redis.zrange(keys.delayed, 0, -1) == [later.member.encode()]
    [(now_entry, fields)] = (await redis.xrange(keys.jobs, "-", "+"))[stream_before:]
    assert list(fields) == [b"id", b"kind", b"repo", b"attempt", b"job"]
    assert fields[b"id"] == b"now" and fields[b"attempt"] == b"2"
    [(extra_entry, host_fields)] = await redis.xrange(keys.host_jobs("h1"))
    assert list(host_fields) == [b"id", b"kind", b"repo", b"attempt", b"job", b"aa", b"zz"]
    # Promoted: queued again, and the hash names the stream and the new entry (dueAt and the zset gone).
    assert await redis.hgetall(keys.job("now")) == {
        b"state": b"queued", b"stream": keys.jobs.encode(), b"entry": now_entry
    }
    assert await redis.hmget(keys.job("extra"), ["stream", "entry"]) == [
        keys.host_jobs("h1").encode(), extra_entry
    ]
    assert 0 < await redis.ttl(keys.job("now")) <= JOB_STATE_TTL_S
    assert (await redis.hget(keys.job("later"), "state")) == b"delayed"
    assert await delayed.promote_due(redis, keys) == 0


async def test_an_unusable_member_is_parked_on_dead_not_lost_or_retried(redis: Redis, keys: Keys) -> None:
    await redis.set(keys.host_jobs("wrongtype"), "x")  # XADD to it fails inside the script
    await redis.zadd(keys.delayed, {"not json": 0, due_envelope("a", keys.host_jobs("wrongtype")): 0,
                                    due_envelope("b", keys.jobs): 0})
    assert await delayed.promote_due(redis, keys) == 1
    dead = await redis.xrange(keys.dead)
    assert sorted(f[b"reason"] for _, f in dead) == [UNUSABLE_ENVELOPE.encode()] * 2
    unusable = due_envelope("a", keys.host_jobs("wrongtype")).encode()
    assert {f[b"envelope"] for _, f in dead} == {b"not json", unusable}
    assert await redis.zcard(keys.delayed) == 0
    assert [f[b"id"] for _, f in await redis.xrange(keys.jobs)] == [b"b"]


async def test_concurrent_promoters_put_each_job_in_the_stream_exactly_once(
    redis: Redis, keys: Keys
) -> None:
    ids = [f"job-{i}" for i in range(200)]
    await redis.zadd(keys.delayed, {due_envelope(i, keys.jobs): 0 for i in ids})

    counts = await asyncio.gather(*(delayed.promote_due(redis, keys) for _ in range(10)))

    assert sum(counts) == 200
    promoted = [f[b"id"].decode() for _, f in await redis.xrange(keys.jobs)]
    assert sorted(promoted) == sorted(ids)
    assert await redis.zcard(keys.delayed) == 0


async def test_run_promoter_promotes_within_its_interval_and_stops_on_the_event(
    redis: Redis, keys: Keys
) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(delayed.run_promoter(redis, keys, stop, interval_s=0.05))
    await schedule_entry(redis, keys, "soon", delay_ms=100)

    async def promoted() -> bool:
        return await redis.hget(keys.job("soon"), "state") == b"queued"

    await wait_for(promoted, timeout=5, what="the promotion")
    assert [f[b"id"] for _, f in await redis.xrange(keys.jobs)][-1] == b"soon"
    stop.set()
    await asyncio.wait_for(task, 5)


async def test_run_promoter_rides_out_a_redis_outage(tmp_path: Path, keys: Keys) -> None:
    server = RedisProcess(tmp_path / "redis")
    server.start()
    client = create_redis(server.url)
    stop = asyncio.Event()
    try:
        with structlog.testing.capture_logs() as logs:
            task = asyncio.create_task(delayed.run_promoter(client, keys, stop, interval_s=0.05))
            server.stop()
            await wait_for(lambda: any(x["event"] == "promoter_redis_unreachable" for x in logs),
                           what="the outage logged")
            assert not task.done()
            server.start()
            await client.zadd(keys.delayed, {due_envelope("after-outage", keys.jobs): 0})
            await wait_for(lambda: client.xlen(keys.jobs), timeout=15, what="promotion after the restart")
            stop.set()
            await asyncio.wait_for(task, 15)
        events = [x["event"] for x in logs]
        assert events.count("promoter_redis_unreachable") == 1
        assert events.count("promoter_redis_restored") == 1
    finally:
        stop.set()
        await client.aclose()
        server.stop()


async def test_find_and_remove_a_delayed_job_by_id(redis: Redis, keys: Keys) -> None:
    odd = "gl-a*b?[c]\\d"  # glob characters in an id must not widen or break the match
    for job_id in (odd, "gl-a", "gl-ab"):
        await schedule_entry(redis, keys, job_id, delay_ms=60_000)

    found = await delayed.find_delayed(redis, keys, odd)
    assert found is not None and found.id == odd and found.attempt == 2
    assert await delayed.find_delayed(redis, keys, "gl-") is None

    assert await delayed.remove_delayed(redis, keys, found.member, state="cancelled") is True
    assert await delayed.remove_delayed(redis, keys, found.member, state="cancelled") is False
    assert await delayed.find_delayed(redis, keys, odd) is None
    assert await redis.hget(keys.job(odd), "state") == b"cancelled"
    assert await redis.zcard(keys.delayed) == 2
    # Without a state, removal leaves the job's state hash alone.
    other = await delayed.find_delayed(redis, keys, "gl-a")
    assert other is not None
    assert await delayed.remove_delayed(redis, keys, other.member) is True
    assert await redis.hget(keys.job("gl-a"), "state") == b"delayed"
