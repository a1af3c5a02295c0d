"""The fleet view of run history: a Redis copy of each run record, and the merge.

The file under ``PI_LOGS_DIR`` is the record; this is a view of it. So the file is written first, the
copy never outlives the file's retention, and a failure here costs one row of a fleet view, never a job:
the writer never raises. The value is the record's own JSON (the file's bytes without the trailing
newline), so nothing derived can go stale. Raw ``.log``
files hold payload text and are never mirrored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

import msgspec

from pidispatch.common.health import Health
from pidispatch.common.keys import DAY_S, MIRROR_MAX_DAYS, RUNS_INDEX_MAX, Keys
from pidispatch.common.models import RunRecord
from pidispatch.common.redis import Redis, bounded
from pidispatch.common.workerscripts import RUNS_PRUNE
from pidispatch.worker.engine.jobname import job_file_name
from pidispatch.worker.history.records import encode_record

DAY_MS = DAY_S * 1000

# What ``read_mirror`` reports besides its runs (``unreachable`` also names the exception class).
DEGRADED_OK = "ok"
DEGRADED_OFF = "off"
DEGRADED_TRUNCATED = "truncated"
DEGRADED_UNREACHABLE = "unreachable"

_decoder = msgspec.json.Decoder(RunRecord)

def mirror_window_ms(retention_days: int) -> int:
    """How long a mirrored record lives: the file retention, capped at 92 days (0 = files kept forever)."""
    days = min(retention_days, MIRROR_MAX_DAYS) if retention_days > 0 else MIRROR_MAX_DAYS
    return days * DAY_MS


def _epoch_ms(iso: str | None) -> int | None:
    """``2024-05-01T12:00:00.000Z`` to epoch ms; None when absent or not a timestamp."""
    if not iso:
        return None
    try:
        dt = datetime.fromisoformat(iso)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)  # records are always UTC; a zone-less one is read the same way
    return int(dt.timestamp() * 1000)


def record_time_ms(record: RunRecord) -> int | None:
    """When the run ended, else when it started; None when neither reads as a timestamp."""
    ended = _epoch_ms(record.ended_at)
    return ended if ended is not None else _epoch_ms(record.started_at)


def record_body(record: RunRecord) -> bytes:
    """The mirrored bytes: exactly the record file's content minus its trailing newline."""
    return encode_record(record).rstrip(b"\n")


async def mirror_record(
    redis: Redis,
    keys: Keys,
    record: RunRecord,
    *,
    retention_days: int,
    now_ms: int,
    health: Health | None = None,
) -> bool:
    """Copy one record into the fleet mirror; True when Redis took it. Never raises.

    One pipeline, bounded by REDIS_OP_TIMEOUT_S. The index is trimmed by the writer (by age, then to the
    newest RUNS_INDEX_MAX) so no reader pays for a backlog, and its expiry rolls with traffic: a fleet
    that stops running jobs loses its index one window later, when there is nothing left to show.
    Failures go to ``health`` (pass one ``Health`` per worker so an outage logs once, not once per job).
    """
    health = health or Health("run_mirror_failed", "run_mirror_restored")
    member = job_file_name(record.job_id)  # injective, as the record's file name: no two jobs share one
    window = mirror_window_ms(retention_days)
    score = record_time_ms(record)
    try:
        async with redis.pipeline(transaction=False) as pipe:
            pipe.set(keys.run_rec(member), record_body(record), px=window)
            pipe.zadd(keys.runs_index, {member: now_ms if score is None else score})
            pipe.zremrangebyscore(keys.runs_index, "-inf", f"({now_ms - window}")
            pipe.zremrangebyrank(keys.runs_index, 0, -(RUNS_INDEX_MAX + 1))
            pipe.pexpire(keys.runs_index, window)
            await bounded(pipe.execute())
    except Exception as exc:
        # The class name only: a client error's text carries the server address.
        health.failed(job=member, reason=type(exc).__name__)
        return False
    health.ok()
    return True


