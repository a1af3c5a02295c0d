"""Run history (spec worker §4): one JSON record per run attempt under ``PI_LOGS_DIR``.

The record is built field by field from ids, enums and numbers, never by spreading job data, so no
title, body, login or host path can reach it. Writing is atomic (temp file + rename) and never raises:
a full disk must not turn a finished job into a retried one.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from pidispatch.common.log import get_logger
from pidispatch.common.models import Job, RunRecord, record_target, sanitize_job_id
from pidispatch.worker.exitline import ExitInfo

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(RunRecord)


def iso_ms(epoch_ms: int) -> str:
    """``2024-05-01T12:00:00.000Z``, the shape JavaScript's ``toISOString`` gives."""
    dt = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def record_path(logs_dir: str, job_id: str) -> Path:
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
    if isinstance(exc, OSError) and exc.errno in errno.errorcode:
        return errno.errorcode[exc.errno]
    return type(exc).__name__


async def write_record(logs_dir: str, record: RunRecord) -> bool:
    """Write ``<logs_dir>/<sanitized id>.json``; on failure log ``run_record_failed`` and return False."""
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


async def read_record(logs_dir: str, job_id: str) -> RunRecord | None:
    """The job's last record, or None when there is none or it does not decode."""
    return await asyncio.to_thread(_read, record_path(logs_dir, job_id))
