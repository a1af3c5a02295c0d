"""Liveness, freshness and takeover decisions of ``upkeep`` against a real Redis."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from pidispatch.common.health import Health
from pidispatch.common.keys import WORKER_GROUP, Keys
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.settings import load_settings
from pidispatch.common.streams import ensure_group
from pidispatch.worker.context import Held, WorkerContext
from pidispatch.worker.upkeep import Upkeep
from tests.support.polling import wait_for

TTL_MS = 300


def upkeep_for(
    redis: Redis, keys: Keys, name: str, slots: dict[tuple[str, str], Held] | None = None,
    ttl_ms: int = TTL_MS,
) -> Upkeep:
    settings = load_settings(
        {"PI_WORKER_NAME": name, "PD_HOST_BEAT_MS": "100", "PD_HOST_TTL_MS": str(ttl_ms)}
    )
    ctx = WorkerContext(settings, redis, keys, None, now_ms, {}, Health("down", "up"))  # type: ignore[arg-type]
    return Upkeep(ctx, [keys.jobs], slots if slots is not None else {}, asyncio.Event())


async def deliver(redis: Redis, keys: Keys, consumer: str) -> str:
    entry = (await redis.xadd(keys.jobs, {"id": "j", "job": "{}"})).decode()
    await ensure_group(redis, keys.jobs, WORKER_GROUP)
    await redis.xreadgroup(WORKER_GROUP, consumer, {keys.jobs: ">"}, count=1)
    return entry


async def idle_ms(redis: Redis, keys: Keys, entry: str) -> int:
    rows = await redis.xpending_range(keys.jobs, WORKER_GROUP, min=entry, max=entry, count=1)
    return int(rows[0]["time_since_delivered"])


async def test_a_beat_writes_the_row_with_its_ttl_and_refreshes_held_entries(
    redis: Redis, keys: Keys
) -> None:
    entry = await deliver(redis, keys, "alive")
    await asyncio.sleep(0.25)
    before = await idle_ms(redis, keys, entry)
    assert before >= 250
    up = upkeep_for(redis, keys, "alive", {(keys.jobs, entry): Held(keys.jobs, entry, {}, "new")})
    await up.beat()
    assert await idle_ms(redis, keys, entry) < before  # a peer's idle test starts over
    assert 0 < await redis.pttl(keys.host("alive")) <= TTL_MS
    assert await redis.hget(keys.host("alive"), "running") == b"1"
    assert await redis.sismember(keys.hosts, "alive")


async def test_entries_of_a_live_host_are_never_claimed_however_idle(redis: Redis, keys: Keys) -> None:
    # A TTL of 2 s, beaten every 100 ms: a loaded machine (several tests at a time) cannot let the row lapse
    # between two beats, which is not what this test is about.
    ttl_ms = 2000
    entry = await deliver(redis, keys, "alive")
    alive = upkeep_for(redis, keys, "alive", ttl_ms=ttl_ms)
    stop = asyncio.Event()

    async def beating() -> None:
        while not stop.is_set():
            await alive.beat()
            await asyncio.sleep(0.1)

    beats = asyncio.create_task(beating())
    try:
        await wait_for(lambda: _idle_past(redis, keys, entry, ttl_ms), 10, what="the entry idle past the TTL")
        assert await upkeep_for(redis, keys, "peer", ttl_ms=ttl_ms).claim_orphans(5) == []
    finally:
        stop.set()
        await beats


async def _idle_past(redis: Redis, keys: Keys, entry: str, ms: int) -> bool:
    return await idle_ms(redis, keys, entry) > ms + 50


async def test_a_dead_hosts_entries_are_claimed_only_after_sitting_idle_for_the_ttl(
    redis: Redis, keys: Keys
) -> None:
    entry = await deliver(redis, keys, "dead")  # never wrote a row, or its row expired
    peer = upkeep_for(redis, keys, "peer")
    assert await peer.claim_orphans(5) == []  # not idle long enough yet
    await asyncio.sleep(TTL_MS / 1000 + 0.05)
    claimed = await peer.claim_orphans(5)
    assert [(s, e, f["id"]) for s, e, f in claimed] == [(keys.jobs, entry, "j")]
    rows = await redis.xpending_range(keys.jobs, WORKER_GROUP, min="-", max="+", count=5)
    assert [r["consumer"] for r in rows] == [b"peer"]


async def test_two_peers_racing_for_one_dead_hosts_entry_claim_it_once(redis: Redis, keys: Keys) -> None:
    await deliver(redis, keys, "dead")
    await asyncio.sleep(TTL_MS / 1000 + 0.05)
    first, second = upkeep_for(redis, keys, "p1"), upkeep_for(redis, keys, "p2")
    results = await asyncio.gather(first.claim_orphans(5), second.claim_orphans(5))
    assert sorted(len(r) for r in results) == [0, 1]


async def test_claims_stop_at_the_free_slots(redis: Redis, keys: Keys) -> None:
    for _ in range(3):
        await deliver(redis, keys, "dead")
    await asyncio.sleep(TTL_MS / 1000 + 0.05)
    assert len(await upkeep_for(redis, keys, "peer").claim_orphans(2)) == 2


async def test_a_path_shaped_value_is_dropped_from_the_row_and_logged_once(redis: Redis, keys: Keys) -> None:
    settings = load_settings({"PI_WORKER_NAME": "pathy", "PI_JOB_IMAGE": "/srv/images/job.tar"})
    ctx = WorkerContext(
        settings, redis, keys, None, now_ms, {"TZ": "Europe/Amsterdam"}, Health("down", "up"),  # type: ignore[arg-type]
        caps=frozenset({"s:prod"}),
    )
    up = Upkeep(ctx, [keys.jobs], {}, asyncio.Event())
    with capture_logs() as logs:
        await up.beat()
        await up.beat()
    row = {k.decode(): v.decode() for k, v in (await redis.hgetall(keys.host("pathy"))).items()}
    assert "image" not in row and row["tz"] == "Europe/Amsterdam" and row["caps"] == "s:prod"
    refused = [e for e in logs if e["event"] == "host_registry_field_refused"]
    assert refused == [{"event": "host_registry_field_refused", "field": "image", "reason": "path-shaped",
                        "log_level": "warning"}]
