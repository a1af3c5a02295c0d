"""The receiver's HTTP edge: routes, the delivery pipeline, health, metrics and the process lifecycle.

Pipeline per delivery (docs/receiver.md), the same for every forge: header rows →
bounded body read → credential over the raw bytes → minimal read of the verified body → events the
router can never act on answer 204 unstored → append once (``ingest``) → 202 accepted / duplicate.
When Redis cannot take it in time, or while the spool still holds earlier deliveries (arrival order),
the delivery goes to the durable spool (``spool``): 202 spooled, or 503 when the spool is full or absent.
What differs per forge lives in its arm.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from time import perf_counter

import msgspec
from aiohttp import ClientPayloadError, hdrs, web
from aiohttp.streams import StreamReader
from redis.exceptions import RedisError

from pidispatch.common.health import Health
from pidispatch.common.keys import RECEIVER_BODY_TIMEOUT_S, Keys
from pidispatch.common.log import get_logger
from pidispatch.common.monitor import OK_BODY, READ_METHODS, READY_BODY, json_response
from pidispatch.common.redis import Redis, bounded
from pidispatch.common.replication import Replicas, ReplicaShortfall
from pidispatch.common.runtime import EpochMsClock
from pidispatch.common.settings import Settings
from pidispatch.forges import FORGES as ALL_FORGES
from pidispatch.forges import verify
from pidispatch.forges.armconfig import ReceiverConfig
from pidispatch.forges.arms import FORGES, Arm, forge_for_path, normalise_path
from pidispatch.forges.receive import configure_arms, load_receiver_config
from pidispatch.forges.refusals import METHOD_NOT_ALLOWED, ReceiverRefusal, not_configured
from pidispatch.receiver.connections import Connections
from pidispatch.receiver.deadline import Deadlines
from pidispatch.receiver.ingest import Ingest
from pidispatch.receiver.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from pidispatch.receiver.metrics import Metrics
from pidispatch.receiver.spool import Spool
from pidispatch.receiver.spoolfile import QUARANTINE_FILE, Record

READY_TIMEOUT_S = 1.0

_ACCEPTED = b'{"status":"accepted"}'
_DUPLICATE = b'{"status":"duplicate"}'
_SPOOLED = b'{"status":"spooled"}'
_REDIS_UNREACHABLE = b'{"status":"redis-unreachable"}'
# Event names of every forge are lowercase words joined by _ . - (issues, merge_request,
# ms.vss-code.git-pullrequest-comment-event); anything else a request says is not logged.
_EVENT_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


# The event type counted for an ignored delivery whose event header is not a plain name.
IGNORED_OTHER = "other"


def _log_event(value: str | None) -> str | None:
    return value if value is not None and _EVENT_NAME_RE.fullmatch(value) else None


def _log_delivery_id(value: str | None) -> str | None:
    """Header values reach the log only when they are short printable tokens (a forge sends these)."""
    return value if value is not None and verify.valid_delivery_id(value) else None


async def read_body(content: StreamReader, limit: int) -> bytes | None:
    """The whole body, or None as soon as it passes ``limit``; never buffers more than the limit."""
    chunks: list[bytes] = []
    size = 0
    while chunk := await content.readany():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class Receiver:
    """The request handlers, holding the resources ``create_app`` was given."""

    def __init__(
        self,
        arms: dict[str, Arm],
        redis: Redis,
        keys: Keys,
        clock: EpochMsClock,
        metrics: Metrics,
        spool: Spool | None = None,
        replicas: Replicas | None = None,
    ) -> None:
        self._arms = arms
        self._redis = redis
        self._ingest = Ingest(redis, keys, replicas=replicas)
        self._clock = clock
        self.metrics = metrics
        self.spool = spool
        self.connections: Connections | None = None  # set by ``serve``: the listener's connection cap
        self._body_deadlines = Deadlines(RECEIVER_BODY_TIMEOUT_S)
        self._log = get_logger()
        self._unconfigured = {forge: not_configured(forge) for forge in FORGES}
        self._redis_health = Health("redis_unreachable", "redis_restored")
        self._spool_health = Health("spool_full", "spool_has_room")
        self._in_flight = 0
        self._idle: asyncio.Future[None] | None = None  # exists only while draining

    async def drain(self, timeout: float) -> None:
        """Wait until no request is being handled, or ``timeout``; call after the listener closed.

        aiohttp's own shutdown stops reading request bodies, so a delivery still uploading would be
        cut; draining first lets it finish.
        """
        if self._in_flight:
            self._idle = asyncio.get_running_loop().create_future()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._idle), timeout)

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        self._in_flight += 1
        connections = self.connections
        if connections is not None:  # a whole head arrived: shed after the slow and the idle ones
            connections.requesting.add(request.protocol)
        try:
            return await self._route(request)
        finally:
            if connections is not None:
                connections.requesting.discard(request.protocol)
            self._in_flight -= 1
            if not self._in_flight and self._idle is not None and not self._idle.done():
                self._idle.set_result(None)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = normalise_path(request.path)
        # Service paths are answered here, before forge routing, so they never fall through to GitHub.
        if path == "/healthz":
            return self._healthz(request)
        if path == "/readyz":
            return await self._readyz(request)
        if path == "/metrics":
            return self._metrics(request)
        forge = forge_for_path(path)
        arm = self._arms.get(forge)
        if arm is None:
            return self._refuse(forge, None, None, self._unconfigured[forge])
        try:
            return await self._deliver(arm, request)
        except Exception as exc:
            # Unreachable by design; the line names the forge and the error class only.
            self._log.error("verify_handler_error", forge=arm.name, error=type(exc).__name__)
            return self._refuse(arm.name, None, None, arm.table.internal_error, outcome="failed")

    def _healthz(self, request: web.Request) -> web.Response:
        """The process is alive; deliberately no Redis, so a Redis outage never restarts receivers."""
        if request.method not in READ_METHODS:
            return json_response(405, METHOD_NOT_ALLOWED.body)
        return json_response(200, OK_BODY)

    async def _readyz(self, request: web.Request) -> web.Response:
        """200 while deliveries are taken (Redis answers, or the spool has room); the spool's depth."""
        if request.method not in READ_METHODS:
            return json_response(405, METHOD_NOT_ALLOWED.body)
        try:
            await bounded(self._redis.ping(), READY_TIMEOUT_S)
        except (RedisError, OSError) as exc:  # TimeoutError is an OSError
            self._redis_health.failed(error=type(exc).__name__)
            spool = self.spool
            if spool is None:
                return json_response(503, _REDIS_UNREACHABLE)
            # Taking a delivery needs room for the largest one and a disk that takes writes.
            room = spool.size + verify.MAX_BODY_BYTES < spool.max_bytes and spool.writable
            return self._ready_body(200 if room else 503, "spooling" if room else "redis-unreachable")
        self._redis_health.ok()
        return json_response(200, READY_BODY) if self.spool is None else self._ready_body(200, "ready")

    def _ready_body(self, status: int, state: str) -> web.Response:
        assert self.spool is not None
        body = {"status": state, "spool_depth": self.spool.depth, "spool_bytes": self.spool.size}
        return json_response(status, msgspec.json.encode(body))

    def _metrics(self, request: web.Request) -> web.Response:
        if request.method not in READ_METHODS:
            return json_response(405, METHOD_NOT_ALLOWED.body)
        return web.Response(body=self.metrics.render(), headers={hdrs.CONTENT_TYPE: METRICS_CONTENT_TYPE})

    async def _deliver(self, arm: Arm, request: web.Request) -> web.StreamResponse:
        name = arm.name
        head = arm.head(request.method, request.headers, request.content_length)
        if head.refusal is not None:
            return self._refuse(name, _log_event(head.event), _log_delivery_id(head.delivery), head.refusal)
        content = request.content
        try:
            if content.is_eof():  # the common case: the body came with the headers, nothing to wait for
                body = await read_body(content, verify.MAX_BODY_BYTES)
            else:
                with self._body_deadlines():  # a client trickling its body is cut off
                    body = await read_body(content, verify.MAX_BODY_BYTES)
        except (ClientPayloadError, ConnectionError, TimeoutError):
            return self._refuse(name, _log_event(head.event), head.delivery, arm.table.body_incomplete)
        if body is None:
            return self._refuse(name, _log_event(head.event), head.delivery, arm.table.payload_too_large)
        metrics = self.metrics
        metrics.body_bytes(name, len(body))
        started = perf_counter()
        matched = arm.authenticate(head, body, self._clock())
        metrics.verify_time(name, perf_counter() - started)
        if isinstance(matched, ReceiverRefusal):
            return self._refuse(name, _log_event(head.event), head.delivery, matched)
        # Verified: the body is the forge's own from here on.
        previous = matched != 0
        if previous:
            metrics.verified_with_previous(name)
        verdict = arm.classify(head, body)
        if isinstance(verdict, ReceiverRefusal):
            return self._refuse(name, _log_event(head.event), head.delivery, verdict, previous=previous)
        event, delivery, store = verdict
        if not store:
            self._log_delivery(name, _log_event(event), delivery, 204, "ignored", previous=previous)
            await self._count_ignored(name, _log_event(event) or IGNORED_OTHER)
            return web.Response(status=204)
        assert event is not None  # only named events are stored
        connections = self.connections
        if connections is not None:  # storing: never shed under descriptor pressure
            connections.storing.add(request.protocol)
        try:
            return await self._store(arm, Record(name, event, delivery, self._clock(), body), previous)
        finally:
            if connections is not None:
                connections.storing.discard(request.protocol)

    async def _count_ignored(self, forge: str, event: str) -> None:
        self.metrics.ignored(forge, event)
        # Only a count: a Redis that does not answer costs the count, never the 204 (nor a spool entry).
        with contextlib.suppress(RedisError, OSError):
            await self._ingest.count_ignored(forge, event)

    async def _store(self, arm: Arm, record: Record, previous: bool) -> web.Response:
        """Redis, else the spool; while the spool holds earlier deliveries, the spool first (their order).
        A full spool never refuses what a Redis that answers again would take: order yields there."""
        spool = self.spool
        spool_first = spool is not None and spool.depth > 0
        if spool_first and (answer := await self._spool(record, previous)) is not None:
            return answer
        appended = await self._append(record)
        if isinstance(appended, ReplicaShortfall):
            return await self._unreplicated(record, previous, appended, spool_first)
        retry_in_spool = isinstance(appended, str) and spool is not None and not spool_first
        if retry_in_spool and (answer := await self._spool(record, previous)) is not None:
            return answer
        name, event, delivery = record.forge, record.event, record.delivery
        if isinstance(appended, str):
            self._log.warning("enqueue_failed", forge=name, delivery=delivery, error=appended)
            return self._refuse(name, event, delivery, arm.table.enqueue_failed, "failed", previous)
        return self._kept(record, appended, previous)

    def _kept(self, record: Record, appended: bool, previous: bool) -> web.Response:
        """202 for a delivery Redis holds: appended now, or a duplicate of one it holds."""
        outcome = "accepted" if appended else "duplicate"
        self._log_delivery(record.forge, record.event, record.delivery, 202, outcome, previous=previous)
        return json_response(202, _ACCEPTED if appended else _DUPLICATE)

    async def _unreplicated(
        self, record: Record, previous: bool, short: ReplicaShortfall, spooled_first: bool
    ) -> web.Response:
        """The primary took it, too few replicas hold it: a failover now would lose it, so the spool keeps
        a copy (its drain appends it once more, a duplicate then, and waits for the replicas again)."""
        self.metrics.replica_shortfall(record.forge)
        if self.spool is not None and not spooled_first and (answer := await self._spool(record, previous)):
            return answer
        # No second copy could be kept: it is on the primary all the same, so the answer stays 202.
        self._log.warning("replica_ack_short", forge=record.forge, delivery=record.delivery,
                          held=short.held, wanted=short.wanted)
        return self._kept(record, short.replies[0] is not None, previous)

    async def _append(self, record: Record) -> bool | str | ReplicaShortfall:
        """True appended, False a duplicate; the error's class name when Redis did not take it in time;
        the shortfall when it did and too few replicas held it."""
        started = perf_counter()
        try:
            appended = await self._ingest.append(
                record.forge, record.event, record.delivery, record.received_at, record.body
            )
        except ReplicaShortfall as short:
            self._redis_health.ok()
            return short
        except (RedisError, OSError) as exc:  # TimeoutError (the bound) is an OSError
            self.metrics.append_failed(record.forge)
            self._redis_health.failed(error=type(exc).__name__)
            return type(exc).__name__
        self.metrics.append_time(perf_counter() - started)
        self._redis_health.ok()
        return appended

    async def _spool(self, record: Record, previous: bool) -> web.Response | None:
        """202 spooled once the delivery is fsynced in the spool; None when it is full or the disk fails."""
        assert self.spool is not None
        try:
            spooled = await self.spool.append(record)
        except OSError as exc:
            self._log.warning("spool_write_failed", forge=record.forge, error=type(exc).__name__)
            return None
        if not spooled:
            self._spool_health.failed(max_bytes=self.spool.max_bytes)
            return None
        self._spool_health.ok()
        self._log_delivery(record.forge, record.event, record.delivery, 202, "spooled", previous=previous)
        return json_response(202, _SPOOLED)

    async def drain_spool(self) -> None:
        """Append what the spool holds, in order, whenever Redis takes it; runs for the app's lifetime."""
        spool = self.spool
        assert spool is not None
        ingest, metrics, health = self._ingest, self.metrics, Health("spool_drain_failing", "spool_draining")

        def store(r: Record) -> Awaitable[bool]:
            return ingest.append(r.forge, r.event, r.delivery, r.received_at, r.body, held=False)

        def drained(record: Record, appended: bool) -> None:
            health.ok()
            metrics.spool_drained(record.forge, "accepted" if appended else "duplicate")
            if not spool.depth:
                self._log.info("spool_drained", drained=spool.drained)

        def failed(exc: BaseException) -> None:
            health.failed(error=type(exc).__name__, depth=spool.depth)

        def quarantined(offset: int, length: int) -> None:
            self._log.error("spool_record_quarantined", offset=offset, bytes=length, file=QUARANTINE_FILE,
                            fix="the record is kept there byte for byte; the deliveries after it go on")

        for offset in spool.quarantined_at_open:
            self._log.error("spool_record_quarantined", offset=offset, file=QUARANTINE_FILE, at="open",
                            fix="no whole record there (damage, or a write a crash cut short); kept byte for "
                                "byte; every whole record before and after it is delivered")
        if spool.depth or spool.quarantined:
            self._log.info("spool_recovered", depth=spool.depth, quarantined=spool.quarantined,
                           quarantined_bytes=spool.quarantined_bytes)
        # With PD_REPLICA_ACKS a drained record stays spooled until the replicas hold it: one WAIT a batch.
        confirm = ingest.confirm if ingest.waits_for_replicas else None
        await spool.drain(store, drained, failed, quarantined, confirm)

    def _refuse(
        self,
        forge: str,
        event: str | None,
        delivery: str | None,
        refusal: ReceiverRefusal,
        outcome: str = "refused",
        previous: bool = False,
    ) -> web.Response:
        self._log_delivery(forge, event, delivery, refusal.status, outcome, refusal.reason, previous)
        return json_response(refusal.status, refusal.body)

    def _log_delivery(
        self,
        forge: str,
        event: str | None,
        delivery: str | None,
        status: int,
        outcome: str,
        reason: str | None = None,
        previous: bool = False,
    ) -> None:
        """One line and one count per answered delivery; never the body, the credentials or a login."""
        self.metrics.delivery(forge, outcome, reason or "")
        if reason is None and not previous and not self._log.is_enabled_for(logging.DEBUG):
            return  # the hot path's line is debug (below): not even its fields are built
        fields = {
            "forge": forge, "forge_event": event, "delivery": delivery, "status": status, "outcome": outcome
        }
        if reason is not None:
            fields["reason"] = reason
        if previous:
            fields["verified_with"] = "previous"
            self._log.info("delivery", **fields)  # rotation in progress: the operator wants to see it
        elif reason is None:
            # Accepted, duplicate and ignored deliveries are the hot path and are already in pd:events and
            # the metrics; their line is debug (PD_LOG_LEVEL=debug shows it). Refusals stay at info.
            self._log.debug("delivery", **fields)
        else:
            self._log.info("delivery", **fields)


