"""The gates a job passes at pickup, before anything is reserved: quiet hours, then its wait-for
conditions. A job either goes on, goes back to ``pd:delayed`` (no attempt used, nothing recorded), or is
refused (the caller records the refusal). Also the steps every deferral shares."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from pidispatch.common import delayed
from pidispatch.common.health import Backoff
from pidispatch.common.keys import DEFER_MS, WORKER_GROUP
from pidispatch.common.log import get_logger
from pidispatch.common.models import Job
from pidispatch.worker.context import Held, WorkerContext
from pidispatch.worker.engine.attempt import AttemptOutcome
from pidispatch.worker.limits.pausewindows import pause_until
from pidispatch.worker.waits.gate import Defer, Refuse

# A window closing within a second is not waited for: the job just runs.
WINDOW_SLACK_MS = 1_000


class Deferred:
    """The job went back to ``pd:delayed``: nothing more to do with this delivery."""


DEFERRED = Deferred()


async def pickup_gates(
    ctx: WorkerContext, held: Held, job: Job, attempt: int
) -> Deferred | AttemptOutcome | None:
    """None to go on, ``DEFERRED`` when the job waits, or the refusal to record. Redis errors propagate
    (the job is held, never refused for want of Redis)."""
    if ctx.pause_windows and await _held_by_window(ctx, held, job, attempt):
        return DEFERRED
    if ctx.wait_gate is None or not job.wait_for:
        return None
    verdict = await ctx.wait_gate.decide(job, held.abort)
    if isinstance(verdict, Refuse):
        return AttemptOutcome("policy", verdict.reason)
    if isinstance(verdict, Defer):
        await defer(ctx, held, job, attempt, why=f"wait-{verdict.why}", delay_ms=verdict.delay_ms)
        return DEFERRED
    return None


async def defer(
    ctx: WorkerContext, held: Held, job: Job, attempt: int, why: str = "folder-busy", *,
    delay_ms: int = DEFER_MS,
) -> None:
    """Back to ``pd:delayed`` for ``delay_ms`` without using an attempt (its folder is busy here, a scoped
    ceiling is reached, or it waits for a condition)."""
    get_logger().info("job_deferred", job=job.id, why=why, delayMs=delay_ms)
    await _back_to_delayed(ctx, held, job, attempt, delay_ms)


async def _back_to_delayed(ctx: WorkerContext, held: Held, job: Job, attempt: int, delay_ms: int) -> None:
    """The entry as it came, same attempt, into ``pd:delayed`` for ``delay_ms`` (acked in the same step)."""
    await until_done(ctx, lambda: delayed.schedule(
        ctx.redis, ctx.keys, source=held.stream, group=WORKER_GROUP, entry_id=held.entry_id,
        stream=held.stream, fields=held.fields, job_id=job.id, attempt=attempt, delay_ms=delay_ms,
    ))


async def _held_by_window(ctx: WorkerContext, held: Held, job: Job, attempt: int) -> bool:
    """Inside a quiet-hours window: back to ``pd:delayed`` until it closes, using no attempt."""
    now = ctx.clock()
    until = pause_until(ctx.pause_windows, job, now)
    if until is None or until - now <= WINDOW_SLACK_MS:  # closing within a second: just run
        return False
    get_logger().info("job_paused_by_window", job=job.id, until=until)
    await until_done(ctx, lambda: _note_window_hold(ctx, job.id, now, until))
    await _back_to_delayed(ctx, held, job, attempt, until - now)
    return True


async def _note_window_hold(ctx: WorkerContext, job_id: str, now: int, until: int) -> None:
    # For status only: members whose window closed are dropped as new ones come.
    async with ctx.redis.pipeline(transaction=False) as pipe:
        pipe.zremrangebyscore(ctx.keys.window_held, "-inf", now)
        pipe.zadd(ctx.keys.window_held, {job_id: until})
        await pipe.execute()


async def until_done(ctx: WorkerContext, step: Callable[[], Awaitable[object]]) -> None:
    """A step that must happen once the record exists: retried through a Redis outage."""
    backoff = Backoff()
    while True:
        try:
            await step()
            ctx.redis_health.ok()
            return
        except RedisError as exc:
            ctx.redis_health.failed(reason=type(exc).__name__)
        await asyncio.sleep(backoff.next())
