"""Serving the cron triggers: the scheduler's loop, its fleet gate and the triggers file's watch, started
together."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Mapping

from pidispatch.common.filewatch import signature, watch_file
from pidispatch.common.keys import Keys
from pidispatch.common.log import get_logger
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import EpochMsClock
from pidispatch.common.settings import cron_min_interval
from pidispatch.worker.cron.gate import Gate
from pidispatch.worker.cron.schedules import Scheduler, host_zone, load_schedules


async def start_schedules(
    env: Mapping[str, str], redis: Redis, keys: Keys, stream: str, clock: EpochMsClock, stop: asyncio.Event,
    *, host: str, recheck_s: float,
) -> tuple[Scheduler, list[asyncio.Task[None]]] | None:
    """Serve the cron triggers of ``PI_TRIGGERS_FILE`` (unset: none, returns None): the serving loop, the
    fleet gate (re-checked every ``recheck_s``) and the file's watch. A bad file or ``TZ`` at start raises
    ``ConfigError`` (exit 2); a missing file serves nothing until it appears; a bad edit keeps the running
    set (``schedules_reload_invalid``)."""
    path = (env.get("PI_TRIGGERS_FILE") or "").strip()
    if not path:
        return None
    zone, tz = host_zone(env)
    load = functools.partial(load_schedules, cron_floor_s=cron_min_interval(env))
    scheduler = Scheduler(redis=redis, keys=keys, stream=stream, clock=clock, zone=zone, tz=tz)
    gate = Gate(scheduler, host, recheck_s)
    # The router's file need not be on every worker host: absent, nothing is served until it appears.
    # Its signature is taken before the load, so an edit racing the start is seen by the watch.
    since = await asyncio.to_thread(signature, path)
    if since is not None:
        scheduler.swap(await asyncio.to_thread(load, path))
        await gate.reconcile()
    else:
        get_logger().info("schedules_file_missing", file=os.path.basename(path), served=[])
    get_logger().info("schedules_started", served=sorted(scheduler.active), tz=tz, at=clock())
    tasks = [
        asyncio.create_task(scheduler.run(stop)),
        asyncio.create_task(gate.run(stop)),
        asyncio.create_task(watch_file(
            path, load, scheduler.swap, stop, what="schedules",
            fields=lambda loaded: {"wanted": sorted(r.id for r in loaded.mine)}, since=(since,),
        )),
    ]
    return scheduler, tasks
