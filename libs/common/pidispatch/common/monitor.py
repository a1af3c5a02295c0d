"""The router's and the worker's monitoring endpoint (``PD_METRICS_PORT``): ``/healthz``, ``/readyz`` and
``/metrics`` on a small aiohttp server of their own, and the registry its ``/metrics`` renders.

The answers match the receiver's (``pidispatch.receiver.app``): ``/healthz`` checks no dependency, so an
outage never makes an orchestrator restart the service; ``/readyz`` names the dependencies that are down,
as the service's own loop last saw them (the handler does no I/O).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType

import msgspec
from aiohttp import hdrs, web
from prometheus_client import CollectorRegistry, Gauge, PlatformCollector, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from pidispatch.common import __version__
from pidispatch.common.errors import InfraError
from pidispatch.common.log import get_logger

# The names of the dependencies that are down now ("redis", "docker"); empty when the service is ready.
Readiness = Callable[[], Sequence[str]]

# Loopback unless PD_METRICS_BIND says otherwise (compose opens it on its private network).
BIND = "127.0.0.1"
# Shared with the receiver's own /healthz and /readyz, so every service answers alike.
OK_BODY = b'{"status":"ok"}'
READY_BODY = b'{"status":"ready"}'
_NOT_FOUND = b'{"error":"not found"}'
_METHOD_NOT_ALLOWED = b'{"error":"method not allowed"}'  # the receiver's 405 body
READ_METHODS = frozenset({hdrs.METH_GET, hdrs.METH_HEAD})


def json_response(status: int, body: bytes) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json")


def service_registry(service: str) -> CollectorRegistry:
    """A registry of the process's own series (CPU, memory, descriptors, Python) and ``pd_service_info``."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    info = Gauge(
        "pd_service_info", "The pi-dispatch service serving this endpoint, and its version (always 1).",
        ("service", "version"), registry=registry,
    )
    info.labels(service, __version__).set(1)
    return registry


class Monitor:
    """The endpoint on ``port``: ``start`` binds it (``InfraError`` when taken), ``close`` stops it."""

    def __init__(
        self, port: int, readiness: Readiness, registry: CollectorRegistry, bind: str = BIND
    ) -> None:
        self.port, self._readiness, self._registry, self.bind = port, readiness, registry, bind
        self._routes: dict[str, Callable[[], web.Response]] = {
            "/healthz": self._healthz, "/readyz": self._readyz, "/metrics": self._metrics,
        }
        app = web.Application()
        # One catch-all route, so an unknown path and a wrong method get the same small JSON bodies.
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)

    async def start(self) -> None:
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, self.bind, self.port).start()
        except OSError as exc:
            await self._runner.cleanup()
            raise InfraError(
                f"cannot listen on PD_METRICS_PORT {self.bind}:{self.port}: {exc.strerror or exc}"
            ) from None
        get_logger().info("monitor_listening", port=self.port, bind=self.bind)

    async def close(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> Monitor:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _dispatch(self, request: web.Request) -> web.Response:
        answer = self._routes.get(request.path)
        if answer is None:
            return json_response(404, _NOT_FOUND)
        if request.method not in READ_METHODS:
            return json_response(405, _METHOD_NOT_ALLOWED)
        return answer()

    def _healthz(self) -> web.Response:
        """The process serves; deliberately no dependency, so an outage never restarts the service."""
        return json_response(200, OK_BODY)

    def _readyz(self) -> web.Response:
        down = list(self._readiness())
        if not down:
            return json_response(200, READY_BODY)
        return json_response(503, msgspec.json.encode({"status": "unready", "down": down}))

    def _metrics(self) -> web.Response:
        return web.Response(
            body=generate_latest(self._registry), headers={hdrs.CONTENT_TYPE: CONTENT_TYPE_LATEST}
        )


@contextlib.asynccontextmanager
async def monitoring(
    port: int | None, service: str, readiness: Readiness, *, registry: CollectorRegistry | None = None,
    bind: str = BIND,
) -> AsyncIterator[Monitor | None]:
    """The endpoint of ``service`` for the block's duration; none when ``port`` is None (unset).
    ``registry`` is the service's own (``service_registry`` plus its series); a bare one by default."""
    if port is None:
        yield None
        return
    async with Monitor(port, readiness, registry or service_registry(service), bind) as monitor:
        yield monitor
