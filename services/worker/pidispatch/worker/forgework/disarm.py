"""Spend a one-shot trigger: write ``on.disarmed = {"at", "jobId"}`` into its ``triggers.json`` entry.

This is the only write the worker makes to the triggers file. It happens after the record of a ``once``
job's attempt is written, when that attempt started a container or ended for good (the lifecycle
decides, ``should_disarm``). The write is atomic (a temporary file in the same folder, fsync, rename,
the same mode) and keeps every other byte (``splice``); when the file changed under it, is not the same
rule at that index, or cannot be spliced safely, nothing is written and ``disarm_failed`` is logged.
The router's hot reload then sees the mark and the entry matches nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
from datetime import UTC, datetime

from pidispatch.common.log import get_logger
from pidispatch.common.models import Job
from pidispatch.worker.forgework.authored import entry_at, matched_of, read_text, same_rule
from pidispatch.worker.forgework.splice import add_on_key

# Refusals that say the job no longer belongs to its rule as the file is now: they spend nothing of it.
NOT_SPENDING = frozenset({"once-already-spent", "trigger-skew"})


def should_disarm(job: Job, reason: str | None, *, started: bool, final: bool) -> bool:
    """A ``once`` job's rule is spent once a container started for it (it may have cost money) or its
    attempt ended for good (the one shot was taken, whatever came of it), unless the file itself refused
    the job (``NOT_SPENDING``). Pure."""
    matched = matched_of(job)
    if matched is None or matched.once is not True or reason in NOT_SPENDING:
        return False
    return started or final


def disarmed_text(text: str, job: Job, at: str) -> tuple[str | None, str]:
    """The new file text and ``"disarmed"``, or None and why not (a reason token). Pure."""
    matched = matched_of(job)
    if matched is None:
        return None, "not-a-trigger-job"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None, "unparsable"
    entry = entry_at(data, matched.index)
    if entry is None or not same_rule(entry, job, matched):
        return None, "rule-changed"
    mark = entry["on"].get("disarmed")
    if mark is not None:
        own = isinstance(mark, dict) and mark.get("jobId") == job.id
        return None, "already-disarmed" if own else "disarmed-by-another"
    spliced = add_on_key(text, matched.index, "disarmed", {"at": at, "jobId": job.id})
    return (spliced, "disarmed") if spliced is not None else (None, "unsafe-splice")


def _replace(path: str, old: str, new: str) -> None:
    """Write ``new`` over ``path`` atomically, keeping its mode (and owner where allowed), only if the
    file still holds ``old``: an edit made meanwhile wins over the mark."""
    st = os.stat(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".triggers-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(new.encode("utf-8"))
            out.flush()
            os.fchmod(out.fileno(), st.st_mode & 0o7777)
            with contextlib.suppress(PermissionError):
                os.fchown(out.fileno(), st.st_uid, st.st_gid)
            os.fsync(out.fileno())
        if read_text(path) != old:
            raise FileExistsError("the file changed while the mark was prepared")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power loss
    finally:
        os.close(dir_fd)


def disarm_file(path: str, job: Job, at: str) -> str:
    """Blocking: mark the job's entry; returns the outcome token (``disarmed`` when written)."""
    text = read_text(path)
    if text is None:
        return "unreadable"
    new, outcome = disarmed_text(text, job, at)
    if new is None:
        return outcome
    try:
        _replace(path, text, new)
    except FileExistsError:
        return "changed-meanwhile"
    except OSError:
        return "write-failed"
    return "disarmed"


async def disarm(path: str, job: Job, now_ms: int) -> str:
    """Mark the job's one-shot entry spent; never raises (the record is already written)."""
    at = datetime.fromtimestamp(now_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    matched = matched_of(job)
    index = matched.index if matched is not None else None
    try:
        outcome = await asyncio.to_thread(disarm_file, path, job, at)
    except Exception as exc:  # a bug must not undo the record's ack path
        get_logger().error("disarm_failed", job=job.id, index=index, reason="internal-error",
                           error=type(exc).__name__)
        return "internal-error"
    if outcome == "disarmed":
        get_logger().info("trigger_disarmed", job=job.id, index=index)
    elif outcome in ("already-disarmed", "disarmed-by-another"):
        # Spent already (a repeat after a crash, or the job refused once-already-spent): nothing to do.
        get_logger().info("trigger_disarm_skipped", job=job.id, index=index, reason=outcome)
    else:
        get_logger().warning("disarm_failed", job=job.id, index=index, reason=outcome)
    return outcome
