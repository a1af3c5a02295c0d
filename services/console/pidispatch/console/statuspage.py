"""``pi-dispatch web``: a read-only status page (aiohttp), server-rendered, refreshing itself.

It writes nothing anywhere: every handler reads (``statusdata``) and renders (``statushtml``). It binds
loopback by default; any other address needs basic auth (``PD_WEB_USER`` and ``PD_WEB_PASSWORD``), since
the pages list job ids, hosts and the captured output of this host's jobs. A Redis that does not answer
gives each page a banner and status 503, within ``PAGE_TIMEOUT_S``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from aiohttp import web
from redis.exceptions import AuthenticationError, RedisError

from pidispatch.common.errors import InfraError
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis, bounded, redis_for
from pidispatch.common.registry import RegistryUnreachable
from pidispatch.common.runtime import EpochMsClock
from pidispatch.common.secret import Secret
from pidispatch.console import statusdata, statushtml, trialpage
from pidispatch.console.trialpage import TrialSource
from pidispatch.console.webauth import (
    REALM,
    FailureThrottle,
    authorized,
    check_exposure,
    web_credentials,
)
from pidispatch.triggers.lookup import SelfIds

T = TypeVar("T")
DEFAULT_BIND, DEFAULT_PORT = "127.0.0.1", 8080
PAGE_TIMEOUT_S = 5.0
PAGE_LIMIT = 50
# No script, no frames, no outside fetches; inline style only. The output is never sniffed as HTML.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_DOWN = (RedisError, OSError, TimeoutError, RegistryUnreachable)


class Unanswered(Exception):
    """Redis did not answer a page's reads; ``banner`` says so in words that name no address."""

    def __init__(self, banner: str) -> None:
        super().__init__(banner)
        self.banner = banner


@dataclass(frozen=True, slots=True)
class WebConfig:
    """Everything the pages read, resolved at start so a bad value stops the command, not a request."""

    keys: Keys
    logs_dir: str
    retention_days: int
    triggers_file: str
    cron_floor_s: int
    zone: ZoneInfo
    tz: str
    self_ids: SelfIds
    credentials: tuple[str, Secret[str]] | None


