"""The router's consumer loop over ``pd:events`` (group ``router``).

Exactly-once effects from an at-least-once hand-off: each job is enqueued by one script keyed on its
deterministic id, and only then are the decision and the XACK written together. A router that dies
anywhere before that script (``RECORD_PAGE``) leaves the entry pending; a peer (or its own restart)
re-processes it and the script answers ``duplicate`` instead of adding a second job.

Work is done a page at a time: decisions are pure and computed first, forge lookups for the page run
concurrently, every enqueue of the page goes in one pipeline, and every decision + ack in one script. That
script runs while the next page is decided (one in flight at a time, each awaited before the next is sent):
an entry is still acked only after its own jobs were enqueued, so a failure anywhere leaves it pending.

The consumer name is ``router.consumer.consumer_name``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from pidispatch.common.dedup import upgrade_until
from pidispatch.common.faults import crash_point
from pidispatch.common.health import Backoff, Health
from pidispatch.common.keys import READ_BLOCK_MS, ROUTER_GROUP, Keys
from pidispatch.common.log import get_logger
from pidispatch.common.models import Event, Fields, is_replay, text
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
    send_to_dead,
)
from pidispatch.forges import pipeline
from pidispatch.router.consumer import consumer_name
from pidispatch.router.enqueue import Enqueuer
from pidispatch.router.heal import HealMarks
from pidispatch.router.metrics import BACKLOG_REFRESH_S, RouterMetrics
from pidispatch.router.trim import mark_read, mark_spacing, run_trimmer
from pidispatch.triggers import decisions, jobs
from pidispatch.triggers.decision import Ask, Drop, Fire, Subject
from pidispatch.triggers.decisions import RouteOutcome
from pidispatch.triggers.lookup import Authorized, Indeterminate, Question, SelfIds, Verdict
from pidispatch.triggers.rules import RulesRef
from pidispatch.triggers.subsets import MalformedPayload

Asker = Callable[[Question, str], Awaitable[Verdict]]

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
# Errors that mean "Redis is not answering": back off and retry, never exit.
TRANSIENT = (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)


class _Work(msgspec.Struct):
    """One entry of a page on its way through decide → ask → enqueue → record."""

    entry_id: str
    fields: Fields
    event: Event | None = None
    decision: Drop | Fire | Ask | None = None
    subject: Subject | None = None
    outcome: RouteOutcome | None = None
    replies: list[Any] = msgspec.field(default_factory=list)
    read_at: float = msgspec.field(default_factory=time.monotonic)  # for pd_router_enqueue_seconds


def _logging(fields: Fields, about: Subject | None, healed: bool = False) -> decisions.Logging:
    return decisions.Logging(about or pipeline.subject_of(fields.get("event")), is_replay(fields), healed)


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
    router = Router(
        settings, redis, keys, rules_ref, clock, consumer or consumer_name(),
        self_ids or SelfIds(), ask or _no_authority, redis_health, metrics,
    )
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
    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        keys: Keys,
        rules_ref: RulesRef,
        clock: EpochMsClock,
        consumer: str,
        self_ids: SelfIds,
        ask: Asker,
        redis_health: Health | None = None,
        metrics: RouterMetrics | None = None,
    ) -> None:
        self.settings, self.redis, self.keys, self.rules_ref = settings, redis, keys, rules_ref
        # Kept even when no endpoint serves them: a few counters in memory cost nothing.
        self.metrics = metrics or RouterMetrics()
        self.clock, self.consumer, self.self_ids, self.ask = clock, consumer, self_ids, ask
        self.redis_health = redis_health or Health("redis_unreachable", "redis_restored")
        self.log = get_logger()
        self.enqueuer = Enqueuer(redis, keys, clock)
        self._heal_marks = HealMarks(redis, keys)
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
        # The last page's decisions and acks on their way to Redis (RECORD_PAGE) while the next is decided.
        self._recording: asyncio.Task[None] | None = None

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await self._run(stop)
        finally:
            await self._quiesce()

    async def _recorded(self) -> None:
        """Wait for the page being recorded; its failure is raised here, once."""
        task, self._recording = self._recording, None
        if task is not None:
            await task

    async def _quiesce(self) -> None:
        """Drop the prefetched read and let the page being recorded land: its acks are written before a
        stop or a restart of the loop, and a failure leaves its entries pending, to be read again."""
        task, self._prefetch = self._prefetch, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(Exception):
            await self._recorded()

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
        if self._recording is not None and self._recording.done():
            await self._recorded()  # an idle router hears of a failed record now, not at its next page
        if not self._group_ready:
            await ensure_group(self.redis, events, ROUTER_GROUP)
            spaces = (self.keys.deliveries, self.keys.jobids)
            until = await upgrade_until(self.redis, self.keys.dedup_layout, spaces, self.clock())
            if until and not self.enqueuer.before_until:
                self.log.info("dedup_reads_old_buckets", until=iso_ms(until))
            self.enqueuer.before_until = until
            self._group_ready = True
        now = time.monotonic()
        if now >= self._next_claim:
            self._next_claim = now + self._claim_every
            await self._claim()
        if now >= self._next_retry:
            self._next_retry = now + RETRY_TICK_S
            await self._retry_own()
        if self._backlog is not None:
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
            await self.process_page([(entry_id, fields) for _, entry_id, fields in entries])

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
            self._claim_cursor, entries = await claim_idle(
                self.redis, self.keys.events, ROUTER_GROUP, self.consumer, self.settings.claim_idle_ms,
                cursor=self._claim_cursor, count=CLAIM_COUNT,
            )
            await self._process_claimed([(entry_id, fields) for _, entry_id, fields in entries])
            if self._claim_cursor == "0-0":
                return

    async def _retry_own(self) -> None:
        """Re-try our own entries left pending by a failed lookup or error, each after its backoff."""
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
                await self._dead(entry_id, fields, reason, deliveries)
            else:
                fresh.append((entry_id, fields))
        if fresh:
            await self.process_page(fresh)

    async def process_page(self, entries: list[tuple[str, Fields]]) -> None:
        """Decide, ask, enqueue and record a page of entries; anything that fails stays pending."""
        rules = self.rules_ref.current  # one file for the whole page
        work = [_Work(entry_id, fields) for entry_id, fields in entries]
        for w in work:
            await self._decide(w, rules)
        asks = [w for w in work if isinstance(w.decision, Ask)]
        if asks:
            verdicts = await asyncio.gather(*(self._ask(w) for w in asks))
            for w, verdict in zip(asks, verdicts, strict=True):
                self._settle(w, verdict, rules)
        fires = [w for w in work if isinstance(w.decision, Fire)]
        if fires:
            await self._enqueue_page(fires)
        # Exactly-once is earned above: a crash here re-processes the page and every script answers
        # "duplicate". The crash tests kill the router at this point.
        crash_point("router-after-enqueue")
        await self._recorded()
        done = [w for w in work if w.outcome is not None]
        if done:
            self._recording = asyncio.ensure_future(self._record_page(done))

    async def _decide(self, w: _Work, rules: Any) -> None:
        try:
            event = Event.from_fields(w.fields)
            if not event.delivery:
                raise ValueError("empty delivery id")
            w.event = event
            w.decision, w.subject = pipeline.planned(event, rules, self.self_ids)
        except (ValueError, MalformedPayload):
            # Deterministic: retrying cannot help, so park it at once and let the entries behind it run.
            deliveries = await delivery_count(self.redis, self.keys.events, ROUTER_GROUP, w.entry_id)
            await self._dead(w.entry_id, w.fields, "malformed-event", deliveries)
            return
        except Exception as exc:
            await self._failed(w, "processing-failed", type(exc).__name__)
            return
        if isinstance(w.decision, Drop):
            w.outcome = RouteOutcome("dropped", reason=w.decision.reason)
            self.log.debug("dropped", delivery=event.delivery, reason=w.decision.reason)

    async def _ask(self, w: _Work) -> Verdict:
        assert isinstance(w.decision, Ask) and w.event is not None
        try:
            verdict: Verdict = await self.ask(w.decision.question, w.event.delivery)
            return verdict
        except Exception as exc:  # the asker should not raise; a bug there must not drop the event
            return Indeterminate(f"error-{type(exc).__name__}")

    def _settle(self, w: _Work, verdict: Verdict, rules: Any) -> None:
        assert w.event is not None
        if not isinstance(verdict, Authorized):
            # Never a silent drop: the entry stays pending and is retried with backoff, then parked.
            w.decision, w.outcome = None, RouteOutcome("pending", reason=f"lookup-failed:{verdict.reason}")
            self.log.warning(
                f"{w.event.forge}_lookup_failed", delivery=w.event.delivery, reason=verdict.reason
            )
            return
        w.decision = pipeline.resume(w.event, rules, self.self_ids, verdict.value is True)
        if isinstance(w.decision, Drop):
            w.outcome = RouteOutcome("dropped", reason=w.decision.reason)
            self.log.debug("dropped", delivery=w.event.delivery, reason=w.decision.reason)

    async def _enqueue_page(self, fires: list[_Work]) -> None:
        """Every replica of every firing entry through the ENQUEUE script, in one pipeline."""
        now = self.clock()
        plans = []
        for w in fires:
            assert isinstance(w.decision, Fire)
            plans.append(jobs.planned(w.decision.job, now))
        entries = [w.entry_id for w in fires]
        for w, (ids, streams, mine) in zip(fires, await self.enqueuer.enqueue(plans, entries), strict=True):
            errors = [r for r in mine if isinstance(r, Exception)]
            if errors:
                if any(isinstance(e, TRANSIENT) for e in errors):
                    raise errors[0]
                await self._failed(w, "enqueue-failed", type(errors[0]).__name__)
                continue
            w.outcome = self._outcome(w, ids, streams, mine)
            self.metrics.enqueued(time.monotonic() - w.read_at)

    def _outcome(self, w: _Work, ids: list[str], streams: list[str], replies: list[Any]) -> RouteOutcome:
        # Per-event lines are debug: a JSON line per delivery was a hot-path cost, and pd:decisions
        # (pi-dispatch events, explain) and the metrics already say what became of each.
        assert isinstance(w.decision, Fire) and w.event is not None
        decoded = [[text(part) for part in reply] for reply in replies]
        outcome = decisions.enqueued(w.entry_id, w.decision.index, ids, streams, decoded)
        pairs = zip(ids, decoded, outcome.jobs, outcome.streams, strict=True)
        for job_id, (status, *_), carrier, stream in pairs:
            if stream == "-":  # another entry's job carries this work
                self.log.debug("deduplicated", delivery=w.event.delivery, job=job_id, survivor=carrier)
            else:
                self.log.debug(
                    "enqueued", delivery=w.event.delivery, job=job_id, trigger=w.decision.index,
                    existing=status == "duplicate",
                )
        return outcome

    async def _record_page(self, work: list[_Work]) -> None:
        """Decisions and acks in one script: each entry is either finished and explained, or still
        pending and will be re-processed (idempotently). A ``pending`` outcome is written, not acked."""
        if not work:
            return
        now, page = self.clock(), decisions.Page()
        named = [(w.event.forge, w.event.delivery) if w.event else
                 (w.fields.get("forge", "?"), w.fields.get("delivery", "?")) for w in work]
        # The healer's record of what it asked for: one ZMSCORE a page marks a redelivered decision.
        marks = await self._heal_marks.of(named)
        for w, (forge, delivery), mark in zip(work, named, marks, strict=True):
            assert w.outcome is not None
            log = _logging(w.fields, w.subject, mark)
            decisions.record(page, self.keys, forge, delivery, w.entry_id, w.outcome, now, log)
            if w.outcome.outcome != "pending":
                page.acked.append(w.entry_id)
        await decisions.write(self.redis, self.keys, page, self.settings.events_maxlen, ROUTER_GROUP)
        # Counted once written (a failed write re-processes the page), once per kind: a page is mostly one.
        counts = Counter((w.outcome.outcome, w.outcome.reason) for w in work if w.outcome is not None)
        for (outcome, reason), count in counts.items():
            self.metrics.decided(outcome, reason, count)

    async def _failed(self, w: _Work, reason: str, error: str) -> None:
        """Leave the entry pending for a retry; park it once it has had ``PD_MAX_DELIVERIES`` tries."""
        deliveries = await delivery_count(self.redis, self.keys.events, ROUTER_GROUP, w.entry_id)
        w.decision, w.outcome = None, None
        if deliveries >= self.settings.max_deliveries:
            await self._dead(w.entry_id, w.fields, reason, deliveries, error=error)
        else:
            self.log.warning("event_failed", entry=w.entry_id, error=error, deliveries=deliveries)

    async def _dead(
        self, entry_id: str, fields: Fields, reason: str, deliveries: int, error: str | None = None
    ) -> None:
        await send_to_dead(
            self.redis, self.keys, source=self.keys.events, group=ROUTER_GROUP, entry_id=entry_id,
            reason=reason, deliveries=deliveries, fields=fields,
        )
        delivery, forge = fields.get("delivery"), fields.get("forge")
        if delivery and forge:
            cap = self.settings.events_maxlen
            log = _logging(fields, None)
            await decisions.record_dead(self.redis, self.keys, forge, delivery, entry_id, reason, log, cap)
        extra = {"error": error} if error else {}
        self.log.warning("event_dead", entry=entry_id, reason=reason, **extra)
        self.metrics.decided("dead", reason)
