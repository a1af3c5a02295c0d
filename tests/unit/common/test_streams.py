"""Stream plumbing against a real redis-server."""

from __future__ import annotations

from pidispatch.common import streams
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis


async def test_ensure_group_is_idempotent_and_creates_the_stream(redis: Redis, keys: Keys) -> None:
    await streams.ensure_group(redis, keys.jobs, "g")
    await streams.ensure_group(redis, keys.jobs, "g")
    groups = await redis.xinfo_groups(keys.jobs)
    assert [g["name"] for g in groups] == [b"g"]


async def test_read_group_recreates_a_deleted_group(redis: Redis, keys: Keys) -> None:
    await streams.ensure_group(redis, keys.jobs, "g")
    await redis.delete(keys.jobs)
    await redis.xadd(keys.jobs, {"a": "1"})
    # The stream was recreated without the group: NOGROUP must heal, not crash the consumer, and the
    # group restarts from the beginning so what was appended meanwhile is not lost.
    entries = await streams.read_group(redis, "g", "c1", {keys.jobs: ">"}, count=10)
    assert [e[2] for e in entries] == [{"a": "1"}]


async def test_pending_then_claim_then_dead(redis: Redis, keys: Keys) -> None:
    await streams.ensure_group(redis, keys.events, "g")
    entry = (await redis.xadd(keys.events, {"k": "v"})).decode()
    got = await streams.read_group(redis, "g", "dead-consumer", {keys.events: ">"}, count=1)
    assert got == [(keys.events, entry, {"k": "v"})]
    assert await streams.delivery_count(redis, keys.events, "g", entry) == 1

    cursor, claimed = await streams.claim_idle(redis, keys.events, "g", "peer", min_idle_ms=0)
    assert [c[1] for c in claimed] == [entry]
    assert cursor == "0-0"
    assert await streams.delivery_count(redis, keys.events, "g", entry) == 2

    await streams.send_to_dead(
        redis, keys, source=keys.events, group="g", entry_id=entry, reason="malformed-event",
        deliveries=2, fields={"k": "v"},
    )
    assert await streams.delivery_count(redis, keys.events, "g", entry) == 0
    dead = await redis.xrange(keys.dead)
    assert len(dead) == 1
    fields = {k.decode(): v.decode() for k, v in dead[0][1].items()}
    assert fields == {"source": keys.events, "entry": entry, "reason": "malformed-event",
                      "deliveries": "2", "k": "v"}


async def test_own_pending_is_redelivered_with_id_zero(redis: Redis, keys: Keys) -> None:
    await streams.ensure_group(redis, keys.jobs, "g")
    await redis.xadd(keys.jobs, {"n": "1"})
    await streams.read_group(redis, "g", "c1", {keys.jobs: ">"}, count=1)
    again = await streams.read_group(redis, "g", "c1", {keys.jobs: "0"}, count=10)
    assert [e[2] for e in again] == [{"n": "1"}]
    other = await streams.read_group(redis, "g", "c2", {keys.jobs: "0"}, count=10)
    assert other == []