RECEIVER = web.AppKey("receiver", Receiver)


def create_app(
    settings: Settings,
    redis: Redis,
    keys: Keys,
    clock: EpochMsClock,
    config: ReceiverConfig | None = None,
    spool: Spool | None = None,
) -> web.Application:
    """Wire the handlers to the resources they are given.

    ``config`` is what ``load_receiver_config`` read at startup; without it, the arms ``settings``
    alone describes (GitHub with ``WEBHOOK_SECRET``). Raises ``ConfigError`` if no arm is configured.
    With a ``spool``, deliveries Redis cannot take are spooled, and drained while the app runs; without
    one they are answered 503.
    """
    if config is None:
        config = load_receiver_config(settings, {})
    arms = configure_arms(config)
    metrics = Metrics(tuple(arms))
    receiver = Receiver(arms, redis, keys, clock, metrics, spool, Replicas.of(settings))
    # Credentials are checked over the bytes on the wire: never let aiohttp inflate a Content-Encoding.
    app = web.Application(handler_args={"auto_decompress": False})
    app[RECEIVER] = receiver
    # Paths are normalised and routed by ``arms.FORGE_PATHS``, not aiohttp's table: the forges' own paths
    # get plain routes only because aiohttp finds those by a dict lookup, the catch-all by a regex.
    for forge in ALL_FORGES:
        app.router.add_route("*", forge.path, receiver.dispatch)
    app.router.add_route("*", "/{tail:.*}", receiver.dispatch)
    if spool is not None:
        metrics.watch_spool(spool)
        app.cleanup_ctx.append(_draining(receiver))
    return app


def _draining(receiver: Receiver) -> Callable[[web.Application], AsyncIterator[None]]:
    async def drain(_: web.Application) -> AsyncIterator[None]:
        task = asyncio.get_running_loop().create_task(receiver.drain_spool())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return drain
