"""Jobs waiting for a time (retry backoff, waitFor holds, defers) in the ``pd:delayed`` zset.

Each member is an *envelope*: the job stream entry it will become again, plus the stream to return to;
its score is the due time in ms by Redis's own clock. Guarantees:

- ``schedule`` moves a pending entry into the zset and acks it in one script: a crash leaves the job
  either pending (it will be re-read) or delayed (it will be promoted), never lost and never both.
- ``promote_due`` reads ``TIME`` server-side, so no client clock decides what is due, and removes each
  member before appending it: concurrent promoters never double-promote.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from pidispatch.common.health import Backoff, Health
from pidispatch.common.keys import DEAD_MAXLEN, JOB_STATE_TTL_S, PROMOTE_BATCH, PROMOTE_INTERVAL_S, Keys
from pidispatch.common.log import get_logger
from pidispatch.common.redis import Redis

# The first fields of a job stream entry, in this order, so XRANGE reads like a log.
ENTRY_FIELD_ORDER = ("id", "kind", "repo", "attempt", "job")
# Reason on pd:dead for a member that cannot become a stream entry again (not JSON, wrong shape).
UNUSABLE_ENVELOPE = "delayed-envelope-unusable"

# Move a pending entry into the zset and ack it, atomically. Reads first, writes last: Redis does not roll
# back a script that fails midway, so nothing is written unless every write can happen.
# KEYS: source stream, delayed zset, job state hash. ARGV: group, entry id, delay ms, envelope, state ttl s.
# Returns the due time (ms, server clock), or false when the entry is not pending (someone acked it).
_SCHEDULE = """
if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1) == 0 then
  return false
