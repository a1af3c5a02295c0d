"""The receiver's HTTP edge: routes, the GitHub-style arm, health, and the process lifecycle.

Pipeline per delivery (spec ingest §1.3, DESIGN §6): header checks → bounded body read → credential
over the raw bytes → JSON object check → events the router can never act on answer 204 unstored →
append once (``ingest``) → 202 accepted / duplicate, or 503 when Redis cannot take it in time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

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
from pidispatch.receiver.arms import (
    FALLTHROUGH_FORGE,
    FORGE_PATHS,
    Arm,
    configure_arms,
    forge_for_path,
    normalise_path,
)
from pidispatch.receiver.ingest import Ingest
from pidispatch.receiver.verify import Refusal

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
_ENQUEUE_FAILED = b'{"error":"enqueue-failed"}'
_INTERNAL_ERROR = b'{"error":"internal error"}'
_READ_METHODS = frozenset({hdrs.METH_GET, hdrs.METH_HEAD})
_BODY_INCOMPLETE = Refusal(400, "body-incomplete", b'{"error":"incomplete body"}')


def _json(status: int, body: bytes) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json")


def _log_token(value: str | None) -> str | None:
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

    def __init__(self, arms: dict[str, Arm], redis: Redis, keys: Keys, clock: Callable[[], int]) -> None:
        self._arms = arms
        self._redis = redis
        self._ingest = Ingest(redis, keys)
        self._clock = clock
        self._log = get_logger()
        self._unconfigured = {
            forge: verify.not_configured(forge) for forge in (FALLTHROUGH_FORGE, *FORGE_PATHS.values())
        }
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
        # Health paths are answered here, before forge routing, so they never fall through to GitHub.
        if path == "/healthz":
            return self._healthz(request)
        if path == "/readyz":
            return await self._readyz(request)
        forge = forge_for_path(path)
        arm = self._arms.get(forge)
        if arm is None:
            return self._refuse(forge, None, None, self._unconfigured[forge])
        try:
            return await self._deliver(arm, request)
        except Exception as exc:
            # Unreachable by design; the line names the delivery only, never body or headers.
            self._log.error(
                "verify_handler_error",
                forge=arm.name,
                delivery=_log_token(request.headers.get(arm.delivery_header)),
                error=type(exc).__name__,
            )
            return _json(500, _INTERNAL_ERROR)

    def _healthz(self, request: web.Request) -> web.Response:
        """The process is alive; deliberately no Redis, so a Redis outage never restarts receivers."""
        if request.method not in _READ_METHODS:
            return _json(405, verify.METHOD_NOT_ALLOWED.body)
        return _json(200, _OK)

    async def _readyz(self, request: web.Request) -> web.Response:
        if request.method not in _READ_METHODS:
            return _json(405, verify.METHOD_NOT_ALLOWED.body)
        try:
            async with asyncio.timeout(READY_TIMEOUT_S):
                await self._redis.ping()
        except (RedisError, OSError) as exc:  # TimeoutError is an OSError
            self._redis_health.failed(error=type(exc).__name__)
            return _json(503, _REDIS_UNREACHABLE)
        self._redis_health.ok()
        return _json(200, _READY)

    async def _deliver(self, arm: Arm, request: web.Request) -> web.StreamResponse:
        headers = request.headers
        signature = headers.get(arm.signature_header)
        event = headers.get(arm.event_header)
        delivery = headers.get(arm.delivery_header)
        refusal = verify.github_preamble(
            request.method, headers.get(hdrs.CONTENT_TYPE), signature, event, delivery, request.content_length
        )
        if refusal is not None:
            return self._refuse(arm.name, _log_token(event), _log_token(delivery), refusal)
        # The preamble proved these present and the delivery id well-formed.
        assert signature is not None and event is not None and delivery is not None
        try:
            body = await read_body(request.content, verify.MAX_BODY_BYTES)
        except (ClientPayloadError, ConnectionError):  # aiohttp usually cancels us instead; be precise
            return self._refuse(arm.name, _log_token(event), delivery, _BODY_INCOMPLETE)
        if body is None:
            return self._refuse(arm.name, _log_token(event), delivery, verify.PAYLOAD_TOO_LARGE)
        if not arm.verify(body, signature):
            return self._refuse(arm.name, _log_token(event), delivery, verify.INVALID_SIGNATURE)
        # Verified: from here the headers are the forge's own, but still only logged when token-shaped.
        if not verify.is_json_object(body):
            return self._refuse(arm.name, _log_token(event), delivery, verify.INVALID_JSON)
        if event not in arm.events:
            self._log_delivery(arm.name, _log_token(event), delivery, 204, "ignored")
            return web.Response(status=204)
        try:
            appended = await self._ingest.append(arm.name, event, delivery, self._clock(), body)
        except (RedisError, OSError) as exc:  # TimeoutError (the bound) is an OSError
            self._redis_health.failed(error=type(exc).__name__)
            self._log.warning("enqueue_failed", forge=arm.name, delivery=delivery, error=type(exc).__name__)
            self._log_delivery(arm.name, event, delivery, 503, "refused", "enqueue-failed")
            return _json(503, _ENQUEUE_FAILED)
        self._redis_health.ok()
        if appended:
            self._log_delivery(arm.name, event, delivery, 202, "accepted")
            return _json(202, _ACCEPTED)
        self._log_delivery(arm.name, event, delivery, 202, "duplicate")
        return _json(202, _DUPLICATE)

    def _refuse(self, forge: str, event: str | None, delivery: str | None, refusal: Refusal) -> web.Response:
        self._log_delivery(forge, event, delivery, refusal.status, "refused", refusal.reason)
        return _json(refusal.status, refusal.body)

    def _log_delivery(
        self,
        forge: str,
        event: str | None,
        delivery: str | None,
        status: int,
        outcome: str,
        reason: str | None = None,
    ) -> None:
        log = self._log
        if reason is None:
            log.info(
                "delivery", forge=forge, forge_event=event, delivery=delivery, status=status, outcome=outcome
            )
        else:
            log.info(
                "delivery", forge=forge, forge_event=event, delivery=delivery, status=status, outcome=outcome,
                reason=reason,
            )


RECEIVER = web.AppKey("receiver", Receiver)


def create_app(settings: Settings, redis: Redis, keys: Keys, clock: Callable[[], int]) -> web.Application:
    """Wire the handlers to the resources they are given; raises ``ConfigError`` if no arm is configured."""
    receiver = Receiver(configure_arms(settings), redis, keys, clock)
    # Credentials are checked over the bytes on the wire: never let aiohttp inflate a Content-Encoding.
    app = web.Application(handler_args={"auto_decompress": False})
    app[RECEIVER] = receiver
    # One catch-all route: paths are normalised and routed by the spec's table, not aiohttp's.
    app.router.add_route("*", "/{tail:.*}", receiver.dispatch)
    return app


async def serve(settings: Settings) -> int:
    """Run the receiver until SIGTERM/SIGINT, then stop accepting, finish in-flight requests, exit 0.

    Redis need not be up: requests answer 503 until it is.
    """
    log = get_logger()
    stop = stop_on_signals()
    arms = configure_arms(settings)  # refuse a bad configuration before opening anything
    redis = create_redis(settings.redis_url)
    try:
        app = create_app(settings, redis, Keys(settings.key_prefix), now_ms)
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
            log.info("receiver_started", port=settings.receiver_port, arms=sorted(arms))
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
