"""A worker's duties beside its jobs: the liveness row, fresh pending entries, cancel requests, and
taking over the pending jobs of a host whose row expired.

A peer claims a dead host's entries only when its row is gone AND the entries sat idle for the row's
whole lifetime; a live worker re-claims its running entries to itself every beat, so both tests agree
that nobody owns them before anything moves.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from redis.exceptions import RedisError, ResponseError
from redis.typing import StreamIdT

from pidispatch.common import __version__
from pidispatch.common.keys import CANCEL_ACK_TTL_MS, CANCEL_POLL_S, WORKER_GROUP
from pidispatch.common.log import get_logger
from pidispatch.common.models import text
from pidispatch.common.registry import EGRESS_FIELD, JOB_IMAGE_FIELD, host_streams, path_shaped
from pidispatch.common.runtime import every
from pidispatch.common.streams import Entry, ack, claim, pending, wire
from pidispatch.worker.context import Held, WorkerContext
from pidispatch.worker.engine.runner import OPERATOR_CANCEL
from pidispatch.worker.limits import budget

if TYPE_CHECKING:
    from pidispatch.worker.cron.schedules import Scheduler

SlotKey = tuple[str, str]


class Upkeep:
    def __init__(
        self, ctx: WorkerContext, streams: list[str], slots: Mapping[SlotKey, Held], stop: asyncio.Event
    ) -> None:
        self.ctx, self.streams, self.slots, self.stop = ctx, streams, slots, stop
        self.started_ms = ctx.clock()
        self.log = get_logger()
        self.refused: set[str] = set()
        # Set when this worker serves cron schedules: the row then names them (fleet view, ``schedules``).
        self.scheduler: Scheduler | None = None
        # Set once Docker answered at start: IMAGE_PRESENT or IMAGE_MISSING (``status`` reads it).
        self.job_image: str | None = None

    # ---- liveness -----------------------------------------------------------------------------------

    def row(self) -> dict[str, str]:
        s = self.ctx.settings
        fields = {
            "name": s.worker_name,
            "beatAt": str(self.ctx.clock()),
            "startedAt": str(self.started_ms),
            "version": __version__,
            "routes": "true" if s.worker_name_declared else "false",
            "concurrency": str(s.concurrency),
            "running": str(len(self.slots)),
            "tz": self.ctx.env.get("TZ") or time.tzname[0],
            "image": s.job_image,
            "caps": ",".join(sorted(self.ctx.caps)),
            EGRESS_FIELD: "on" if s.egress.enabled else "off",
        }
        if self.scheduler is not None:
            fields.update(self.scheduler.row_fields())
        if self.job_image is not None:
            fields[JOB_IMAGE_FIELD] = self.job_image
        clean = {}
        for name, value in fields.items():
            # Names, numbers and digests only: a path would tell every reader of Redis this host's layout.
            if path_shaped(value):
                if name not in self.refused:
                    self.refused.add(name)
                    self.log.warning("host_registry_field_refused", field=name, reason="path-shaped")
                continue
            clean[name] = value
        return clean

    async def beat(self) -> None:
        """Write the row, then re-claim every held entry to ourselves so its idle time starts over."""
        ctx = self.ctx
        key = ctx.keys.host(ctx.host)
        # The budget gauges ride on the beat: the active windows' counters, read with the row's write.
        found = budget.windows(ctx.settings, ctx.clock(), ctx.keys)
        async with ctx.redis.pipeline(transaction=False) as pipe:
            for window in found:
                pipe.get(window.key)
            pipe.hset(key, mapping=wire(self.row()))
            pipe.pexpire(key, ctx.settings.host_ttl_ms)
            pipe.sadd(ctx.keys.hosts, ctx.host)
            by_stream: dict[str, list[StreamIdT]] = {}
            for stream, entry_id in list(self.slots):
                by_stream.setdefault(stream, []).append(entry_id)
            for stream, ids in by_stream.items():
                pipe.xclaim(stream, WORKER_GROUP, ctx.host, 0, ids, justid=True)
            used = (await pipe.execute())[:len(found)]
        ctx.metrics.budget_used({w.name: int(n or 0) for w, n in zip(found, used, strict=True)})

    async def run_heartbeat(self) -> None:
        # A missed beat is tried again on the next one, not sooner: the row outlives several beats.
        interval = self.ctx.settings.host_beat_ms / 1000
        await every(interval, self.beat, self.stop, self.ctx.redis_health, back_off=False)

    async def remove_row(self) -> None:
        """Clean shutdown with nothing left running: peers need not wait for the row to expire."""
        with contextlib.suppress(RedisError):
            async with self.ctx.redis.pipeline(transaction=False) as pipe:
                pipe.delete(self.ctx.keys.host(self.ctx.host))
                pipe.srem(self.ctx.keys.hosts, self.ctx.host)
                await pipe.execute()

    # ---- cancel requests ----------------------------------------------------------------------------

    async def poll_cancels(self) -> None:
        """One round trip: DEL each held job's request key; a 1 means somebody asked to cancel it."""
        held = [h for h in list(self.slots.values()) if h.job_id is not None]
        if not held:
            return
        ctx = self.ctx
        async with ctx.redis.pipeline(transaction=False) as pipe:
            for h in held:
                pipe.delete(ctx.keys.cancel(h.job_id or ""))
            found = await pipe.execute()
        for h, hit in zip(held, found, strict=True):
            if hit:
                self.log.info("job_cancel_requested", job=h.job_id)
                h.abort.trigger(OPERATOR_CANCEL)
                await ctx.redis.set(ctx.keys.cancel_ack(h.job_id or ""), ctx.host, px=CANCEL_ACK_TTL_MS)

    async def run_cancel_poll(self) -> None:
        # Silent on Redis faults: the heartbeat's health already reports them.
        await every(CANCEL_POLL_S, self.poll_cancels, self.stop, None, back_off=False)

    # ---- takeover -----------------------------------------------------------------------------------

    async def _streams_to_watch(self) -> list[str]:
        """The streams this worker drains, then every other host's stream: a dead host's pending jobs
        are nobody's unless a peer claims them."""
        others = set((await host_streams(self.ctx.redis, self.ctx.keys)).values()) - set(self.streams)
        return [*self.streams, *sorted(others)]

    async def claim_orphans(self, limit: int) -> list[Entry]:
        """Up to ``limit`` pending entries of hosts whose liveness row expired, claimed to this worker."""
        ctx, ttl = self.ctx, self.ctx.settings.host_ttl_ms
        claimed: list[Entry] = []
        for stream in await self._streams_to_watch():
            try:
                summary = await ctx.redis.xpending(stream, WORKER_GROUP)
            except ResponseError:
                continue  # no group yet: no worker ever read it, so nothing is pending there
            for row in summary.get("consumers") or []:
                owner = text(row["name"])
                if owner == ctx.host or await ctx.redis.exists(ctx.keys.host(owner)):
                    continue
                rows = await pending(
                    ctx.redis, stream, WORKER_GROUP, count=limit - len(claimed), consumer=owner, idle_ms=ttl
                )
                if not rows:
                    continue
                # min_idle_time makes the claim exclusive: a second peer finds the idle time reset.
                got, gone = await claim(
                    ctx.redis, stream, WORKER_GROUP, ctx.host, ttl, [row.entry_id for row in rows]
                )
                # Deleted from the stream meanwhile: nothing to run.
                await ack(ctx.redis, stream, WORKER_GROUP, *gone)
                claimed += [(stream, entry_id, fields) for entry_id, fields in got]
                if got or gone:
                    self.log.warning("jobs_taken_over", dead_host=owner, count=len(got) + len(gone))
                    ctx.metrics.took_over(len(got) + len(gone))
                if len(claimed) >= limit:
                    return claimed
        return claimed
