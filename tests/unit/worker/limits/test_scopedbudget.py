"""Scoped windows and leases on a real Redis: scoped before global, all or none, given back once, one slot
per attempt however often it runs, and a concurrency ceiling the fleet shares."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import pytest

from pidispatch import forges
from pidispatch.common.keys import Keys
from pidispatch.common.models import Job
from pidispatch.common.outcome import JobRefusal
from pidispatch.common.redis import Redis
from pidispatch.common.settings import Settings, load_settings
from pidispatch.worker.limits import scopedlease
from pidispatch.worker.limits.budget import Reservation
from pidispatch.worker.limits.scoped import ScopedLimit, parse_limits, rows_for
from pidispatch.worker.limits.scopedbudget import reserve_all, scoped_windows
from pidispatch.worker.limits.scopedlease import lease_sets, take_lease
from tests.support.polling import poll_until

NOW = int(dt.datetime(2026, 12, 3, 12, tzinfo=dt.UTC).timestamp() * 1000)
FORGE = forges.names()[0]


def job(n: int, repo: str = "owner/app") -> Job:
    return Job(id=f"j-{n}", kind=FORGE, repo=repo)


def rows(*raw: dict[str, object]) -> tuple[ScopedLimit, ...]:
    return parse_limits(json.dumps({"version": 2, "limits": list(raw)}), "limits.json")


def settings(keys: Keys, **env: str) -> Settings:
    return load_settings({"PD_KEY_PREFIX": keys.prefix, **env})


async def counts(redis: Redis, keys: Keys, limits: tuple[ScopedLimit, ...], j: Job) -> list[int]:
    found = scoped_windows(rows_for(limits, j), NOW, keys)
    return [int(await redis.get(w.key) or 0) for w in found]


async def global_day(redis: Redis, keys: Keys) -> int:
    return int(await redis.get(keys.budget_day("2026-12-03")) or 0)


async def test_a_full_scoped_window_refuses_scope_cap_with_nothing_reserved(redis: Redis, keys: Keys) -> None:
    limits = rows({"scope": "owner/app", "day": 1, "week": 5})
    first = await reserve_all(redis, keys, settings(keys), limits, job(1), 1, NOW)
    second = await reserve_all(redis, keys, settings(keys), limits, job(2), 1, NOW)
    assert isinstance(first, Reservation)
    assert second == JobRefusal("scope-cap")
    assert await counts(redis, keys, limits, job(2)) == [1, 1]  # the week window was not touched either
    assert await global_day(redis, keys) == 1
    other = await reserve_all(redis, keys, settings(keys), limits, job(3, "owner/other"), 1, NOW)
    assert isinstance(other, Reservation)


async def test_a_zero_window_always_refuses(redis: Redis, keys: Keys) -> None:
    limits = rows({"scope": "owner/app", "month": 0})
    assert await reserve_all(redis, keys, settings(keys), limits, job(1), 1, NOW) == JobRefusal("scope-cap")
    assert await global_day(redis, keys) == 0


async def test_the_scoped_slot_is_given_back_when_the_global_window_refuses(redis: Redis, keys: Keys) -> None:
    limits = rows({"scope": "owner/app", "day": 5})
    refused = await reserve_all(redis, keys, settings(keys, PI_DAILY_CAP="0"), limits, job(1), 1, NOW)
    assert refused == JobRefusal("over-budget", budget_reserved=True)
    assert await counts(redis, keys, limits, job(1)) == [0]
    assert await global_day(redis, keys) == 1  # a refused global reservation stays counted, as ever


async def test_an_attempt_run_again_takes_no_second_scoped_slot(redis: Redis, keys: Keys) -> None:
    limits = rows({"scope": "owner/app", "day": 1})
    first = await reserve_all(redis, keys, settings(keys), limits, job(1), 1, NOW)
    again = await reserve_all(redis, keys, settings(keys), limits, job(1), 1, NOW)  # after a crash
    assert isinstance(first, Reservation) and isinstance(again, Reservation)
    assert await counts(redis, keys, limits, job(1)) == [1]
    retry = await reserve_all(redis, keys, settings(keys), limits, job(1), 2, NOW)  # a new attempt counts
    assert retry == JobRefusal("scope-cap")


async def test_a_release_gives_scoped_and_global_slots_back_once(redis: Redis, keys: Keys) -> None:
    limits = rows({"scope": "owner/app", "day": 1})
    first = await reserve_all(redis, keys, settings(keys), limits, job(1), 1, NOW)
    assert isinstance(first, Reservation) and first.scoped is not None
    assert await first.release() and not await first.release()
    assert not await first.scoped.release()  # the claim is gone: a second give-back gives nothing
    assert await counts(redis, keys, limits, job(1)) == [0] and await global_day(redis, keys) == 0
    assert isinstance(await reserve_all(redis, keys, settings(keys), limits, job(2), 1, NOW), Reservation)


async def test_narrowest_row_is_reserved_first_and_a_wider_full_row_takes_nothing(
    redis: Redis, keys: Keys
) -> None:
    limits = rows({"scope": "/srv", "day": 1}, {"scope": "/srv/app", "day": 3})
    local = [Job(id=f"l-{n}", kind="local", repo="local:app", folder="/srv/app") for n in range(2)]
    assert isinstance(await reserve_all(redis, keys, settings(keys), limits, local[0], 1, NOW), Reservation)
    assert await reserve_all(redis, keys, settings(keys), limits, local[1], 1, NOW) == JobRefusal("scope-cap")
    assert await counts(redis, keys, limits, local[1]) == [1, 1]


async def test_a_concurrency_ceiling_is_shared_and_freed_on_release(redis: Redis, keys: Keys) -> None:
    limits = rows({"scope": "owner/app", "concurrent": 1})
    held = await take_lease(redis, keys, limits, job(1), "host-a")
    assert held is not None
    assert await take_lease(redis, keys, limits, job(2), "host-b") is None
    again = await take_lease(redis, keys, limits, job(1), "host-b")  # the holder itself is not refused
    assert again is not None
    await again.release()
    await held.release()
    later = await take_lease(redis, keys, limits, job(2), "host-b")
    assert later is not None
    await later.release()


async def test_an_expired_lease_no_longer_counts(redis: Redis, keys: Keys) -> None:
    limits = rows({"scope": "owner/app", "concurrent": 1})
    [(key, _)] = lease_sets(rows_for(limits, job(1)), job(1), keys, "host-a")
    await redis.zadd(key, {"j-crashed": 1})  # a crashed worker's lease, run out long ago
    lease = await take_lease(redis, keys, limits, job(1), "host-a")
    assert lease is not None and await redis.zrange(key, 0, -1) == [b"j-1"]
    await asyncio.wait_for(lease.release(), 5)
    assert await redis.exists(key) == 0


async def test_local_leases_count_one_hosts_folder(redis: Redis, keys: Keys) -> None:
    limits = rows({"scope": "/srv/app", "concurrent": 1})
    local = [Job(id=f"l-{n}", kind="local", repo="local:app", folder="/srv/app") for n in range(3)]
    here = await take_lease(redis, keys, limits, local[0], "host-a")
    there = await take_lease(redis, keys, limits, local[1], "host-b")
    assert here is not None and there is not None
    assert await take_lease(redis, keys, limits, local[2], "host-a") is None
    await here.release()
    await there.release()


async def test_a_job_without_a_ceiling_takes_no_lease(redis: Redis, keys: Keys) -> None:
    lease = await take_lease(redis, keys, rows({"scope": "owner/app", "day": 1}), job(1), "host-a")
    assert lease is not None and lease.sets == () and lease.renewer is None


async def test_a_held_lease_is_renewed_until_released(
    redis: Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scopedlease, "SCOPED_LEASE_RENEW_S", 0.05)
    limits = rows({"scope": "owner/app", "concurrent": 1})
    [(key, _)] = lease_sets(rows_for(limits, job(1)), job(1), keys, "host-a")
    lease = await take_lease(redis, keys, limits, job(1), "host-a")
    assert lease is not None
    first = await redis.zscore(key, "j-1")
    assert first is not None

    async def renewed() -> bool:
        score = await redis.zscore(key, "j-1")
        return score is not None and score > first

    assert await poll_until(renewed, 5)
    await lease.release()
    assert lease.renewer is None and await redis.zscore(key, "j-1") is None
