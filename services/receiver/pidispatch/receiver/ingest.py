"""Append a verified delivery to ``pd:events`` at most once.

Guarantee: the ``INGEST`` script sets the delivery's seen key and XADDs the entry in one atomic step,
so a delivery is appended once or not at all; a Redis fault before the reply leaves nothing
half-written and the forge's redelivery is either appended then or answered as a duplicate.
"""

from __future__ import annotations

import asyncio

from pidispatch.common.keys import REDIS_OP_TIMEOUT_S, SEEN_TTL_S, Keys
from pidispatch.common.redis import Redis
from pidispatch.common.scripts import INGEST


class Ingest:
    """Holds the script registered once; each append is one EVALSHA (reloaded if Redis lost it)."""

    __slots__ = ("_events", "_keys", "_script", "_timeout_s")

    def __init__(self, redis: Redis, keys: Keys, timeout_s: float = REDIS_OP_TIMEOUT_S) -> None:
        self._script = redis.register_script(INGEST)
        self._keys = keys
        self._events = keys.events
        self._timeout_s = timeout_s

    async def append(self, forge: str, event: str, delivery: str, received_at: int, body: bytes) -> bool:
        """True when appended, False when this delivery was seen before.

        Raises ``RedisError`` or ``TimeoutError`` (also when Redis takes longer than the bound, e.g. a
        frozen server): the caller answers 503 and the forge may redeliver.
        """
        # The fields of pidispatch.common.models.Event, built flat so a request allocates no Event;
        # the body goes as the received bytes, verbatim.
        async with asyncio.timeout(self._timeout_s):
            entry_id = await self._script(
                keys=(self._keys.seen(forge, delivery), self._events),
                args=(
                    SEEN_TTL_S,
                    "forge", forge,
                    "event", event,
                    "delivery", delivery,
                    "received_at", received_at,
                    "body", body,
                ),
            )
        return entry_id is not None
