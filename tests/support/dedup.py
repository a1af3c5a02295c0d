"""Reading what common.dedup remembered, as a test asserts it (the services only ever check-and-add)."""

from __future__ import annotations

import struct

from pidispatch.common.dedup import DAY_MS, NEAR, SLOT_BYTES, STORED_BYTES, WINDOW_DAYS, Space, remembered
from pidispatch.common.redis import Redis


def table_slots(raw: bytes) -> tuple[int, dict[bytes, int]]:
    """A shard table's size (2**bits), and its filled slots as {digest: day}; asserts the layout holds:
    every digest within NEAR slots of its own, at most once, the header's newest day the newest."""
    bits, newest = struct.unpack_from(">BH", raw, 0)
    size = 2**bits
    assert len(raw) == (1 + size + min(NEAR, size) - 1) * SLOT_BYTES, "header, 2**bits slots, a neighbourhood"
    slots: dict[bytes, int] = {}
    for n, at in enumerate(range(SLOT_BYTES, len(raw), SLOT_BYTES), start=1):
        digest, (day,) = raw[at:at + STORED_BYTES], struct.unpack_from(">H", raw, at + STORED_BYTES)
        if day:
            assert digest not in slots, "a digest is kept at most once"
            assert 0 <= n - home(digest, size) < min(NEAR, size), "a digest lives in its neighbourhood"
            slots[digest] = day
    assert not slots or max(slots.values()) <= newest
    return size, slots


def home(digest: bytes, size: int) -> int:
    """The slot a digest points to (1-based, as DEDUP_LUA)."""
    return int.from_bytes(digest[:4], "big") % size + 1


async def is_remembered(redis: Redis, space: Space, identity: str, now_ms: int) -> bool:
    """Is ``identity`` in its shard's table, on a day a check at ``now_ms`` still counts?"""
    found = remembered(space, identity, now_ms)
    raw = await redis.get(found.keys[0])
    if raw is None:
        return False
    day = table_slots(raw)[1].get(bytes(found.args[0]))  # type: ignore[arg-type]
    return day is not None and day >= now_ms // DAY_MS - WINDOW_DAYS


async def remembered_count(redis: Redis, pattern: str) -> int:
    """How many identities the tables matching ``pattern`` hold (live or not)."""
    total = 0
    async for name in redis.scan_iter(match=pattern, count=1000):
        total += len(table_slots(await redis.get(name) or b"")[1])
    return total
