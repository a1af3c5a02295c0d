"""Trimming streams without reading an entry: behind every group's unfinished work, in bounded steps.

``pd:events`` keeps about ``PD_EVENTS_MAXLEN`` finished entries (``explain`` and ``replay`` read them); a
job stream keeps no finished entry. Nothing pending or undelivered is ever cut: the cut is never past any
group's oldest pending entry nor its last-delivered one, and a stream without a group is left whole.

How many entries a cut keeps is known without a scan: the events stream is marked with (entries ever
added, last id) every keep/64 additions, "ever added" being XLEN plus what trimming removed, at each
trim pass and, as the router reads, at its group's position (Redis 7's entries-read), so a backlog read
between two passes is marked all along. A mark at least ``keep`` additions old is a cut that keeps at
least ``keep`` entries. Each step is one ``XTRIM
MINID ~ LIMIT``: whole nodes, a bounded count, so no command holds Redis for long.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import cast

from redis.exceptions import RedisError

from pidispatch.common.keys import (
    ROUTER_GROUP,
    TRIM_INTERVAL_S,
    TRIM_MARK_SPACING,
    TRIM_MARKS_MAX,
    TRIM_PASS_STEPS,
    TRIM_STEP_ENTRIES,
    Keys,
)
from pidispatch.common.models import text
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import every
from pidispatch.common.scripts import GROUP_MARK, TRIM_MARK, TRIM_STEP

# Above every real id: the cap of a stream that keeps no finished entry.
NO_CAP = f"{2**64 - 1}-{2**64 - 1}"


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def choose_minid(groups: list[tuple[str | None, str]], cap: str | None) -> str | None:
    """The MINID for ``XTRIM``: never past any group's oldest pending or last-delivered entry (unfinished
    work), never keeping more than ``cap`` allows. ``groups`` = [(oldest pending, last delivered)].
    None means do not trim (no cap yet, no group to protect, or nothing delivered yet)."""
    if cap is None or not groups:
        return None
    bound = cap
    for pending, delivered in groups:
        for candidate in (pending, delivered):
            if candidate is not None and _id_key(candidate) < _id_key(bound):
                bound = candidate
    return None if _id_key(bound) == (0, 0) else bound


async def _groups(r: Redis, stream: str) -> list[tuple[str | None, str]]:
    out: list[tuple[str | None, str]] = []
    for info in await r.xinfo_groups(stream):
        name = text(info["name"])
        summary = await r.xpending(stream, name)
        oldest = text(summary["min"]) if summary["pending"] else None
        out.append((oldest, text(info["last-delivered-id"])))
    return out


def mark_spacing(keep: int) -> int:
    """Pure: additions between two marks, so ``TRIM_MARKS_MAX`` marks span several times ``keep``."""
    return max(keep // TRIM_MARK_SPACING, 1)


async def mark_read(r: Redis, keys: Keys, spacing: int) -> None:
    """Mark the router group's position (entries it has read, its last delivered id) for the trimmer."""
    await GROUP_MARK(r, [keys.events, keys.events_marks], [ROUTER_GROUP, spacing, TRIM_MARKS_MAX])


async def _count_cap(r: Redis, keys: Keys, keep: int) -> str | None:
    """The id of the newest mark at least ``keep`` additions old (None: the stream is not over ``keep``)."""
    stream, trimmed, marks = keys.events, keys.events_trimmed, keys.events_marks
    added = await TRIM_MARK(r, [stream, trimmed, marks], [mark_spacing(keep), TRIM_MARKS_MAX])
    if added is None:
        return None
    found = await r.zrevrangebyscore(marks, int(added) - keep, "-inf", start=0, num=1, withscores=True)
    if not found:
        return None
    member, score = cast("tuple[bytes, float]", found[0])
    await r.zremrangebyscore(marks, "-inf", f"({int(score)}")  # older marks can never be a cut again
    return text(member)


async def _cut(r: Redis, stream: str, counter: str, minid: str, *, approximate: bool) -> int:
    """Remove entries older than ``minid`` in bounded steps; how many went."""
    if not approximate:  # exact cuts are for tests on small streams: one unbounded XTRIM
        removed = int(await r.xtrim(stream, minid=minid, approximate=False))
        await r.incrby(counter, removed)
        return removed
    removed = 0
    for _ in range(TRIM_PASS_STEPS):
        n = int(await TRIM_STEP(r, [stream, counter], [minid, TRIM_STEP_ENTRIES]))
        removed += n
        if n < TRIM_STEP_ENTRIES:
            break
    return removed


async def trim_events(r: Redis, keys: Keys, keep: int, *, approximate: bool = True) -> tuple[str | None, int]:
    """Cut ``keys.events`` to about ``keep`` finished entries: (the MINID used, entries removed)."""
    cap = await _count_cap(r, keys, keep)  # marked on every pass, so a cap exists once traffic passes keep
    if cap is None or await r.xlen(keys.events) <= keep:
        return None, 0
    minid = choose_minid(await _groups(r, keys.events), cap)
    if minid is None:
        return None, 0
    return minid, await _cut(r, keys.events, keys.events_trimmed, minid, approximate=approximate)


async def trim_job_streams(r: Redis, keys: Keys, streams: Iterable[str], *, approximate: bool = True) -> int:
    """Cut each job stream behind its group (an acked job entry is never read again); entries removed."""
    removed = 0
    for stream in streams:
        if not await r.exists(stream):
            continue
        minid = choose_minid(await _groups(r, stream), NO_CAP)
        if minid is not None:
            removed += await _cut(r, stream, keys.jobs_trimmed, minid, approximate=approximate)
    return removed


async def trim_all(r: Redis, keys: Keys, keep: int) -> bool:
    """One pass over the events stream and the job streams of the shared queue and each registered host
    (a dead host's stream is the rerouter's). True when a cut used its whole step budget: go again."""
    _, removed = await trim_events(r, keys, keep)
    hosts = [keys.host_jobs(text(m)) for m in await r.smembers(keys.hosts)]
    removed_jobs = await trim_job_streams(r, keys, [keys.jobs, *hosts])
    budget = TRIM_PASS_STEPS * TRIM_STEP_ENTRIES
    return removed >= budget or removed_jobs >= budget


async def run_trimmer(r: Redis, keys: Keys, keep: int, stop: asyncio.Event) -> None:
    """Trim every ``TRIM_INTERVAL_S`` until ``stop``; housekeeping never stops routing, so a failed pass
    is logged and the next one tries again."""
    await every(
        TRIM_INTERVAL_S, lambda: trim_all(r, keys, keep), stop, None,
        faults=(RedisError, OSError), bug_event="streams_trim_failed",
    )
