"""Scoped ``concurrent`` ceilings: a lease per running job in a sorted set per row, shared by the fleet.

A lease is the job's id scored by when it runs out (on Redis's clock). It is taken in every row of the
job at once (all or none), renewed while the job runs, and removed when its attempt ends; a crashed
worker's lease runs out by itself within ``SCOPED_LEASE_TTL_MS``. A forge job's rows count the whole
fleet; a local job's folder is one host's, so its rows count that host's jobs only (the host is part of
the set's name).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from pidispatch.common.keys import SCOPED_LEASE_RENEW_S, SCOPED_LEASE_TTL_MS, Keys
from pidispatch.common.log import get_logger
from pidispatch.common.models import Job
from pidispatch.common.redis import Redis, bounded
from pidispatch.common.workerscripts import SCOPED_LEASE_TAKE
from pidispatch.worker.limits.scoped import ScopedLimit, rows_for


def lease_sets(rows: Sequence[ScopedLimit], job: Job, keys: Keys, host: str) -> list[tuple[str, int]]:
    """Pure: (lease set, ceiling) for every row of ``rows`` with a ceiling, in row order."""
    found = []
    for row in rows:
        if row.concurrent is None:
            continue
        name = row.digest
        if job.is_local:  # one host's folder: a same-named folder elsewhere is another folder
            name = hashlib.sha256(f"{host}\n{row.digest}".encode()).hexdigest()[:16]
        found.append((keys.scoped_lease(name), row.concurrent))
    return found


@dataclass
class Lease:
    """Leases one job holds; ``release`` stops renewing them and removes them (at most once)."""

    redis: Redis
    job_id: str
    sets: tuple[str, ...]
    renewer: asyncio.Task[None] | None = field(default=None, repr=False)

    async def release(self) -> None:
        """Never raises: a lease not removed runs out by itself."""
        if self.renewer is not None:
            self.renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.renewer
            self.renewer = None
        if not self.sets:
            return
        sets, self.sets = self.sets, ()
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                for key in sets:
                    pipe.zrem(key, self.job_id)
                await bounded(pipe.execute())
        except RedisError as exc:
            get_logger().warning("scoped_lease_release_failed", job=self.job_id, error=type(exc).__name__)


async def _take(redis: Redis, sets: Sequence[tuple[str, int]], job_id: str) -> int:
    args: list[str | int] = [job_id, SCOPED_LEASE_TTL_MS, *(ceiling for _, ceiling in sets)]
    return int(await bounded(SCOPED_LEASE_TAKE(redis, [key for key, _ in sets], args)))


async def _renew(redis: Redis, sets: Sequence[tuple[str, int]], job_id: str) -> None:
    """Until cancelled. A renewal that fails leaves the lease to run out: the ceiling may then be passed
    while Redis is unreachable, which is logged."""
    while True:
        await asyncio.sleep(SCOPED_LEASE_RENEW_S)
        try:
            if await _take(redis, sets, job_id) != 0:
                get_logger().warning("scoped_lease_lost", job=job_id)
        except RedisError as exc:
            get_logger().warning("scoped_lease_renew_failed", job=job_id, error=type(exc).__name__)


async def take_lease(
    redis: Redis, keys: Keys, limits: Sequence[ScopedLimit], job: Job, host: str
) -> Lease | None:
    """The job's leases (an empty one when no row of it sets ``concurrent``), or None when a row is at
    its ceiling. Raises ``RedisError``: the caller holds the job."""
    sets = lease_sets(rows_for(limits, job), job, keys, host)
    if not sets:
        return Lease(redis, job.id, ())
    full = await _take(redis, sets, job.id)
    if full:
        get_logger().info("scoped_lease_full", job=job.id, ceiling=sets[full - 1][1])
        return None
    renewer = asyncio.create_task(_renew(redis, sets, job.id))
    return Lease(redis, job.id, tuple(key for key, _ in sets), renewer)
