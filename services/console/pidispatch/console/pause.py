"""``pi-dispatch pause`` and ``resume``: the fleet's or one host's pause flag in Redis."""

from __future__ import annotations

import argparse
import sys

from pidispatch.common.connect import unreachable
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis

# How far back the run-history mirror is asked for hosts that ran jobs (it keeps about that long anyway).
SEEN_WINDOW_MS = 30 * 24 * 3600 * 1000


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for verb, text in (("pause", "stop taking new jobs (jobs still enqueue)"), ("resume", "take jobs again")):
        c = sub.add_parser(
            verb, help=f"{text}: every worker, or one host with --host",
            description=f"{text.capitalize()}: every worker, or one host with --host. The flag lives in "
            "Redis with no expiry, so it outlasts restarts of the workers.",
        )
        c.add_argument("--host", help="only this worker (its PI_WORKER_NAME)")
        c.add_argument("--json", action="store_true", help="print one JSON object")
        c.set_defaults(func=pause_command, paused=verb == "pause")


async def pause_command(args: argparse.Namespace) -> int:
    """Set or clear ``pd:paused`` (fleet) or ``pd:paused:<host>``. The flag has no expiry: a pause lasts
    until someone resumes, across restarts of Redis (with persistence) and of the workers."""
    import json

    from redis.exceptions import AuthenticationError

    from pidispatch.common.configsyntax import WORKER_NAME_RE
    from pidispatch.common.errors import ConfigError
    from pidispatch.common.keys import Keys
    from pidispatch.common.redis import auth_refused, redis_for
    from pidispatch.common.settings import load_settings

    settings = load_settings()
    if args.host is not None and not WORKER_NAME_RE.match(args.host):
        raise ConfigError(f"--host {args.host!r} is not a worker name; accepted: 1-64 of [A-Za-z0-9._-]")
    keys = Keys(settings.key_prefix)
    key = keys.paused_host(args.host) if args.host else keys.paused
    redis = redis_for(settings)
    try:
        if args.paused:
            await redis.set(key, "1")
        else:
            await redis.delete(key)
        fleet_paused = bool(await redis.exists(keys.paused))
        if args.host and args.paused:
            warning = unseen_host_warning(args.host, *await _seen_hosts(redis, keys))
            if warning:
                print(warning, file=sys.stderr)
    except AuthenticationError:
        raise auth_refused(settings.redis_url) from None
    except Exception as exc:
        raise unreachable(settings, type(exc).__name__, "nothing changed") from None
    finally:
        await redis.aclose()
    scope = args.host or "fleet"
    if args.json:
        print(json.dumps({"paused": args.paused, "scope": scope, "fleetPaused": fleet_paused}))
    elif args.paused:
        where = f"worker {args.host}" if args.host else "every worker"
        print(f"paused — {where} will stop taking new jobs (jobs still enqueue)")
    else:
        note = " (the fleet-wide pause is still on: pi-dispatch resume)" if args.host and fleet_paused else ""
        print(f"resumed {'worker ' + args.host if args.host else 'the fleet'}{note}")
    return 0


def unseen_host_warning(host: str, live: list[str], past: list[str]) -> str | None:
    """Pure: the stderr line for a pause of a host no registry row or mirrored run names (a typo, most
    likely: the pause is set all the same, and waits for a worker of that name)."""
    if host in live or host in past:
        return None
    named = ", ".join(live) or "none"
    return (f"pi-dispatch: warning: no worker named {host} has been seen (live now: {named}); the pause is "
            f"set and holds a worker of that name when one starts (undo: pi-dispatch resume --host {host})")


async def _seen_hosts(redis: Redis, keys: Keys) -> tuple[list[str], list[str]]:
    """The hosts with a live registry row, and those that mirrored a run lately (best effort)."""
    from pidispatch.common.registry import RegistryUnreachable, read_live_hosts
    from pidispatch.common.runtime import now_ms
    from pidispatch.worker.history.mirror import hosts_of, read_mirror

    now = now_ms()
    try:
        live = [h.name for h in await read_live_hosts(redis, keys, now)]
    except RegistryUnreachable:
        live = []
    records, _ = await read_mirror(redis, keys, since_ms=now - SEEN_WINDOW_MS, limit=1000)
    return live, hosts_of(records)
