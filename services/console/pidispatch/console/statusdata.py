"""What the status page shows, gathered from Redis and this host's run records; no rendering here.

Each gatherer reads through the project's own readers (the registry, the runs mirror, the decisions,
the wait holds, the schedule rows), so the page shows what the CLI verbs show. Callers bound every
gatherer with ``bounded``: a Redis that does not answer costs a banner, never a hung request.
"""

from __future__ import annotations

import asyncio
import functools
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
from redis.exceptions import ResponseError

from pidispatch.common.cronpattern import MIN_INTERVAL_DEFAULT_S
from pidispatch.common.errors import ConfigError
from pidispatch.common.keys import ROUTER_GROUP, WORKER_GROUP, Keys
from pidispatch.common.models import RunRecord, text
from pidispatch.common.redis import Redis
from pidispatch.common.registry import HostRow, host_streams, read_live_hosts
from pidispatch.console import events
from pidispatch.console.control import valid_job_id
from pidispatch.console.runs import degraded_note
from pidispatch.console.scheduleview import schedule_rows
from pidispatch.console.waitview import wait_rows
from pidispatch.forges import pipeline
from pidispatch.triggers import decisions
from pidispatch.triggers.decisions import Decided
from pidispatch.triggers.explain import Explanation
from pidispatch.triggers.loader import load_triggers
from pidispatch.triggers.lookup import SelfIds
from pidispatch.triggers.subsets import MalformedPayload
from pidispatch.worker.cron.firings import guard_state, last_firing
from pidispatch.worker.history.mirror import DEGRADED_UNREACHABLE, merge_runs, mirror_window_ms, read_mirror
from pidispatch.worker.history.records import list_runs, read_record, record_path
from pidispatch.worker.waits.state import held_jobs

# The newest this many bytes of a captured output are served; an agent's output can run to megabytes.
OUTPUT_MAX_BYTES = 2 * 1024 * 1024
TRIGGERS_UNREADABLE = "PI_TRIGGERS_FILE cannot be read or is refused (pi-dispatch router names why)"


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One stream: its length, and its consumer group's pending entries and lag (None: no group yet)."""

    stream: str
    group: str
    length: int
    pending: int | None
    lag: int | None


@dataclass(frozen=True, slots=True)
class Overview:
    queues: list[QueueRow]
    delayed_key: str
    delayed: int
    dead_key: str
    dead: int
    hosts: list[HostRow]
    paused: bool


@dataclass(frozen=True, slots=True)
class RunRow:
    record: RunRecord
    has_output: bool  # a captured output file beside this host's record


@dataclass(frozen=True, slots=True)
class DeliveryTrace:
    forge: str
    delivery: str
    stored: Decided | None
    explanation: Explanation | None
    problem: str | None  # why today's re-run is missing, in words that name no path


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None


async def queue_row(redis: Redis, stream: str, group: str) -> QueueRow:
    length = int(await redis.xlen(stream))
    pending = lag = None
    try:
        groups = await redis.xinfo_groups(stream)
    except ResponseError:  # no such stream yet
        groups = []
    for g in groups:
        if text(g.get("name", b"")) == group:
            pending, lag = _int(g.get("pending")), _int(g.get("lag"))
    return QueueRow(stream, group, length, pending, lag)


async def overview(redis: Redis, keys: Keys, now_ms: int) -> Overview:
    streams = [(keys.events, ROUTER_GROUP), (keys.jobs, WORKER_GROUP)]
    streams += [(s, WORKER_GROUP) for _, s in sorted((await host_streams(redis, keys)).items())]
    queues = [await queue_row(redis, s, g) for s, g in streams]
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zcard(keys.delayed)
        pipe.xlen(keys.dead)
        pipe.exists(keys.paused)
        delayed, dead, paused = await pipe.execute()
    hosts = await read_live_hosts(redis, keys, now_ms)
    return Overview(queues, keys.delayed, int(delayed), keys.dead, int(dead), hosts, bool(paused))


def _output_path(logs_dir: str, job_id: str) -> Path:
    # The worker's own naming (ladder.capture_path): never a path taken from the request.
    return record_path(logs_dir, job_id).with_suffix(".log")


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


