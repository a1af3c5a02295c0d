"""Jobs routed to a host that died before reading them move to a capable live host or to ``pd:jobs``;
jobs it had read stay for the workers' takeover, and no job is ever both moved and read."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import structlog

from pidispatch.common.keys import JOB_STATE_TTL_S, WORKER_GROUP, Keys
from pidispatch.common.models import (
    Job,
    Matched,
    Sender,
    Target,
    Trigger,
    job_from_fields,
    job_to_fields,
    text,
)
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.streams import ensure_group, read_group
from pidispatch.router.reroute import reroute_orphans, run_rerouter
from tests.support.polling import wait_for


def forge_job(*, profile: str | None = None) -> Job:
    delivery = str(uuid.uuid4())
    return Job(
        id=f"gh-{delivery}", kind="github", repo="Codertocat/Hello-World", flow="fix",
        target=Target(type="issue", number=1, title="t", body="b"),
        trigger=Trigger(event="issues", action="labeled", delivery_id=delivery, sender=Sender(id=21031067),
                        matched=Matched(index=0, type="label", label="bug")),
        secrets={"API_KEY": "ref"} if profile else None, secrets_profile=profile,
    )


def local_job() -> Job:
    return Job(id=f"local-{uuid.uuid4().hex[:8]}", kind="local", repo="local:app", folder="/srv/app",
               task="t")


async def register(redis: Redis, keys: Keys, name: str, caps: str) -> None:
    await redis.hset(keys.host(name), mapping={"name": name, "beatAt": str(now_ms()), "routes": "true",
                                               "caps": caps})
    await redis.pexpire(keys.host(name), 90_000)
    await redis.sadd(keys.hosts, name)


async def add(redis: Redis, stream: str, job: Job) -> str:
    return (await redis.xadd(stream, job_to_fields(job))).decode()  # type: ignore[arg-type]


async def entries(redis: Redis, stream: str) -> list[list[tuple[bytes, bytes]]]:
    return [list(fields.items()) for _, fields in await redis.xrange(stream)]


async def test_a_dead_hosts_unread_jobs_move_and_its_read_job_stays(redis: Redis, keys: Keys) -> None:
    await register(redis, keys, "mini1", "s:prod")
    await register(redis, keys, "mini2", "")
    await redis.sadd(keys.hosts, "gone")  # its row expired: it beats no more
    dead = keys.host_jobs("gone")
    read_by_it = forge_job(profile="prod")
    await add(redis, dead, read_by_it)
    await ensure_group(redis, dead, WORKER_GROUP)
    [(_, held, _)] = await read_group(redis, WORKER_GROUP, "gone", {dead: ">"}, count=1)
    bound = [forge_job(profile="prod"), forge_job(profile="prod")]
    plain, local = forge_job(), local_job()
    for job in (*bound, plain, local):
        await add(redis, dead, job)
    before = {j.id: list(job_to_fields(j).items()) for j in (*bound, plain)}
    live_stream = keys.host_jobs("mini2")
    untouched = await add(redis, live_stream, forge_job(profile="prod"))

    with structlog.testing.capture_logs() as logs:
        assert await reroute_orphans(redis, keys, now_ms()) == 3
    # Needs s:prod: the only capable live host. Needs nothing: the shared stream. Same fields, same order.
    assert await entries(redis, keys.host_jobs("mini1")) == [
        [(k.encode(), v.encode()) for k, v in before[j.id]] for j in bound
    ]
    assert await entries(redis, keys.jobs) == [[(k.encode(), v.encode()) for k, v in before[plain.id]]]
    # The job it had read is the takeover's (still pending under its name); the local job waits for it.
    assert [job_from_fields(f)[0].id for _, f in await redis.xrange(dead)] == [read_by_it.id, local.id]
    pending = await redis.xpending_range(dead, WORKER_GROUP, min="-", max="+", count=10)
    assert [(p["message_id"].decode(), p["consumer"].decode()) for p in pending] == [(held, "gone")]
    assert [(await redis.xrange(live_stream))[0][0].decode()] == [untouched]
    assert [(e["from_host"], e["count"]) for e in logs if e["event"] == "jobs_rerouted"] == [("gone", 3)]
    # Each moved job's state hash names its new stream and entry (XRANGE finds it there, renewed TTL);
    # the jobs that stayed were not touched.
    for job, stream in ((bound[0], keys.host_jobs("mini1")), (bound[1], keys.host_jobs("mini1")),
                        (plain, keys.jobs)):
        named, entry = (text(v) for v in await redis.hmget(keys.job(job.id), ["stream", "entry"]))
        assert named == stream
        [(_, found)] = await redis.xrange(stream, entry, entry)
        assert job_from_fields(found)[0].id == job.id
        assert 0 < await redis.ttl(keys.job(job.id)) <= JOB_STATE_TTL_S
    assert not await redis.exists(keys.job(read_by_it.id), keys.job(local.id))

    # A second pass finds nothing left to move.
    assert await reroute_orphans(redis, keys, now_ms()) == 0
    assert await redis.xlen(keys.host_jobs("mini1")) == 2 and await redis.xlen(keys.jobs) == 1


async def test_a_stream_nobody_ever_read_moves_whole_and_a_live_hosts_stream_never_moves(
    redis: Redis, keys: Keys
) -> None:
    await register(redis, keys, "alive", "")
    never_read = keys.host_jobs("ghost")  # found by scanning the keyspace: not even in pd:hosts
    jobs = [forge_job() for _ in range(250)]  # more than one page
    for job in jobs:
        await add(redis, never_read, job)
    await add(redis, keys.host_jobs("alive"), forge_job())
    assert await reroute_orphans(redis, keys, now_ms()) == 250
    assert await redis.xlen(never_read) == 0
    assert [job_from_fields(f)[0].id for _, f in await redis.xrange(keys.jobs)] == [j.id for j in jobs]
    assert await redis.xlen(keys.host_jobs("alive")) == 1


async def test_a_job_read_between_the_scan_and_its_move_stays_with_the_reader(
    redis: Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host comes back (its row not written yet) and wins the race for every other entry: it reads
    the oldest unread entry right before the pass's move script for that entry runs."""
    dead = keys.host_jobs("flaky")
    await ensure_group(redis, dead, WORKER_GROUP)
    jobs = [forge_job() for _ in range(20)]
    for job in jobs:
        await add(redis, dead, job)
    read: list[str] = []
    real_evalsha, moves = redis.evalsha, 0

    async def worker_then_evalsha(*args: Any) -> Any:
        nonlocal moves
        moves += 1
        if moves % 2:
            got = await read_group(redis, WORKER_GROUP, "flaky", {dead: ">"}, count=1)
            read.extend(job_from_fields(f)[0].id for _, _, f in got)
        return await real_evalsha(*args)

    monkeypatch.setattr(redis, "evalsha", worker_then_evalsha)
    assert await reroute_orphans(redis, keys, now_ms()) == 10
    moved = [job_from_fields(f)[0].id for _, f in await redis.xrange(keys.jobs)]
    left = [job_from_fields(f)[0].id for _, f in await redis.xrange(dead)]
    assert len(read) == 10 and not set(moved) & set(read)
    # Every job is in exactly one place: read by the worker (still pending in its stream) or moved.
    assert sorted(read) == sorted(left)
    assert sorted(moved + left) == sorted(j.id for j in jobs)


