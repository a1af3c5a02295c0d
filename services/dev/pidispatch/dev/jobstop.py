"""What dev does with jobs its worker is running when it stops: cancel them and wait for their record.

dev removes everything it started when it stops, and its stand-in model stops with it, so a job left
running for a later re-attach could only fail, and would be recorded ``worker-lost`` once its container
was gone. Instead each running job is cancelled the way ``pi-dispatch cancel`` does it (the worker stops
the container and records ``operator-cancel``) before the worker is stopped; a second Ctrl-C stops at once
and says what that leaves.
"""

from __future__ import annotations

import asyncio
import time

from redis.exceptions import RedisError, ResponseError

from pidispatch.common.keys import WORKER_GROUP, Keys
from pidispatch.common.models import decode_fields
from pidispatch.common.redis import Redis, redis_for
from pidispatch.common.settings import Settings
from pidispatch.common.streams import pending
from pidispatch.worker.lifecycle import TERMINAL_STATES

RUNNING_STATES = frozenset({"starting", "launching", "running"})
CANCEL_TTL_MS = 60_000
WAIT_S = 20.0  # the container gets 5 s to stop, then the record is written


async def _held_jobs(redis: Redis, keys: Keys, host: str) -> list[str]:
    """The job ids of the entries the worker ``host`` holds, in either stream it reads."""
    ids: list[str] = []
    for stream in (keys.host_jobs(host), keys.jobs):
        try:
            rows = await pending(redis, stream, WORKER_GROUP, count=100, consumer=host)
        except ResponseError:  # no such stream or group yet
            continue
        for row in rows:
            hit = await redis.xrange(stream, min=row.entry_id, max=row.entry_id, count=1)
            job = decode_fields(hit[0][1] or {}).get("id") if hit else None
            if job:
                ids.append(job)
    return ids


async def _state(redis: Redis, keys: Keys, job_id: str) -> str:
    return decode_fields(await redis.hgetall(keys.job(job_id)) or {}).get("state", "")


async def cancel_running(settings: Settings, hurry: asyncio.Event) -> None:
    """Cancel the jobs dev's worker runs and wait (at most ``WAIT_S``, or until ``hurry``) for their
    records. Silent when none runs; a Redis that does not answer leaves the jobs to the worker's stop."""
    keys, host = Keys(settings.key_prefix), settings.worker_name
    redis = redis_for(settings)
    try:
        held = await asyncio.wait_for(_held_jobs(redis, keys, host), 3)
        running = [j for j in held if await _state(redis, keys, j) in RUNNING_STATES]
        for job in running:
            await redis.set(keys.cancel(job), "dev-stopped", px=CANCEL_TTL_MS)
            print(f"pi-dispatch dev: cancelling running job {job} (its record will say operator-cancel); "
                  "Ctrl-C again to stop at once", flush=True)
        deadline = time.monotonic() + WAIT_S
        left = list(running)
        while left and time.monotonic() < deadline and not hurry.is_set():
            left = [j for j in left if await _state(redis, keys, j) not in TERMINAL_STATES]
            if left:
                await asyncio.sleep(0.2)
        for job in left:
            print(f"pi-dispatch dev: job {job} was stopped before its record was written; the next dev "
                  "start here records it failed (worker-lost)", flush=True)
    except (RedisError, OSError, TimeoutError):
        return
    finally:
        await redis.aclose()
