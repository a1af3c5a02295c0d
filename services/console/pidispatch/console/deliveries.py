"""The operator's verbs over stored deliveries: ``events``, ``explain`` and ``replay``."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
from datetime import UTC, datetime

import msgspec
from redis.exceptions import AuthenticationError

from pidispatch.common.errors import InfraError
from pidispatch.common.keys import Keys
from pidispatch.common.models import Event
from pidispatch.common.redis import (
    Redis,
    auth_refused,
    bounded,
    redis_for,
    redis_location,
)
from pidispatch.common.runtime import now_ms
from pidispatch.common.settings import Settings, load_settings
from pidispatch.console import events
from pidispatch.forges import pipeline
from pidispatch.forges.config import load_forge_config
from pidispatch.forges.identity import explicit_self_ids
from pidispatch.triggers import decisions
from pidispatch.triggers.explain import stored_line
from pidispatch.triggers.loader import load_triggers
from pidispatch.triggers.subsets import MalformedPayload


async def open_redis(settings: Settings) -> Redis:
    redis = redis_for(settings)
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
    redis = await open_redis(settings)
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
    redis = await open_redis(settings)
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
    rules = await asyncio.to_thread(
        functools.partial(load_triggers, settings.triggers_file, cron_floor_s=settings.cron_min_interval_s)
    )
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


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
