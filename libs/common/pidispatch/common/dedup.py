"""Exact dedup that stays small and answers in constant time: an identity (a delivery, a job id) is
remembered for a window as 8 bytes in its shard's table.

A shard's table is one Redis string (``DEDUP_LUA``): an 8-byte header (log2 of its size, the newest day
kept), then slots of a 6-byte digest and the UTC day it was remembered (2 bytes), or 8 zero bytes. A digest
lives within NEAR slots of the one it points to (its neighbourhood, as in hopscotch hashing), so a check is
two GETRANGEs (the header, the neighbourhood) whatever the volume or the window, and a new identity one
SETRANGE more. A slot whose day has left the window is free again. When a neighbourhood has no free slot
the table is rebuilt from its live slots at most half full, which costs that shard's size only.
``benchmarks/dedup.py`` measures this against the layout before (a string per day and shard, 32 scanned
per check) and a hash per week and shard; docs/redis.md has the figures and why this one won: a script's
every ``redis.call`` costs microseconds, and this layout needs the fewest.

The digest is BLAKE2b-64 of the identity: its first 16 bits pick the shard, its last 48 are stored. A new
identity is taken for one seen before only if those 64 bits collide with one in its window: about
n / 2**64 for n remembered (2e-12 at 31 million). Identities reach this only once authenticated.

An installation upgraded from the day-bucket layout keeps its old job-id buckets for their 32 days: the
router passes their prefix while the upgrade flag lives (``upgrade_until``), so no job queued before the
upgrade runs again for a redelivery after it.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from pidispatch.common.keys import Space
from pidispatch.common.redis import Redis

DAY_MS = 24 * 3600 * 1000
WINDOW_DAYS = 31  # a redelivery within 31 days (up to 32 at a day's start) is still recognised
# 65,536 shards: a table holds ~490 identities at 1 million a day, so its rare rebuild stays near a
# millisecond; the key each costs (~100 B) is spread over them.
SHARDS = 1 << 16
LEGACY_SHARDS = 1 << 14  # the day buckets' layout: 14 of the same 16 bits
STORED_BYTES = 6
SLOT_BYTES = 8  # the digest and its day (2 bytes: UTC days since the epoch, good until 2149)
NEAR = 32  # slots a digest may live from its own; one GETRANGE of 256 bytes reads them all


# The Lua functions INGEST and ENQUEUE share (common.scripts). Each script's KEYS[1] and ARGV[1..4] are a
# ``Remembered``: its shard's table; its digest, today, the old buckets' prefix ('' when none) and shard.
# ``known()`` answers whether the identity is remembered and where it would go; ``keep(where)`` puts it there.
DEDUP_LUA = f"""
local SLOT, NEAR, WINDOW = {SLOT_BYTES}, {NEAR}, {WINDOW_DAYS}
local EMPTY = string.rep('\\0', SLOT)
local digest, today = ARGV[1], tonumber(ARGV[2])
local oldest = today - WINDOW

local function home(d, size)
  local a, b, c, e = string.byte(d, 1, 4)
  return (((a * 256 + b) * 256 + c) * 256 + e) % size + 1
end

local function near(size) return math.min(NEAR, size) end

-- Found, then the free slot of its neighbourhood (nil: none, or no table), the header's bits and newest
-- day. A table of 2^bits has near - 1 slots more, so no neighbourhood wraps. A slot of a day before
-- oldest is free, and the digest's own such slot is taken first (it is kept at most once). The digest is
-- looked for with string.find, in C: a Lua loop over the slots cost more than both GETRANGEs.
local function probe()
  local head = redis.call('GETRANGE', KEYS[1], 0, SLOT - 1)
  if head == '' then return false, nil, 0, 0 end
  local bits, hi, lo = string.byte(head, 1, 3)
  local newest, size = hi * 256 + lo, 2 ^ bits
  local at, n = home(digest, size), near(size)
  local slots = redis.call('GETRANGE', KEYS[1], at * SLOT, (at + n) * SLOT - 1)
  local from = 1
  while true do
    local p = string.find(slots, digest, from, true)
    if not p then break end
    if (p - 1) % SLOT == 0 then
      local a, b = string.byte(slots, p + 6, p + 7)
      return a * 256 + b >= oldest, at + (p - 1) / SLOT, bits, newest
    end
    from = p + 1
  end
  for j = 0, n - 1 do
    local a, b = string.byte(slots, j * SLOT + 7, j * SLOT + 8)
    if a * 256 + b < oldest then return false, at + j, bits, newest end
  end
  return false, nil, bits, newest
end

-- The layout before: a string of digests end to end per day and shard (a match starts on a boundary).
local function known_before(prefix, shard)
  if prefix == '' then return false end
  for day = today, oldest, -1 do
    local stored = redis.call('GET', prefix .. day .. ':' .. shard)
    local from = 1
    while stored do
      local at = string.find(stored, digest, from, true)
      if not at then break end
      if (at - 1) % #digest == 0 then return true end
      from = at + 1
    end
  end
  return false
