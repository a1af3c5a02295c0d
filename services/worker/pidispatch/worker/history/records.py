"""Run history: one JSON record per run attempt under ``PI_LOGS_DIR``.

The record is built field by field from ids, enums and numbers, never by spreading job data, so no
title, body, login or host path can reach it. Writing is atomic (temp file + rename) and never raises:
a full disk must not turn a finished job into a retried one.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path

import msgspec

from pidispatch.common.log import get_logger
from pidispatch.common.models import Job, RunRecord, sanitize_job_id
from pidispatch.common.runtime import EpochMsClock, iso_ms, stopped
from pidispatch.common.settings import Settings
from pidispatch.forges import item_sep
from pidispatch.worker.engine.exitline import ExitInfo
from pidispatch.worker.engine.jobname import job_file_name

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(RunRecord)


def record_target(job: Job) -> str | None:
    """``local:<basename>`` or ``<repo><sep><number>``; never a full path or any payload text."""
    if job.is_local:
        return job.repo if job.repo.startswith("local:") else f"local:{job.repo}"
    if job.target is None:
        return None
    return f"{job.repo}{item_sep(job.kind, job.target.type == 'pull_request')}{job.target.number}"


def record_path(logs_dir: str, job_id: str) -> Path:
    """``<logs_dir>/<name>.json`` with the injective name: no two job ids share a record."""
    return Path(logs_dir) / f"{job_file_name(job_id)}.json"


def _legacy_path(logs_dir: str, job_id: str) -> Path:
    # Records written before the injective names; several ids may map to one, so it is checked.
    return Path(logs_dir) / f"{sanitize_job_id(job_id)}.json"


def build_record(
    job: Job,
    *,
    attempt: int,
    outcome: str,
    reason: str | None,
    exit_code: int | None,
    exit_info: ExitInfo | None,
    started_at_ms: int,
    ended_at_ms: int,
    host: str,
) -> RunRecord:
    """Pure: one attempt's record."""
    matched = job.trigger.matched if job.trigger is not None else None
    return RunRecord(
        job_id=job.id,
        kind=job.kind,
        target=record_target(job),
        flow=job.flow,
        started_at=iso_ms(started_at_ms),
        ended_at=iso_ms(ended_at_ms),
        outcome=outcome,
        reason=reason,
        exit_code=exit_code,
        turns=exit_info.turns if exit_info else None,
        tokens=exit_info.tokens if exit_info else None,
        usage=None,
        provider=None,
        model=None,
        budget_reserved=False,
        attempt=attempt,
        replica=job.replica,
        replicas=job.replicas,
        trigger_index=matched.index if matched else None,
        trigger_type=matched.type if matched else None,
        host=host,
    )


def encode_record(record: RunRecord) -> bytes:
    return _encoder.encode(record) + b"\n"


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _failure_reason(exc: BaseException) -> str:
    # errno names only: an OSError's text carries the host path.
    if isinstance(exc, OSError) and exc.errno is not None and exc.errno in errno.errorcode:
        return errno.errorcode[exc.errno]
    return type(exc).__name__


async def write_record(logs_dir: str, record: RunRecord) -> bool:
    """Write ``<logs_dir>/<job file name>.json``; on failure log ``run_record_failed`` and return False."""
    try:
        await asyncio.to_thread(_write_atomic, record_path(logs_dir, record.job_id), encode_record(record))
        return True
    except Exception as exc:
        get_logger().warning("run_record_failed", job=record.job_id, reason=_failure_reason(exc))
        return False


def _read(path: Path) -> RunRecord | None:
    try:
        return _decoder.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def _read_either(logs_dir: str, job_id: str) -> RunRecord | None:
    found = _read(record_path(logs_dir, job_id))
    if found is None:
        legacy = _read(_legacy_path(logs_dir, job_id))
        found = legacy if legacy is not None and legacy.job_id == job_id else None
    return found


