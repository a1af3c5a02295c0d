"""The receiver's HTTP edge: routes, the delivery pipeline, health, metrics and the process lifecycle.

Pipeline per delivery (spec ingest §1.3-§1.6, DESIGN §6), the same for every forge: header rows →
bounded body read → credential over the raw bytes → minimal read of the verified body → events the
router can never act on answer 204 unstored → append once (``ingest``) → 202 accepted / duplicate, or
503 when Redis cannot take it in time. What differs per forge lives in its arm.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from time import perf_counter

from aiohttp import ClientPayloadError, hdrs, web
from aiohttp.streams import StreamReader
from redis.exceptions import RedisError

from pidispatch.common.errors import InfraError
from pidispatch.common.health import Health
from pidispatch.common.keys import Keys
from pidispatch.common.log import get_logger
from pidispatch.common.redis import Redis, create_redis
from pidispatch.common.runtime import now_ms, stop_on_signals
from pidispatch.common.settings import Settings
from pidispatch.receiver import verify
from pidispatch.receiver.arms import FORGES, Arm, configure_arms, forge_for_path, normalise_path
from pidispatch.receiver.config import ReceiverConfig, load_receiver_config
from pidispatch.receiver.ingest import Ingest
from pidispatch.receiver.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from pidispatch.receiver.metrics import Metrics
from pidispatch.receiver.refusals import METHOD_NOT_ALLOWED, Refusal, not_configured

READY_TIMEOUT_S = 1.0
# On SIGTERM in-flight requests get this long to finish (a slow upload included; Redis calls are
# bounded at 2 s), then aiohttp gets CLEANUP_TIMEOUT_S to cancel any straggler.
DRAIN_TIMEOUT_S = 5.0
CLEANUP_TIMEOUT_S = 1.0

_ACCEPTED = b'{"status":"accepted"}'
_DUPLICATE = b'{"status":"duplicate"}'
_OK = b'{"status":"ok"}'
_READY = b'{"status":"ready"}'
_REDIS_UNREACHABLE = b'{"status":"redis-unreachable"}'
_READ_METHODS = frozenset({hdrs.METH_GET, hdrs.METH_HEAD})
# Event names of every forge are lowercase words joined by _ . - (issues, merge_request,
# ms.vss-code.git-pullrequest-comment-event); anything else a request says is not logged.
_EVENT_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


def _json(status: int, body: bytes) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json")


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
        self, arms: dict[str, Arm], redis: Redis, keys: Keys, clock: Callable[[], int], metrics: Metrics
    ) -> None:
        self._arms = arms
        self._redis = redis
        self._ingest = Ingest(redis, keys)
        self._clock = clock
        self.metrics = metrics
        self._log = get_logger()
        self._unconfigured = {forge: not_configured(forge) for forge in FORGES}
        self._redis_health = Health("redis_unreachable", "redis_restored")
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
        try:
            return await self._route(request)
        finally:
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
        if request.method not in _READ_METHODS:
            return _json(405, METHOD_NOT_ALLOWED.body)
        return _json(200, _OK)

    async def _readyz(self, request: web.Request) -> web.Response:
        if request.method not in _READ_METHODS:
            return _json(405, METHOD_NOT_ALLOWED.body)
        try:
            async with asyncio.timeout(READY_TIMEOUT_S):
                await self._redis.ping()
        except (RedisError, OSError) as exc:  # TimeoutError is an OSError
            self._redis_health.failed(error=type(exc).__name__)
            return _json(503, _REDIS_UNREACHABLE)
        self._redis_health.ok()
        return _json(200, _READY)

    def _metrics(self, request: web.Request) -> web.Response:
        if request.method not in _READ_METHODS:
            return _json(405, METHOD_NOT_ALLOWED.body)
        return web.Response(body=self.metrics.render(), headers={hdrs.CONTENT_TYPE: METRICS_CONTENT_TYPE})

    async def _deliver(self, arm: Arm, request: web.Request) -> web.StreamResponse:
        name = arm.name
        head = arm.head(request.method, request.headers, request.content_length)
        if head.refusal is not None:
            return self._refuse(name, _log_event(head.event), _log_delivery_id(head.delivery), head.refusal)
        try:
            body = await read_body(request.content, verify.MAX_BODY_BYTES)
        except (ClientPayloadError, ConnectionError):  # aiohttp usually cancels us instead; be precise
            return self._refuse(name, _log_event(head.event), head.delivery, arm.table.body_incomplete)
        if body is None:
            return self._refuse(name, _log_event(head.event), head.delivery, arm.table.payload_too_large)
        metrics = self.metrics
        metrics.body_bytes(name, len(body))
        started = perf_counter()
        matched = arm.authenticate(head, body, self._clock())
        metrics.verify_time(name, perf_counter() - started)
        if type(matched) is Refusal:
            return self._refuse(name, _log_event(head.event), head.delivery, matched)
        # Verified: the body is the forge's own from here on.
        previous = matched != 0
        if previous:
            metrics.verified_with_previous(name)
        verdict = arm.classify(head, body)
        if type(verdict) is Refusal:
            return self._refuse(name, _log_event(head.event), head.delivery, verdict, previous=previous)
        event, delivery, store = verdict
        if not store:
            self._log_delivery(name, _log_event(event), delivery, 204, "ignored", previous=previous)
            return web.Response(status=204)
        assert event is not None  # only named events are stored
        started = perf_counter()
        try:
            appended = await self._ingest.append(name, event, delivery, self._clock(), body)
        except (RedisError, OSError) as exc:  # TimeoutError (the bound) is an OSError
            metrics.append_failed(name)
            self._redis_health.failed(error=type(exc).__name__)
            self._log.warning("enqueue_failed", forge=name, delivery=delivery, error=type(exc).__name__)
            return self._refuse(name, event, delivery, arm.table.enqueue_failed, "failed", previous)
        metrics.append_time(perf_counter() - started)
        self._redis_health.ok()
        outcome = "accepted" if appended else "duplicate"
        self._log_delivery(name, event, delivery, 202, outcome, previous=previous)
        return _json(202, _ACCEPTED if appended else _DUPLICATE)

    def _refuse(
        self,
        forge: str,
        event: str | None,
        delivery: str | None,
        refusal: Refusal,
        outcome: str = "refused",
        previous: bool = False,
    ) -> web.Response:
        self._log_delivery(forge, event, delivery, refusal.status, outcome, refusal.reason, previous)
        return _json(refusal.status, refusal.body)

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
    clock: Callable[[], int],
    config: ReceiverConfig | None = None,
) -> web.Application:
    """Wire the handlers to the resources they are given.

    ``config`` is what ``load_receiver_config`` read at startup; without it, the arms ``settings``
    alone describes (GitHub with ``WEBHOOK_SECRET``). Raises ``ConfigError`` if no arm is configured.
    """
    if config is None:
        config = load_receiver_config(settings, {})
    arms = configure_arms(config)
    receiver = Receiver(arms, redis, keys, clock, Metrics(tuple(arms)))
    # Credentials are checked over the bytes on the wire: never let aiohttp inflate a Content-Encoding.
    app = web.Application(handler_args={"auto_decompress": False})
    app[RECEIVER] = receiver
    # One catch-all route: paths are normalised and routed by the spec's table, not aiohttp's.
    app.router.add_route("*", "/{tail:.*}", receiver.dispatch)
    return app


async def serve(settings: Settings, config: ReceiverConfig) -> int:
    """Run the receiver until SIGTERM/SIGINT, then stop accepting, finish in-flight requests, exit 0.

    Redis need not be up: requests answer 503 until it is.
    """
    log = get_logger()
    stop = stop_on_signals()
    redis = create_redis(settings.redis_url)
    try:
        app = create_app(settings, redis, Keys(settings.key_prefix), now_ms, config)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=CLEANUP_TIMEOUT_S)
        await runner.setup()
        try:
            site = web.TCPSite(runner, settings.receiver_bind, settings.receiver_port)
            try:
                await site.start()
            except OSError as exc:
                raise InfraError(
                    f"cannot listen on RECEIVER_BIND:RECEIVER_PORT "
                    f"{settings.receiver_bind}:{settings.receiver_port}: {exc.strerror or exc}"
                ) from None
            rotating = [forge for forge in config.forges() if len(getattr(config, forge).secrets) > 1]
            log.info("receiver_started", port=settings.receiver_port, arms=config.forges(), rotating=rotating)
            await stop.wait()
            log.info("receiver_stopping")
            await site.stop()  # no new connections; requests already in flight finish below
            await app[RECEIVER].drain(DRAIN_TIMEOUT_S)
        finally:
            await runner.cleanup()
    finally:
        await redis.aclose()
    log.info("receiver_stopped")
    return 0
