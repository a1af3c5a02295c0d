"""``pi-dispatch schedules``: one row per cron trigger in ``PI_TRIGGERS_FILE`` with the hosts serving it
(from the host registry), its next occurrence in this host's zone and its last firing (from Redis)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from pidispatch.common.cronpattern import next_occurrence
from pidispatch.common.registry import HostRow
from pidispatch.router.rules import CronRule

ACTIVE, UNSERVED = "active", "unserved"
ROW_KEYS = ("id", "pattern", "tz", "hosts", "next", "last", "stalls", "state")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("schedules", help="list the cron triggers, who serves them, next and last runs")
    p.add_argument("--json", action="store_true", help="print one JSON array")
    p.set_defaults(func=schedules_command)


def schedule_rows(
    rules: Sequence[CronRule], hosts: Sequence[HostRow], lasts: Mapping[str, dict[str, Any] | None],
    now_ms: int, zone: ZoneInfo, tz: str,
) -> list[dict[str, Any]]:
    """Pure: the rows, in file order. A schedule no live host serves is ``unserved`` (nothing fires it)."""
    rows = []
    for rule in rules:
        serving = sorted(h.name for h in hosts if rule.id in h.cron)
        at = next_occurrence(rule.pattern, now_ms, zone)
        rows.append({
            "id": rule.id, "pattern": rule.pattern, "tz": tz, "hosts": serving,
            "next": datetime.fromtimestamp(at / 1000, zone).isoformat(), "last": lasts.get(rule.id),
            "stalls": 0, "state": ACTIVE if serving else UNSERVED,
        })
    return rows


def render_table(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return "no cron triggers in PI_TRIGGERS_FILE"
    header = ("ID", "PATTERN", "STATE", "NEXT", "LAST", "HOSTS")
    lines = [header]
    for r in rows:
        last = r["last"]
        shown = f"{last['at']} {last['outcome'] or '-'}" if last else "-"
        lines.append((r["id"], r["pattern"], r["state"], r["next"], shown, ",".join(r["hosts"]) or "-"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                     for line in lines)


async def schedules_command(args: argparse.Namespace) -> int:
    """Reads the triggers file (a bad one exits 2 naming it), then Redis (down: exit 1 naming REDIS_URL)."""
    from pidispatch.common.keys import Keys
    from pidispatch.common.registry import RegistryUnreachable, read_live_hosts
    from pidispatch.common.runtime import now_ms
    from pidispatch.router.triggers import load_triggers
    from pidispatch.worker.control import connected, redis_settings
    from pidispatch.worker.firings import last_firing
    from pidispatch.worker.schedules import host_zone

    path = (os.environ.get("PI_TRIGGERS_FILE") or "").strip()
    rules = (await asyncio.to_thread(load_triggers, path)).cron if path else ()
    zone, tz = host_zone(os.environ)
    settings = redis_settings()
    keys = Keys(settings.key_prefix)
    now = now_ms()
    async with connected(settings, "nothing was read") as redis:
        try:
            hosts = await read_live_hosts(redis, keys, now)
        except RegistryUnreachable as exc:
            raise OSError(exc.reason) from None
        lasts = {r.id: await last_firing(redis, keys, r.id) for r in rules}
    rows = schedule_rows(rules, hosts, lasts, now, zone, tz)
    print(json.dumps(rows) if args.json else render_table(rows))
    return 0