end
local t = redis.call('TIME')
local due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[3])
redis.call('ZADD', KEYS[2], due, ARGV[4])
redis.call('HSET', KEYS[3], 'state', 'delayed', 'dueAt', string.format('%d', due))
redis.call('EXPIRE', KEYS[3], ARGV[5])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return due
"""

# Promote up to ARGV[1] due members. The target stream is named inside each envelope rather than in
# KEYS: fine on the single-node Redis this deployment runs (6.2 allows it), not on a cluster.
# KEYS: delayed zset, dead stream. ARGV: batch, job state key prefix, state ttl s, dead maxlen, dead reason.
# Returns how many entries were appended.
_PROMOTE = """
local first = {id = true, kind = true, repo = true, attempt = true, job = true}
local function entry_args(env)
  if type(env) ~= 'table' or type(env.id) ~= 'string' or type(env.stream) ~= 'string'
     or type(env.fields) ~= 'table' then
    return nil
  end
  local args, rest = {}, {}
  for _, name in ipairs({'id', 'kind', 'repo', 'attempt', 'job'}) do
    local v = env.fields[name]
    if v ~= nil then
      if type(v) ~= 'string' then return nil end
      args[#args + 1] = name
      args[#args + 1] = v
    end
  end
  for name, v in pairs(env.fields) do
    if type(v) ~= 'string' then return nil end
    if not first[name] then rest[#rest + 1] = name end
  end
  table.sort(rest)
  for _, name in ipairs(rest) do
    args[#args + 1] = name
    args[#args + 1] = env.fields[name]
  end
  if #args == 0 then return nil end
  return args
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local moved = 0
for _, member in ipairs(due) do
  if redis.call('ZREM', KEYS[1], member) == 1 then
    local ok, env = pcall(cjson.decode, member)
    local args = ok and entry_args(env) or nil
    local added = false
    if args then
      -- pcall: a stream key of the wrong type must not abort the batch after earlier members moved.
      added = type(redis.pcall('XADD', env.stream, '*', unpack(args))) == 'string'
    end
    if added then
      local job = ARGV[2] .. env.id
      redis.call('HSET', job, 'state', 'queued')
      redis.call('HDEL', job, 'dueAt')
      redis.call('EXPIRE', job, ARGV[3])
      moved = moved + 1
    else
      redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'source', KEYS[1], 'entry', '',
                 'reason', ARGV[5], 'deliveries', '0', 'envelope', member)
    end
  end
end
return moved
"""

# Remove one member; when it was there and a state is given, record that state in the same step.
# KEYS: delayed zset, job state hash. ARGV: member, state ('' = leave the hash alone), state ttl s.
_REMOVE = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[2], 'state', ARGV[2])
  redis.call('HDEL', KEYS[2], 'dueAt')
  redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return 1
"""


@dataclass(frozen=True, slots=True)
class Envelope:
    """One member of ``pd:delayed``. ``member`` is its exact text, the handle ZREM needs."""

    id: str
    attempt: int
    stream: str
    fields: dict[str, str]
    member: str

    @classmethod
    def build(cls, *, job_id: str, attempt: int, stream: str, fields: Mapping[str, str]) -> Envelope:
        body = {"id": job_id, "attempt": attempt, "stream": stream, "fields": dict(fields)}
        member = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return cls(job_id, attempt, stream, dict(fields), member)

    @classmethod
    def parse(cls, member: str | bytes) -> Envelope | None:
        """None for a member that is not an envelope (the promoter parks such members on ``pd:dead``)."""
        text = member.decode() if isinstance(member, bytes) else member
        try:
            raw: Any = json.loads(text)
            fields = raw["fields"]
            ok = isinstance(fields, dict) and all(isinstance(v, str) for v in fields.values())
            if ok and isinstance(raw["id"], str) and isinstance(raw["stream"], str):
                return cls(raw["id"], int(raw["attempt"]), raw["stream"], fields, text)
        except (ValueError, TypeError, KeyError):
            pass
        return None


async def schedule(
    redis: Redis,
    keys: Keys,
    *,
    source: str,
    group: str,
    entry_id: str,
    stream: str,
    fields: Mapping[str, str],
    job_id: str,
    attempt: int,
    delay_ms: int,
) -> int | None:
    """Move the pending entry ``entry_id`` of ``source``/``group`` to ``pd:delayed``, due in ``delay_ms``.

    ``fields`` is the entry it will become (already updated, e.g. attempt+1) on ``stream``. Returns the
    due time (ms, Redis's clock), or None when the entry was no longer pending (another consumer acked
    it): then nothing was scheduled, so a job a peer already finished never runs twice.
    """
    envelope = Envelope.build(job_id=job_id, attempt=attempt, stream=stream, fields=fields)
    script = redis.register_script(_SCHEDULE)
    due = await script(
        keys=[source, keys.delayed, keys.job(job_id)],
        args=[group, entry_id, max(0, int(delay_ms)), envelope.member, JOB_STATE_TTL_S],
    )
    return None if due is None else int(due)


async def promote_due(redis: Redis, keys: Keys, *, batch: int = PROMOTE_BATCH) -> int:
    """Append up to ``batch`` due envelopes to their streams (state ``queued``); returns how many."""
    script = redis.register_script(_PROMOTE)
    moved = await script(
        keys=[keys.delayed, keys.dead],
        args=[batch, keys.job(""), JOB_STATE_TTL_S, DEAD_MAXLEN, UNUSABLE_ENVELOPE],
    )
    return int(moved)


async def run_promoter(
    redis: Redis, keys: Keys, stop: asyncio.Event, *, interval_s: float = PROMOTE_INTERVAL_S
) -> None:
    """Promote due jobs until ``stop``; rides out Redis outages with backoff, logging each transition."""
    log = get_logger()
    health = Health("promoter_redis_unreachable", "promoter_redis_restored")
    backoff = Backoff()
    while not stop.is_set():
        try:
            moved = await promote_due(redis, keys)
        except RedisError as exc:
            health.failed(reason=type(exc).__name__)
            await backoff.pause(stop)
            continue
        health.ok()
        backoff.reset()
        if moved:
            log.debug("delayed_promoted", count=moved)
        if moved >= PROMOTE_BATCH:
            await asyncio.sleep(0)  # a full batch: more may be due, go again after letting others run
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


async def find_delayed(redis: Redis, keys: Keys, job_id: str) -> Envelope | None:
    """The envelope of ``job_id`` waiting in ``pd:delayed``, if any."""
    # The MATCH narrows server-side; parsing confirms (the pattern also matches the entry's own id field).
    pattern = "*" + _glob_escape('"id":' + json.dumps(job_id)) + "*"
    async for member, _score in redis.zscan_iter(keys.delayed, match=pattern, count=500):
        envelope = Envelope.parse(member)
        if envelope is not None and envelope.id == job_id:
            return envelope
    return None


async def remove_delayed(
    redis: Redis, keys: Keys, envelope_member: str, *, state: str | None = None
) -> bool:
    """ZREM one member; True when this call removed it. With ``state``, the job's state hash is set to
    it in the same step (cancel passes ``"cancelled"``)."""
    envelope = Envelope.parse(envelope_member)
    job_key = keys.job(envelope.id) if envelope else keys.job("")
    script = redis.register_script(_REMOVE)
    removed = await script(
        keys=[keys.delayed, job_key],
        args=[envelope_member, state if envelope and state else "", JOB_STATE_TTL_S],
    )
    return bool(removed)