async def test_the_rerouter_loop_moves_a_dead_hosts_jobs_and_stops_cleanly(redis: Redis, keys: Keys) -> None:
    job = forge_job()
    await add(redis, keys.host_jobs("gone"), job)
    stop = asyncio.Event()
    task = asyncio.create_task(run_rerouter(redis, keys, stop, now_ms, interval_s=0.05))
    try:
        await wait_for(lambda: redis.xlen(keys.jobs), what="the moved job")
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    [(_, fields)] = await redis.xrange(keys.jobs)
    assert job_from_fields(fields)[0].id == job.id


async def test_an_unusable_key_skips_only_its_own_host(redis: Redis, keys: Keys) -> None:
    await redis.sadd(keys.hosts, "broken")
    await redis.set(keys.host_jobs("broken"), "not a stream")
    job = forge_job()
    await add(redis, keys.host_jobs("gone"), job)
    with structlog.testing.capture_logs() as logs:
        assert await reroute_orphans(redis, keys, now_ms()) == 1
    assert [e["from_host"] for e in logs if e["event"] == "reroute_skipped"] == ["broken"]
    assert await redis.xlen(keys.jobs) == 1


async def test_a_dead_hosts_unread_occurrence_moves_only_to_a_live_host_serving_its_schedule(
    redis: Redis, keys: Keys
) -> None:
    await register(redis, keys, "serves-tick", "")
    await redis.hset(keys.host("serves-tick"), "cron", "tick")
    await register(redis, keys, "serves-tick-shared-only", "")  # reads only pd:jobs: not a target
    await redis.hset(keys.host("serves-tick-shared-only"), mapping={"cron": "tick", "routes": "false"})
    await register(redis, keys, "serves-other", "")
    await redis.hset(keys.host("serves-other"), "cron", "other")
    dead = keys.host_jobs("gone")

    def occurrence(sid: str, at: int) -> Job:
        return Job(id=f"repeat:{sid}:{at}", kind="local", repo="local:app", folder="/srv/app", task="t",
                   trigger=Trigger(event="cron", id=sid, pattern="* * * * *"))

    tick, lonely, local = occurrence("tick", 1_000), occurrence("lonely", 2_000), local_job()
    for job in (tick, lonely, local):
        await add(redis, dead, job)
    assert await reroute_orphans(redis, keys, now_ms()) == 1
    moved = await redis.xrange(keys.host_jobs("serves-tick"))
    assert [job_from_fields(f)[0].id for _, f in moved] == [tick.id]
    # Nobody else serves "lonely", and a plain local job's folder is its host's: both wait for it.
    assert [job_from_fields(f)[0].id for _, f in await redis.xrange(dead)] == [lonely.id, local.id]
