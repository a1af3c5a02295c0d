"""``run.waitFor``: the conditions a job waits on before it starts. Pure.

``after_instant_ms`` is the one definition of a legal ``after`` instant; the worker's wait gate must read
instants with it too, or a file that loads clean could hold until an instant nobody wrote.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from pidispatch.triggers.refusal import ID_RE, TriggerEntry, nonblank

WAIT_CONDITION_KEYS = ("after", "profile")
# Every profile condition is a subprocess run before the container, holding a slot while it runs.
WAIT_CONDITION_MAX = 4
# The zone is mandatory: without one the same file would mean another instant on a worker elsewhere.
# Time fields are bounded here, because a rolling ``T24:00`` would silently hold a day longer.
_AFTER_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([01][0-9]|2[0-3]):([0-5][0-9])"
    r"(?::([0-5][0-9])(?:\.([0-9]+))?)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)
AFTER_ACCEPTED = ('an ISO-8601 instant carrying its own zone, like "2026-09-01T09:00:00Z" or '
                  '"2026-09-01T11:00:00+02:00", on a real calendar date')


def after_instant_ms(text: Any) -> int | None:
    """Epoch milliseconds of a legal ``after`` value, or None (wrong shape, or a date that does not exist:
    Feb 31 is refused rather than rolled into March)."""
    if not isinstance(text, str):
        return None
    match = _AFTER_RE.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute = (int(g) for g in match.group(1, 2, 3, 4, 5))
    second = int(match.group(6) or 0)
    millis = int((match.group(7) or "")[:3].ljust(3, "0"))
    zone = match.group(8)
    if zone in ("Z", "z"):
        offset = dt.timedelta(0)
    else:
        sign = -1 if zone[0] == "-" else 1
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 23 or minutes > 59:
            return None
        offset = sign * dt.timedelta(hours=hours, minutes=minutes)
    try:
        moment = dt.datetime(year, month, day, hour, minute, second, millis * 1000,
                             tzinfo=dt.timezone(offset))
    except ValueError:
        return None
    return int(moment.timestamp() * 1000)


def wait_for(e: TriggerEntry) -> tuple[dict[str, str], ...] | None:
    """The validated conditions as a freshly built tuple (nothing unvalidated rides through), or None."""
    if "waitFor" not in e.run:
        return None
    # The combinations are refused before the shape, so the message names the combination.
    if e.is_cron:
        e.fail("run.waitFor", "is refused on a cron trigger; accepted: only on webhook triggers")
    if e.on.get("once") is True:
        e.fail("run.waitFor", "is refused beside on.once true (a wait that never clears would spend the "
                              "one-shot with no run)")
    if "replicas" in e.run:
        e.fail("run.waitFor", "is refused beside run.replicas (each replica would hold on the same "
                              "condition)")
    raw = e.run["waitFor"]
    if not isinstance(raw, list) or not 1 <= len(raw) <= WAIT_CONDITION_MAX:
        e.fail("run.waitFor", f"must be an array of 1 to {WAIT_CONDITION_MAX} conditions")
    accepted = ", ".join(WAIT_CONDITION_KEYS)
    conditions: list[dict[str, str]] = []
    profiles: set[str] = set()
    for position, condition in enumerate(raw):
        field = f"run.waitFor[{position}]"
        if not isinstance(condition, dict) or len(condition) != 1:
            e.fail(field, f"must be an object with exactly one key; accepted: {accepted}")
        ((key, value),) = condition.items()
        if key == "exclusive":
            e.fail(field, "exclusive is no longer a condition (the worker already runs one local job per "
                          f"folder); accepted: {accepted}")
        if key not in WAIT_CONDITION_KEYS:
            # Unknown keys inside a condition are never dropped: a dropped term is a gate that holds nothing.
            e.fail(field, f"has an unsupported condition; accepted: {accepted}")
        if key == "after":
            if any("after" in c for c in conditions):
                e.fail(field, 'is a second "after"; accepted: at most one per array')
            if after_instant_ms(value) is None:
                e.fail(f"{field}.after", f"must be {AFTER_ACCEPTED}")
        else:
            if not nonblank(value) or not ID_RE.fullmatch(value):
                e.fail(f"{field}.profile", "must be a profile name of letters, digits, dot, dash and "
                                           "underscore")
            if value in profiles:
                e.fail(f"{field}.profile", "repeats an earlier profile; accepted: each profile once")
            profiles.add(value)
        conditions.append({key: value})
    return tuple(conditions)
