"""Spend windows on a real Redis: caps, the soft hold before them, releases and counter expiry."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
import structlog
from redis.exceptions import RedisError

from pidispatch.common.embedded import free_port
from pidispatch.common.keys import BUDGET_DAY_TTL_S, BUDGET_MONTH_TTL_S, BUDGET_WEEK_TTL_S, Keys
from pidispatch.common.outcome import JobRefusal
from pidispatch.common.redis import Redis, create_redis
from pidispatch.common.settings import Settings, load_settings
from pidispatch.worker.limits.budget import (
    Reservation,
    record_token_spend,
    reserve,
    token_cap_refusal,
    windows,
)


def ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)


# A Thursday, a minute before midnight UTC.
NOW = ms("2026-12-03T23:59:00+00:00")


def settings(keys: Keys, **env: str) -> Settings:
    return load_settings({"PD_KEY_PREFIX": keys.prefix, **env})


async def count(redis: Redis, key: str) -> int | None:
    raw = await redis.get(key)
    return None if raw is None else int(raw)


def test_only_the_day_window_is_on_by_default(keys: Keys) -> None:
    [day] = windows(settings(keys), NOW)  # keys default to the settings' prefix
    assert (day.name, day.key, day.cap) == ("day", keys.budget_day("2026-12-03"), 25)
    assert day.ttl_s == BUDGET_DAY_TTL_S


@pytest.mark.parametrize(
    ("now", "monday", "month"),
    [
        ("2026-12-03T23:59:00+00:00", "2026-11-30", "2026-12"),  # Thursday
        ("2026-11-30T00:00:00+00:00", "2026-11-30", "2026-11"),  # Monday itself
        ("2026-12-06T23:59:59+00:00", "2026-11-30", "2026-12"),  # Sunday: still that week
        # 01:00 on a Monday in UTC+2 is still Sunday in UTC: windows are UTC.
        ("2026-12-07T01:00:00+02:00", "2026-11-30", "2026-12"),
        ("2027-01-01T00:30:00+01:00", "2026-12-28", "2026-12"),
    ],
)
def test_week_key_is_the_utc_monday_and_month_key_the_utc_month(
    keys: Keys, now: str, monday: str, month: str
) -> None:
    found = windows(settings(keys, PI_WEEKLY_CAP="100", PI_MONTHLY_CAP="300"), ms(now), keys)
    assert [w.name for w in found] == ["day", "week", "month"]
    week, mon = found[1], found[2]
    assert (week.key, week.cap, week.ttl_s) == (keys.budget_week(monday), 100, BUDGET_WEEK_TTL_S)
    assert (mon.key, mon.cap, mon.ttl_s) == (keys.budget_month(month), 300, BUDGET_MONTH_TTL_S)


async def test_over_the_day_cap_refuses_and_keeps_the_increment(redis: Redis, keys: Keys) -> None:
    day = keys.budget_day("2026-12-03")
    await redis.set(day, 10)
    got = await reserve(redis, keys, settings(keys, PI_DAILY_CAP="10"), NOW)
    assert got == JobRefusal("over-budget", budget_reserved=True)
    assert await count(redis, day) == 11


async def test_soft_hold_band_refuses_before_the_cap(redis: Redis, keys: Keys) -> None:
    day = keys.budget_day("2026-12-03")
    s = settings(keys, PI_DAILY_CAP="5", PI_SOFT_HOLD_PCT="80")
    await redis.set(day, 3)
    first = await reserve(redis, keys, s, NOW)  # 4 > floor(5 * 80 / 100) = 4 is false: runs
    assert isinstance(first, Reservation)
    second = await reserve(redis, keys, s, NOW)  # 5 > 4: held
    assert second == JobRefusal("soft-hold", budget_reserved=True)
    assert await count(redis, day) == 5


async def test_over_budget_in_any_window_beats_soft_hold_in_another(redis: Redis, keys: Keys) -> None:
    s = settings(keys, PI_DAILY_CAP="10", PI_SOFT_HOLD_PCT="50", PI_WEEKLY_CAP="3")
    await redis.set(keys.budget_day("2026-12-03"), 7)
    await redis.set(keys.budget_week("2026-11-30"), 3)
    assert await reserve(redis, keys, s, NOW) == JobRefusal("over-budget", budget_reserved=True)


async def test_a_cap_of_zero_refuses_every_job(redis: Redis, keys: Keys) -> None:
    assert await reserve(redis, keys, settings(keys, PI_DAILY_CAP="0"), NOW) == JobRefusal(
        "over-budget", budget_reserved=True
    )


async def test_release_gives_back_exactly_the_reserved_windows_once(redis: Redis, keys: Keys) -> None:
    s = settings(keys, PI_WEEKLY_CAP="50")
    other = keys.budget_month("2026-12")  # not an active window: never touched
    await redis.set(other, 9)
    got = await reserve(redis, keys, s, NOW)
    assert isinstance(got, Reservation)
    day, week = keys.budget_day("2026-12-03"), keys.budget_week("2026-11-30")
    assert (await count(redis, day), await count(redis, week)) == (1, 1)
    assert await got.release() is True
    assert await got.release() is False
    assert (await count(redis, day), await count(redis, week), await count(redis, other)) == (0, 0, 9)
    assert got.released


async def test_ttl_is_set_when_a_counter_is_created_and_never_extended(redis: Redis, keys: Keys) -> None:
    s = settings(keys, PI_WEEKLY_CAP="50")
    day, week = keys.budget_day("2026-12-03"), keys.budget_week("2026-11-30")
    await reserve(redis, keys, s, NOW)
    assert BUDGET_DAY_TTL_S - 5 <= await redis.ttl(day) <= BUDGET_DAY_TTL_S
    assert BUDGET_WEEK_TTL_S - 5 <= await redis.ttl(week) <= BUDGET_WEEK_TTL_S
    await redis.expire(day, 100)
    await reserve(redis, keys, s, NOW)
    assert 0 < await redis.ttl(day) <= 100


async def test_a_counter_that_lost_its_ttl_gets_one_back(redis: Redis, keys: Keys) -> None:
    day = keys.budget_day("2026-12-03")
    await redis.set(day, 2)
    await reserve(redis, keys, settings(keys), NOW)
    assert await redis.ttl(day) > 0


async def test_concurrent_reservations_never_share_a_slot(redis: Redis, keys: Keys) -> None:
    s = settings(keys, PI_DAILY_CAP="10")
    got = await asyncio.gather(*(reserve(redis, keys, s, NOW) for _ in range(25)))
    ran = [g for g in got if isinstance(g, Reservation)]
    assert len(ran) == 10
    assert sorted(r.counts[0] for r in ran) == list(range(1, 11))
    assert await count(redis, keys.budget_day("2026-12-03")) == 25


async def test_reserve_propagates_a_redis_fault(keys: Keys) -> None:
    dead = create_redis(f"redis://127.0.0.1:{free_port()}/0")
    try:
        with pytest.raises(RedisError):
            await reserve(dead, keys, settings(keys), NOW)
    finally:
        await dead.aclose()


async def test_token_cap_is_a_lagging_read_only_cap(redis: Redis, keys: Keys) -> None:
    s = settings(keys, PI_DAILY_TOKEN_CAP="100")
    key = keys.budget_tokens("2026-12-03")
    assert await token_cap_refusal(redis, keys, s, NOW) is None
    assert await count(redis, key) is None  # a read creates nothing
    await record_token_spend(redis, keys, s, NOW, 99)
    assert await token_cap_refusal(redis, keys, s, NOW) is None
    assert BUDGET_DAY_TTL_S - 5 <= await redis.ttl(key) <= BUDGET_DAY_TTL_S
    await record_token_spend(redis, keys, s, NOW, 1)
    assert await token_cap_refusal(redis, keys, s, NOW) == JobRefusal("daily-token-cap")
    assert await count(redis, key) == 100


async def test_token_cap_off_or_zero(redis: Redis, keys: Keys) -> None:
    off = settings(keys)
    await record_token_spend(redis, keys, off, NOW, 500)
    assert await count(redis, keys.budget_tokens("2026-12-03")) is None
    assert await token_cap_refusal(redis, keys, off, NOW) is None
    zero = settings(keys, PI_DAILY_TOKEN_CAP="0")
    assert await token_cap_refusal(redis, keys, zero, NOW) == JobRefusal("daily-token-cap")


async def test_no_tokens_or_a_nonsense_total_records_nothing(redis: Redis, keys: Keys) -> None:
    s = settings(keys, PI_DAILY_TOKEN_CAP="100")
    for total in (0, -5, float("nan"), float("inf"), True, "12"):
        await record_token_spend(redis, keys, s, NOW, total)  # type: ignore[arg-type]
    assert await count(redis, keys.budget_tokens("2026-12-03")) is None
    await record_token_spend(redis, keys, s, NOW, 12.0)
    assert await count(redis, keys.budget_tokens("2026-12-03")) == 12


async def test_token_spend_never_raises(keys: Keys) -> None:
    dead = create_redis(f"redis://127.0.0.1:{free_port()}/0")
    try:
        with structlog.testing.capture_logs() as logs:
            await record_token_spend(dead, keys, settings(keys, PI_DAILY_TOKEN_CAP="100"), NOW, 10)
    finally:
        await dead.aclose()
    assert [entry["event"] for entry in logs] == ["token_spend_error"]
