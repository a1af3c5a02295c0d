"""Scoped job-count windows, reserved before the fleet's own windows (``budget``).

Order and atomicity: every scoped window of the job's rows is checked and incremented in one server-side
script, all or none, so a full scoped window refuses ``scope-cap`` with nothing reserved. Then the global
windows are reserved as before; when they refuse, the scoped slots are given back (the global increment
stays counted, as a refused global reservation always does). The scoped script leaves a claim per job and
attempt: an attempt run again after a crash finds it and takes no second slot, and a give-back deletes the
claim, so slots are given back at most once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from pidispatch.common.keys import (
    BUDGET_DAY_TTL_S,
    BUDGET_MONTH_TTL_S,
    BUDGET_WEEK_TTL_S,
    SCOPED_CLAIM_TTL_S,
    Keys,
)
from pidispatch.common.log import get_logger
from pidispatch.common.models import Job
from pidispatch.common.outcome import JobRefusal
from pidispatch.common.redis import Redis, bounded
from pidispatch.common.settings import Settings
from pidispatch.common.workerscripts import SCOPED_RELEASE, SCOPED_RESERVE
from pidispatch.worker.limits import budget
from pidispatch.worker.limits.scoped import ScopedLimit, rows_for

SCOPE_CAP = "scope-cap"


@dataclass(frozen=True)
class ScopedWindow:
    row: ScopedLimit
    name: str
    key: str
    cap: int
    ttl_s: int


def scoped_windows(rows: Sequence[ScopedLimit], now_ms: int, keys: Keys) -> list[ScopedWindow]:
    """Pure: every window ``rows`` set at ``now_ms`` (UTC), in row order (narrowest first), day first."""
    day = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC).date()
    monday = (day - dt.timedelta(days=day.weekday())).isoformat()
    found = []
    for row in rows:
        names = {
            "day": (keys.budget_scoped_day(row.digest, day.isoformat()), BUDGET_DAY_TTL_S),
            "week": (keys.budget_scoped_week(row.digest, monday), BUDGET_WEEK_TTL_S),
            "month": (keys.budget_scoped_month(row.digest, day.strftime("%Y-%m")), BUDGET_MONTH_TTL_S),
        }
        for name, cap in row.caps().items():
            key, ttl = names[name]
            found.append(ScopedWindow(row, name, key, cap, ttl))
    return found


@dataclass
class ScopedClaim:
    """The scoped slots one attempt holds; ``release`` gives them back once (the claim guards it)."""

    redis: Redis
    claim: str
    counters: tuple[str, ...]

    async def release(self) -> bool:
        return bool(await bounded(SCOPED_RELEASE(self.redis, [self.claim, *self.counters])))


async def reserve_scoped(
    redis: Redis, keys: Keys, job: Job, attempt: int, found: Sequence[ScopedWindow]
) -> ScopedClaim | JobRefusal:
    """One slot in every scoped window, or ``scope-cap`` with nothing taken. Raises ``RedisError``."""
    claim = keys.budget_scoped_claim(job.id, attempt)
    args: list[str | int] = [SCOPED_CLAIM_TTL_S]
    for w in found:
        args += [w.cap, w.ttl_s]
    full = int(await bounded(SCOPED_RESERVE(redis, [claim, *(w.key for w in found)], args)))
    if full > 0:
        window = found[full - 1]
        get_logger().info("budget_refused", reason=SCOPE_CAP, window=window.name, cap=window.cap,
                          scope=window.row.digest)
        return JobRefusal(SCOPE_CAP)
    return ScopedClaim(redis, claim, tuple(w.key for w in found))


async def reserve_all(
    redis: Redis, keys: Keys, settings: Settings, limits: Sequence[ScopedLimit], job: Job, attempt: int,
    now_ms: int,
) -> budget.Reservation | JobRefusal:
    """The job's scoped windows narrowest first, then the global ones (``budget.reserve``)."""
    found = scoped_windows(rows_for(limits, job), now_ms, keys)
    claim = await reserve_scoped(redis, keys, job, attempt, found) if found else None
    if isinstance(claim, JobRefusal):
        return claim
    reserved = await budget.reserve(redis, keys, settings, now_ms)
    if isinstance(reserved, JobRefusal):
        if claim is not None:
            await claim.release()  # a Redis fault here leaves the claim: the re-run counts nothing twice
        return reserved
    reserved.scoped = claim
    return reserved
