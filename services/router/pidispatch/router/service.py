"""The router's consumer loop over ``pd:events`` (group ``router``).

Exactly-once effects from an at-least-once hand-off: each job is enqueued by one script keyed on its
deterministic id, and only then are the decision and the XACK written together. A router that dies
anywhere before that MULTI leaves the entry pending; a peer (or its own restart) re-processes it and the
script answers ``duplicate`` instead of adding a second job.

Consumer names: ``PD_ROUTER_NAME`` if set, else ``router-<hostname>``. The name is stable so a restarted
router re-reads its own pending entries first; two routers on one host must be given distinct names, or
they share one pending list (still safe, but each re-processes the other's in-flight entries).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import time
from collections.abc import Callable, Mapping
from itertools import chain
from typing import Any

import msgspec
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from pidispatch.common.errors import ConfigError
from pidispatch.common.health import Backoff, Health
from pidispatch.common.keys import (
    DEDUP_WINDOW_MS,
    EVENT_DECISION_TTL_S,
    JOBID_TTL_S,
    READ_BLOCK_MS,
    ROUTER_GROUP,
    Keys,
)
from pidispatch.common.log import get_logger
from pidispatch.common.models import Event, Fields, job_to_fields
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.scripts import ENQUEUE, NTH_OLDEST_ID
from pidispatch.common.settings import Settings
from pidispatch.common.streams import (
    Entry,
    claim_idle,
    delivery_count,
    ensure_group,
    read_group,
    send_to_dead,
)
from pidispatch.router import jobs
from pidispatch.router.match.github import Decision, Drop, Fire, decide
from pidispatch.router.subsets.github import MalformedPayload, project
from pidispatch.router.triggers import RulesRef

Clock = Callable[[], int]

CONSUMER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
READ_COUNT = 64
CLAIM_COUNT = 64
# Bounded work per claim tick, so a huge pending list never starves new events; the cursor carries over.
CLAIM_PAGES_PER_TICK = 8
TRIM_INTERVAL_S = 30.0
# At most this many entries are scanned (server-side) per trim to find the MAXLEN-th newest id.
TRIM_SCAN_MAX = 10_000
# Errors that mean "Redis is not answering": back off and retry, never exit.
TRANSIENT = (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)



class Outcome(msgspec.Struct, frozen=True):
    outcome: str  # queued | dropped | deduplicated
    reason: str = ""
    jobs: tuple[str, ...] = ()
    trigger: str = ""


def consumer_name(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    declared = (env.get("PD_ROUTER_NAME") or "").strip()
    if declared:
        if not CONSUMER_RE.match(declared):
            raise ConfigError(
                f"PD_ROUTER_NAME={declared!r} is refused; accepted: 1-64 of [A-Za-z0-9._-], "
                "starting with a letter or digit"
            )
        return declared
    host = re.sub(r"[^A-Za-z0-9._-]", "", socket.gethostname())[:56]
    return f"router-{host or 'localhost'}"


def resolve_self_id(settings: Settings) -> int | None:
    """The harness's own GitHub user id (bot-loop guard). Without credentials it cannot author events,
    so no identity is needed; with credentials it must be known before the first event."""
    if settings.github_self_id is not None:
        return settings.github_self_id
    if settings.github_auth_source is not None:
        raise ConfigError(
            "GITHUB_SELF_ID is required when GITHUB_AUTH_SOURCE is set (the router must recognise the "
            "harness's own events); accepted: the numeric GitHub user id of the harness account"
        )
    return None


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def choose_minid(groups: list[tuple[str | None, str]], nth_newest: str | None) -> str | None:
    """The MINID for ``XTRIM``: never past any group's oldest pending or last-delivered entry (unfinished
    work), never keeping more than ``nth_newest`` allows. ``groups`` = [(oldest pending, last delivered)].
    None means do not trim (nothing over the cap, no group to protect, or nothing delivered yet)."""
    if nth_newest is None or not groups:
        return None
    bound = nth_newest
    for pending, delivered in groups:
        for candidate in (pending, delivered):
            if candidate is not None and _id_key(candidate) < _id_key(bound):
                bound = candidate
    return None if _id_key(bound) == (0, 0) else bound


async def trim_events(r: Redis, stream: str, maxlen: int, *, approximate: bool = True) -> str | None:
    """Trim ``stream`` to ~``maxlen`` finished entries; returns the MINID used, if any."""
    length = await r.xlen(stream)
    if length <= maxlen:
        return None
    nth = await r.eval(NTH_OLDEST_ID, 1, stream, min(length - maxlen + 1, TRIM_SCAN_MAX))
    groups: list[tuple[str | None, str]] = []
    for info in await r.xinfo_groups(stream):
        name = _s(info["name"])
        summary = await r.xpending(stream, name)
        oldest = _s(summary["min"]) if summary["pending"] else None
        groups.append((oldest, _s(info["last-delivered-id"])))
    minid = choose_minid(groups, _s(nth) if nth else None)
    if minid is not None:
        await r.xtrim(stream, minid=minid, approximate=approximate)
    return minid


async def run_router(
    settings: Settings,
    redis: Redis,
    keys: Keys,
    rules_ref: RulesRef,
    stop: asyncio.Event,
    clock: Clock = now_ms,
    *,
    consumer: str | None = None,
) -> None:
    """Consume ``pd:events`` until ``stop`` is set. Transient Redis errors never end it."""
    self_id = resolve_self_id(settings)
    log = get_logger()
    if self_id is None:
        log.info("self_identity", forge="github", resolved=False, reason="no-credentials")
    else:
        log.info("self_identity", forge="github", resolved=True, source="GITHUB_SELF_ID")
    router = Router(settings, redis, keys, rules_ref, clock, consumer or consumer_name(), self_id)
    log.info("router_started", consumer=router.consumer, rules=rules_ref.current.count)
    await router.run(stop)


class Router:
    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        keys: Keys,
        rules_ref: RulesRef,
        clock: Clock,
        consumer: str,
        self_id: int | None,
    ) -> None:
        self.settings, self.redis, self.keys, self.rules_ref = settings, redis, keys, rules_ref
        self.clock, self.consumer, self.self_id = clock, consumer, self_id
        self.log = get_logger()
        self._enqueue = redis.register_script(ENQUEUE)
        self._group_ready = False
        self._backlog: str | None = "0"  # cursor through our own pending entries; None once drained
        self._claim_cursor = "0-0"
        self._claim_every = max(settings.claim_idle_ms / 2000, 1.0)
        self._next_claim = 0.0
        self._next_trim = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        backoff, redis_health = Backoff(), Health("redis_unreachable", "redis_restored")
        while not stop.is_set():
            try:
                await self._tick(stop)
            except TRANSIENT as exc:
                redis_health.failed(error=type(exc).__name__)
                # Whatever we were doing is still pending: start again from our own pending list.
                self._backlog = "0"
                await backoff.pause(stop)
                continue
            except Exception as exc:
                if isinstance(exc, ResponseError) and "NOGROUP" in str(exc):
                    # The stream or group was deleted under us (e.g. Redis restarted empty): recreate it.
                    self._group_ready = False
                    continue
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
            self._group_ready = True
        now = time.monotonic()
        if now >= self._next_claim:
            self._next_claim = now + self._claim_every
            await self._claim()
        if now >= self._next_trim:
            self._next_trim = now + TRIM_INTERVAL_S
            await self._trim()
        if self._backlog is not None:
            entries = await read_group(
                self.redis, ROUTER_GROUP, self.consumer, {events: self._backlog}, count=READ_COUNT
            )
            # Advance past each page so an entry left pending by a failure is not re-read in a loop.
            self._backlog = entries[-1][1] if entries else None
        else:
            entries = await self._read_new(stop)
        for _, entry_id, fields in entries:
            await self.process(entry_id, fields)

    async def _read_new(self, stop: asyncio.Event) -> list[Entry]:
        """A blocking read that a stop interrupts at once. Cancelling it is safe: anything the server
        already delivered to us stays pending under our name and is re-read or claimed later."""
        read = asyncio.ensure_future(read_group(
            self.redis, ROUTER_GROUP, self.consumer, {self.keys.events: ">"},
            count=READ_COUNT, block_ms=READ_BLOCK_MS,
        ))
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({read, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not read.done():
                read.cancel()
                with contextlib.suppress(BaseException):
                    await read
        return read.result() if not read.cancelled() else []

    async def _claim(self) -> None:
        """Take over entries a peer (or our previous life) left pending longer than ``PD_CLAIM_IDLE_MS``."""
        for _ in range(CLAIM_PAGES_PER_TICK):
            self._claim_cursor, entries = await claim_idle(
                self.redis, self.keys.events, ROUTER_GROUP, self.consumer, self.settings.claim_idle_ms,
                cursor=self._claim_cursor, count=CLAIM_COUNT,
            )
            for _, entry_id, fields in entries:
                deliveries = await delivery_count(self.redis, self.keys.events, ROUTER_GROUP, entry_id)
                if deliveries > self.settings.max_deliveries:
                    # Already had its tries (a processing crash never reaches the failure handler).
                    await self._dead(entry_id, fields, "max-deliveries", deliveries)
                else:
                    await self.process(entry_id, fields)
            if self._claim_cursor == "0-0":
                return

    async def _trim(self) -> None:
        try:
            await trim_events(self.redis, self.keys.events, self.settings.events_maxlen)
        except TRANSIENT:
            raise
        except Exception as exc:  # trimming is housekeeping: never let it stop routing
            self.log.warning("events_trim_failed", error=type(exc).__name__)

    async def process(self, entry_id: str, fields: Fields) -> None:
        """Decide one entry, enqueue its jobs, record the decision and ack. An unexpected error leaves
        the entry pending for a retry through the claim path, up to ``PD_MAX_DELIVERIES``."""
        try:
            await self._process(entry_id, fields)
        except TRANSIENT:
            raise
        except Exception as exc:
            deliveries = await delivery_count(self.redis, self.keys.events, ROUTER_GROUP, entry_id)
            if deliveries >= self.settings.max_deliveries:
                await self._dead(entry_id, fields, "processing-failed", deliveries, error=type(exc).__name__)
            else:
                self.log.warning(
                    "event_failed", entry=entry_id, error=type(exc).__name__, deliveries=deliveries
                )

    async def _process(self, entry_id: str, fields: Fields) -> None:
        try:
            event = Event.from_fields(fields)
            if not event.delivery:
                raise ValueError("empty delivery id")
            decision = self.decide(event)
        except (ValueError, MalformedPayload):
            # Deterministic: retrying cannot help, so park it at once and let the entries behind it run.
            deliveries = await delivery_count(self.redis, self.keys.events, ROUTER_GROUP, entry_id)
            await self._dead(entry_id, fields, "malformed-event", deliveries)
            return
        if isinstance(decision, Drop):
            outcome = Outcome("dropped", reason=decision.reason)
        else:
            outcome = await self.enqueue_jobs(event, decision)
        await self._record(event, entry_id, outcome)
        if isinstance(decision, Drop):
            self.log.info("dropped", delivery=event.delivery, reason=decision.reason)

    def decide(self, event: Event) -> Decision:
        """Pure routing of one event (the rules are read once, so one event never sees two files)."""
        rules = self.rules_ref.current
        if event.forge != "github":
            return Drop("forge-not-enabled")
        return decide(event.event, project(event.body), rules, self.self_id, event.delivery)

    async def enqueue_jobs(self, event: Event, fire: Fire) -> Outcome:
        """One ENQUEUE script per replica. The script is where exactly-once is earned: the job id is the
        delivery's, so a re-processed entry finds ``pd:jobid:<id>`` set and adds nothing."""
        carried: list[str] = []
        statuses: list[str] = []
        for job, semantic in jobs.planned(fire.job, self.clock()):
            pairs = list(chain.from_iterable(job_to_fields(job).items()))
            reply: list[Any] = await self._enqueue(
                keys=[self.keys.jobid(job.id), self.keys.dedup(semantic), self.keys.jobs],
                args=[job.id, JOBID_TTL_S, DEDUP_WINDOW_MS, *pairs],
            )
            status, value = _s(reply[0]), _s(reply[1])
            statuses.append(status)
            if status == "deduplicated":
                carried.append(value)  # the surviving job carries this work
                self.log.info("deduplicated", delivery=event.delivery, job=job.id, survivor=value)
            else:
                carried.append(job.id)
                self.log.info(
                    "enqueued", delivery=event.delivery, job=job.id, trigger=fire.index,
                    existing=status == "duplicate",
                )
        # "duplicate" means our own job already exists (a re-processed entry): that is still queued.
        outcome = "deduplicated" if all(s == "deduplicated" for s in statuses) else "queued"
        return Outcome(outcome, jobs=tuple(carried), trigger=str(fire.index))

    async def _record(self, event: Event, entry_id: str, outcome: Outcome) -> None:
        """The decision and the ack in one MULTI: either the entry is finished and explained, or it is
        still pending and will be re-processed (idempotently, see ``enqueue_jobs``)."""
        key = self.keys.event(event.forge, event.delivery)
        mapping = {
            "outcome": outcome.outcome,
            "reason": outcome.reason,
            "jobs": ",".join(outcome.jobs),
            "trigger": outcome.trigger,
            "decidedAt": str(self.clock()),
            "entry": entry_id,
        }
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=mapping)
            pipe.expire(key, EVENT_DECISION_TTL_S)
            pipe.xack(self.keys.events, ROUTER_GROUP, entry_id)
            await pipe.execute()

    async def _dead(
        self, entry_id: str, fields: Fields, reason: str, deliveries: int, error: str | None = None
    ) -> None:
        await send_to_dead(
            self.redis, self.keys, source=self.keys.events, group=ROUTER_GROUP, entry_id=entry_id,
            reason=reason, deliveries=deliveries, fields=fields,
        )
        extra = {"error": error} if error else {}
        self.log.warning("event_dead", entry=entry_id, reason=reason, **extra)