async def runs(redis: Redis, keys: Keys, logs_dir: str, retention_days: int, now_ms: int,
               limit: int) -> tuple[list[RunRow], str | None, bool]:
    """The merged run list (as ``pi-dispatch runs``), a note when it is not the whole fleet, and
    whether Redis answered. This host's records are shown even when it did not."""
    since = now_ms - mirror_window_ms(retention_days)
    local, (mirrored, degraded) = await asyncio.gather(
        list_runs(logs_dir, limit=limit), read_mirror(redis, keys, since_ms=since, limit=limit)
    )
    merged = merge_runs(mirrored, local, limit)
    mine = {r.job_id for r in local}
    outputs = await asyncio.to_thread(
        lambda: {j for j in mine if _is_file(_output_path(logs_dir, j))}
    )
    rows = [RunRow(r, r.job_id in outputs) for r in merged]
    answered = not degraded.startswith(DEGRADED_UNREACHABLE)
    return rows, None if not answered else degraded_note(degraded, limit), answered


def _read_tail(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        if size <= OUTPUT_MAX_BYTES:
            return f.read()
        f.seek(size - OUTPUT_MAX_BYTES)
        note = f"[earlier output cut: the last {OUTPUT_MAX_BYTES} of {size} bytes follow]\n".encode()
        return note + f.read()


async def captured_output(logs_dir: str, job_id: str) -> bytes | None:
    """The captured output of a job that has a record on this host, or None. The file is found by the
    job id's injective file name, so no request can name a path outside ``logs_dir``."""
    if not valid_job_id(job_id) or await read_record(logs_dir, job_id) is None:
        return None
    return await asyncio.to_thread(_read_tail, _output_path(logs_dir, job_id))


async def delivery_trace(redis: Redis, keys: Keys, forge: str, delivery: str, triggers_file: str,
                         self_ids: SelfIds, *,
                         cron_floor_s: int = MIN_INTERVAL_DEFAULT_S) -> DeliveryTrace | None:
    """``pi-dispatch explain``'s content for one stored delivery, or None when it is not stored."""
    if forge not in events.FORGES or not valid_job_id(delivery):
        return None
    found = await events.find(redis, keys, delivery, forge)
    if found is None:
        return None
    entry, event = found
    stored = await decisions.read(redis, keys, event.forge, event.delivery, entry)
    try:
        load = functools.partial(load_triggers, triggers_file, cron_floor_s=cron_floor_s)
        rules = await asyncio.to_thread(load)
    except ConfigError:
        return DeliveryTrace(forge, delivery, stored, None, TRIGGERS_UNREADABLE)
    try:
        explanation = pipeline.explain(event, rules, self_ids, None)
    except MalformedPayload:
        return DeliveryTrace(forge, delivery, stored, None, "the stored body does not have the forge's shape")
    return DeliveryTrace(forge, delivery, stored, msgspec.structs.replace(explanation, stored=stored), None)


async def schedules(redis: Redis, keys: Keys, triggers_file: str, zone: ZoneInfo, tz: str,
                    now_ms: int, *, cron_floor_s: int = MIN_INTERVAL_DEFAULT_S,
                    ) -> tuple[list[dict[str, Any]], str | None]:
    """``pi-dispatch schedules``' rows, and why there are none when the file cannot be read."""

    problem: str | None = None
    try:
        load = functools.partial(load_triggers, triggers_file, cron_floor_s=cron_floor_s)
        cron = (await asyncio.to_thread(load)).cron
    except ConfigError:
        cron, problem = (), TRIGGERS_UNREADABLE
    hosts = await read_live_hosts(redis, keys, now_ms)
    lasts = {r.id: await last_firing(redis, keys, r.id) for r in cron}
    guards: Mapping[str, tuple[int, bool]] = {r.id: await guard_state(redis, keys, r.id) for r in cron}
    return schedule_rows(cron, hosts, lasts, now_ms, zone, tz, guards), problem


async def waits(redis: Redis, keys: Keys) -> list[dict[str, Any]]:

    return wait_rows(await held_jobs(redis, keys))
