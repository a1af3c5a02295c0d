"""``pi-dispatch runs``: the newest run records of the fleet, this host's files merged with the mirror.

The files under ``PI_LOGS_DIR`` are this host's history; the Redis mirror (``pd:runs:*``) adds every
host that declares ``PI_WORKER_NAME``. The mirror is a view, so a Redis that is down or empty costs the
other hosts' rows, never this host's: the command says so in one line and still exits 0. ``--local``
skips Redis entirely. Reading and rendering are separate; the renderers are pure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import msgspec

from pidispatch.common import devstate, runtime
from pidispatch.common.keys import Keys
from pidispatch.common.models import RunRecord
from pidispatch.common.redis import redis_for
from pidispatch.common.settings import Settings, load_settings
from pidispatch.common.table import aligned
from pidispatch.worker.history.mirror import (
    DEGRADED_OFF,
    DEGRADED_OK,
    DEGRADED_TRUNCATED,
    hosts_of,
    merge_runs,
    mirror_window_ms,
    read_mirror,
)
from pidispatch.worker.history.records import list_runs

EMPTY = "no runs recorded yet"
COLUMNS = ("ENDED", "OUTCOME", "REASON", "TARGET", "JOB", "HOST", "ATTEMPT")
MAX_LIMIT = 10_000
# ``degraded`` when --local asked for this host's files only (the other values come from read_mirror).
DEGRADED_LOCAL = "local"
_ISO_MINUTE = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2})")
# A record file is data: control characters in it must not drive the operator's terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class RunsView(msgspec.Struct):
    """What ``runs`` shows: merged records newest first, how complete the fleet part is, and its hosts."""

    runs: list[RunRecord]
    degraded: str
    hosts: list[str]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "runs", help="list recent runs: this host's files plus every host's mirrored records",
        description="List recent run records, newest first: the files in PI_LOGS_DIR merged with every "
        "host's records mirrored in Redis; without Redis it lists the files and says why.",
    )
    p.add_argument("--limit", type=_limit, default=20, help="how many, newest first (default %(default)s)")
    p.add_argument(
        "--json", action="store_true",
        help='one JSON object {"runs": [records as on disk], "degraded": ..., "hosts": [...]}',
    )
    p.add_argument("--local", action="store_true", help="this host's files only; do not contact Redis")
    p.set_defaults(func=runs_command)


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"accepted: a whole number from 1 to {MAX_LIMIT}")
    return value


async def read_runs(settings: Settings, limit: int, *, now_ms: int, local_only: bool = False) -> RunsView:
    """The records to show, newest first: local files and (unless ``local_only``) the fleet mirror."""
    if local_only:
        local = await list_runs(settings.logs_dir, limit=limit)
        return RunsView(runs=local, degraded=DEGRADED_LOCAL, hosts=hosts_of(local))
    local, (mirrored, degraded) = await asyncio.gather(
        list_runs(settings.logs_dir, limit=limit), _read_fleet(settings, limit, now_ms)
    )
    runs = merge_runs(mirrored, local, limit)
    return RunsView(runs=runs, degraded=degraded, hosts=hosts_of(runs))


async def _read_fleet(settings: Settings, limit: int, now_ms: int) -> tuple[list[RunRecord], str]:
    # read_mirror bounds itself (REDIS_OP_TIMEOUT_S) and never raises, so a down Redis costs <= 2 s.
    redis = redis_for(settings)
    try:
        since = now_ms - mirror_window_ms(settings.log_retention_days)
        return await read_mirror(redis, Keys(settings.key_prefix), since_ms=since, limit=limit)
    finally:
        await redis.aclose()


def degraded_note(degraded: str, limit: int) -> str | None:
    """Pure: the one line telling people the list is not the whole fleet, or None when it is."""
    if degraded in (DEGRADED_OK, DEGRADED_LOCAL):
        return None
    if degraded == DEGRADED_OFF:
        return "no fleet mirror (PI_WORKER_NAME not declared on any worker?) — showing this host's files only"
    if degraded == DEGRADED_TRUNCATED:
        return f"showing the newest {limit} runs; --limit shows more"
    return f"fleet view unavailable: Redis {_cell(degraded)} — showing this host's files only"


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
    return aligned(rows)


def render_json(view: RunsView) -> str:
    """Pure: one JSON object; records keep their on-disk (camelCase) field names."""
    return msgspec.json.encode(view).decode()


async def runs_command(args: argparse.Namespace) -> int:
    settings = load_settings()
    view = await read_runs(settings, args.limit, now_ms=runtime.now_ms(), local_only=args.local)
    if args.json:
        # A script gets valid JSON even when nothing ran yet, and reads ``degraded`` instead of a note.
        print(render_json(view))
        return 0
    cwd = Path.cwd()
    # dev runs one unnamed worker: no fleet to mirror, so saying the mirror is off there is noise.
    beside_dev = (cwd / devstate.STATE_DIR / devstate.STATE_FILE).exists()
    note = None if beside_dev and view.degraded == DEGRADED_OFF else degraded_note(view.degraded, args.limit)
    if not view.runs:
        note = devstate.not_here(os.environ, cwd) or note
    if note:
        print(note, file=sys.stderr)  # stderr: the table on stdout stays the data
    print(render_table(view.runs))
    return 0
