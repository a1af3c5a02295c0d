"""Spend windows: the job-count budget reserved just before a container starts, and the
daily token cap.

A reservation increments every active window in one server-side script, so two workers reserving at
once both see their own increment and never the same count. A refused reservation is *not* given back:
the attempt is counted even though it did not run, which is what keeps a flood of
refused jobs from looking free. Only ``Reservation.release`` gives slots back (never-started, config).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pidispatch.common.keys import (
    BUDGET_DAY_TTL_S,
    BUDGET_MONTH_TTL_S,
    BUDGET_TOKENS_TTL_S,
    BUDGET_WEEK_TTL_S,
    Keys,
)
from pidispatch.common.log import get_logger
from pidispatch.common.outcome import JobRefusal
from pidispatch.common.redis import Redis, bounded
from pidispatch.common.settings import Settings
from pidispatch.common.workerscripts import BUDGET_ADD

OVER_BUDGET = "over-budget"
SOFT_HOLD = "soft-hold"
DAILY_TOKEN_CAP = "daily-token-cap"


@dataclass(frozen=True)
class Window:
    name: str
    key: str
    cap: int
    ttl_s: int


def _utc_day(now_ms: int) -> dt.date:
    return dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC).date()


def windows(settings: Settings, now_ms: int, keys: Keys | None = None) -> list[Window]:
    """Pure: the active job-count windows at ``now_ms`` (UTC), day first. Day is always active."""
    keys = keys or Keys(settings.key_prefix)
    day = _utc_day(now_ms)
    found = [Window("day", keys.budget_day(day.isoformat()), settings.daily_cap, BUDGET_DAY_TTL_S)]
    if settings.weekly_cap is not None:
        monday = day - dt.timedelta(days=day.weekday())
        week = keys.budget_week(monday.isoformat())
        found.append(Window("week", week, settings.weekly_cap, BUDGET_WEEK_TTL_S))
    if settings.monthly_cap is not None:
        month = keys.budget_month(day.strftime("%Y-%m"))
        found.append(Window("month", month, settings.monthly_cap, BUDGET_MONTH_TTL_S))
    return found


def window_state(reserved: int, cap: int, soft_hold_pct: int | None) -> str | None:
    """Pure: ``over-budget``, ``soft-hold`` or None (fine) for one window after this job's increment."""
    if cap <= 0 or reserved > cap:
        return OVER_BUDGET
    if soft_hold_pct is not None and reserved > cap * soft_hold_pct // 100:
        return SOFT_HOLD
    return None


def verdict(
    found: Sequence[Window], counts: Sequence[int], soft_hold_pct: int | None
) -> tuple[str, Window] | None:
    """Pure: the worst state over every window and the first window (day, week, month) in it."""
    states = [window_state(n, w.cap, soft_hold_pct) for w, n in zip(found, counts, strict=True)]
    for worst in (OVER_BUDGET, SOFT_HOLD):
        for w, state in zip(found, states, strict=True):
            if state == worst:
                return worst, w
    return None


async def _add(redis: Redis, found: Sequence[Window], amount: int) -> list[int]:
    args = [str(amount), *(str(w.ttl_s) for w in found)]
    keys = [w.key for w in found]
    # Bounded as a whole: an overrun is a Redis fault (a RedisError) like any other.
    counts = await bounded(BUDGET_ADD(redis, keys, args))
    return [int(n) for n in counts]


class Releasable(Protocol):
    async def release(self) -> bool: ...


@dataclass
class Reservation:
    """Slots taken in each active window by one attempt; ``release`` gives them back at most once.
    ``scoped`` is the attempt's scoped reservation, given back with it."""

    redis: Redis
    windows: tuple[Window, ...]
    counts: tuple[int, ...]
    released: bool = False
    scoped: Releasable | None = None
    _spent: bool = field(default=False, repr=False)

    async def release(self) -> bool:
        """DECR exactly the windows this reservation incremented. True when this call gave them back.

        A second call does nothing. A Redis fault propagates and the slots stay counted (the record then
        says ``budgetReserved``); it is not retried, because the failed call may have applied.
        """
        if self._spent:
            return False
        self._spent = True
        if self.scoped is not None:  # guarded by its own claim: safe to call again after a fault here
            await self.scoped.release()
        await _add(self.redis, self.windows, -1)
        self.released = True
        return True


async def reserve(redis: Redis, keys: Keys, settings: Settings, now_ms: int) -> Reservation | JobRefusal:
    """Take one slot in every active window, or refuse ``over-budget``/``soft-hold``.

    A refused reservation keeps its increment and says so (``budget_reserved=True``). Raises
    ``RedisError`` when Redis cannot answer: the caller holds the job, nothing was decided.
    """
    found = windows(settings, now_ms, keys)
    counts = await _add(redis, found, 1)
    bad = verdict(found, counts, settings.soft_hold_pct)
    if bad is not None:
        reason, window = bad
        get_logger().info("budget_refused", reason=reason, window=window.name, cap=window.cap)
        return JobRefusal(reason, budget_reserved=True)
    return Reservation(redis=redis, windows=tuple(found), counts=tuple(counts))


def token_key(keys: Keys, now_ms: int) -> str:
    return keys.budget_tokens(_utc_day(now_ms).isoformat())


async def token_cap_refusal(redis: Redis, keys: Keys, settings: Settings, now_ms: int) -> JobRefusal | None:
    """Read-only: refuse ``daily-token-cap`` once today's recorded spend reached the cap.

    A lagging cap: jobs already running can overshoot it. Raises ``RedisError`` when Redis cannot answer.
    """
    cap = settings.daily_token_cap
    if cap is None:
        return None
    if cap > 0:
        raw = await bounded(redis.get(token_key(keys, now_ms)))
        spent = int(raw) if raw is not None else 0
        if spent < cap:
            return None
    get_logger().info("budget_refused", reason=DAILY_TOKEN_CAP, window="tokens", cap=cap)
    return JobRefusal(DAILY_TOKEN_CAP)


async def record_token_spend(
    redis: Redis, keys: Keys, settings: Settings, now_ms: int, total: float
) -> None:
    """Add a finished run's tokens to today's counter. Never raises: the run is paid for either way.

    ``total`` comes from the container's exit line: anything but a positive finite number counts nothing.
    """
    if settings.daily_token_cap is None or isinstance(total, bool) or not isinstance(total, int | float):
        return
    if not math.isfinite(total) or int(total) <= 0:
        return
    total = int(total)
    window = Window("tokens", token_key(keys, now_ms), settings.daily_token_cap, BUDGET_TOKENS_TTL_S)
    try:
        await _add(redis, [window], total)
    except Exception as exc:
        get_logger().warning("token_spend_error", error=type(exc).__name__)
