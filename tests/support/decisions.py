"""Reading the router's decisions as tests assert them: by field name, as the per-delivery hash held them."""

from __future__ import annotations

from pidispatch.common.dedup import bucket_digest
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from pidispatch.triggers import decisions


async def decision_fields(redis: Redis, keys: Keys, forge: str, delivery: str) -> dict[str, str]:
    """The newest decision on ``delivery`` as ``outcome``, ``reason``, ``jobs`` (comma-joined), ``trigger``,
    ``decidedAt`` and ``entry`` strings ("" for none); ``{}`` while there is none."""
    d = await decisions.read(redis, keys, forge, delivery, None)
    if d is None:
        return {}
    return {
        "outcome": d.outcome, "reason": d.reason, "jobs": ",".join(d.jobs),
        "trigger": "" if d.trigger is None else str(d.trigger),
        "decidedAt": "" if d.decided_at is None else str(d.decided_at), "entry": d.entry,
    }


def bucket_of(keys: Keys, forge: str, delivery: str, entry_id: str) -> str:
    """The bucket that holds the decision on ``delivery`` made from entry ``entry_id``."""
    return keys.decided(decisions.entry_day(entry_id), bucket_digest(f"{forge}:{delivery}")[0])
