"""A cron pattern: its grammar and its next occurrence in a time zone (``croniter`` does the calendar),
and the job id of one occurrence, ``repeat:<schedule id>:<epoch ms>``, which every service reads.

Five fields put the minute first; six put seconds first.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

REPEAT_PREFIX = "repeat:"
# A pattern with no occurrence this far ahead is refused: it would never fire (``0 0 31 2 *``).
HORIZON_YEARS = 4
# PI_CRON_MIN_INTERVAL_S's default: no schedule fires more often than once a minute.
MIN_INTERVAL_DEFAULT_S = 60
# How far the gap check walks: enough occurrences to pass every hour, day and month boundary of a
# pattern that fires more often than the floor allows somewhere, bounded for one that fires rarely.
_GAP_OCCURRENCES = 1000
_GAP_SPAN_S = 400 * 24 * 3600


def valid_pattern(pattern: str) -> bool:
    """Five or six fields that ``croniter`` reads (so a loaded schedule always has a next occurrence)."""
    fields = pattern.split()
    if len(fields) not in (5, 6):
        return False
    return bool(croniter.is_valid(pattern, second_at_beginning=len(fields) == 6))


def pattern_problem(pattern: str, floor_s: int, now_ms: int) -> str | None:
    """Why a pattern that parses is refused, or None: no occurrence within ``HORIZON_YEARS`` of
    ``now_ms``, or two occurrences closer than ``floor_s`` seconds (in UTC). Five fields are a minute
    apart at least, so only a floor above 60 s or a seconds field needs the walk."""
    six = len(pattern.split()) == 6
    start = datetime.fromtimestamp(now_ms / 1000, UTC)
    it = croniter(pattern, start, second_at_beginning=six, max_years_between_matches=HORIZON_YEARS)
    try:
        first = prev = float(it.get_next(float))
    except CroniterBadDateError:
        return f"has no occurrence in the next {HORIZON_YEARS} years, so it would never fire"
    if not six and floor_s <= 60:
        return None
    for _ in range(_GAP_OCCURRENCES):
        try:
            at = float(it.get_next(float))
        except CroniterBadDateError:
            return None  # no further occurrence within the horizon: no closer gap either
        if at - prev < floor_s:
            return (f"fires {at - prev:g} s after a previous occurrence; accepted: at least "
                    f"PI_CRON_MIN_INTERVAL_S={floor_s} s apart (lower it to allow this)")
        if at - first > _GAP_SPAN_S:
            return None
        prev = at
    return None


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
