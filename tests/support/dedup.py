"""Reading what common.dedup remembered, as a test asserts it (the services only ever check-and-add)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pidispatch.common.dedup import STORED_BYTES, remembered
from pidispatch.common.redis import Redis


async def is_remembered(
    redis: Redis, window: Callable[[int, int], Sequence[str]], identity: str, now_ms: int
) -> bool:
    """Is ``identity`` in one of the buckets a check at ``now_ms`` would look at?"""
    found = remembered(window, identity, now_ms)
    for name in found.buckets:
        stored = await redis.get(name) or b""
        digests = {stored[i:i + STORED_BYTES] for i in range(0, len(stored), STORED_BYTES)}
        if found.digest in digests:
            return True
    return False


async def remembered_count(redis: Redis, pattern: str) -> int:
    """How many identities the buckets matching ``pattern`` hold."""
    total = 0
    async for name in redis.scan_iter(match=pattern, count=1000):
        total += await redis.strlen(name)
    return total // STORED_BYTES
