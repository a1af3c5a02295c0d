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
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pidispatch.common.health import Health
from pidispatch.common.keys import DEAD_MAXLEN, JOB_STATE_TTL_S, PROMOTE_BATCH, PROMOTE_INTERVAL_S, Keys
from pidispatch.common.log import get_logger
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import every
from pidispatch.common.scripts import DELAYED_PROMOTE, DELAYED_REMOVE, DELAYED_SCHEDULE

# The first fields of a job stream entry, in this order, so XRANGE reads like a log.
ENTRY_FIELD_ORDER = ("id", "kind", "repo", "attempt", "job")
# Reason on pd:dead for a member that cannot become a stream entry again (not JSON, wrong shape).
UNUSABLE_ENVELOPE = "delayed-envelope-unusable"

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
    due = await DELAYED_SCHEDULE(
        redis,
        [source, keys.delayed, keys.job(job_id)],
        [group, entry_id, max(0, int(delay_ms)), envelope.member, JOB_STATE_TTL_S],
    )
    return None if due is None else int(due)


async def promote_due(redis: Redis, keys: Keys, *, batch: int = PROMOTE_BATCH) -> int:
    """Append up to ``batch`` due envelopes to their streams (state ``queued``); returns how many."""
    moved = await DELAYED_PROMOTE(
        redis,
        [keys.delayed, keys.dead],
        [batch, keys.job(""), JOB_STATE_TTL_S, DEAD_MAXLEN, UNUSABLE_ENVELOPE],
    )
    return int(moved)


async def run_promoter(
    redis: Redis, keys: Keys, stop: asyncio.Event, *, interval_s: float = PROMOTE_INTERVAL_S
) -> None:
    """Promote due jobs until ``stop``; rides out Redis outages with backoff, logging each transition."""
    log = get_logger()

    async def step() -> bool:
        moved = await promote_due(redis, keys)
        if moved:
            log.debug("delayed_promoted", count=moved)
        return moved >= PROMOTE_BATCH  # a full batch: more may be due, go again at once

    health = Health("promoter_redis_unreachable", "promoter_redis_restored")
    await every(interval_s, step, stop, health)


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
    removed = await DELAYED_REMOVE(
        redis,
        [keys.delayed, job_key],
        [envelope_member, state if envelope and state else "", JOB_STATE_TTL_S],
    )
    return bool(removed)
