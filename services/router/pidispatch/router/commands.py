"""The router's CLI verbs: ``router`` (the service; also ``python -m pidispatch.router``), and the
operator's view of stored deliveries: ``events``, ``explain``, ``replay``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os

from pidispatch.common.delayed import run_promoter
from pidispatch.common.health import Health
from pidispatch.common.keys import Keys
from pidispatch.common.log import configure_logging
from pidispatch.common.monitor import monitoring, service_registry
from pidispatch.common.redis import (
    check_redis_auth,
    redis_for,
)
from pidispatch.common.runtime import now_ms, stop_on_signals
from pidispatch.common.settings import Settings, load_settings
from pidispatch.forges import FORGES
from pidispatch.forges.authority import Authority
from pidispatch.forges.config import ForgeConfig, load_forge_config
from pidispatch.forges.http import create_http
from pidispatch.forges.identity import require_knowable, resolve_self_ids
from pidispatch.forges.route import route_of, token_sources
from pidispatch.router.consumer import consumer_name
from pidispatch.router.heal import delivery_log, require_logs, run_healer
from pidispatch.router.metrics import RouterMetrics
from pidispatch.router.reroute import run_rerouter
from pidispatch.router.service import run_router
from pidispatch.router.watch import watch_triggers
from pidispatch.triggers.loader import load_triggers, warn_if_empty
from pidispatch.triggers.lookup import Question, Verdict
from pidispatch.triggers.rules import Rules, RulesRef


def require_credentials(rules: Rules, config: ForgeConfig) -> None:
    """Rules that can only fire after a forge lookup need that forge's credentials: refuse to start
    without them (exit 2) rather than park every such event as ``lookup-failed``."""
    # Forges that ask about every delivery first: the order these refusals have always come in.
    for forge in sorted(FORGES, key=lambda f: not f.lookup_always):
        if route_of(forge).needs_lookup(rules.group(forge.name)):
            config.require(forge.name)


async def serve(_args: argparse.Namespace | None = None) -> int:
    """Validate everything first (a bad file or variable exits 2 before any connection), serve the
    ``PD_METRICS_PORT`` endpoint when it is set, then route (``_route``) until SIGTERM/SIGINT."""
    settings = load_settings()
    configure_logging("router", settings.log_level)
    forges = load_forge_config()
    consumer = consumer_name()
    rules = await asyncio.to_thread(
        functools.partial(load_triggers, settings.triggers_file, cron_floor_s=settings.cron_min_interval_s)
    )
    warn_if_empty(rules, os.path.basename(settings.triggers_file) or settings.triggers_file)
    require_credentials(rules, forges)
    require_knowable(rules, forges)
    require_logs(settings, forges)
    # Made here, not in the loop, so /readyz reads the very state the loop writes.
    redis_health = Health("redis_unreachable", "redis_restored")
    # One registry for the endpoint and the router's own series; kept (in memory) even when not served.
    registry = service_registry("router")
    metrics = RouterMetrics(registry)
    # Served from before the identity lookups, which may retry for minutes: the process is alive meanwhile.
    async with monitoring(
        settings.metrics_port, "router", lambda: ["redis"] if redis_health.down else [], registry=registry,
        bind=settings.metrics_bind,
    ):
        await _route(settings, forges, rules, consumer, redis_health, metrics)
    return 0


async def _route(
    settings: Settings, forges: ForgeConfig, rules: Rules, consumer: str, redis_health: Health,
    metrics: RouterMetrics,
) -> None:
    """Connect, resolve the harness's identity on each forge, then route until SIGTERM/SIGINT."""
    stop = stop_on_signals()
    http = create_http()
    redis = redis_for(settings)
    try:
        await check_redis_auth(redis, settings.redis_url)
        sources = token_sources(forges, http)
        # Logs one ``self_identity`` line per forge, those without credentials included.
        self_ids = await resolve_self_ids(forges, sources, http)
        authority = Authority(forges, sources, http, metrics=metrics)

        async def ask(question: Question, delivery: str) -> Verdict:
            return await authority.ask(question, delivery=delivery)

        rules_ref = RulesRef(rules)
        keys = Keys(settings.key_prefix)
        watcher = asyncio.create_task(
            watch_triggers(settings.triggers_file, rules_ref, stop, self_ids=self_ids,
                           cron_floor_s=settings.cron_min_interval_s)
        )
        # Workers promote too; the promoting script is atomic, so any number of promoters is safe.
        promoter = asyncio.create_task(run_promoter(redis, keys, stop))
        # Every router re-routes too; each move is one atomic script, so peers never double-move.
        rerouter = asyncio.create_task(run_rerouter(redis, keys, stop, now_ms))
        # One router heals at a time (a lease); the others' loops find it held and wait for the next turn.
        healer = asyncio.create_task(run_healer(
            settings, redis, keys, delivery_log(sources, http), consumer, stop, now_ms, metrics.healed
        ))
        try:
            await run_router(
                settings, redis, keys, rules_ref, stop, now_ms, self_ids=self_ids, ask=ask, consumer=consumer,
                redis_health=redis_health, metrics=metrics,
            )
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(watcher, promoter, rerouter, healer)
    finally:
        await redis.aclose()
        await http.close()


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "router",
        help="consume pd:events, match triggers.json, enqueue jobs",
        description="Route verified forge events to jobs. Env: REDIS_URL, VALKEY_PASSWORD or REDIS_PASSWORD, "
        "PD_KEY_PREFIX, PI_TRIGGERS_FILE, "
        f"forge credentials ({'; '.join(f.credentials_hint for f in FORGES)}), "
        "PD_ROUTER_NAME (distinct per router on one host), PD_CLAIM_IDLE_MS, PD_MAX_DELIVERIES, "
        "PD_EVENTS_MAXLEN, PD_HEAL_INTERVAL_S, PD_HEAL_WINDOW_H, GITHUB_HEAL_HOOKS.",
    )
    parser.set_defaults(func=serve, service=True)
