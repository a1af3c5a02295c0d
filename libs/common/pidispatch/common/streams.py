"""Consumer-group plumbing shared by the router and the worker.

At-least-once hand-off: an entry stays pending until its consumer acks it; ``claim_idle`` lets a peer
take over entries whose consumer died; ``send_to_dead`` parks an entry that can never be processed and
acks it in the same transaction, so it is neither lost nor retried forever.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.exceptions import ResponseError
from redis.typing import EncodableT, FieldT, KeyT, StreamIdT

from pidispatch.common.keys import DEAD_MAXLEN, Keys
from pidispatch.common.models import Fields, decode_fields, text
from pidispatch.common.redis import Redis

Entry = tuple[str, str, Fields]  # (stream, entry id, fields)
StreamEntry = tuple[str, Fields]  # (entry id, fields) of one stream


def entries_of(raw: Iterable[object] | None) -> list[StreamEntry]:
    """XRANGE-shaped replies as text."""
    out: list[StreamEntry] = []
    for item in raw or ():
        match item:
            case (bytes() | str() as entry_id, Mapping() as fields):
                out.append((text(entry_id), decode_fields(fields)))
    return out


def wire(fields: Mapping[str, str]) -> dict[FieldT, EncodableT]:
    """Text fields as redis-py's ``xadd`` and ``hset(mapping=)`` type them (their dict parameter is
    invariant; str is accepted)."""
    return cast("dict[FieldT, EncodableT]", fields)


async def xrange(r: Redis, stream: str, *, min: str = "-", max: str = "+", count: int | None = None
                 ) -> list[StreamEntry]:
    return entries_of(await r.xrange(stream, min=min, max=max, count=count))


async def xrevrange(r: Redis, stream: str, *, max: str = "+", min: str = "-", count: int | None = None
                    ) -> list[StreamEntry]:
    return entries_of(await r.xrevrange(stream, max=max, min=min, count=count))


async def ensure_group(r: Redis, stream: str, group: str) -> None:
    """Create the group (and the stream) if missing; idempotent across replicas and restarts."""
    try:
        await r.xgroup_create(stream, group, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


async def last_delivered(r: Redis, stream: str, group: str) -> str | None:
    """The group's last-delivered id, or None when the stream or the group does not exist."""
    try:
        groups: list[dict[Any, Any]] = await r.xinfo_groups(stream)
    except ResponseError:
        return None  # no such stream
    for found in groups:
        if text(found.get("name", b"")) == group:
            return text(found["last-delivered-id"])
    return None


def _flatten(reply: Any) -> list[Entry]:
    out: list[Entry] = []
    for stream, entries in reply or []:
        for entry_id, fields in entries:
            # A pending entry that was trimmed away comes back with no fields.
            out.append((text(stream), text(entry_id), decode_fields(fields or {})))
    return out


async def read_group(
    r: Redis,
    group: str,
    consumer: str,
    streams: dict[str, str],
    count: int,
    block_ms: int | None = None,
) -> list[Entry]:
    """XREADGROUP over ``streams`` ({stream: ">" for new, "0" for own pending}).

    A group deleted under us (``NOGROUP``: stream flushed, Redis restarted empty) is recreated once.
    """
    wanted: dict[KeyT, StreamIdT] = dict(streams.items())
    try:
        reply = await r.xreadgroup(group, consumer, wanted, count=count, block=block_ms)
    except ResponseError as exc:
        if "NOGROUP" not in str(exc):
            raise
        for stream in streams:
            await ensure_group(r, stream, group)
        reply = await r.xreadgroup(group, consumer, wanted, count=count, block=block_ms)
    return _flatten(reply)


async def ack(r: Redis, stream: str, group: str, *entry_ids: str) -> None:
    if entry_ids:
        await r.xack(stream, group, *entry_ids)


async def claim_idle(
    r: Redis, stream: str, group: str, consumer: str, min_idle_ms: int, cursor: str = "0-0", count: int = 10
) -> tuple[str, list[Entry]]:
    """XAUTOCLAIM one page; returns the next cursor ("0-0" when the scan wrapped) and the entries."""
    reply = await r.xautoclaim(stream, group, consumer, min_idle_ms, start_id=cursor, count=count)
    next_cursor, entries = text(reply[0]), reply[1]
    return next_cursor, _flatten([(stream, [e for e in entries if e is not None])])


def _text(value: bytes | str | int) -> str:
    return str(value) if isinstance(value, int) else text(value)


@dataclass(frozen=True, slots=True)
class Pending:
    """One row of XPENDING's extended form."""

    entry_id: str
    consumer: str
    idle_ms: int
    deliveries: int


async def pending(
    r: Redis, stream: str, group: str, *, count: int, min: str = "-", max: str = "+",
    consumer: str | None = None, idle_ms: int | None = None,
) -> list[Pending]:
    rows = await r.xpending_range(
        stream, group, min=min, max=max, count=count, consumername=consumer, idle=idle_ms
    )
    return [
        Pending(_text(row["message_id"]), _text(row["consumer"]), int(row["time_since_delivered"]),
                int(row["times_delivered"]))
        for row in rows
    ]


async def claim(
    r: Redis, stream: str, group: str, consumer: str, min_idle_ms: int, entry_ids: Sequence[str]
) -> tuple[list[StreamEntry], list[str]]:
    """XCLAIM: the entries that were still pending and idle long enough are now ours; and the ids among
    them whose entry was deleted from the stream meanwhile (claimed without fields: nothing to process)."""
    ids: list[StreamIdT] = list(entry_ids)
    reply = await r.xclaim(stream, group, consumer, min_idle_time=min_idle_ms, message_ids=ids)
    entries: list[StreamEntry] = []
    gone: list[str] = []
    for item in reply or ():
        match item:
            case (bytes() | str() as entry_id, Mapping() as fields) if fields:
                entries.append((text(entry_id), decode_fields(fields)))
            case (bytes() | str() as entry_id, _):
                gone.append(text(entry_id))
    # An id asked for and not answered: Redis 6.2 answers a deleted entry with no id at all, and 7.0
    # leaves it out (dropping it from the PEL itself); still in the stream, it was just not claimable.
    claimed = {entry_id for entry_id, _ in entries} | set(gone)
    unknown = [entry_id for entry_id in entry_ids if entry_id not in claimed]
    if unknown:
        async with r.pipeline(transaction=False) as pipe:
            for entry_id in unknown:
                pipe.xrange(stream, entry_id, entry_id, count=1)
            found = await pipe.execute()
        gone += [entry_id for entry_id, rows in zip(unknown, found, strict=True) if not rows]
    return entries, gone


async def delivery_count(r: Redis, stream: str, group: str, entry_id: str) -> int:
    """How many times the group has delivered this entry (0 if it is no longer pending)."""
    rows = await pending(r, stream, group, min=entry_id, max=entry_id, count=1)
    return rows[0].deliveries if rows else 0


async def send_to_dead(
    r: Redis,
    keys: Keys,
    *,
    source: str,
    group: str,
    entry_id: str,
    reason: str,
    deliveries: int,
    fields: Fields,
) -> None:
    """Park an entry in ``pd:dead`` with its reason and ack it, in one transaction."""
    dead_fields = {"source": source, "entry": entry_id, "reason": reason, "deliveries": str(deliveries)}
    for k, v in fields.items():
        dead_fields.setdefault(k, v)
    async with r.pipeline(transaction=True) as pipe:
        pipe.xadd(keys.dead, wire(dead_fields), maxlen=DEAD_MAXLEN, approximate=True)
        pipe.xack(source, group, entry_id)
        await pipe.execute()