def _html(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/html", charset="utf-8", headers=HEADERS)


class StatusPage:
    """The routes. ``read`` runs one page's gathering within ``PAGE_TIMEOUT_S`` and turns every way Redis
    can fail into ``Unanswered``."""

    def __init__(self, config: WebConfig, redis: Redis, clock: EpochMsClock) -> None:
        self.config, self.redis, self.clock = config, redis, clock

    async def read(self, call: Awaitable[T]) -> T:
        try:
            return await bounded(call, PAGE_TIMEOUT_S)
        except AuthenticationError:
            raise Unanswered(statushtml.REDIS_REFUSED) from None
        except _DOWN:
            raise Unanswered(statushtml.REDIS_DOWN) from None

    async def overview(self, request: web.Request) -> web.Response:
        try:
            view = await self.read(statusdata.overview(self.redis, self.config.keys, self.clock()))
        except Unanswered as exc:
            return _html(statushtml.overview_html(None, exc.banner), 503)
        return _html(statushtml.overview_html(view))

    async def runs(self, request: web.Request) -> web.Response:
        c = self.config
        rows, note, answered = await statusdata.runs(
            self.redis, c.keys, c.logs_dir, c.retention_days, self.clock(), PAGE_LIMIT
        )  # bounded inside: the mirror read never raises, this host's files need no Redis
        if not answered:
            only_here = "showing this host's records only"
            return _html(statushtml.runs_html(rows, only_here, statushtml.REDIS_DOWN), 503)
        return _html(statushtml.runs_html(rows, note))

    async def output(self, request: web.Request) -> web.Response:
        found = await statusdata.captured_output(self.config.logs_dir, request.match_info["job"])
        if found is None:
            return _html(statushtml.missing_html("no captured output for that job on this host"), 404)
        return web.Response(body=found, content_type="text/plain", charset="utf-8", headers=HEADERS)

    async def deliveries(self, request: web.Request) -> web.Response:
        from pidispatch.console.events import recent

        try:
            rows = await self.read(recent(self.redis, self.config.keys, PAGE_LIMIT))
        except Unanswered as exc:
            return _html(statushtml.deliveries_html([], exc.banner), 503)
        return _html(statushtml.deliveries_html(rows))

    async def delivery(self, request: web.Request) -> web.Response:
        c, forge, delivery = self.config, request.match_info["forge"], request.match_info["delivery"]
        try:
            trace = await self.read(
                statusdata.delivery_trace(self.redis, c.keys, forge, delivery, c.triggers_file, c.self_ids,
                                          cron_floor_s=c.cron_floor_s)
            )
        except Unanswered as exc:
            return _html(statushtml.page("delivery", "deliveries", "", exc.banner), 503)
        if trace is None:
            return _html(statushtml.missing_html("that delivery is not in the stored events"), 404)
        return _html(statushtml.trace_html(trace))

    async def schedules(self, request: web.Request) -> web.Response:
        c = self.config
        try:
            rows, problem = await self.read(
                statusdata.schedules(self.redis, c.keys, c.triggers_file, c.zone, c.tz, self.clock(),
                                     cron_floor_s=c.cron_floor_s)
            )
        except Unanswered as exc:
            return _html(statushtml.schedules_html([], None, exc.banner), 503)
        return _html(statushtml.schedules_html(rows, problem))

    async def waits(self, request: web.Request) -> web.Response:
        try:
            rows = await self.read(statusdata.waits(self.redis, self.config.keys))
        except Unanswered as exc:
            return _html(statushtml.waits_html([], exc.banner), 503)
        return _html(statushtml.waits_html(rows))


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(config: WebConfig, redis: Redis, clock: EpochMsClock) -> web.Application:
    """The application: GET (and HEAD) routes, and the one form that posts (``trialpage``: it writes
    nothing either), behind basic auth when credentials are configured."""
    pages = StatusPage(config, redis, clock)
    throttle = FailureThrottle()

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if config.credentials is not None:
            client = request.remote or "unknown"
            if not authorized(request.headers.get("Authorization"), config.credentials):
                await throttle.failed(client)
                return web.Response(status=401, text="authentication required\n",
                                    headers={**HEADERS, "WWW-Authenticate": REALM})
            throttle.passed(client)
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return _html(statushtml.missing_html("no such page"), 404)

    app = web.Application(middlewares=[guard])
    trials = TrialSource(config.keys, config.triggers_file, config.cron_floor_s, config.self_ids)
    for method, path, handler in trialpage.routes(trials, redis, _html):
        app.router.add_route(method, path, handler)
    for path, handler in (
        ("/", pages.overview), ("/runs", pages.runs), ("/runs/{job}/output", pages.output),
        ("/deliveries", pages.deliveries), ("/deliveries/{forge}/{delivery}", pages.delivery),
        ("/schedules", pages.schedules), ("/waits", pages.waits),
    ):
        app.router.add_get(path, handler)
    return app


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("web", help="serve a read-only status page: queues, hosts, runs, deliveries, "
                                   "schedules, waits (basic auth: PD_WEB_USER and PD_WEB_PASSWORD)",
                       description="Serve a read-only HTML status page that refreshes itself: streams and "
                       "lag, live hosts, recent runs with their captured output, deliveries with their "
                       "explain trace, schedules and held jobs. Loopback only unless basic auth is set.")
    p.add_argument("--bind", default=DEFAULT_BIND,
                   help="address to listen on (default %(default)s; beyond loopback needs basic auth)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT,
                   help="port to listen on (default %(default)s; 0: any free port, printed at start)")
    p.set_defaults(func=web_command)


def _port(value: str) -> int:
    if not value.isdigit() or not 0 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError("accepted: a port from 0 to 65535")
    return int(value)


def load_web_config(env: Mapping[str, str], bind: str) -> tuple[WebConfig, Any]:
    """The page's configuration and the settings it came from; every refusal is a ``ConfigError``."""
    from pidispatch.common.settings import load_settings
    from pidispatch.forges.config import load_forge_config
    from pidispatch.forges.identity import explicit_self_ids
    from pidispatch.worker.cron.schedules import host_zone

    credentials = web_credentials(env)
    check_exposure(bind, credentials)
    settings = load_settings(env)
    zone, tz = host_zone(env)
    config = WebConfig(
        keys=Keys(settings.key_prefix), logs_dir=settings.logs_dir,
        retention_days=settings.log_retention_days, triggers_file=settings.triggers_file,
        cron_floor_s=settings.cron_min_interval_s, zone=zone, tz=tz,
        self_ids=explicit_self_ids(load_forge_config(env)), credentials=credentials,
    )
    return config, settings


async def web_command(args: argparse.Namespace) -> int:
    from pidispatch.common.log import configure_logging, get_logger
    from pidispatch.common.runtime import now_ms, stop_on_signals

    config, settings = load_web_config(os.environ, args.bind)
    configure_logging("web", settings.log_level)
    stop = stop_on_signals()
    redis = redis_for(settings)
    runner = web.AppRunner(build_app(config, redis, now_ms), access_log=None)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, args.bind, args.port).start()
        except OSError as exc:
            raise InfraError(f"cannot listen on --bind {args.bind} --port {args.port}: "
                             f"{exc.strerror or type(exc).__name__}") from None
        host, port = runner.addresses[0][:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"pi-dispatch web: serving http://{shown}:{port}/ (read-only; Ctrl-C stops)", flush=True)
        get_logger().info("web_listening", port=port, auth=config.credentials is not None)
        await stop.wait()
    finally:
        await runner.cleanup()
        await redis.aclose()
    return 0
