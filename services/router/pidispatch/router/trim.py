"""Trimming ``pd:events`` without dropping unfinished work.

The stream is cut only behind the oldest entry any group has not finished (pending or undelivered),
and otherwise kept to about ``PD_EVENTS_MAXLEN`` finished entries, which ``explain`` and ``replay`` use.
"""

from __future__ import annotations

from pidispatch.common.models import text
from pidispatch.common.redis import Redis
from pidispatch.common.scripts import NTH_OLDEST_ID

# At most this many entries are scanned (server-side) per trim to find the MAXLEN-th newest id.
TRIM_SCAN_MAX = 10_000




def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def choose_minid(groups: list[tuple[str | None, str]], nth_newest: str | None) -> str | None:
    """The MINID for ``XTRIM``: never past any group's oldest pending or last-delivered entry (unfinished
    work), never keeping more than ``nth_newest`` allows. ``groups`` = [(oldest pending, last delivered)].
    None means do not trim (nothing over the cap, no group to protect, or nothing delivered yet)."""
    if nth_newest is None or not groups:
        return None
    bound = nth_newest
    for pending, delivered in groups:
        for candidate in (pending, delivered):
            if candidate is not None and _id_key(candidate) < _id_key(bound):
                bound = candidate
    return None if _id_key(bound) == (0, 0) else bound


async def trim_events(r: Redis, stream: str, maxlen: int, *, approximate: bool = True) -> str | None:
    """Trim ``stream`` to ~``maxlen`` finished entries; returns the MINID used, if any."""
    length = await r.xlen(stream)
    if length <= maxlen:
        return None
    nth = await NTH_OLDEST_ID(r, [stream], [min(length - maxlen + 1, TRIM_SCAN_MAX)])
    groups: list[tuple[str | None, str]] = []
    for info in await r.xinfo_groups(stream):
        name = text(info["name"])
        summary = await r.xpending(stream, name)
        oldest = text(summary["min"]) if summary["pending"] else None
        groups.append((oldest, text(info["last-delivered-id"])))
    minid = choose_minid(groups, text(nth) if nth else None)
    if minid is not None:
        await r.xtrim(stream, minid=minid, approximate=approximate)
    return minid
