"""pidispatch.common.registry.HostCache: the router's view of the registry, never older than 5 s: from 2.5 s a
snapshot is re-read in the background (one read in flight) and used meanwhile; at 5 s, the first call
and the first after an idle spell, the caller waits for the read; a failed read is a snapshot with no host,
and each job it sends to the shared stream is counted."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
import structlog

from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from pidispatch.common.registry import HostCache, HostRow, RegistryUnreachable, read_live_hosts, refresh_due
from tests.support.polling import wait_for

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

    async def __call__(
        self, redis: Redis, keys: Keys, now_ms: int, *, timeout_s: float, known: Sequence[str]
    ) -> list[HostRow]:
        self.calls += 1
        self.known = list(known)
        await self.gate.wait()
        if self.fail:
            raise RegistryUnreachable("ConnectionError")
        return await read_live_hosts(redis, keys, now_ms, timeout_s=timeout_s, known=known)


async def beat(redis: Redis, keys: Keys, name: str, at: int) -> None:
    await redis.hset(keys.host(name), mapping={"name": name, "beatAt": str(at), "caps": "s:prod",
                                               "routes": "true"})
    await redis.sadd(keys.hosts, name)


async def plain(redis: Redis, keys: Keys, at: int) -> None:
    await beat(redis, keys, "plain", at)
    await redis.hset(keys.host("plain"), "caps", "")


def names(cache_hosts: tuple[HostRow, ...]) -> list[str]:
    return [h.name for h in cache_hosts]


@pytest.mark.parametrize(("read_at", "now", "due"), [
    (None, T0, "wait"),  # never read
    (T0, T0 + 2_499, None),
    (T0, T0 + 2_500, "background"),  # half its age: re-read while it is still used
    (T0, T0 + 4_999, "background"),
    (T0, T0 + 5_000, "wait"),  # its documented age: never routed on
    (T0, T0 + 3_600_000, "wait"),  # an idle hour
])
def test_a_snapshot_is_reread_from_half_its_age_and_never_used_at_its_age(
    read_at: int | None, now: int, due: str | None
) -> None:
    assert refresh_due(read_at, now, 5_000) == due


async def test_only_the_first_call_waits_and_an_ageing_snapshot_is_reread_in_the_background(
    redis: Redis, keys: Keys
) -> None:
    clock, read = Clock(), CountingRead()
    cache = HostCache(redis, keys, clock, read=read)
    await beat(redis, keys, "mini1", T0)
    assert names((await cache.fleet()).hosts) == ["mini1"]
    assert read.calls == 1

    await beat(redis, keys, "mini2", T0)
    clock.now += 2_000
    assert names((await cache.fleet()).hosts) == ["mini1"]  # fresh: no read
    assert read.calls == 1
    clock.now += 1_000
    read.gate.clear()
    assert names((await cache.fleet()).hosts) == ["mini1"]  # ageing: used while the re-read runs
    await asyncio.sleep(0)  # the re-read starts
    assert names((await cache.fleet()).hosts) == ["mini1"]
    await asyncio.sleep(0)
    assert read.calls == 2  # one read in flight, however many callers
    read.gate.set()
    await wait_for(lambda: _has(cache, "mini2"), what="the new snapshot")
    assert read.calls == 2 and read.known == ["mini1"]  # the last snapshot's rows came with the index


async def test_after_an_idle_spell_the_first_job_waits_for_a_fresh_snapshot(redis: Redis, keys: Keys) -> None:
    """A snapshot past its age may name a host gone since: the job is routed on a new read, not on it."""
    clock, read = Clock(), CountingRead()
    cache = HostCache(redis, keys, clock, read=read)
    await beat(redis, keys, "mini1", T0)
    await plain(redis, keys, T0)  # a host without the capability: routing has a choice to make
    assert await cache.route(["s:prod"], "gh-1") == "mini1"

    clock.now += 600_000  # ten idle minutes: mini1 stopped beating, mini2 came up
    await redis.delete(keys.host("mini1"))
    await redis.srem(keys.hosts, "mini1")
    await beat(redis, keys, "mini2", clock.now)
    await plain(redis, keys, clock.now)
    assert await cache.route(["s:prod"], "gh-2") == "mini2"  # no stale pick of mini1
    assert read.calls == 2


async def _has(cache: HostCache, name: str) -> bool:
    return name in names((await cache.fleet()).hosts)


async def test_concurrent_callers_on_a_cold_cache_share_one_read(redis: Redis, keys: Keys) -> None:
    read = CountingRead()
    read.gate.clear()
    cache = HostCache(redis, keys, Clock(), read=read)
    await beat(redis, keys, "mini1", T0)
    callers = [asyncio.create_task(cache.fleet()) for _ in range(8)]
    await asyncio.sleep(0)  # let every caller reach the in-flight read before it completes
    read.gate.set()
    results = await asyncio.gather(*callers)
    assert read.calls == 1
    assert all(names(r.hosts) == ["mini1"] for r in results)


async def test_a_cancelled_caller_does_not_cancel_the_shared_read(redis: Redis, keys: Keys) -> None:
    read = CountingRead()
    read.gate.clear()
    cache = HostCache(redis, keys, Clock(), read=read)
    first, second = asyncio.create_task(cache.fleet()), asyncio.create_task(cache.fleet())
    await asyncio.sleep(0)
    first.cancel()
    read.gate.set()
    assert (await second).hosts == ()
    assert read.calls == 1


async def test_a_failed_read_sends_jobs_to_the_shared_stream_counted_and_logged_once_a_window(
    redis: Redis, keys: Keys
) -> None:
    clock, read = Clock(), CountingRead(fail=True)
    cache = HostCache(redis, keys, clock, read=read)
    await beat(redis, keys, "mini1", T0)
    await beat(redis, keys, "plain", T0)
    await redis.hset(keys.host("plain"), "caps", "")
    with structlog.testing.capture_logs() as logs:
        for i in range(5):
            assert await cache.route(["s:prod"], f"gh-{i}") is None
        assert await cache.route([], "gh-x") is None  # needs nothing: not a fall-back
        assert read.calls == 1 and cache.fallbacks == 5
        clock.now += 5_000
        assert await cache.route(["s:prod"], "gh-6") is None  # re-read, failed again: still the shared stream
        assert read.calls == 2 and cache.fallbacks == 6
        read.fail = False
        clock.now += 5_000
        assert await cache.route(["s:prod"], "gh-9") == "mini1"  # the registry is back: read before routing
    events = [e["event"] for e in logs if e["event"].startswith("host_registry")]
    # Once a window: the first fall-back, then the one 5 s later; unreachable and restored once each.
    assert events == ["host_registry_unreachable", "host_registry_fallback", "host_registry_fallback",
                      "host_registry_restored"]
    assert [e["fallbacks"] for e in logs if e["event"] == "host_registry_fallback"] == [1, 6]
    assert logs[0]["reason"] == "ConnectionError"


async def test_any_exception_from_the_read_fails_open(redis: Redis, keys: Keys) -> None:
    async def broken(
        redis: Redis, keys: Keys, now_ms: int, *, timeout_s: float, known: Sequence[str]
    ) -> list[HostRow]:
        raise ValueError("a bug")

    cache = HostCache(redis, keys, Clock(), read=broken)
    assert (await cache.fleet()).hosts == ()
    assert await cache.route(["s:prod"], "gh-1") is None and cache.fallbacks == 1
