"""The operator's view of stored deliveries: ``pi-dispatch events``, ``explain`` and ``replay``.

``events`` lists recent deliveries with what the router decided; ``explain`` re-runs the match on the
stored raw event against the current triggers file and changes nothing; ``replay`` appends the stored
event again so the router re-processes it (after fixing the triggers file, say) — the job-id and
semantic dedup still hold, so a delivery that already made its job makes no second one.
"""

from __future__ import annotations

import msgspec

from pidispatch import forges
from pidispatch.common.keys import Keys
from pidispatch.common.models import Event, decode_fields, text
from pidispatch.common.redis import Redis
from pidispatch.common.streams import wire, xrange, xrevrange

FORGES = forges.names()
# Set on a replayed entry, so the log and the decision say it was an operator's replay.
REPLAY_FIELD = "replayed_at"


class Delivery(msgspec.Struct, kw_only=True):
    """One row of ``pi-dispatch events``: ids, names and tokens only, never payload text."""

    entry: str
    forge: str
    event: str
    delivery: str
    received_at: int
    outcome: str | None = None
    reason: str | None = None
    jobs: list[str] = msgspec.field(default_factory=list)
    trigger: int | None = None
    decided_at: int | None = None


def _decision_row(entry: str, fields: dict[str, str], decision: dict[str, str]) -> Delivery:
    trigger = decision.get("trigger") or ""
    decided = decision.get("decidedAt") or ""
    return Delivery(
        entry=entry,
        forge=fields.get("forge", "?"),
        event=fields.get("event", "?"),
        delivery=fields.get("delivery", "?"),
        received_at=int(fields.get("received_at") or 0),
        outcome=decision.get("outcome") or None,
        reason=decision.get("reason") or None,
        jobs=[j for j in (decision.get("jobs") or "").split(",") if j],
        trigger=int(trigger) if trigger.isdigit() else None,
        decided_at=int(decided) if decided.isdigit() else None,
    )


async def recent(r: Redis, keys: Keys, limit: int) -> list[Delivery]:
    """The newest ``limit`` stored deliveries, newest first, each with its decision (if made yet)."""
    rows = await xrevrange(r, keys.events, count=limit)
    async with r.pipeline(transaction=False) as pipe:
        for _, fields in rows:
            pipe.hgetall(keys.event(fields.get("forge", "?"), fields.get("delivery", "?")))
        decisions = await pipe.execute()
    return [_decision_row(e, f, decode_fields(d)) for (e, f), d in zip(rows, decisions, strict=True)]


async def find(r: Redis, keys: Keys, delivery: str, forge: str | None = None) -> tuple[str, Event] | None:
    """The stored entry of a delivery: through its decision's ``entry`` when decided, else by a scan of
    the (trimmed, bounded) events stream."""
    for f in (forge,) if forge else FORGES:
        entry = await r.hget(keys.event(f, delivery), "entry")
        if entry:
            found = await xrange(r, keys.events, min=text(entry), max=text(entry), count=1)
            if found:
                return found[0][0], Event.from_fields(found[0][1])
    last = "+"
    while True:
        page = await xrevrange(r, keys.events, max=last, count=500)
        for entry_id, fields in page:
            if fields.get("delivery") == delivery and (forge is None or fields.get("forge") == forge):
                return entry_id, Event.from_fields(fields)
        if len(page) < 500:
            return None
        last = "(" + page[-1][0]


async def replay(r: Redis, keys: Keys, event: Event, now_ms: int) -> str:
    """Append the stored event again for the router; returns the new entry id."""
    fields = event.to_fields()
    fields[REPLAY_FIELD] = str(now_ms)
    return text(await r.xadd(keys.events, wire(fields)))
