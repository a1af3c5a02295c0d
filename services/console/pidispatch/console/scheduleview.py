"""The cron verbs. ``pi-dispatch schedules``: one row per cron trigger in ``PI_TRIGGERS_FILE`` with the
hosts serving it (from the host registry), its next occurrence in this host's zone and its last firing
(from Redis). ``pi-dispatch run --trigger <id>``: one run of a cron trigger now, on this host."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from pidispatch.common.cronpattern import next_occurrence
from pidispatch.common.registry import HostRow
from pidispatch.common.table import aligned
from pidispatch.triggers.rules import CronRule

ACTIVE, UNSERVED, TORN_DOWN, DIVERGENT = "active", "unserved", "torn-down", "divergent"
ROW_KEYS = ("id", "pattern", "tz", "hosts", "next", "last", "stalls", "state")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "schedules", help="list the cron triggers, who serves them, next and last runs",
        description="List the cron triggers of PI_TRIGGERS_FILE with the host serving each, the next and "
        "last firing; --rearm lifts the stall guard's tear-down of one.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON array")
    p.add_argument("--rearm", metavar="ID", help="lift the stall guard's tear-down of this schedule")
    p.set_defaults(func=schedules_command)


def schedule_rows(
    rules: Sequence[CronRule], hosts: Sequence[HostRow], lasts: Mapping[str, dict[str, Any] | None],
    now_ms: int, zone: ZoneInfo, tz: str, guards: Mapping[str, tuple[int, bool]] | None = None,
) -> list[dict[str, Any]]:
    """Pure: the rows, in file order. A schedule no live host serves is ``unserved``, one the stall guard
    tore down ``torn-down`` (nothing fires either), one two live hosts define differently ``divergent``
    (the fleet gate holds back their edits until they agree)."""
    from pidispatch.worker.cron.gate import divergent_ids

    split = divergent_ids(hosts)
    rows = []
    for rule in rules:
        serving = sorted(h.name for h in hosts if rule.id in h.cron)
        at = next_occurrence(rule.pattern, now_ms, zone)
        stalls, down = (guards or {}).get(rule.id, (0, False))
        rows.append({
            "id": rule.id, "pattern": rule.pattern, "tz": tz, "hosts": serving,
            "next": datetime.fromtimestamp(at / 1000, zone).isoformat(), "last": lasts.get(rule.id),
            "stalls": stalls, "state": state(down, rule.id in split, bool(serving)),
        })
    return rows


def state(down: bool, divergent: bool, serving: bool) -> str:
    return TORN_DOWN if down else DIVERGENT if divergent else ACTIVE if serving else UNSERVED


def render_table(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return "no cron triggers in PI_TRIGGERS_FILE"
    header = ("ID", "PATTERN", "STATE", "NEXT", "LAST", "HOSTS")
    lines = [header]
    for r in rows:
        last = r["last"]
        shown = f"{last['at']} {last['outcome'] or '-'}" if last else "-"
        lines.append((r["id"], r["pattern"], r["state"], r["next"], shown, ",".join(r["hosts"]) or "-"))
    return aligned(lines)


async def schedules_command(args: argparse.Namespace) -> int:
    """Reads the triggers file (a bad one exits 2 naming it), then Redis (down: exit 1 naming REDIS_URL)."""
    from pidispatch.common.connect import connected, redis_settings
    from pidispatch.common.keys import Keys
    from pidispatch.common.registry import RegistryUnreachable, read_live_hosts
    from pidispatch.common.runtime import now_ms
    from pidispatch.common.settings import cron_min_interval
    from pidispatch.triggers.loader import load_triggers
    from pidispatch.worker.cron.firings import guard_state, last_firing, rearm
    from pidispatch.worker.cron.schedules import host_zone

    path = (os.environ.get("PI_TRIGGERS_FILE") or "").strip()
    floor = cron_min_interval(os.environ)
    load = functools.partial(load_triggers, path, cron_floor_s=floor)
    rules = (await asyncio.to_thread(load)).cron if path else ()
    zone, tz = host_zone(os.environ)
    settings = redis_settings()
    keys = Keys(settings.key_prefix)
    now = now_ms()
    if args.rearm is not None:
        async with connected(settings, "nothing was changed") as redis:
            lifted = await rearm(redis, keys, args.rearm)
        said = f"re-armed {args.rearm}" if lifted else f"{args.rearm} was not torn down; its stalls are reset"
        print(json.dumps({"rearmed": args.rearm, "wasTornDown": lifted}) if args.json else said)
        return 0
    async with connected(settings, "nothing was read") as redis:
        try:
            hosts = await read_live_hosts(redis, keys, now)
        except RegistryUnreachable as exc:
            raise OSError(exc.reason) from None
        lasts = {r.id: await last_firing(redis, keys, r.id) for r in rules}
        guards = {r.id: await guard_state(redis, keys, r.id) for r in rules}
    rows = schedule_rows(rules, hosts, lasts, now, zone, tz, guards)
    print(json.dumps(rows) if args.json else render_table(rows))
    return 0


# --- pi-dispatch run --trigger <id> ---------------------------------------------------------------------

# What a cron trigger's own run decides: refused beside --trigger rather than silently ignored.
