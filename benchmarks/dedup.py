"""Dedup structures side by side: Redis time per check and bytes per identity, at a day's volume.

Each candidate answers "was this identity seen in the last 31 days, and if not remember it" in one Lua
call, over shards filled as they would be at steady state (the window's identities spread over the
candidate's shard count), 64 shards per run:

- day buckets (the layout before, 16,384 shards): a string of 6-byte digests per day and shard, 32 of
  them scanned;
- week hashes (65,536 shards): a hash per 7-day bucket and shard, field = digest, 5 HEXISTS (listpack
  while small, a real hash table past Redis's 128 entries);
- tables (common.dedup, the layout in use, 65,536 shards): one table per shard in a string, a header
  read and a neighbourhood read; and what one table's rebuild costs at that volume.

Time is Redis's own (INFO commandstats usec_per_call of EVALSHA), so the client does not count; bytes are
used_memory growth over the identities kept.

    .venv/bin/python benchmarks/dedup.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from _redis import private_redis

from pidispatch.common.dedup import DAY_MS, DEDUP_LUA, LEGACY_SHARDS, SHARDS, WINDOW_DAYS, remembered
from pidispatch.common.keys import Keys
from pidispatch.common.luascript import Script
from pidispatch.common.redis import Redis, create_redis
from pidispatch.common.scripts import INGEST

# The layout before, as its INGEST ran: KEYS are the window's buckets, today's first.
DAY_BUCKETS = Script("""
for i = 1, #KEYS do
  local stored = redis.call('GET', KEYS[i])
  local from = 1
  while stored do
    local at = string.find(stored, ARGV[1], from, true)
    if not at then break end
    if (at - 1) % #ARGV[1] == 0 then return 1 end
    from = at + 1
  end
end
redis.call('APPEND', KEYS[1], ARGV[1])
redis.call('EXPIREAT', KEYS[1], ARGV[2])
return 0
""")
# Week hashes: KEYS are the window's 5 buckets, this week's first.
WEEK_HASHES = Script("""
for i = 1, #KEYS do
  if redis.call('HEXISTS', KEYS[i], ARGV[1]) == 1 then return 1 end
