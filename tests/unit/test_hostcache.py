"""pidispatch.common.registry.HostCache: the router's view of the registry: cached 5 s, one read in flight, a
failed read cached as [] and logged once per transition."""

from __future__ import annotations

import asyncio

import structlog

from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from pidispatch.common.registry import HostCache, HostRow, RegistryUnreachable, read_live_hosts

T0 = 1_800_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


class CountingRead:
    """The real reader (or a failure), counted; ``gate`` holds every read until the test opens it."""

    def __init__(self, *, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, redis: Redis, keys: Keys, now_ms: int, *, timeout_s: float) -> list[HostRow]:
        self.calls += 1
        await self.gate.wait()
        if self.fail:
            raise RegistryUnreachable("ConnectionError")
        return await read_live_hosts(redis, keys, now_ms, timeout_s=timeout_s)


async def beat(redis: Redis, keys: Keys, name: str, at: int) -> None:
    await redis.hset(keys.host(name), mapping={"name": name, "beatAt": str(at), "caps": "s:prod",
                                               "routes": "true"})
    await redis.sadd(keys.hosts, name)


async def test_reads_are_cached_for_five_seconds(redis: Redis, keys: Keys) -> None:
    clock, read = Clock(), CountingRead()
    cache = HostCache(redis, keys, clock, read=read)
    await beat(redis, keys, "mini1", T0)
    assert [h.name for h in await cache.hosts()] == ["mini1"]
    assert read.calls == 1

    await beat(redis, keys, "mini2", T0)
    clock.now += 4_000
    assert [h.name for h in await cache.hosts()] == ["mini1"]  # served from cache: no read
    assert read.calls == 1
    clock.now += 2_000
    assert [h.name for h in await cache.hosts()] == ["mini1", "mini2"]
    assert read.calls == 2


async def test_concurrent_callers_on_a_cold_cache_share_one_read(redis: Redis, keys: Keys) -> None:
    read = CountingRead()
    read.gate.clear()
    cache = HostCache(redis, keys, Clock(), read=read)
    await beat(redis, keys, "mini1", T0)
    callers = [asyncio.create_task(cache.hosts()) for _ in range(8)]
    await asyncio.sleep(0)  # let every caller reach the in-flight read before it completes
    read.gate.set()
    results = await asyncio.gather(*callers)
    assert read.calls == 1
    assert all([h.name for h in r] == ["mini1"] for r in results)


async def test_a_cancelled_caller_does_not_cancel_the_shared_read(redis: Redis, keys: Keys) -> None:
    read = CountingRead()
    read.gate.clear()
    cache = HostCache(redis, keys, Clock(), read=read)
    first, second = asyncio.create_task(cache.hosts()), asyncio.create_task(cache.hosts())
    await asyncio.sleep(0)
    first.cancel()
    read.gate.set()
    assert await second == []
    assert read.calls == 1


async def test_a_failed_read_is_cached_as_empty_and_logged_once(redis: Redis, keys: Keys) -> None:
    clock, read = Clock(), CountingRead(fail=True)
    cache = HostCache(redis, keys, clock, read=read)
    with structlog.testing.capture_logs() as logs:
        for _ in range(5):
            assert await cache.hosts() == []
        assert read.calls == 1
        clock.now += 5_000
        assert await cache.hosts() == [] and read.calls == 2  # still down: no second log line
        read.fail = False
        await beat(redis, keys, "mini1", clock.now)
        clock.now += 5_000
        assert [h.name for h in await cache.hosts()] == ["mini1"]
    events = [e["event"] for e in logs if e["event"].startswith("host_registry")]
    assert events == ["host_registry_unreachable", "host_registry_restored"]
    assert logs[0]["reason"] == "ConnectionError"


async def test_any_exception_from_the_read_fails_open(redis: Redis, keys: Keys) -> None:
    async def broken(redis: Redis, keys: Keys, now_ms: int, *, timeout_s: float) -> list[HostRow]:
        raise ValueError("a bug")

    cache = HostCache(redis, keys, Clock(), read=broken)
    assert await cache.hosts() == []
