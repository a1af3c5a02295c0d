"""``pi-dispatch hosts``: every worker with a live registry row."""

from __future__ import annotations

import argparse
import sys

import msgspec

from pidispatch.common.connect import unreachable
from pidispatch.common.keys import ROUTE_FRESH_MS, Keys
from pidispatch.common.registry import HostRow, RegistryUnreachable, read_live_hosts
from pidispatch.common.runtime import now_ms
from pidispatch.common.settings import load_settings
from pidispatch.console.deliveries import open_redis


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
    redis = await open_redis(settings)
    try:
        hosts = await read_live_hosts(redis, Keys(settings.key_prefix), now_ms())
    except RegistryUnreachable as exc:
        raise unreachable(settings, exc.reason, "the registry was not read") from None
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
        print(f"{h.name:<{width}}  {beat:>6}  {'yes' if h.routes else 'shared':<6}  {load:<7}  "
              f"{(h.version or '-'):<10}  {caps}{mark}")
    if any(not h.routes for h in hosts):
        # "no" read as broken: such a worker (dev's, one host) is fine, it takes every job from one stream.
        print("\nshared: no declared PI_WORKER_NAME, so no stream of its own: it takes jobs from the shared "
              "stream, and a job that needs a capability is routed to a named host instead")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ho = sub.add_parser(
        "hosts", help="every host with a live registry row: beat, routes, caps, load",
        description="List every worker with a live registry row in Redis: its last beat, whether jobs "
        "are routed to it, its capabilities and load; stale rows are marked.",
    )
    ho.add_argument("--json", action="store_true", help='one JSON object {"hosts": [...]} for scripts')
    ho.set_defaults(func=hosts_command)
