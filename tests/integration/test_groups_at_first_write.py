"""Every consumer group exists from the first write to its stream, created by the writer: an operator's
`XPENDING pd:events router` or `XPENDING pd:jobs workers` answers on a stack where no router or worker ran
yet, and the entries are already protected from trimming (a stream's group is what trimming stays behind)."""

from __future__ import annotations

from redis.exceptions import ResponseError

from pidispatch.common.keys import ROUTER_GROUP, WORKER_GROUP, Keys
from pidispatch.common.models import Job, text
from pidispatch.common.redis import Redis
from pidispatch.common.streams import read_group
from pidispatch.receiver.ingest import Ingest
from pidispatch.router.enqueue import Enqueuer


async def _groups(redis: Redis, stream: str) -> dict[str, str]:
    return {text(g["name"]): text(g["last-delivered-id"]) for g in await redis.xinfo_groups(stream)}


async def test_the_receivers_first_append_creates_the_router_group(redis: Redis, keys: Keys) -> None:
    try:
        await redis.xpending(keys.events, ROUTER_GROUP)
        raise AssertionError("the group existed before the first append")
    except ResponseError as exc:
        assert "NOGROUP" in str(exc) or "no such key" in str(exc)
    ingest = Ingest(redis, keys)
    assert await ingest.append("x", "push", "d-1", 1, b"{}")
    assert await ingest.append("x", "push", "d-2", 2, b"{}")
    assert await _groups(redis, keys.events) == {ROUTER_GROUP: "0-0"}
    assert (await redis.xpending(keys.events, ROUTER_GROUP))["pending"] == 0
    # A router starting later still reads both: the group was made at the stream's start.
    got = await read_group(redis, ROUTER_GROUP, "router-a", {keys.events: ">"}, count=10)
    assert [fields["delivery"] for _, _, fields in got] == ["d-1", "d-2"]


async def test_the_routers_first_enqueue_creates_the_workers_group(redis: Redis, keys: Keys) -> None:
    enqueuer = Enqueuer(redis, keys, lambda: 1_000_000)
    job = Job(id="local-first-write", kind="local", repo="local:x", folder="/srv/x", task="t")
    [(ids, streams, replies)] = await enqueuer.enqueue([[(job, "semantic-first-write")]], ["7-0"])
    assert ids == [job.id] and not any(isinstance(r, Exception) for r in replies)
    assert streams == [keys.jobs]
    assert await _groups(redis, keys.jobs) == {WORKER_GROUP: "0-0"}
    assert (await redis.xpending(keys.jobs, WORKER_GROUP))["pending"] == 0
    got = await read_group(redis, WORKER_GROUP, "w-1", {keys.jobs: ">"}, count=10)
    assert [fields["id"] for _, _, fields in got] == [job.id]
    # The job's state hash names the stream and entry it went to and the pd:events entry it came from.
    [(_, entry_id, _)] = got
    state = await redis.hmget(keys.job(job.id), ["state", "stream", "entry", "eventEntry"])
    assert [text(v) for v in state] == ["queued", keys.jobs, entry_id, "7-0"]
    assert [text(r) for r in replies[0]] == ["queued", entry_id]
