"""A held job's wait-for state in Redis: its hold hash, the supersede lease of its target, the done marker
and the held index (key names in ``common.keys``). The worker's gate writes it; ``waits``, ``status`` and
``cancel`` read and end it. Every write is one script or one pipeline, bounded."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from pidispatch.common.keys import (
    REDIS_OP_TIMEOUT_S,
    WAIT_COUNTER_TTL_MS,
    WAIT_DONE_TTL_MS,
    WAIT_HOLD_MIN_TTL_MS,
    WAIT_HOLD_SLACK_MS,
    Keys,
)
from pidispatch.common.models import decode_fields, text
from pidispatch.common.redis import Redis, bounded
from pidispatch.common.streams import wire
from pidispatch.common.workerscripts import WAIT_HOLD, WAIT_RELEASE


class HoldState(msgspec.Struct, frozen=True, kw_only=True):
    """One hold as stored. ``conditions`` is the job's ``waitFor`` as JSON; ``next`` when it wakes (ms);
    ``held`` once it was deferred at least once (a cleared wait then leaves the done marker)."""

    job: str
    since: int
    target: str = ""
    dedup_id: str = ""
    conditions: str = "[]"
    checks: int = 0
    faults: int = 0
    throttles: int = 0
    next: int | None = None
    held: bool = False


def hold_ttl_ms(now_ms: int, until_ms: int) -> int:
    """A hold outlives its next wake by an hour, and lives at least five minutes."""
    return max(WAIT_HOLD_MIN_TTL_MS, until_ms - now_ms + WAIT_HOLD_SLACK_MS)


def _int(fields: Mapping[str, str], name: str) -> int:
    raw = fields.get(name, "")
    return int(raw) if raw.isascii() and raw.isdigit() else 0


def parse_hold(job_id: str, fields: Mapping[str, str]) -> HoldState | None:
    """Pure: a hold hash as read, or None when it has no ``since`` (gone, or not a hold)."""
    if "since" not in fields:
        return None
    nxt = fields.get("next", "")
    return HoldState(
        job=job_id, since=_int(fields, "since"), target=fields.get("target", ""),
        dedup_id=fields.get("dedupId", ""), conditions=fields.get("conditions", "[]"),
        checks=_int(fields, "checks"), faults=_int(fields, "faults"), throttles=_int(fields, "throttles"),
        next=int(nxt) if nxt.isascii() and nxt.isdigit() else None, held=fields.get("held") == "1",
    )


async def read_hold(redis: Redis, keys: Keys, job_id: str) -> HoldState | None:
    raw = await bounded(redis.hgetall(keys.wait_job(job_id)), REDIS_OP_TIMEOUT_S)
    return parse_hold(job_id, decode_fields(raw))


async def take_hold(
    redis: Redis, keys: Keys, *, job_id: str, dedup_id: str, ttl_ms: int, now_ms: int,
    fields: Mapping[str, str],
) -> str | None:
    """Hold the target's lease for this job and stamp its hash (``since`` once, then ``fields``); the
    live holder's job id when another job already waits on the target, else None."""
    pairs = [v for kv in fields.items() for v in kv]
    holder = await bounded(WAIT_HOLD(
        redis, [keys.wait_key(dedup_id), keys.wait_job(job_id), keys.wait_held],
        [job_id, ttl_ms, ttl_ms, keys.wait_job(""), now_ms, *pairs],
    ), REDIS_OP_TIMEOUT_S)
    return text(holder) if holder else None


async def note_check(redis: Redis, keys: Keys, job_id: str, *, fault: bool) -> tuple[int, int]:
    """Count one check (a fault adds to the consecutive faults, any other answer resets them); returns
    (checks, faults). The counters keep the hash for 25 h."""
    key = keys.wait_job(job_id)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hincrby(key, "checks", 1)
        if fault:
            pipe.hincrby(key, "faults", 1)
        else:
            pipe.hset(key, "faults", 0)
        pipe.pexpire(key, WAIT_COUNTER_TTL_MS)
        checks, faults, _ = await bounded(pipe.execute(), REDIS_OP_TIMEOUT_S)
    return int(checks), int(faults)


async def note_throttle(
    redis: Redis, keys: Keys, job_id: str, now_ms: int, fields: Mapping[str, str]
) -> tuple[int, int]:
    """A check that found no free slot: stamp the hold (``since`` once, and ``fields``) and count it;
    returns (since, consecutive throttles)."""
    key = keys.wait_job(job_id)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hsetnx(key, "since", now_ms)
        pipe.hset(key, mapping=wire(fields))
        pipe.hincrby(key, "throttles", 1)
        pipe.hget(key, "since")
        pipe.pexpire(key, WAIT_COUNTER_TTL_MS)
        pipe.sadd(keys.wait_held, job_id)
        _, _, throttles, since, _, _ = await bounded(pipe.execute(), REDIS_OP_TIMEOUT_S)
    return int(since), int(throttles)


async def mark_deferred(redis: Redis, keys: Keys, job_id: str, *, next_ms: int, ttl_ms: int) -> None:
    """The job goes back to wait until ``next_ms``: a later clear leaves the done marker."""
    key = keys.wait_job(job_id)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(key, mapping={"next": str(next_ms), "held": "1", "throttles": "0"})
        pipe.pexpire(key, ttl_ms)
        await bounded(pipe.execute(), REDIS_OP_TIMEOUT_S)


async def release_hold(redis: Redis, keys: Keys, job_id: str, dedup_id: str, *, cleared: bool) -> None:
    """End the hold; ``cleared`` leaves ``wait:done`` naming this job for 15 minutes."""
    await bounded(WAIT_RELEASE(
        redis, [keys.wait_key(dedup_id), keys.wait_job(job_id), keys.wait_held, keys.wait_done(dedup_id)],
        [job_id, WAIT_DONE_TTL_MS if cleared else 0],
    ), REDIS_OP_TIMEOUT_S)


async def done_by(redis: Redis, keys: Keys, dedup_id: str) -> str | None:
    """The job whose wait on this target cleared in the last 15 minutes, or None."""
    value = await bounded(redis.get(keys.wait_done(dedup_id)), REDIS_OP_TIMEOUT_S)
    return text(value) if value else None


async def held_jobs(redis: Redis, keys: Keys) -> list[HoldState]:
    """Every hold, oldest first; index members whose hash is gone are pruned. Redis errors propagate."""
    members = sorted(text(m) for m in await redis.smembers(keys.wait_held))
    if not members:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for job_id in members:
            pipe.hgetall(keys.wait_job(job_id))
        raws: Sequence[Any] = await pipe.execute()
    holds, gone = [], []
    for job_id, raw in zip(members, raws, strict=True):
        hold = parse_hold(job_id, decode_fields(raw))
        if hold is None:
            gone.append(job_id)
        else:
            holds.append(hold)
    if gone:
        await redis.srem(keys.wait_held, *gone)
    return sorted(holds, key=lambda h: (h.since, h.job))


def conditions_json(conditions: Sequence[Mapping[str, str]]) -> str:
    return json.dumps([dict(c) for c in conditions], separators=(",", ":"))
