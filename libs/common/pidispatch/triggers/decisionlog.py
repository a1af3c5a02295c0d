"""The readable decision log ``pd:decisions``: a line per decision, so ``redis-cli ZREVRANGE pd:decisions 0
19`` lists the last 20 without a join, and ``pi-dispatch events`` reads it.

A sorted set scored by the decision time (epoch ms), capped at ``PD_EVENTS_MAXLEN`` lines like
``pd:events`` (the oldest go in the same script that adds, ``decisions.write``). A line reads (on one line)::

    2026-12-01T10:00:00.123Z queued github issues/labeled acme/app#7 delivery=<id> jobs=<id>
        stream=pd:jobs trigger=0 entry=<pd:events entry id>

time (ISO-8601, UTC), outcome, forge, event type and action (a ``/`` between: no event word holds
one), target (``-`` when the body names none), then ``key=value`` pairs: ``delivery`` and ``entry``
always; ``reason``, ``jobs``, ``stream`` (one per job, in the same order), ``trigger`` (the rule's index),
``replay=yes`` and ``healed=yes`` (the healer asked the forge to redeliver it: ``router.heal``) where they
apply. Every value is a token, an id or an item reference (``RouterForge.target``): never payload text.
A delivery decided twice (``pending``, then ``queued``) has two lines; lines of one millisecond (one page)
order by their text. The week-long per-delivery record is ``router.decisions``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import msgspec

from pidispatch.common.keys import Keys
from pidispatch.common.models import text
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import iso_ms
from pidispatch.triggers.decision import Subject


class Logged(msgspec.Struct, frozen=True, kw_only=True):
    """One line of the log, parsed; ``decided_at`` is its score."""

    decided_at: int
    outcome: str
    forge: str
    event: str
    action: str | None = None
    target: str | None = None
    delivery: str = "?"
    reason: str = ""
    jobs: tuple[str, ...] = ()
    streams: tuple[str, ...] = ()
    trigger: int | None = None
    replay: bool = False
    healed: bool = False
    entry: str = ""


def _token(value: str) -> str:
    # A value is one space-free token; what could break the line is escaped, as in a URL. Most values
    # need nothing (the test costs less than the two replaces did, on the router's hot path).
    if not value:
        return "-"
    if "%" in value or " " in value:
        return value.replace("%", "%25").replace(" ", "%20")
    return value


def _untoken(value: str) -> str:
    return value.replace("%20", " ").replace("%25", "%")


def line(decision: Logged) -> str:
    """Pure: the member text of one decision."""
    d = decision
    about = d.event + (f"/{d.action}" if d.action else "")
    words = [iso_ms(d.decided_at), d.outcome, _token(d.forge), _token(about), _token(d.target or "")]
    words.append(f"delivery={_token(d.delivery)}")
    if d.reason:
        words.append(f"reason={_token(d.reason)}")
    if d.jobs:
        words.append(f"jobs={','.join(d.jobs)}")
    if d.streams:
        words.append(f"stream={','.join(d.streams)}")
    if d.trigger is not None:
        words.append(f"trigger={d.trigger}")
    if d.replay:
        words.append("replay=yes")
    if d.healed:
        words.append("healed=yes")
    words.append(f"entry={d.entry}")
    return " ".join(words)


def parse(member: str, score: float) -> Logged | None:
    """Pure: a line back into its fields, or None for a member this module did not write."""
    words = member.split(" ")
    if len(words) < 6:
        return None
    _, outcome, forge, about, target = words[:5]
    event, _, action = _untoken(about).partition("/")
    pairs = dict(word.partition("=")[::2] for word in words[5:])
    trigger = pairs.get("trigger", "")
    return Logged(
        decided_at=int(score), outcome=outcome, forge=_untoken(forge), event=event, action=action or None,
        target=None if target == "-" else _untoken(target), delivery=_untoken(pairs.get("delivery", "?")),
        reason=_untoken(pairs.get("reason", "")), jobs=_split(pairs.get("jobs", "")),
        streams=_split(pairs.get("stream", "")), trigger=int(trigger) if trigger.isdigit() else None,
        replay=pairs.get("replay") == "yes", healed=pairs.get("healed") == "yes",
        entry=pairs.get("entry", ""),
    )


def _split(value: str) -> tuple[str, ...]:
    return tuple(value.split(",")) if value else ()


def logged(
    subject: Subject, forge: str, delivery: str, entry: str, outcome: str, decided_at: int, *,
    reason: str = "", jobs: Sequence[str] = (), streams: Sequence[str] = (), trigger: int | None = None,
    replay: bool = False, healed: bool = False,
) -> Logged:
    """Pure: the log's view of one decision."""
    shown = () if all(s == "-" for s in streams) else tuple(streams)  # nothing queued: no stream to name
    return Logged(
        decided_at=decided_at, outcome=outcome, forge=forge, event=subject.event, action=subject.action,
        target=subject.target, delivery=delivery, reason=reason, jobs=tuple(jobs), streams=shown,
        trigger=trigger, replay=replay, healed=healed, entry=entry,
    )


async def newest(redis: Redis, keys: Keys, limit: int) -> list[Logged]:
    """The newest ``limit`` decisions, newest first."""
    reply = await redis.zrevrange(keys.decisions, 0, limit - 1, withscores=True)
    found = cast("list[tuple[bytes, float]]", reply)
    rows = (parse(text(member), score) for member, score in found)
    return [row for row in rows if row is not None]
