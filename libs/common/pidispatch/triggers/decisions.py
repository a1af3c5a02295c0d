"""Decision records: what the router made of each delivery, kept for a week in a few dozen bytes.

A decision is one field of a day/shard bucket HASH ``pd:decided:<day>:<shard>``: the day is the UTC day
of the delivery's ``pd:events`` entry id, and BLAKE2b-64 of ``<forge>:<delivery>`` gives the shard (14 of
its first 16 bits, ``common.dedup.bucket_digest``) and the field (the other 48). The value is a msgpack
array ``[outcome, reason, jobs, trigger, decided_at_ms, entry]``, ``jobs`` a count when the ids are the
delivery's own (its job id, or its replicas'), else the ids. Values up to 64 B keep a bucket a listpack:
about 50-85 B a decision (1 million to 100,000 a day), where a hash per delivery cost ~300 B. A value
naming another delivery's job (``deduplicated``), or a long lookup-failure reason, is longer and turns
its one bucket into a plain hash table.

Two deliveries share a field only if 62 bits of their digests collide on one day, about n**2 / 2**63
a day for n decisions (1e-7 at a million); the later decision would then hide the earlier.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from pidispatch.common.dedup import DAY_MS, bucket_digest
from pidispatch.common.keys import DECISION_KEEP_DAYS, Keys
from pidispatch.common.luascript import lua_bytes, run_call
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms as wall_ms
from pidispatch.common.scripts import RECORD_PAGE
from pidispatch.triggers import decisionlog
from pidispatch.triggers.decision import Subject
from pidispatch.triggers.jobs import JobIdError, job_id

# What became of one delivery; ``pending`` is written but not acked, so the entry is processed again.
RouteOutcomeName = Literal["queued", "dropped", "deduplicated", "pending"]
# A read by delivery alone looks at every day still kept: today and the DECISION_KEEP_DAYS before it.
PROBED_DAYS = DECISION_KEEP_DAYS + 1


class RouteOutcome(msgspec.Struct, frozen=True):
    """What the router made of one delivery; ``trigger`` is the firing rule's index, ``streams`` where each
    of ``jobs`` went (``-`` for a job another delivery's carries)."""

    outcome: RouteOutcomeName
    reason: str = ""
    jobs: tuple[str, ...] = ()
    trigger: int | None = None
    streams: tuple[str, ...] = ()


# Why a firing delivery made no job of its own: its job id exists from another entry of the same delivery
# (a replay), or an equivalent job is in the 10-minute semantic window.
DEDUP_JOB_ID, DEDUP_WINDOW = "job-id", "semantic-window"


def enqueued(
    entry_id: str, trigger: int, ids: Sequence[str], streams: Sequence[str], replies: Sequence[Sequence[str]]
) -> RouteOutcome:
    """Pure: a firing entry's outcome from its jobs' ENQUEUE replies (decoded). ``duplicate`` from this
    same entry is its own job, already queued by an earlier try of this page: still ``queued``."""
    carried, went, why = [], [], set()
    for own, stream, (status, value, *origin) in zip(ids, streams, replies, strict=True):
        if status == "deduplicated":
            carried.append(value)
            went.append("-")
            why.add(DEDUP_WINDOW)
        elif status == "duplicate" and origin and origin[0] and origin[0] != entry_id:
            carried.append(own)
            went.append("-")
            why.add(DEDUP_JOB_ID)
        else:
            carried.append(own)
            went.append(stream)
    outcome: RouteOutcomeName = "deduplicated" if carried and all(w == "-" for w in went) else "queued"
    reason = ",".join(sorted(why)) if outcome == "deduplicated" else ""
    return RouteOutcome(outcome, reason, tuple(carried), trigger, tuple(went))


class Decided(msgspec.Struct, frozen=True):
    """A stored decision as its readers see it. ``outcome`` may also be ``dead``, whose ``decided_at`` is
    that of the entry's earlier pending decision, if it had one."""

    outcome: str
    reason: str
    jobs: list[str]
    trigger: int | None
    decided_at: int | None
    entry: str


class _Stored(msgspec.Struct, array_like=True, frozen=True):
    outcome: str
    reason: str
    jobs: int | list[str]
    trigger: int | None
    decided_at: int | None
    entry: str


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(_Stored)


def entry_day(entry_id: str) -> int:
    """The UTC day (days since the epoch) of a stream entry id, from its milliseconds part."""
    return int(entry_id.split("-", 1)[0]) // DAY_MS


def expire_at_s(day: int) -> int:
    """A decision lives DECISION_KEEP_DAYS full days after its day: its bucket goes at the end of
    day + DECISION_KEEP_DAYS, so the last read that probes the day still finds it."""
    return (day + DECISION_KEEP_DAYS + 1) * DAY_MS // 1000


def own_ids(forge: str, delivery: str, n: int) -> list[str]:
    """The ``n`` job ids a delivery's own job makes: its id alone, or ``<id>-r1`` .. ``-r<n>`` as
    ``jobs.fan_out`` names replicas."""
    if n == 0:
        return []
    first = job_id(forge, delivery)
    return [first] if n == 1 else [f"{first}-r{i}" for i in range(1, n + 1)]


def encode(forge: str, delivery: str, decided: Decided) -> bytes:
    jobs: int | list[str] = list(decided.jobs)
    try:
        if decided.jobs == own_ids(forge, delivery, len(decided.jobs)):
            jobs = len(decided.jobs)
    except JobIdError:  # no job id for this forge name (an unreadable entry's): keep the ids as they are
        pass
    d = decided
    return _ENCODER.encode(_Stored(d.outcome, d.reason, jobs, d.trigger, d.decided_at, d.entry))


def decode(forge: str, delivery: str, value: bytes) -> Decided:
    s = _DECODER.decode(value)
    jobs = own_ids(forge, delivery, s.jobs) if isinstance(s.jobs, int) else s.jobs
    return Decided(s.outcome, s.reason, jobs, s.trigger, s.decided_at, s.entry)


class Page:
    """Decisions written together (``write``): each its bucket and (field, value, expiry), the readable
    lines, and the entries to ack with them."""

    __slots__ = ("acked", "buckets", "lines", "rows")

    def __init__(self) -> None:
        self.buckets: list[str] = []
        self.rows: list[msgspec.Raw | str] = []
        self.lines: list[decisionlog.Logged] = []
        self.acked: list[str] = []

    def add(self, keys: Keys, forge: str, delivery: str, decided: Decided) -> None:
        day = entry_day(decided.entry)
        shard, field = bucket_digest(f"{forge}:{delivery}")
        self.buckets.append(keys.decided(day, shard))
        # Numbers as text: how a Lua number reaches a command differs between servers (RECORD_PAGE).
        self.rows += (lua_bytes(field), lua_bytes(encode(forge, delivery, decided)), str(expire_at_s(day)))


async def write(redis: Redis, keys: Keys, page: Page, cap: int, group: str = "") -> None:
    """The page's decisions, its lines (the log cut to ``cap``) and its acks on ``keys.events`` for
    ``group``, in one atomic script. Redis errors propagate (nothing is written then)."""
    lines = [part for d in page.lines for part in (str(d.decided_at), decisionlog.line(d))]
    blob = _ENCODER.encode((page.rows, lines, page.acked))
    await run_call(redis, RECORD_PAGE, [keys.decisions, keys.events, *page.buckets], [group, cap, blob])


class Logging(msgspec.Struct, frozen=True):
    """What the readable log (``router.decisionlog``) adds to a decision: what the delivery is about,
    whether its entry is a replay, and whether the healer asked its forge to redeliver it."""

    about: Subject
    replay: bool
    healed: bool = False


def record(
    page: Page, keys: Keys, forge: str, delivery: str, entry_id: str, outcome: RouteOutcome,
    decided_at: int, log: Logging,
) -> None:
    """Add one entry's week-long decision record and its line for the readable log to ``page``."""
    decided = Decided(
        outcome.outcome, outcome.reason, list(outcome.jobs), outcome.trigger, decided_at, entry_id
    )
    page.add(keys, forge, delivery, decided)
    o = outcome
    page.lines.append(decisionlog.logged(
        log.about, forge, delivery, entry_id, o.outcome, decided_at, reason=o.reason, jobs=o.jobs,
        streams=o.streams, trigger=o.trigger, replay=log.replay, healed=log.healed,
    ))


async def record_dead(
    redis: Redis, keys: Keys, forge: str, delivery: str, entry_id: str, reason: str, log: Logging, cap: int
) -> None:
    """Mark a parked entry ``dead``, keeping the time of the entry's own earlier (pending) decision; its
    line, stamped now, goes to the readable log (cut to ``cap`` lines)."""
    before = await read(redis, keys, forge, delivery, entry_id)
    decided_at = before.decided_at if before is not None and before.entry == entry_id else None
    line = decisionlog.logged(
        log.about, forge, delivery, entry_id, "dead", wall_ms(), reason=reason, replay=log.replay
    )
    page = Page()
    page.add(keys, forge, delivery, Decided("dead", reason, [], None, decided_at, entry_id))
    page.lines.append(line)
    await write(redis, keys, page, cap)


async def parked_reason(redis: Redis, keys: Keys, forge: str, delivery: str, entry_id: str) -> str:
    """Why an entry kept failing, as its pending decision recorded it (else a generic token)."""
    stored = await read(redis, keys, forge, delivery, entry_id)
    reason = stored.reason if stored else ""
    return reason.split(":", 1)[0] if reason.startswith("lookup-failed") else "max-deliveries"


async def read(
    redis: Redis, keys: Keys, forge: str, delivery: str, entry_id: str | None, now_ms: int | None = None
) -> Decided | None:
    """One delivery's decision: from its entry's day when the entry id is known, else the newest of the
    days still kept (``now_ms`` picks today)."""
    if entry_id is not None:
        days = [entry_day(entry_id)]
    else:
        today = (wall_ms() if now_ms is None else now_ms) // DAY_MS
        days = list(range(today, today - PROBED_DAYS, -1))
    shard, field = bucket_digest(f"{forge}:{delivery}")
    async with redis.pipeline(transaction=False) as pipe:
        for day in days:
            pipe.hget(keys.decided(day, shard), field)
        values = await pipe.execute()
    found = next((v for v in values if v), None)
    return decode(forge, delivery, found) if found else None