end

-- KEYS[1] again from its live slots and the new one, at most half full, every digest in its neighbourhood.
local function rebuild(bits)
  local live = {{digest .. struct.pack('>I2', today)}}
  if bits > 0 then
    local all = redis.call('GET', KEYS[1])
    for p = SLOT + 1, #all, SLOT do
      if struct.unpack('>I2', all, p + 6) >= oldest then
        live[#live + 1] = string.sub(all, p, p + SLOT - 1)
      end
    end
  end
  bits = 3
  while 2 ^ bits < #live * 2 do bits = bits + 1 end
  while true do
    local size, slots, placed = 2 ^ bits, {{}}, true
    for _, entry in ipairs(live) do
      local i = home(entry, size)
      local last = i + near(size) - 1
      while slots[i] and i <= last do i = i + 1 end
      if i > last then placed = false break end
      slots[i] = entry
    end
    if placed then
      local out = {{struct.pack('>BI2', bits, today) .. string.rep('\\0', SLOT - 3)}}
      for i = 1, size + near(size) - 1 do out[i + 1] = slots[i] or EMPTY end
      redis.call('SET', KEYS[1], table.concat(out))
      return
    end
    bits = bits + 1
  end
end

local function known()
  local found, at, bits, newest = probe()
  if found or known_before(ARGV[3], ARGV[4]) then return true end
  return false, {{at, bits, newest}}
end

local function keep(where)
  local at, bits, newest = where[1], where[2], where[3]
  local entry = digest .. struct.pack('>I2', today)
  if bits == 0 then  -- no table yet: the smallest, holding this one
    at = home(digest, 8)
    redis.call('SET', KEYS[1], struct.pack('>BI2', 3, today) .. string.rep('\\0', SLOT - 3 + (at - 1) * SLOT)
      .. entry .. string.rep('\\0', (15 - at) * SLOT))
  elseif at == nil then
    rebuild(bits)
  else
    redis.call('SETRANGE', KEYS[1], at * SLOT, entry)
    if today <= newest then return end
    redis.call('SETRANGE', KEYS[1], 1, struct.pack('>I2', today))
  end
  -- Kept until its newest slot has left every window: the end of day today + WINDOW.
  redis.call('EXPIREAT', KEYS[1], (today + WINDOW + 1) * 86400)
end
"""


class Remembered(NamedTuple):
    """The first KEYS and ARGV of a script that checks or keeps one identity (``DEDUP_LUA``)."""

    keys: list[str]  # its shard's table
    args: list[bytes | int | str]  # its digest, today (UTC days since the epoch), the old buckets, shard


def digest(identity: str) -> tuple[int, bytes]:
    """(shard, stored bytes) of ``identity``: the 16 bits that pick its shard, the 48 kept in it."""
    full = hashlib.blake2b(identity.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(full[:2], "big"), full[2:]


def bucket_digest(identity: str) -> tuple[int, bytes]:
    """(shard, stored bytes) of ``identity`` in a day's buckets, which keep 16,384 shards (the router's
    decisions; the dedup layout before): 14 of the same 16 bits pick it."""
    shard, stored = digest(identity)
    return shard % LEGACY_SHARDS, stored


def remembered(space: Space, identity: str, now_ms: int, *, before: bool = False) -> Remembered:
    """Where ``identity`` is looked for and kept on the UTC day of ``now_ms``; ``before``: also in the day
    buckets of the layout before (``upgrade_until``)."""
    shard, stored = digest(identity)
    legacy = space.legacy if before else ""
    return Remembered([space.table(shard)], [stored, now_ms // DAY_MS, legacy, shard % LEGACY_SHARDS])


async def upgrade_until(redis: Redis, layout: str, spaces: tuple[Space, ...], now_ms: int) -> int:
    """When (epoch ms) the day buckets of the layout before stop mattering; 0 when there are none.

    The first start of the table layout looks for them (SCAN steps of 1,000 keys, so no command is long)
    and, when some exist, sets the spaces' ``upgraded`` flag for the 32 days they live. Redis errors
    propagate."""
    flag = spaces[0].upgraded
    if not await redis.exists(layout):
        if any([await _any_key(redis, space.legacy + "*") for space in spaces]):
            await redis.set(flag, "1", exat=now_ms // 1000 + (WINDOW_DAYS + 1) * DAY_MS // 1000)
        await redis.set(layout, "tables")
    left_ms = await redis.pttl(flag)
    return now_ms + left_ms if left_ms > 0 else 0


async def _any_key(redis: Redis, pattern: str) -> bool:
    async for _ in redis.scan_iter(match=pattern, count=1000):
        return True
    return False
