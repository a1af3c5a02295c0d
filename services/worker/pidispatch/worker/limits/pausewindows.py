"""Quiet hours: windows in which this host starts no job for a scope (``PI_PAUSE_WINDOWS_FILE``).

    {"version": 1, "windows": [{"scope": "owner/name" | "/abs/folder" | "*", "days": ["mon", ...],
                                "from": "22:00", "to": "07:00", "tz": "Europe/Amsterdam"}]}

A window opens on each listed day at ``from`` and closes at ``to``, in its own time zone (required, an
IANA name); when ``to`` is not after ``from`` it closes the next day, so a window may cross midnight.
``scope`` is a forge job's repository, a local job's folder, or ``*`` for every job. A job picked up
inside a window waits in ``pd:delayed`` until every window that holds it has closed: no attempt is used
and nothing is recorded. Every key is checked at load; a bad file refuses the start (exit 2) and a bad
edit keeps the last good windows.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec

from pidispatch.common.errors import ConfigError
from pidispatch.common.filewatch import read_config_file
from pidispatch.common.models import Job

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_CLOCK_RE = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")
_FILE_KEYS = frozenset({"version", "windows"})
_WINDOW_KEYS = frozenset({"scope", "days", "from", "to", "tz"})
MAX_BYTES = 256 * 1024
# Windows that close one into another are followed this far; more would be a window of all week.
_CHAIN_MAX = 16


class PauseWindow(msgspec.Struct, frozen=True, kw_only=True):
    scope: str
    days: frozenset[int]  # 0 = Monday
    opens: time
    closes: time
    tz: ZoneInfo

    def holds(self, job: Job) -> bool:
        if self.scope == "*":
            return True
        if job.is_local:
            return job.folder is not None and os.path.normpath(job.folder) == self.scope
        return job.repo.casefold() == self.scope.casefold()

    def closes_after(self, at: datetime) -> datetime | None:
        """When this window, open at ``at``, closes; None when it is not open then."""
        local = at.astimezone(self.tz)
        crosses = self.closes <= self.opens
        for start_day in (local.date(), local.date() - timedelta(days=1)):
            if start_day.weekday() not in self.days:
                continue
            opened = datetime.combine(start_day, self.opens, self.tz)
            closed = datetime.combine(start_day + timedelta(days=1 if crosses else 0), self.closes, self.tz)
            if opened <= local < closed:
                return closed.astimezone(UTC)
        return None


def pause_until(windows: Sequence[PauseWindow], job: Job, now_ms: int) -> int | None:
    """When the windows that hold ``job`` at ``now_ms`` have all closed (ms), or None if none holds it."""
    at = datetime.fromtimestamp(now_ms / 1000, UTC)
    until: datetime | None = None
    for _ in range(_CHAIN_MAX):
        closes = [c for w in windows if w.holds(job) and (c := w.closes_after(at)) is not None]
        if not closes:
            break
        at = until = max(closes)
    return None if until is None else int(until.timestamp() * 1000)


def parse_windows(text: str, name: str) -> tuple[PauseWindow, ...]:
    """The windows of a file's text; ``ConfigError`` naming the file and the field otherwise."""
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfigError(f"{name} is not JSON; accepted: {{\"version\": 1, \"windows\": [...]}}") from None
    if not isinstance(data, dict) or set(data) - _FILE_KEYS or data.get("version") != 1:
        raise ConfigError(f"{name}: accepted: an object with \"version\": 1 and \"windows\" (a list), only")
    raw = data.get("windows")
    if not isinstance(raw, list):
        raise ConfigError(f"{name}: windows must be a list")
    return tuple(_window(w, f"{name}: windows[{i}]") for i, w in enumerate(raw))


def _window(raw: object, where: str) -> PauseWindow:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be an object with {', '.join(sorted(_WINDOW_KEYS))}")
    if unknown := sorted(set(raw) - _WINDOW_KEYS):
        raise ConfigError(f"{where}.{unknown[0]} is refused; accepted: {', '.join(sorted(_WINDOW_KEYS))}")
    scope = raw.get("scope")
    folder_ok = not isinstance(scope, str) or not scope.startswith("/") or scope == os.path.normpath(scope)
    if not isinstance(scope, str) or not scope or not folder_ok:
        raise ConfigError(f"{where}.scope is refused; accepted: owner/name, an absolute folder, or *")
    days = _days(raw.get("days"), f"{where}.days")
    opens, closes = _clock(raw.get("from"), f"{where}.from"), _clock(raw.get("to"), f"{where}.to")
    if opens == closes:
        raise ConfigError(f"{where}: from and to are equal; accepted: a window of at least one minute")
    tz = raw.get("tz")
    try:
        zone = ZoneInfo(tz) if isinstance(tz, str) and tz else None
    except (ZoneInfoNotFoundError, ValueError):
        zone = None
    if zone is None:
        raise ConfigError(f"{where}.tz is refused; accepted: an IANA time zone name (Europe/Amsterdam)")
    return PauseWindow(
        scope=scope, days=days, opens=opens, closes=closes, tz=zone,
    )


def _days(raw: object, where: str) -> frozenset[int]:
    names = raw if isinstance(raw, list) else []
    if not names or not all(d in DAYS for d in names) or len(set(names)) != len(names):
        raise ConfigError(f"{where} is refused; accepted: a list of distinct days of {', '.join(DAYS)}")
    return frozenset(DAYS.index(d) for d in names)


def _clock(raw: object, where: str) -> time:
    match = _CLOCK_RE.match(raw) if isinstance(raw, str) else None
    if match is None:
        raise ConfigError(f"{where} is refused; accepted: HH:MM, 00:00 to 23:59")
    return time(int(match.group(1)), int(match.group(2)))


def load_windows(path: str) -> tuple[PauseWindow, ...]:
    """Read and validate ``path`` (blocking: call through a thread)."""
    text = read_config_file(path, "PI_PAUSE_WINDOWS_FILE", MAX_BYTES)
    return parse_windows(text, os.path.basename(path) or path)