async def read_record(logs_dir: str, job_id: str) -> RunRecord | None:
    """The job's last record, or None when there is none or it does not decode.

    A record under the pre-injective name counts only when it names this very job.
    """
    return await asyncio.to_thread(_read_either, logs_dir, job_id)


# ---- retention: PI_LOG_RETENTION_DAYS by mtime, 0 keeps forever ------------------------------------

SWEPT_SUFFIXES = (".json", ".log")
DAY_S = 86_400
HOUR_S = 3_600


def _sweep(logs_dir: str, cutoff_s: float) -> tuple[int, list[str]]:
    """Remove old records and raw logs; returns (removed, errno names of the files it had to skip).

    lstat only, no recursion: a symlink or folder named ``*.json`` is left alone, so the sweep can never
    reach outside ``PI_LOGS_DIR``.
    """
    removed, skipped = 0, []
    try:
        entries = os.scandir(logs_dir)
    except FileNotFoundError:
        return 0, []
    except OSError as exc:
        return 0, [_failure_reason(exc)]
    with entries:
        for entry in entries:
            if not entry.name.endswith(SWEPT_SUFFIXES):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff_s:
                    os.unlink(entry.path)
                    removed += 1
            except FileNotFoundError:
                continue  # gone meanwhile (another sweeper, a rewrite): nothing to do
            except OSError as exc:
                skipped.append(_failure_reason(exc))
    return removed, skipped


async def sweep_logs(logs_dir: str, retention_days: int, now_ms: int) -> int:
    """Delete ``*.json``/``*.log`` regular files in ``logs_dir`` whose mtime is older than the window.

    0 days keeps everything. Never raises: retention is housekeeping and must not stop a worker.
    """
    if retention_days <= 0:
        return 0
    log = get_logger()
    try:
        removed, skipped = await asyncio.to_thread(_sweep, logs_dir, now_ms / 1000 - retention_days * DAY_S)
    except Exception as exc:
        log.warning("log_reaper_skipped", reason=_failure_reason(exc))
        return 0
    for reason in skipped:
        log.warning("log_reaper_skipped", reason=reason)  # errno name only: the error text has the path
    if removed:
        log.info("logs_swept", removed=removed)
    return removed


async def run_log_sweeper(settings: Settings, stop: asyncio.Event, clock: EpochMsClock) -> None:
    """Sweep at once, then every ``PI_SWEEP_INTERVAL_HOURS`` (0 = at boot only) until ``stop``."""
    interval_s = settings.sweep_interval_hours * HOUR_S
    while not stop.is_set():
        await sweep_logs(settings.logs_dir, settings.log_retention_days, clock())
        if interval_s <= 0 or settings.log_retention_days <= 0:
            return
        await stopped(stop, interval_s)


# ---- reading (``pi-dispatch runs``) ----------------------------------------------------------------


def _read_nofollow(path: str) -> RunRecord | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            return _decoder.decode(f.read())
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def _newest(logs_dir: str, limit: int) -> list[RunRecord]:
    try:
        entries = os.scandir(logs_dir)
    except OSError:
        return []
    candidates: list[tuple[int, str]] = []
    with entries:
        for entry in entries:
            # Dot files are never records (write_record's half-written temp files start with a dot).
            if not entry.name.endswith(".json") or entry.name.startswith("."):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                candidates.append((st.st_mtime_ns, entry.path))
    candidates.sort(reverse=True)
    # mtime approximates endedAt; decoding twice the limit absorbs the difference (a record rewritten
    # late, a clock step) without reading thousands of files. Undecodable ones do not count.
    wanted, records = limit * 2, []
    for _, path in candidates:
        record = _read_nofollow(path)
        if record is not None:
            records.append(record)
            if len(records) >= wanted:
                break
    records.sort(key=lambda r: r.ended_at, reverse=True)
    return records[:limit]


async def list_runs(logs_dir: str, *, limit: int = 20) -> list[RunRecord]:
    """This host's newest run records, newest ``endedAt`` first; files that do not decode are skipped."""
    if limit <= 0:
        return []
    return await asyncio.to_thread(_newest, logs_dir, limit)
