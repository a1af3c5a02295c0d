"""The router's CLI verbs: ``router`` (the service; also ``python -m pidispatch.router``), and the
operator's view of stored deliveries: ``events``, ``explain``, ``replay``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from datetime import UTC, datetime

import msgspec
from redis.exceptions import AuthenticationError

from pidispatch.common.delayed import run_promoter
from pidispatch.common.errors import InfraError
from pidispatch.common.health import Health
from pidispatch.common.keys import ROUTE_FRESH_MS, Keys
from pidispatch.common.log import configure_logging
from pidispatch.common.models import Event
from pidispatch.common.monitor import monitoring, service_registry
from pidispatch.common.redis import (
    Redis,
    auth_refused,
    bounded,
    check_redis_auth,
    create_redis,
    redis_location,
)
from pidispatch.common.registry import HostRow, RegistryUnreachable, read_live_hosts
from pidispatch.common.runtime import now_ms, stop_on_signals
from pidispatch.common.settings import Settings, load_settings
from pidispatch.forges import FORGES
from pidispatch.forges.config import ForgeConfig, load_forge_config
from pidispatch.forges.http import create_http
from pidispatch.router import decisions, events, pipeline
from pidispatch.router.authority import Authority
from pidispatch.router.consumer import consumer_name
from pidispatch.router.explain import stored_line
from pidispatch.router.forge import token_sources
from pidispatch.router.identity import explicit_self_ids, resolve_self_ids
from pidispatch.router.lookup import Question, Verdict
from pidispatch.router.metrics import RouterMetrics
from pidispatch.router.reroute import run_rerouter
from pidispatch.router.rules import Rules, RulesRef
from pidispatch.router.service import run_router
from pidispatch.router.subsets import MalformedPayload
from pidispatch.router.triggers import load_triggers, warn_if_empty
from pidispatch.router.watch import watch_triggers


def require_credentials(rules: Rules, config: ForgeConfig) -> None:
    """Rules that can only fire after a forge lookup need that forge's credentials: refuse to start
    without them (exit 2) rather than park every such event as ``lookup-failed``."""
    # Forges that ask about every delivery first: the order these refusals have always come in.
    for forge in sorted(FORGES, key=lambda f: not f.lookup_always):
        if forge.router().needs_lookup(rules.group(forge.name)):
            config.require(forge.name)


async def serve(_args: argparse.Namespace | None = None) -> int:
    """Validate everything first (a bad file or variable exits 2 before any connection), serve the
    ``PD_METRICS_PORT`` endpoint when it is set, then route (``_route``) until SIGTERM/SIGINT."""
    settings = load_settings()
    configure_logging("router", settings.log_level)
    forges = load_forge_config()
    consumer = consumer_name()
    rules = await asyncio.to_thread(load_triggers, settings.triggers_file)
    warn_if_empty(rules, os.path.basename(settings.triggers_file) or settings.triggers_file)
    require_credentials(rules, forges)
    # Made here, not in the loop, so /readyz reads the very state the loop writes.
    redis_health = Health("redis_unreachable", "redis_restored")
    # One registry for the endpoint and the router's own series; kept (in memory) even when not served.
    registry = service_registry("router")
    metrics = RouterMetrics(registry)
    # Served from before the identity lookups, which may retry for minutes: the process is alive meanwhile.
    async with monitoring(
        settings.metrics_port, "router", lambda: ["redis"] if redis_health.down else [], registry=registry
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
    redis = create_redis(settings.redis_url, settings.redis_password)
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
        watcher = asyncio.create_task(watch_triggers(settings.triggers_file, rules_ref, stop))
        # Workers promote too; the promoting script is atomic, so any number of promoters is safe.
        promoter = asyncio.create_task(run_promoter(redis, keys, stop))
        # Every router re-routes too; each move is one atomic script, so peers never double-move.
        rerouter = asyncio.create_task(run_rerouter(redis, keys, stop, now_ms))
        try:
            await run_router(
                settings, redis, keys, rules_ref, stop, now_ms, self_ids=self_ids, ask=ask, consumer=consumer,
                redis_health=redis_health, metrics=metrics,
            )
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(watcher, promoter, rerouter)
    finally:
        await redis.aclose()
        await http.close()


async def _with_redis(settings: Settings) -> Redis:
    redis = create_redis(settings.redis_url, settings.redis_password)
    where = redis_location(settings.redis_url)
    try:
        await bounded(redis.ping(), 3)
    except AuthenticationError:
        await redis.aclose()
        raise auth_refused(settings.redis_url) from None
    except Exception:
        await redis.aclose()
        raise InfraError(f"Redis at REDIS_URL is not answering ({where})") from None
    return redis


def _ts(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


async def events_command(args: argparse.Namespace) -> int:
    settings = load_settings()
    redis = await _with_redis(settings)
    try:
        rows = await events.recent(redis, Keys(settings.key_prefix), args.limit)
    finally:
        await redis.aclose()
    if args.json:
        sys.stdout.write(msgspec.json.encode(rows).decode() + "\n")
        return 0
    if not rows:
        print("no stored deliveries")
        return 0
    print(f"{'received (UTC)':<20} {'forge':<8} {'event':<24} {'target':<24} {'outcome':<21} "
          f"{'reason/jobs':<40} delivery")
    for row in rows:
        detail = row.reason or ",".join(row.jobs) or "-"
        about = row.event + (f"/{row.action}" if row.action else "")
        print(f"{_ts(row.received_at):<20} {row.forge:<8} {about[:24]:<24} {(row.target or '-')[:24]:<24} "
              f"{events.shown_outcome(row):<21} {detail[:40]:<40} {row.delivery}")
    return 0


async def _stored(args: argparse.Namespace) -> tuple[Settings, Redis, str, Event]:
    settings = load_settings()
    redis = await _with_redis(settings)
    found = await events.find(redis, Keys(settings.key_prefix), args.delivery, args.forge)
    if found is None:
        await redis.aclose()
        raise InfraError(
            f"delivery {args.delivery} is not in the stored events (never received, or trimmed past "
            "PD_EVENTS_MAXLEN)"
        )
    return settings, redis, found[0], found[1]


async def explain_command(args: argparse.Namespace) -> int:
    """The decision the router stored for the delivery, then a re-run of the match on the stored event
    against the current triggers file; changes nothing and asks no forge (a rule that needs the actor's
    authority says so)."""
    settings, redis, entry, event = await _stored(args)
    try:
        stored = await decisions.read(redis, Keys(settings.key_prefix), event.forge, event.delivery, entry)
    finally:
        await redis.aclose()
    rules = await asyncio.to_thread(load_triggers, settings.triggers_file)
    self_ids = explicit_self_ids(load_forge_config())
    authorized = {"yes": True, "no": False}.get(args.assume_authorized)
    try:
        explanation = pipeline.explain(event, rules, self_ids, authorized)
    except MalformedPayload as exc:
        if stored is not None and not args.json:
            print(stored_line(stored))
        print(f"delivery {args.delivery}: the stored body does not have the forge's shape ({exc})")
        return 1
    explanation = msgspec.structs.replace(explanation, stored=stored)
    if args.json:
        sys.stdout.write(msgspec.json.encode(explanation).decode() + "\n")
    else:
        print("\n".join(explanation.lines()))
    return 0


async def replay_command(args: argparse.Namespace) -> int:
    settings, redis, entry, event = await _stored(args)
    try:
        new_entry = await events.replay(redis, Keys(settings.key_prefix), event, now_ms())
    finally:
        await redis.aclose()
    if args.json:
        print(json.dumps({"replayed": True, "forge": event.forge, "delivery": event.delivery,
                          "storedAs": entry, "entry": new_entry}))
        return 0
    print(f"replayed {event.forge} delivery {event.delivery} (stored as {entry}) as entry {new_entry}; "
          "the router re-decides it with the current triggers file, and job dedup still holds")
    return 0


def _host_json(h: HostRow) -> dict[str, object]:
    return {
        "name": h.name, "beatAt": h.beat_at, "startedAt": h.started_at, "staleMs": h.stale_ms,
        "stale": _stale(h), "routes": h.routes, "caps": sorted(h.caps), "running": h.running,
        "concurrency": h.concurrency, "version": h.version, "tz": h.tz, "image": h.image,
    }


def _stale(h: HostRow) -> bool:
    # An undatable beat is no evidence of life either: the router would not route to it.
    return h.stale_ms is None or h.stale_ms > ROUTE_FRESH_MS


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)


async def hosts_command(args: argparse.Namespace) -> int:
    """Every host with a row (members whose row expired are pruned on the way, and not shown)."""
    settings = load_settings()
    redis = await _with_redis(settings)
    try:
        hosts = await read_live_hosts(redis, Keys(settings.key_prefix), now_ms())
    except RegistryUnreachable as exc:
        raise InfraError(f"Redis at REDIS_URL did not answer the registry read ({exc.reason})") from None
    finally:
        await redis.aclose()
    if args.json:
        sys.stdout.write(msgspec.json.encode({"hosts": [_host_json(h) for h in hosts]}).decode() + "\n")
        return 0
    if not hosts:
        print("no live hosts (workers write pd:host:<name> every 15 s)")
        return 0
    width = max(len("NAME"), *(len(h.name) for h in hosts))
    print(f"{'NAME':<{width}}  {'BEAT':>6}  {'ROUTES':<6}  {'RUNNING':<7}  {'VERSION':<10}  CAPS")
    for h in hosts:
        beat = "?" if h.stale_ms is None else f"{h.stale_ms // 1000}s"
        load = f"{_n(h.running)}/{_n(h.concurrency)}"
        caps = ",".join(sorted(h.caps)) or "-"
        mark = "  stale" if _stale(h) else ""
        print(f"{h.name:<{width}}  {beat:>6}  {'yes' if h.routes else 'no':<6}  {load:<7}  "
              f"{(h.version or '-'):<10}  {caps}{mark}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "router",
        help="consume pd:events, match triggers.json, enqueue jobs",
        description="Route verified forge events to jobs. Env: REDIS_URL, VALKEY_PASSWORD or REDIS_PASSWORD, "
        "PD_KEY_PREFIX, PI_TRIGGERS_FILE, "
        "forge credentials (GITHUB_AUTH_SOURCE, GITLAB_TOKEN, FORGEJO_TOKEN, AZURE_TOKEN, ...), "
        "PD_ROUTER_NAME (distinct per router on one host), PD_CLAIM_IDLE_MS, PD_MAX_DELIVERIES, "
        "PD_EVENTS_MAXLEN.",
    )
    parser.set_defaults(func=serve, service=True)

    ev = sub.add_parser(
        "events", help="recent deliveries and what the router decided",
        description="List the newest stored deliveries with the router's decision for each (queued, "
        "dropped and why, deduplicated), a replay as a replay and a cancelled job as cancelled.",
    )
    ev.add_argument("--limit", type=int, default=20, help="how many, newest first (default %(default)s)")
    ev.add_argument("--json", action="store_true", help="one JSON array for scripts")
    ev.set_defaults(func=events_command)

    ex = sub.add_parser(
        "explain", help="what the router decided for a delivery, then what today's rules would do "
        "(changes nothing)",
        description="Print the stored decision for a delivery, then re-run the match on the stored event "
        "against the current PI_TRIGGERS_FILE, rule by rule. Changes nothing and asks no forge.",
    )
    ex.add_argument("delivery", help="the delivery id (the forge's delivery header; `events` lists them)")
    ex.add_argument("--forge", choices=events.FORGES, help="the forge, when two share a delivery id")
    ex.add_argument("--assume-authorized", choices=("yes", "no"),
                    help="answer the forge-authority question instead of leaving it open")
    ex.add_argument("--json", action="store_true", help="print one JSON object")
    ex.set_defaults(func=explain_command)

    rp = sub.add_parser(
        "replay", help="re-process a stored delivery (dedup still holds)",
        description="Append a stored delivery to the events stream again, so the router re-decides it "
        "with the current PI_TRIGGERS_FILE (after fixing a rule, say). A job already made is not made twice.",
    )
    rp.add_argument("delivery", help="the delivery id (`events` lists them)")
    rp.add_argument("--forge", choices=events.FORGES, help="the forge, when two share a delivery id")
    rp.add_argument("--json", action="store_true", help="print one JSON object")
    rp.set_defaults(func=replay_command)

    ho = sub.add_parser(
        "hosts", help="every host with a live registry row: beat, routes, caps, load",
        description="List every worker with a live registry row in Redis: its last beat, whether jobs "
        "are routed to it, its capabilities and load; stale rows are marked.",
    )
    ho.add_argument("--json", action="store_true", help='one JSON object {"hosts": [...]} for scripts')
    ho.set_defaults(func=hosts_command)
