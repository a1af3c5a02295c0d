"""Append a verified delivery to ``pd:events`` at most once.

Guarantee: the ``INGEST`` script remembers the delivery (``common.dedup``) and XADDs the entry in one
atomic step, so a delivery is appended once or not at all; a Redis fault before the reply leaves nothing
half-written and the forge's redelivery is either appended then or answered as a duplicate.
"""

from __future__ import annotations

from pidispatch.common.dedup import remembered
from pidispatch.common.keys import REDIS_OP_TIMEOUT_S, ROUTER_GROUP, Keys
from pidispatch.common.luascript import run_call
from pidispatch.common.models import RECEIVED_AT, RECEIVED_AT_ISO
from pidispatch.common.redis import Redis
from pidispatch.common.replication import Replicas, ReplicaShortfall
from pidispatch.common.runtime import iso_ms
from pidispatch.common.scripts import INGEST
from pidispatch.common.streams import ensure_group
from pidispatch.receiver.deadline import Deadlines

# Arguments that never change, as bytes: redis-py passes bytes through as they are, and this is the hot
# path (packing the command was a visible share of a request's CPU).
_FORGE, _EVENT, _DELIVERY, _BODY = b"forge", b"event", b"delivery", b"body"
_RECEIVED_AT, _RECEIVED_AT_ISO = RECEIVED_AT.encode(), RECEIVED_AT_ISO.encode()


class Ingest:
    """Each append is one EVALSHA (``luascript.run_call``; with replicas to wait for, ``Script.held``); a
    Redis that lost its script cache gets the source once and the append again."""

    __slots__ = ("_deadlines", "_deliveries", "_events", "_grouped", "_keys", "_redis", "_replicas")

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        timeout_s: float = REDIS_OP_TIMEOUT_S,
        replicas: Replicas | None = None,
    ) -> None:
        self._redis = redis
        # PD_REPLICA_ACKS: an append counts once that many replicas hold it (else ReplicaShortfall).
        self._replicas = replicas if replicas is not None and replicas.acks else None
        self._keys = keys
        self._events = keys.events
        self._deliveries = keys.deliveries
        self._deadlines = Deadlines(timeout_s)
        # The writer creates the router's group once, so `XPENDING pd:events router` answers (and trimming
        # protects the entries) before any router ran.
        self._grouped = False

    @property
    def waits_for_replicas(self) -> bool:
        return self._replicas is not None

    async def append(
        self, forge: str, event: str, delivery: str, received_at: int, body: bytes, *, held: bool = True
    ) -> bool:
        """True when appended, False when this delivery was seen before.

        Raises ``RedisError`` or ``TimeoutError`` (also when Redis takes longer than the bound, e.g. a
        frozen server): the caller answers 503 and the forge may redeliver. ``ReplicaShortfall`` (a
        ``RedisError``) when the primary took it and too few replicas held it in time; ``held=False``
        waits for none (the spool's drain confirms a whole batch at once with ``confirm``).
        """
        # The fields of pidispatch.common.models.Event, built flat so a request allocates no Event;
        # the body goes as the received bytes, verbatim.
        seen = remembered(self._deliveries, f"{forge}:{delivery}", received_at)
        keys = [*seen.keys, self._events]
        args = (
            *seen.args,
            _FORGE, forge,
            _EVENT, event,
            _DELIVERY, delivery,
            _RECEIVED_AT, received_at,
            _RECEIVED_AT_ISO, iso_ms(received_at),
            _BODY, body,
        )  # fmt: skip
        with self._deadlines():
            if not self._grouped:
                await ensure_group(self._redis, self._events, ROUTER_GROUP)
                self._grouped = True
            if self._replicas is None or not held:
                entry_id = await run_call(self._redis, INGEST, keys, args)
            else:
                entry_id = await INGEST.held(self._redis, self._replicas, keys, args)
        return entry_id is not None

    async def confirm(self) -> bool:
        """True once the replicas hold everything appended before this call: a probe written after it and
        ``WAIT``ed on (the primary replicates in order)."""
        assert self._replicas is not None
        with self._deadlines():
            try:
                await self._replicas.written(self._redis, ("INCR", self._keys.replica_probe))
            except ReplicaShortfall:
                return False
        return True

    async def count_ignored(self, forge: str, event: str) -> None:
        """One more delivery of ``event`` answered 204 (stored nowhere else), so "did the push arrive?" has an
        answer: ``HGETALL pd:ignored``. A field per forge and event type: bounded by what forges send."""
        with self._deadlines():
            await self._redis.hincrby(self._keys.ignored, f"{forge}:{event}", 1)
