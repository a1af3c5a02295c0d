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
from pidispatch.common.models import Event, text
from pidispatch.common.redis import Redis
from pidispatch.common.streams import wire, xrange, xrevrange
from pidispatch.router import decisions
from pidispatch.router.decisions import Decided

FORGES = forges.names()
# Set on a replayed entry, so the log and the decision say it was an operator's replay.
REPLAY_FIELD = "replayed_at"
# The reason ``pi-dispatch cancel`` writes on a job (pidispatch.worker.control.CANCEL_REASON).
CANCEL_REASON = "operator-cancel"


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
    # This entry was appended by ``pi-dispatch replay``.
    replay: bool = False
    # Every job the decision made was cancelled by an operator since.
    cancelled: bool = False


def _stream_order(entry: str) -> tuple[int, ...]:
    return tuple(int(part) for part in entry.split("-") if part.isdigit())


def _decision_row(entry: str, fields: dict[str, str], decided: Decided | None) -> Delivery:
    """Pure: one listing row. A delivery has one decision record, so once it is replayed the record is
    the newest entry's: an older entry shows ``replayed`` (and which entry was decided), a replay not yet
    taken by the router shows no decision, rather than either repeating the other's."""
    row = Delivery(
        entry=entry,
        forge=fields.get("forge", "?"),
        event=fields.get("event", "?"),
        delivery=fields.get("delivery", "?"),
        received_at=int(fields.get("received_at") or 0),
        replay=REPLAY_FIELD in fields,
    )
    if decided is None:
        return row
    if decided.entry and decided.entry != entry:
        if _stream_order(decided.entry) > _stream_order(entry):
            row.outcome, row.reason = "replayed", f"decided again as entry {decided.entry}"
        return row
    row.outcome, row.reason = decided.outcome or None, decided.reason or None
    row.jobs, row.trigger, row.decided_at = decided.jobs, decided.trigger, decided.decided_at
    return row


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


async def recent(r: Redis, keys: Keys, limit: int) -> list[Delivery]:
    """The newest ``limit`` stored deliveries, newest first, each with its decision (if made yet)."""
    rows = await xrevrange(r, keys.events, count=limit)
    found = await decisions.read_rows(
        r, keys, [(f.get("forge", "?"), f.get("delivery", "?"), e) for e, f in rows]
    )
    listed = [_decision_row(e, f, d) for (e, f), d in zip(rows, found, strict=True)]
    await _mark_cancelled(r, keys, listed)
    return listed


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
    fields[REPLAY_FIELD] = str(now_ms)
    return text(await r.xadd(keys.events, wire(fields)))
