"""``pi-dispatch waits``: one row per job the wait gate holds on its ``waitFor`` conditions, oldest first,
read from the hold hashes (``waitstate.held_jobs``, which prunes index members whose hash is gone)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pidispatch.common.runtime import iso_ms
from pidispatch.common.table import aligned

if TYPE_CHECKING:
    from pidispatch.worker.waits.state import HoldState

ROW_KEYS = ("job", "target", "conditions", "since", "checks", "faults", "next")
EMPTY = "no job is waiting on a condition"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "waits", help="list the jobs held until their waitFor conditions hold",
        description="List the jobs a run.waitFor holds back, with each condition and when it is next "
        "checked (cancel one with `pi-dispatch cancel`).",
    )
    p.add_argument("--json", action="store_true", help="print one JSON array")
    p.set_defaults(func=waits_command)


def parse_conditions(raw: str) -> list[Any]:
    """The stored ``conditions`` JSON as a list; a value that is not a JSON list reads as no conditions
    (the gate writes it with ``conditions_json``, so only a hand edit gets here)."""
    try:
        value = json.loads(raw)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def wait_rows(holds: Sequence[HoldState]) -> list[dict[str, Any]]:
    """Pure: the rows, in the order given (``held_jobs`` gives them oldest first)."""
    return [
        {
            "job": h.job, "target": h.target, "conditions": parse_conditions(h.conditions),
            "since": iso_ms(h.since), "checks": h.checks, "faults": h.faults,
            "next": None if h.next is None else iso_ms(h.next),
        }
        for h in holds
    ]  # fmt: skip


def condition_text(condition: Any) -> str:
    """``{"after": "…"}`` reads ``after=…``; anything that is not an object is shown as JSON."""
    if not isinstance(condition, Mapping):
        return json.dumps(condition)
    return " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in condition.items())


def render_table(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return EMPTY
    header = ("JOB", "TARGET", "SINCE", "NEXT", "CHECKS", "FAULTS", "CONDITIONS")
    lines = [header]
    for r in rows:
        conditions = ", ".join(condition_text(c) for c in r["conditions"])
        lines.append((r["job"], r["target"] or "-", r["since"], r["next"] or "-", str(r["checks"]),
                      str(r["faults"]), conditions or "-"))  # fmt: skip
    return aligned(lines)


async def waits_command(args: argparse.Namespace) -> int:
    """Reads Redis only (down: exit 1 naming REDIS_URL, like ``status``)."""
    from pidispatch.common.connect import connected, redis_settings
    from pidispatch.common.keys import Keys
    from pidispatch.worker.waits.state import held_jobs

    settings = redis_settings()
    async with connected(settings, "nothing was read") as redis:
        holds = await held_jobs(redis, Keys(settings.key_prefix))
    rows = wait_rows(holds)
    print(json.dumps(rows) if args.json else render_table(rows))
    return 0
