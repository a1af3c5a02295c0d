"""``pi-dispatch runs``: the newest run records of this host, read from ``PI_LOGS_DIR``.

Reading and rendering are separate so a later reader (the Redis mirror, spec worker §4.4) can merge its
records in before the same renderers run. It needs no Redis: the files are the host's own history.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

import msgspec

from pidispatch.common.models import RunRecord
from pidispatch.common.settings import Settings, load_settings
from pidispatch.worker.history import list_runs

EMPTY = "no runs recorded in PI_LOGS_DIR yet"
COLUMNS = ("ENDED", "OUTCOME", "REASON", "TARGET", "JOB", "HOST", "ATTEMPT")
MAX_LIMIT = 10_000
_ISO_MINUTE = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2})")
# A record file is data: control characters in it must not drive the operator's terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("runs", help="list this host's recent runs (its files in PI_LOGS_DIR)")
    p.add_argument("--limit", type=_limit, default=20, help="how many, newest first (default %(default)s)")
    p.add_argument("--json", action="store_true", help="one JSON array of records, as on disk")
    p.set_defaults(func=runs_command)


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"accepted: a whole number from 1 to {MAX_LIMIT}")
    return value


async def read_runs(settings: Settings, limit: int) -> list[RunRecord]:
    """The records to show, newest first."""
    return await list_runs(settings.logs_dir, limit=limit)


def _cell(value: object) -> str:
    if value is None or value == "":
        return "-"
    return _CONTROL.sub("?", str(value))


def _ended(iso: str) -> str:
    """UTC to the minute: ``2024-05-01T12:00Z``."""
    m = _ISO_MINUTE.match(iso)
    return f"{m.group(1)}Z" if m else _cell(iso)


def render_table(records: Sequence[RunRecord]) -> str:
    """Pure: a plain-text table for people, one run per line."""
    if not records:
        return EMPTY
    rows = [COLUMNS] + [
        (_ended(r.ended_at), _cell(r.outcome), _cell(r.reason), _cell(r.target), _cell(r.job_id),
         _cell(r.host), _cell(r.attempt))
        for r in records
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def render_json(records: Sequence[RunRecord]) -> str:
    """Pure: one JSON array of the records with their on-disk (camelCase) field names."""
    return msgspec.json.encode(list(records)).decode()


async def runs_command(args: argparse.Namespace) -> int:
    settings = load_settings()
    records = await read_runs(settings, args.limit)
    # A script gets valid JSON even when nothing ran yet; people get a sentence.
    print(render_json(records) if args.json else render_table(records))
    return 0
