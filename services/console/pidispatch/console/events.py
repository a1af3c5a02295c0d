"""The operator's view of stored deliveries: ``pi-dispatch events``, ``explain`` and ``replay``.

``events`` lists recent deliveries with what the router decided; ``explain`` re-runs the match on the
stored raw event against the current triggers file and changes nothing; ``replay`` appends the stored
event again so the router re-processes it (after fixing the triggers file, say) — the job-id and
semantic dedup still hold, so a delivery that already made its job makes no second one.
"""

from __future__ import annotations

import msgspec

from pidispatch import forges
from pidispatch.common.keys import ROUTER_GROUP, Keys
from pidispatch.common.models import REPLAYED_AT, Event, is_replay, received_at, text
from pidispatch.common.redis import Redis
from pidispatch.common.streams import entries_of, last_delivered, pending, wire, xrange, xrevrange
from pidispatch.triggers import decisionlog, decisions
from pidispatch.triggers.decisionlog import Logged

FORGES = forges.names()
# The reason ``pi-dispatch cancel`` writes on a job (pidispatch.console.control.CANCEL_REASON).
CANCEL_REASON = "operator-cancel"


class Delivery(msgspec.Struct, kw_only=True):
    """One row of ``pi-dispatch events``: ids, names and tokens only, never payload text."""

    entry: str
    forge: str
    event: str
    delivery: str
    received_at: int
    action: str | None = None
    target: str | None = None
    outcome: str | None = None
    reason: str | None = None
    jobs: list[str] = msgspec.field(default_factory=list)
    streams: list[str] = msgspec.field(default_factory=list)
    trigger: int | None = None
    decided_at: int | None = None
    # This entry was appended by ``pi-dispatch replay``.
    replay: bool = False
    # Every job the decision made was cancelled by an operator since.
    cancelled: bool = False


def entry_ms(entry: str) -> int:
    """The time part of a stream entry id: when the entry was appended (received, or replayed)."""
    head = entry.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def _logged_row(d: Logged) -> Delivery:
    return Delivery(
        entry=d.entry, forge=d.forge, event=d.event, delivery=d.delivery, received_at=entry_ms(d.entry),
        action=d.action, target=d.target, outcome=d.outcome, reason=d.reason or None, jobs=list(d.jobs),
        streams=list(d.streams), trigger=d.trigger, decided_at=d.decided_at, replay=d.replay,
    )


def _waiting_row(entry: str, fields: dict[str, str]) -> Delivery:
    return Delivery(
        entry=entry, forge=fields.get("forge", "?"), event=fields.get("event", "?"),
        delivery=fields.get("delivery", "?"), received_at=received_at(fields), replay=is_replay(fields),
    )


def listing(decided: list[Logged], waiting: list[tuple[str, dict[str, str]]], limit: int) -> list[Delivery]:
    """Pure: the newest ``limit`` rows, newest first: each entry's newest decision (an entry retried after
    a failed lookup has several), and entries the router has not decided yet."""
    rows: dict[str, Delivery] = {}
    for d in decided:  # newest first: the first line of an entry is its current decision
        rows.setdefault(d.entry, _logged_row(d))
    for entry, fields in waiting:
        rows.setdefault(entry, _waiting_row(entry, fields))
    newest = sorted(rows.values(), key=lambda row: (row.decided_at or row.received_at, row.entry))
    return newest[::-1][:limit]


def shown_outcome(row: Delivery) -> str:
    """Pure: the ``events`` table's outcome column."""
    outcome = "cancelled" if row.cancelled else row.outcome or "not decided"
    return f"replay: {outcome}" if row.replay else outcome


async def _mark_cancelled(r: Redis, keys: Keys, rows: list[Delivery]) -> None:
    """Set ``cancelled`` on rows whose every job an operator cancelled (the job's live state says so)."""
    asked = [(row, job) for row in rows if row.outcome == "queued" for job in row.jobs]
    if not asked:
        return
    async with r.pipeline(transaction=False) as pipe:
        for _, job in asked:
            pipe.hmget(keys.job(job), ["state", "reason"])
        found = await pipe.execute()
    verdict: dict[int, bool] = {}
    for (row, _), (state, reason) in zip(asked, found, strict=True):
        cancelled = (state is not None and text(state) == "cancelled") or (
            reason is not None and text(reason) == CANCEL_REASON
        )
        verdict[id(row)] = verdict.get(id(row), True) and cancelled
    for row in rows:
        row.cancelled = verdict.get(id(row), False)


async def _undecided(r: Redis, keys: Keys, limit: int) -> list[tuple[str, dict[str, str]]]:
    """The newest entries the router has not decided: not yet read by its group, or read and still
    pending (a router died holding them, or is on them now)."""
    last = await last_delivered(r, keys.events, ROUTER_GROUP)
    unread = await xrevrange(r, keys.events, min=f"({last}" if last else "-", count=limit)
    held = await pending(r, keys.events, ROUTER_GROUP, count=limit) if last else []
    async with r.pipeline(transaction=False) as pipe:
        for row in held:
            pipe.xrange(keys.events, min=row.entry_id, max=row.entry_id, count=1)
        found = await pipe.execute() if held else []
    return unread + [entry for hit in found for entry in entries_of(hit)]


async def recent(r: Redis, keys: Keys, limit: int) -> list[Delivery]:
    """The newest ``limit`` deliveries, newest first: the decision log, and what waits for a decision."""
    rows = listing(await decisionlog.newest(r, keys, limit * 2), await _undecided(r, keys, limit), limit)
    await _mark_cancelled(r, keys, rows)
    return rows


async def find(r: Redis, keys: Keys, delivery: str, forge: str | None = None) -> tuple[str, Event] | None:
    """The stored entry of a delivery: through its decision's ``entry`` when decided, else by a scan of
    the (trimmed, bounded) events stream."""
    for f in (forge,) if forge else FORGES:
        decided = await decisions.read(r, keys, f, delivery, None)
        if decided:
            found = await xrange(r, keys.events, min=decided.entry, max=decided.entry, count=1)
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
    fields[REPLAYED_AT] = str(now_ms)
    return text(await r.xadd(keys.events, wire(fields)))
