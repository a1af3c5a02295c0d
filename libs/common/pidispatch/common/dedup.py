"""Exact dedup that stays small: an identity (a delivery, a job id) is remembered as 6 bytes for a window.

What was seen on a UTC day goes in that day's buckets: a Redis string per (day, shard) holding 6-byte
digests end to end, expiring when the day leaves the window. A check looks at the window's buckets of
one shard (today's first); no key per identity: 6 B an identity (plus a string's spare room) and ~136 B
per shard and day, where a key per delivery cost ~112 B.

The digest is BLAKE2b-64 of the identity: 14 of its first 16 bits pick the shard, its last 48 are stored.
A new identity is taken for one seen before only if those 62 bits collide with one in its window: about
n / 2**62 for n remembered (7e-12 at 31 million). Identities reach this only once authenticated.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

DAY_MS = 24 * 3600 * 1000
WINDOW_DAYS = 31  # a redelivery within 31 days (up to 32 at a day's start) is still recognised
# 16,384 shards: below ~40 B an identity from ~60,000 a day, and a check reads ~6 B x (a day's
# identities / SHARDS) per window day, ~18 KB at 50 million a day (docs/redis.md has the formula).
SHARDS = 1 << 14
STORED_BYTES = 6


class Remembered(NamedTuple):
    """Where one identity is looked for and kept: buckets (today's first), its digest, today's expiry."""

    buckets: list[str]
    digest: bytes
    expire_at_s: int


def digest(identity: str) -> tuple[int, bytes]:
    """(shard, stored bytes) of ``identity``: the 16 bits that pick its shard, the 48 kept in it."""
    full = hashlib.blake2b(identity.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(full[:2], "big") % SHARDS, full[2:]


def remembered(window: Callable[[int, int], Sequence[str]], identity: str, now_ms: int) -> Remembered:
    """``window(today, days)`` names the buckets of ``days`` days back from ``today``, newest first, all
    but the shard (``Keys.seen_window``); ``now_ms`` picks today (UTC days since the epoch)."""
    shard, stored = digest(identity)
    today = now_ms // DAY_MS
    # Kept until its day is out of every later check: the end of day today + WINDOW_DAYS.
    expire_at_s = (today + WINDOW_DAYS + 1) * DAY_MS // 1000
    suffix = str(shard)
    return Remembered([prefix + suffix for prefix in window(today, WINDOW_DAYS + 1)], stored, expire_at_s)
