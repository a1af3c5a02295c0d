"""The router's consumer loop over ``pd:events`` (group ``router``).

Work is done a page at a time (``router.pages`` says how a page earns exactly-once effects from an
at-least-once hand-off): this module reads the pages, retries its own entries left pending and claims
its peers' idle ones, parks an entry out of tries, and keeps the loop alive through Redis faults.

The consumer name is ``router.consumer.consumer_name``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from redis.exceptions import ResponseError

from pidispatch.common.dedup import upgrade_until
from pidispatch.common.health import Backoff, Health
from pidispatch.common.keys import READ_BLOCK_MS, ROUTER_GROUP, Keys
from pidispatch.common.log import get_logger
from pidispatch.common.models import Fields
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import EpochMsClock, every, iso_ms, now_ms, unless_stopped
from pidispatch.common.settings import Settings
from pidispatch.common.streams import (
    Entry,
    claim,
    claim_idle,
    delivery_count,
    ensure_group,
    pending,
    read_group,
)
from pidispatch.router.consumer import consumer_name
from pidispatch.router.metrics import BACKLOG_REFRESH_S, RouterMetrics
from pidispatch.router.pages import TRANSIENT, Asker, Pages
from pidispatch.router.trim import mark_read, mark_spacing, run_trimmer
from pidispatch.triggers import decisions
from pidispatch.triggers.lookup import Indeterminate, Question, SelfIds, Verdict
from pidispatch.triggers.rules import RulesRef

READ_COUNT = 64
CLAIM_COUNT = 64
# Bounded work per claim tick, so a huge pending list never starves new events; the cursor carries over.
CLAIM_PAGES_PER_TICK = 8
# Own entries left pending by a failed lookup or a processing error are retried after
# RETRY_FIRST_MS * 2^(deliveries-1), capped; Redis's idle time and delivery count hold that state, so it
# survives a restart.
RETRY_FIRST_MS = 1_000
RETRY_MAX_MS = 60_000
RETRY_TICK_S = 0.5


def retry_after_ms(deliveries: int) -> int:
    """How long an own pending entry rests before its next try."""
    return int(min(RETRY_FIRST_MS * 2 ** max(deliveries - 1, 0), RETRY_MAX_MS))


async def _no_authority(question: Question, delivery: str) -> Verdict:
    return Indeterminate("not-configured")


async def run_router(
    settings: Settings,
    redis: Redis,
    keys: Keys,
    rules_ref: RulesRef,
    stop: asyncio.Event,
    clock: EpochMsClock = now_ms,
    *,
    self_ids: SelfIds | None = None,
    ask: Asker | None = None,
    consumer: str | None = None,
    redis_health: Health | None = None,
    metrics: RouterMetrics | None = None,
) -> None:
    """Consume ``pd:events`` until ``stop`` is set; transient Redis errors never end it (``redis_health``)."""
    metrics = metrics or RouterMetrics()  # kept even when no endpoint serves them: they cost nothing
    ask = ask or _no_authority
    pages = Pages(settings, redis, keys, rules_ref, clock, self_ids or SelfIds(), ask, metrics)
    router = Router(settings, redis, keys, clock, consumer or consumer_name(), pages, metrics, redis_health)
    get_logger().info("router_started", consumer=router.consumer, rules=rules_ref.current.count)
    # Every router trims: each step is one atomic XTRIM behind the groups, so peers never over-cut.
    trimmer = asyncio.create_task(run_trimmer(redis, keys, settings.events_maxlen, stop))
    # The backlog gauges on a timer of their own, so a scrape never waits on Redis.
    backlog = asyncio.create_task(every(
        BACKLOG_REFRESH_S, lambda: router.metrics.refresh_backlog(redis, keys), stop, None,
        back_off=False, bug_event="router_backlog_error",
    ))
    try:
        await router.run(stop)
    finally:
        for task in (trimmer, backlog):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(trimmer, backlog)


class Router:
    """The loop: reads pages for ``pages`` to process, and what its consumer left pending."""

    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        keys: Keys,
        clock: EpochMsClock,
        consumer: str,
        pages: Pages,
        metrics: RouterMetrics,
        redis_health: Health | None = None,
    ) -> None:
        self.settings, self.redis, self.keys, self.clock = settings, redis, keys, clock
        self.consumer, self.pages, self.metrics = consumer, pages, metrics
        self.redis_health = redis_health or Health("redis_unreachable", "redis_restored")
        self.log = get_logger()
        self._group_ready = False
        self._backlog: str | None = "0"  # cursor through our own pending entries; None once drained
        self._claim_cursor = "0-0"
        self._claim_every = max(settings.claim_idle_ms / 2000, 1.0)
        self._mark_spacing = mark_spacing(settings.events_maxlen)
        self._unmarked = 0  # entries read since the group's position was last marked for the trimmer
        self._next_claim = 0.0
        self._next_retry = 0.0
        # The next page's read, started while a full page is processed: the router then waits on Redis
        # once a page less. Dropped (its entries stay pending under our name) whenever the loop restarts.
        self._prefetch: asyncio.Task[list[Entry]] | None = None

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await self._run(stop)
        finally:
            await self._quiesce()

    async def _quiesce(self) -> None:
        """Drop the prefetched read and let the page being recorded land: its acks are written before a
        stop or a restart of the loop, and a failure leaves its entries pending, to be read again."""
        task, self._prefetch = self._prefetch, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await self.pages.settle()

    async def _run(self, stop: asyncio.Event) -> None:
        backoff, redis_health = Backoff(), self.redis_health
        while not stop.is_set():
            try:
                await self._tick(stop)
            except TRANSIENT as exc:
                await self._quiesce()
                redis_health.failed(error=type(exc).__name__)
                # Whatever we were doing is still pending: start again from our own pending list.
                self._backlog = "0"
                await backoff.pause(stop)
                continue
            except ResponseError as exc:
                await self._quiesce()
                if "NOGROUP" in str(exc):
                    # The stream or group was deleted under us (e.g. Redis restarted empty): recreate it.
                    self._group_ready = False
                    continue
                self.log.error("router_error", error=type(exc).__name__)
                await backoff.pause(stop)
                continue
            except Exception as exc:
                await self._quiesce()
                # Not per-entry (those are handled in ``process``): log, back off, keep the service up.
                self.log.error("router_error", error=type(exc).__name__)
                await backoff.pause(stop)
                continue
            redis_health.ok()
            backoff.reset()

    async def _tick(self, stop: asyncio.Event) -> None:
        events = self.keys.events
        if not self._group_ready:
            await ensure_group(self.redis, events, ROUTER_GROUP)
            spaces = (self.keys.deliveries, self.keys.jobids)
            until = await upgrade_until(self.redis, self.keys.dedup_layout, spaces, self.clock())
            if until and not self.pages.enqueuer.before_until:
                self.log.info("dedup_reads_old_buckets", until=iso_ms(until))
            self.pages.enqueuer.before_until = until
            self._group_ready = True
        now = time.monotonic()
        if self.pages.record_done:
            await self.pages.recorded()  # an idle router hears of a failed record now, not at its next page
        if now >= self._next_claim:
            self._next_claim = now + self._claim_every
            await self._claim()
        if now >= self._next_retry:
            self._next_retry = now + RETRY_TICK_S
            await self._retry_own()
        if self._backlog is not None:
            await self.pages.recorded()  # see _claim
            entries = await read_group(
                self.redis, ROUTER_GROUP, self.consumer, {events: self._backlog}, count=READ_COUNT
            )
            # Advance past each page so an entry left pending by a failure is not re-read in a loop.
            self._backlog = entries[-1][1] if entries else None
        else:
            task, self._prefetch = self._prefetch, None
            entries = await task if task is not None else await self._read_new(stop)
            self._unmarked += len(entries)
            if self._unmarked >= self._mark_spacing:
                # A backlog read between two trim passes is marked all along it: the trimmer can cut
                # to PD_EVENTS_MAXLEN as soon as the router caught up, not after that many new arrivals.
                self._unmarked = 0
                await mark_read(self.redis, self.keys, self._mark_spacing)
        if entries:
            self.metrics.read(len(entries))
            if self._backlog is None and len(entries) == READ_COUNT:  # a full page: more are waiting
                self._prefetch = asyncio.ensure_future(self._read_new(stop))
            await self.pages.process([(entry_id, fields) for _, entry_id, fields in entries])

    async def _read_new(self, stop: asyncio.Event) -> list[Entry]:
        """A blocking read that a stop interrupts at once. Cancelling it is safe: anything the server
        already delivered to us stays pending under our name and is re-read or claimed later."""
        read = read_group(
            self.redis, ROUTER_GROUP, self.consumer, {self.keys.events: ">"},
            count=READ_COUNT, block_ms=min(READ_BLOCK_MS, int(RETRY_TICK_S * 1000)),
        )
        return await unless_stopped(read, stop) or []

    async def _claim(self) -> None:
        """Take over entries a peer (or our previous life) left pending longer than ``PD_CLAIM_IDLE_MS``."""
        for _ in range(CLAIM_PAGES_PER_TICK):
            # Pending entries (claimed, retried, our own) are read only once the page being recorded has
            # landed: read before its acks, they would be decided twice.
            await self.pages.recorded()
            self._claim_cursor, entries = await claim_idle(
                self.redis, self.keys.events, ROUTER_GROUP, self.consumer, self.settings.claim_idle_ms,
                cursor=self._claim_cursor, count=CLAIM_COUNT,
            )
            await self._process_claimed([(entry_id, fields) for _, entry_id, fields in entries])
            if self._claim_cursor == "0-0":
                return

    async def _retry_own(self) -> None:
        """Re-try our own entries left pending by a failed lookup or error, each after its backoff."""
        await self.pages.recorded()  # see _claim
        rows = await pending(
            self.redis, self.keys.events, ROUTER_GROUP, count=CLAIM_COUNT, consumer=self.consumer,
            idle_ms=RETRY_FIRST_MS,
        )
        due = [row.entry_id for row in rows if row.idle_ms >= retry_after_ms(row.deliveries)]
        if not due:
            return
        claimed, gone = await claim(
            self.redis, self.keys.events, ROUTER_GROUP, self.consumer, RETRY_FIRST_MS, due
        )
        if gone:
            # Deleted from the stream by hand (the trim never cuts a pending entry): nothing is left to
            # decide, and left pending it would be claimed again every tick, for ever.
            await self.redis.xack(self.keys.events, ROUTER_GROUP, *gone)
            self.log.warning("event_entry_gone", entries=len(gone))
        await self._process_claimed(claimed)

    async def _process_claimed(self, entries: list[tuple[str, Fields]]) -> None:
        self.metrics.read(len(entries))
        fresh: list[tuple[str, Fields]] = []
        for entry_id, fields in entries:
            deliveries = await delivery_count(self.redis, self.keys.events, ROUTER_GROUP, entry_id)
            if deliveries > self.settings.max_deliveries:
                # It had its tries (a crash mid-processing never reaches the failure handler).
                reason = await decisions.parked_reason(
                    self.redis, self.keys, fields.get("forge", "?"), fields.get("delivery", "?"), entry_id
                )
                await self.pages.dead(entry_id, fields, reason, deliveries)
            else:
                fresh.append((entry_id, fields))
        if fresh:
            await self.pages.process(fresh)
