"""Jobs routed to a host that died before reading them go to another capable host, or to ``pd:jobs``
(one atomic script per move, so a job is never lost or doubled on the way).

A host is dead when its row ``pd:host:<name>`` has expired (90 s without a beat). Only entries its
worker never read are moved: those are beyond the ``workers`` group's last-delivered id (or the stream
has no group yet). Entries already delivered and still pending belong to the workers' takeover, which
knows whether a container was started. Each move is one script that re-checks "still there, still not
delivered" and appends the copy and deletes the source entry together, so a worker starting on its stream
meanwhile, or a second router doing the same, can never make a job run twice or vanish.

Forge jobs move to any capable host. A scheduled occurrence (``repeat:<id>:<ms>``) moves only to a live
host that serves its schedule, whose disk has the folder by definition, so a dead server's occurrence is
still run once by a surviving one. Other local jobs name a folder on their own host's disk and wait there
for that host to come back.
"""

from __future__ import annotations

import asyncio

from redis.exceptions import RedisError, ResponseError

from pidispatch.common.cronpattern import schedule_of
from pidispatch.common.health import Health
from pidispatch.common.keys import JOB_STATE_TTL_S, REROUTE_INTERVAL_S, REROUTE_PAGE, WORKER_GROUP, Keys
from pidispatch.common.log import get_logger
from pidispatch.common.models import Fields, job_from_fields
from pidispatch.common.redis import Redis
from pidispatch.common.registry import (
    HostRow,
    RegistryUnreachable,
    host_streams,
    is_live,
    job_needs,
    pick_host,
    read_live_hosts,
    route_job,
)
from pidispatch.common.runtime import EpochMsClock, every
from pidispatch.common.scripts import REROUTE_MOVE
from pidispatch.common.streams import last_delivered, xrange
from pidispatch.triggers.loader import FORGE_KINDS


def _after(entry_id: str) -> str:
    """The smallest id greater than ``entry_id`` (XRANGE's ``(`` form needs Redis 6.2)."""
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


async def dead_hosts(redis: Redis, keys: Keys, names: list[str]) -> list[str]:
    """The names whose liveness row no longer exists."""
    async with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.exists(keys.host(name))
        alive = await pipe.execute()
    return [name for name, n in zip(names, alive, strict=True) if not n]


def target_for(fields: Fields, hosts: list[HostRow], dead: str, keys: Keys) -> str:
    """Pure: where an undelivered forge job of ``dead`` belongs now (a capable live host, else shared)."""
    try:
        job, _ = job_from_fields(fields)
        host = route_job(job_needs(job), hosts, job.id, exclude=dead)
    except Exception:  # an entry that does not decode goes where a worker will dead-letter it
        return keys.jobs
    return keys.host_jobs(host) if host else keys.jobs


def occurrence_target(fields: Fields, hosts: list[HostRow], dead: str, keys: Keys) -> str | None:
    """Pure: the stream of a live host that serves this scheduled occurrence's schedule and drains a stream
    of its own, or None (not an occurrence, or nobody else serves it: it waits for its host)."""
    job_id = fields.get("id", "")
    sid = schedule_of(job_id)
    if sid is None:
        return None
    serving = [h.name for h in hosts if sid in h.cron and h.routes and h.name != dead and is_live(h)]
    host = pick_host(serving, job_id)
    return keys.host_jobs(host) if host else None


class _Rerouter:
    """One pass; reads the registry at most once, and only if some entry has to move."""

    def __init__(self, redis: Redis, keys: Keys, now_ms: int) -> None:
        self.redis, self.keys, self.now_ms = redis, keys, now_ms
        self._hosts: list[HostRow] | None = None

    async def live_hosts(self) -> list[HostRow]:
        if self._hosts is None:
            self._hosts = await read_live_hosts(self.redis, self.keys, self.now_ms)
        return self._hosts

    async def drain(self, host: str, stream: str) -> int:
        """Move every undelivered forge job and scheduled occurrence of ``host``'s stream; returns how many
        moved."""
        last = await last_delivered(self.redis, stream, WORKER_GROUP)
        start = _after(last) if last else "-"
        moved = 0
        while True:
            page = await xrange(self.redis, stream, min=start, count=REROUTE_PAGE)
            for entry_id, fields in page:
                if fields.get("kind") in FORGE_KINDS:
                    target: str | None = target_for(fields, await self.live_hosts(), host, self.keys)
                elif schedule_of(fields.get("id", "")) is not None:
                    target = occurrence_target(fields, await self.live_hosts(), host, self.keys)
                else:
                    target = None  # a local job's folder is on that host's disk: it waits for its host
                if target is None:
                    continue
                # The moved job's state hash names its new place; an entry without an id has none.
                job_id = fields.get("id")
                moving = [stream, target, *([self.keys.job(job_id)] if job_id else [])]
                if await REROUTE_MOVE(self.redis, moving, [WORKER_GROUP, entry_id, JOB_STATE_TTL_S]):
                    moved += 1
            if len(page) < REROUTE_PAGE:
                return moved
            start = _after(page[-1][0])


async def reroute_orphans(redis: Redis, keys: Keys, now_ms: int) -> int:
    """One pass over every dead host's stream; returns how many entries moved.

    Raises RedisError / RegistryUnreachable when Redis does not answer (nothing half-moved: each entry
    moves in one script).
    """
    streams = await host_streams(redis, keys)
    if not streams:
        return 0
    rerouter = _Rerouter(redis, keys, now_ms)
    total = 0
    for host in await dead_hosts(redis, keys, sorted(streams)):
        try:
            moved = await rerouter.drain(host, streams[host])
        except ResponseError as exc:
            # One unusable key (not a stream, say) must not hold up every other dead host's jobs.
            get_logger().warning("reroute_skipped", from_host=host, error=str(exc).split(" ", 1)[0])
            continue
        if moved:
            get_logger().info("jobs_rerouted", from_host=host, count=moved)
        total += moved
    return total


async def run_rerouter(
    redis: Redis,
    keys: Keys,
    stop: asyncio.Event,
    clock: EpochMsClock,
    *,
    interval_s: float = REROUTE_INTERVAL_S,
) -> None:
    """Re-route dead hosts' unread jobs every ``interval_s`` until ``stop``; rides out Redis outages.

    Any number of routers may run this at once: every move is one atomic script.
    """

    async def step() -> None:
        await reroute_orphans(redis, keys, clock())

    health = Health("rerouter_redis_unreachable", "rerouter_redis_restored")
    # Housekeeping: a bug here is logged as reroute_error and must not stop the router.
    await every(
        interval_s, step, stop, health,
        faults=(RedisError, OSError, RegistryUnreachable), bug_event="reroute_error",
    )  # fmt: skip
