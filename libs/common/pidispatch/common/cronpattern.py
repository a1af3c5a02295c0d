"""A cron pattern: its grammar and its next occurrence in a time zone (``croniter`` does the calendar),
and the job id of one occurrence, ``repeat:<schedule id>:<epoch ms>``, which every service reads.

Five fields put the minute first; six put seconds first.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from croniter import croniter

REPEAT_PREFIX = "repeat:"


def valid_pattern(pattern: str) -> bool:
    """Five or six fields that ``croniter`` reads (so a loaded schedule always has a next occurrence)."""
    fields = pattern.split()
    if len(fields) not in (5, 6):
        return False
    return bool(croniter.is_valid(pattern, second_at_beginning=len(fields) == 6))


def next_occurrence(pattern: str, after_ms: int, zone: ZoneInfo) -> int:
    """The first occurrence strictly after ``after_ms``, in epoch ms. Six fields put seconds first. In a
    fall-back's repeated hour a pattern with fixed hours fires once (at the first of the two instants);
    an hour wildcard fires at both, as every hour really passes. A skipped (spring-forward) time fires
    at the first instant after the gap."""
    fields = pattern.split()
    it = croniter(pattern, datetime.fromtimestamp(after_ms / 1000, zone),
                  second_at_beginning=len(fields) == 6)
    hour_field = fields[2] if len(fields) == 6 else fields[1]
    while True:
        at: datetime = it.get_next(datetime)
        if at.fold == 1 and hour_field != "*" and _repeats_wall_time(at):
            continue
        return int(at.timestamp() * 1000)


def _repeats_wall_time(at: datetime) -> bool:
    # fold=1 marks the second pass through an ambiguous wall time only when the offset really differs.
    return at.replace(fold=0).utcoffset() != at.utcoffset()


def occurrence_id(schedule_id: str, at_ms: int) -> str:
    return f"{REPEAT_PREFIX}{schedule_id}:{at_ms}"


def scheduled_for(job_id: str) -> int | None:
    """The occurrence a ``repeat:<id>:<ms>`` job id names, or None for any other id."""
    if not job_id.startswith(REPEAT_PREFIX):
        return None
    _, _, ms = job_id.rpartition(":")
    return int(ms) if ms.isascii() and ms.isdigit() else None


def schedule_of(job_id: str) -> str | None:
    """The schedule id inside ``repeat:<id>:<ms>``, or None."""
    if scheduled_for(job_id) is None:
        return None
    sid = job_id[len(REPEAT_PREFIX):].rpartition(":")[0]
    return sid or None