end
redis.call('HSET', KEYS[1], ARGV[1], '')
redis.call('EXPIREAT', KEYS[1], ARGV[2])
return 0
""")
# Tables: the INGEST of common.scripts, without its XADD (the stream is left out of every candidate).
TABLES = Script(INGEST.script.replace("return redis.call('XADD', KEYS[2], '*', unpack(ARGV, 5))", "return 0"))
# A table's rebuild, forced: what the rare insert whose neighbourhood is full pays.
REBUILD = Script(DEDUP_LUA + "local _, _, bits = probe()\nrebuild(bits)\nreturn 0")
# The floor every candidate stands on: a script that reads one key and answers.
EMPTY = Script("return redis.call('EXISTS', KEYS[1]) == 1 and 1 or 0")
SAMPLE_SHARDS = 64  # the "script floor" row's bytes are what the measurement itself leaves (its noise)
BATCH = 2000  # calls a pipeline: the slowest candidate's batch must answer within the socket timeout


def identity(n: int, shard_hint: int) -> str:
    return f"github:{shard_hint}-{n:08d}"


async def run_candidate(r: Redis, name: str, per_day: int, checks: int) -> tuple[float, float, float]:
    """(µs per new identity, µs per redelivery, bytes per identity kept) over SAMPLE_SHARDS shards."""
    keys = Keys(f"bench{name.replace(' ', '')}")
    # Each candidate at its own shard count: the day buckets had 16,384, the others take 65,536.
    per_shard_day = max(1, round(per_day / (LEGACY_SHARDS if name == "day buckets" else SHARDS)))
    now = int(time.time() * 1000)
    await r.execute_command("FLUSHALL")
    before = (await r.info("memory"))["used_memory"]
    kept = 0

    def call(pipe: object, ident: str, at_ms: int) -> None:
        found = remembered(keys.deliveries, ident, at_ms)
        digest, day, shard = found.args[0], at_ms // DAY_MS, found.args[3]
        table = f"{keys.prefix}:t:{hash(ident) % SAMPLE_SHARDS}"  # every candidate: the same 64 shards
        if name == "day buckets":
            buckets = [f"{keys.prefix}:d:{d}:{table}" for d in range(day, day - WINDOW_DAYS - 1, -1)]
            DAY_BUCKETS.in_pipeline(pipe, buckets, [digest, (day + WINDOW_DAYS + 1) * 86400])  # type: ignore[arg-type]
        elif name == "week hashes":
            week = day // 7
            buckets = [f"{keys.prefix}:w:{w}:{table}" for w in range(week, week - 5, -1)]
            WEEK_HASHES.in_pipeline(pipe, buckets, [digest, (week + 6) * 7 * 86400])  # type: ignore[arg-type]
        elif name == "script floor":
            EMPTY.in_pipeline(pipe, [table], [digest, day])  # type: ignore[arg-type]
        else:
            TABLES.in_pipeline(pipe, [table], [digest, day, "", shard])  # type: ignore[arg-type]

    # Fill: the window's days, oldest first, per_shard_day identities a day in each sampled shard.
    fill = per_shard_day * SAMPLE_SHARDS
    for back in range(WINDOW_DAYS, -1, -1):
        at = now - back * DAY_MS
        for start in range(0, fill, BATCH):
            async with r.pipeline(transaction=False) as pipe:
                for n in range(start, min(fill, start + BATCH)):
                    call(pipe, identity(n, back), at)
                await pipe.execute()
        kept += fill
    grown = (await r.info("memory"))["used_memory"] - before
    times = []
    for fresh in (True, False):
        await r.config_resetstat()
        replies = []
        for start in range(0, checks, BATCH):
            async with r.pipeline(transaction=False) as pipe:
                for n in range(start, min(checks, start + BATCH)):
                    call(pipe, identity(n, 999) if fresh else identity(n % fill, 3), now)
                replies += await pipe.execute()
        found = [reply is None or reply == 1 for reply in replies]  # the tables' INGEST answers false
        assert name == "script floor" or found == [not fresh] * checks, f"{name}: wrong answers"
        stats = await r.info("commandstats")
        times.append(float(stats["cmdstat_evalsha"]["usec_per_call"]))
    return times[0], times[1], grown / kept


async def rebuild_ms(r: Redis, per_day: int) -> float:
    """Redis's own ms for one rebuild of a table holding a window of ``per_day`` a day (median of 15)."""
    keys, table, now = Keys("benchrebuild"), "benchrebuild:table", int(time.time() * 1000)
    live = max(1, round(per_day * (WINDOW_DAYS + 1) / SHARDS))
    for start in range(0, live, 5000):
        async with r.pipeline(transaction=False) as pipe:
            for n in range(start, min(live, start + 5000)):
                found = remembered(keys.deliveries, f"github:{n}", now)
                TABLES.in_pipeline(pipe, [table], found.args)
            await pipe.execute()
    raw = await r.get(table)
    times = []
    for _ in range(15):
        await r.set(table, raw)
        await r.config_resetstat()
        await REBUILD(r, [table], remembered(keys.deliveries, "github:new", now).args)
        times.append(float((await r.info("commandstats"))["cmdstat_evalsha"]["usec"]) / 1e3)
    await r.delete(table)
    return sorted(times)[len(times) // 2]


async def measure(url: str, volumes: tuple[int, ...], checks: int) -> None:
    r = create_redis(url)
    print(f"dedup candidates: Redis µs per call (commandstats), bytes per identity kept; {SAMPLE_SHARDS} "
          f"shards filled for the {WINDOW_DAYS + 1}-day window at each volume, {checks} checks each")
    print(f"{'a day':>11} {'candidate':12} {'new µs':>7} {'again µs':>8} {'B/identity':>10}")
    try:
        for per_day in volumes:
            for name in ("script floor", "day buckets", "week hashes", "tables"):
                new, again, size = await run_candidate(r, name, per_day, checks)
                print(f"{per_day:11,d} {name:12} {new:7.1f} {again:8.1f} {size:10.1f}")
            took = await rebuild_ms(r, per_day)
            print(f"{per_day:11,d} a table's rebuild (its window's identities): {took:.2f} ms")
    finally:
        await r.aclose()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    volumes = (1_000_000,) if args.quick else (100_000, 1_000_000, 10_000_000)
    with private_redis(Path(tempfile.mkdtemp(prefix="pd-bench-dedup-"))) as url:
        asyncio.run(measure(url, volumes, 5000 if args.quick else 20_000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
