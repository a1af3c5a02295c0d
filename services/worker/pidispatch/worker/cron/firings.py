"""Each cron schedule's firings in Redis: which occurrences were queued, fleet-wide, so ``schedules`` can
show a schedule's last run and a scheduled job's ``event.json`` can name when the previous one ran; and
its stall guard, which tears down a schedule whose runs keep losing their worker."""

from __future__ import annotations

from typing import Any, cast

from redis.exceptions import RedisError

from pidispatch.common.cronpattern import schedule_of, scheduled_for
from pidispatch.common.keys import (
    REDIS_OP_TIMEOUT_S,
    SCHED_RUNS_KEEP,
    SCHED_RUNS_TTL_S,
    SCHED_STALL_WINDOW_S,
    Keys,
)
from pidispatch.common.log import get_logger
from pidispatch.common.models import Job, text
from pidispatch.common.redis import Redis, bounded
from pidispatch.common.runtime import iso_ms


async def record_firing(redis: Redis, keys: Keys, job_id: str) -> None:
    """Remember a queued occurrence (the newest ``SCHED_RUNS_KEEP``). Redis errors propagate."""
    sid, at = schedule_of(job_id), scheduled_for(job_id)
    if sid is None or at is None:
        return
    key = keys.sched_runs(sid)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.zadd(key, {job_id: at})
        pipe.zremrangebyrank(key, 0, -SCHED_RUNS_KEEP - 1)
        pipe.expire(key, SCHED_RUNS_TTL_S)
        await pipe.execute()


def _ms(value: Any) -> int | None:
    raw = text(value) if value is not None else ""
    return int(raw) if raw.isascii() and raw.isdigit() else None


async def previous_run_at(redis: Redis, keys: Keys, job: Job) -> str | None:
    """When the schedule's newest earlier firing ended (else started), as ISO; None when there is none or
    Redis cannot say (the event then carries null rather than the job failing)."""
    sid, at = schedule_of(job.id), scheduled_for(job.id)
    if sid is None or at is None:
        return None
    try:
        newest = await bounded(redis.zrevrangebyscore(keys.sched_runs(sid), at - 1, "-inf", start=0, num=1),
                               REDIS_OP_TIMEOUT_S)
        found = cast("list[bytes]", newest)
        if not found:
            return None
        ended, started = await bounded(redis.hmget(keys.job(text(found[0])), ["endedAt", "startedAt"]),
                                       REDIS_OP_TIMEOUT_S)
    except (RedisError, OSError, TimeoutError):
        return None
    ms = _ms(ended) or _ms(started)
    return iso_ms(ms) if ms is not None else None


async def last_firing(redis: Redis, keys: Keys, schedule_id: str) -> dict[str, Any] | None:
    """``{at, jobId, outcome}`` of the newest firing (``outcome``: the job's state, null once forgotten),
    or None. Redis errors propagate."""
    newest = await redis.zrevrange(keys.sched_runs(schedule_id), 0, 0, withscores=True)
    found = cast("list[tuple[bytes, float]]", newest)
    if not found:
        return None
    job_id, at = text(found[0][0]), int(found[0][1])
    state = await redis.hget(keys.job(job_id), "state")
    return {"at": iso_ms(at), "jobId": job_id, "outcome": text(state) if state else None}


# ---- the stall guard -------------------------------------------------------------------------------


async def count_stall(redis: Redis, keys: Keys, job_id: str, stall_max: int) -> None:
    """A scheduled run whose worker died under it counts one stall of its schedule in a rolling 24 h
    window; past ``stall_max`` the schedule is torn down fleet-wide until re-armed (a schedule that keeps
    killing its host must stop spending). The run's job id is the member, so a step repeated after a
    crash counts it once. Never raises."""
    sid = schedule_of(job_id)
    if sid is None:
        return
    log = get_logger()
    try:
        async with redis.pipeline(transaction=True) as pipe:
            pipe.sadd(keys.sched_stalls(sid), job_id)
            pipe.expire(keys.sched_stalls(sid), SCHED_STALL_WINDOW_S)
            pipe.scard(keys.sched_stalls(sid))
            added, _, stalls = await bounded(pipe.execute(), REDIS_OP_TIMEOUT_S)
        if added:
            log.warning("scheduler_stall_counted", schedulerId=sid, jobId=job_id, stalls=int(stalls))
        if int(stalls) > stall_max:
            async with redis.pipeline(transaction=True) as pipe:
                pipe.set(keys.sched_down(sid), str(stalls))
                pipe.delete(keys.sched_stalls(sid))
                await bounded(pipe.execute(), REDIS_OP_TIMEOUT_S)
            log.error("scheduler_torn_down", schedulerId=sid, stalls=int(stalls))
    except Exception as exc:  # the guard must never fail the record it follows
        log.error("scheduler_stall_guard_error", schedulerId=sid, error=type(exc).__name__)


async def torn_down(redis: Redis, keys: Keys, schedule_id: str) -> bool:
    """Whether the stall guard tore the schedule down. Redis errors propagate."""
    return bool(await redis.exists(keys.sched_down(schedule_id)))


async def guard_state(redis: Redis, keys: Keys, schedule_id: str) -> tuple[int, bool]:
    """(stalls in the current window, torn down). Redis errors propagate."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.scard(keys.sched_stalls(schedule_id))
        pipe.exists(keys.sched_down(schedule_id))
        stalls, down = await pipe.execute()
    return int(stalls), bool(down)


async def rearm(redis: Redis, keys: Keys, schedule_id: str) -> bool:
    """Lift a tear-down and start a fresh streak; True when the schedule was torn down."""
    removed = await redis.delete(keys.sched_down(schedule_id))
    await redis.delete(keys.sched_stalls(schedule_id))
    return bool(removed)
