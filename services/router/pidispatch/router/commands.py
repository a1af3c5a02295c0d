"""``pi-dispatch router`` and ``python -m pidispatch.router``: one startup function for both."""

from __future__ import annotations

import argparse
import asyncio

from pidispatch.common.keys import Keys
from pidispatch.common.log import configure_logging
from pidispatch.common.redis import create_redis
from pidispatch.common.runtime import now_ms, stop_on_signals
from pidispatch.common.settings import load_settings
from pidispatch.router.service import consumer_name, resolve_self_id, run_router
from pidispatch.router.triggers import RulesRef, load_triggers


async def serve(_args: argparse.Namespace | None = None) -> int:
    """Validate everything first (a bad file or variable exits 2 before any connection), then route
    until SIGTERM/SIGINT and close the client."""
    configure_logging("router")
    settings = load_settings()
    consumer = consumer_name()
    resolve_self_id(settings)
    rules = await asyncio.to_thread(load_triggers, settings.triggers_file)
    stop = stop_on_signals()
    redis = create_redis(settings.redis_url)
    try:
        await run_router(
            settings, redis, Keys(settings.key_prefix), RulesRef(rules), stop, now_ms, consumer=consumer
        )
    finally:
        await redis.aclose()
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "router",
        help="consume pd:events, match triggers.json, enqueue jobs",
        description="Route verified forge events to jobs. Env: REDIS_URL, PD_KEY_PREFIX, PI_TRIGGERS_FILE, "
        "GITHUB_SELF_ID, PD_ROUTER_NAME (distinct per router on one host), PD_CLAIM_IDLE_MS, "
        "PD_MAX_DELIVERIES, PD_EVENTS_MAXLEN.",
    )
    parser.set_defaults(func=serve)
