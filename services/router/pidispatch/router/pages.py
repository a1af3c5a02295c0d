"""What becomes of a page of ``pd:events`` entries: each decided (pure), the forge asked where a verdict
could change the outcome, every job enqueued in one pipeline, then every decision and ack in one script.

That script runs while the next page is decided (one in flight at a time, each awaited before the next is
sent): an entry is still acked only after its own jobs were enqueued, so a failure anywhere leaves it
pending, and its next try finds its jobs by their ids (``duplicate``) instead of adding them twice.
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
from redis.exceptions import TimeoutError as RedisTimeoutError

from pidispatch.common.faults import crash_point
from pidispatch.common.keys import ROUTER_GROUP, Keys
from pidispatch.common.log import get_logger
from pidispatch.common.models import Event, Fields, is_replay, text
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import EpochMsClock
from pidispatch.common.settings import Settings
from pidispatch.common.streams import delivery_count, send_to_dead
from pidispatch.forges import pipeline
from pidispatch.router.enqueue import Enqueuer
from pidispatch.router.heal import HealMarks
from pidispatch.router.metrics import RouterMetrics
from pidispatch.triggers import decisions, jobs
from pidispatch.triggers.decision import Ask, Drop, Fire, Subject
from pidispatch.triggers.decisions import RouteOutcome
from pidispatch.triggers.lookup import Authorized, Indeterminate, Question, SelfIds, Verdict
from pidispatch.triggers.rules import RulesRef
from pidispatch.triggers.subsets import MalformedPayload

Asker = Callable[[Question, str], Awaitable[Verdict]]

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
    read_at: float = msgspec.field(default_factory=time.monotonic)  # for pd_router_enqueue_seconds


def _logging(fields: Fields, about: Subject | None, healed: bool = False) -> decisions.Logging:
    return decisions.Logging(about or pipeline.subject_of(fields.get("event")), is_replay(fields), healed)


class Pages:
    """One router's pages: ``process`` each, ``recorded`` waits for the one whose record is in flight,
    ``dead`` parks an entry out of tries."""

    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        keys: Keys,
        rules_ref: RulesRef,
        clock: EpochMsClock,
        self_ids: SelfIds,
        ask: Asker,
        metrics: RouterMetrics,
    ) -> None:
        self.settings, self.redis, self.keys, self.rules_ref = settings, redis, keys, rules_ref
        self.clock, self.self_ids, self.ask, self.metrics = clock, self_ids, ask, metrics
        self.log = get_logger()
        self.enqueuer = Enqueuer(redis, keys, clock)
        self._heal_marks = HealMarks(redis, keys)
        # The last page's decisions and acks on their way to Redis (RECORD_PAGE) while the next is decided.
        self._recording: asyncio.Task[None] | None = None

    @property
    def record_done(self) -> bool:
        """A record was sent and has finished (``recorded`` then returns at once, or raises its error)."""
        return self._recording is not None and self._recording.done()

    async def recorded(self) -> None:
        """Wait for the page being recorded; its failure is raised here, once."""
        task, self._recording = self._recording, None
        if task is not None:
            await task

    async def settle(self) -> None:
        """Let the page being recorded land, whatever its outcome (a failure leaves its entries pending)."""
        with contextlib.suppress(Exception):
            await self.recorded()

    async def process(self, entries: list[tuple[str, Fields]]) -> None:
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
            await self._enqueue(fires)
        # Exactly-once is earned above: a crash here re-processes the page and every script answers
        # "duplicate". The crash tests kill the router at this point.
        crash_point("router-after-enqueue")
        await self.recorded()
        done = [w for w in work if w.outcome is not None]
        if done:
            self._recording = asyncio.ensure_future(self._record(done))

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
            await self.dead(w.entry_id, w.fields, "malformed-event", deliveries)
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

    async def _enqueue(self, fires: list[_Work]) -> None:
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

    async def _record(self, work: list[_Work]) -> None:
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
            await self.dead(w.entry_id, w.fields, reason, deliveries, error=error)
        else:
            self.log.warning("event_failed", entry=w.entry_id, error=error, deliveries=deliveries)

    async def dead(
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