class Mirror:
    """One worker's mirror writer: holds the Health so an outage logs one transition, not one per job."""

    def __init__(self, redis: Redis, keys: Keys, retention_days: int) -> None:
        self.redis, self.keys, self.retention_days = redis, keys, retention_days
        self.health = Health("run_mirror_failed", "run_mirror_restored")

    async def write(self, record: RunRecord, now_ms: int) -> bool:
        return await mirror_record(
            self.redis, self.keys, record, retention_days=self.retention_days, now_ms=now_ms,
            health=self.health,
        )


async def read_mirror(redis: Redis, keys: Keys, *, since_ms: int, limit: int) -> tuple[list[RunRecord], str]:
    """The fleet's newest mirrored records after ``since_ms`` (newest first) and how complete they are.

    Two round trips however many runs come back (ids, then one MGET), bounded together by
    REDIS_OP_TIMEOUT_S. Members whose body expired or does not decode are pruned from the index. The
    second value is ``off`` (no index: one host, or no worker declares PI_WORKER_NAME), ``unreachable
    (<ExceptionName>)``, ``truncated`` (the index held at least ``limit`` runs), or ``ok``. Never raises.
    """
    limit = max(1, limit)

    async def fetch() -> tuple[list[bytes], list[bytes | None]]:
        found = await redis.zrevrangebyscore(keys.runs_index, "+inf", f"({since_ms}", start=0, num=limit)
        # Without scores the reply is the members alone; bytes, as the client does not decode.
        members = [m for m in found if isinstance(m, bytes)]
        if not members:
            return [], []
        replies = await redis.mget([keys.run_rec(m.decode()) for m in members])
        return members, [b if isinstance(b, bytes) else None for b in replies]

    try:
        members, bodies = await bounded(fetch())
    except Exception as exc:
        return [], f"{DEGRADED_UNREACHABLE} ({type(exc).__name__})"
    if not members:
        return [], DEGRADED_OFF
    runs: list[RunRecord] = []
    stale: list[tuple[bytes, bytes]] = []
    for member, body in zip(members, bodies, strict=True):
        try:
            if body:
                runs.append(_decoder.decode(body))
                continue
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
        stale.append((member, body or b""))
    if stale:
        await _prune(redis, keys, stale)
    return runs, DEGRADED_TRUNCATED if len(members) >= limit else DEGRADED_OK


async def _prune(redis: Redis, keys: Keys, stale: Sequence[tuple[bytes, bytes]]) -> None:
    # Best effort: a straggler costs one skipped row on the next read, never a wrong one.
    rec_keys = [keys.run_rec(member.decode()) for member, _ in stale]
    argv = [part for pair in stale for part in pair]
    try:
        await bounded(RUNS_PRUNE(redis, [keys.runs_index, *rec_keys], argv))
    except Exception:
        return


def merge_runs(mirrored: Iterable[RunRecord], local: Iterable[RunRecord], limit: int) -> list[RunRecord]:
    """Pure: one list from the mirror and this host's files, newest first, at most ``limit``.

    A retry can land on another host, so per job the later record wins (host A's failed attempt 1 must
    not hide host B's completed attempt 2); local breaks an exact tie, so one host reads its own files.
    Cut after sorting, never before, or the result would depend on which source was longer.
    """
    def at(record: RunRecord) -> float:
        t = record_time_ms(record)
        return -math.inf if t is None else t

    by_job: dict[str, RunRecord] = {r.job_id: r for r in mirrored}
    for record in local:
        seen = by_job.get(record.job_id)
        if seen is None or at(record) >= at(seen):
            by_job[record.job_id] = record
    return sorted(by_job.values(), key=at, reverse=True)[: max(0, limit)]


def hosts_of(records: Iterable[RunRecord]) -> list[str]:
    """Pure: the distinct, non-empty ``host`` fields of the records, sorted."""
    return sorted({r.host for r in records if r.host})
