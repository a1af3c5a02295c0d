"""Writes a failover may not lose: held by replicas (``WAIT``) before anything acts on them.

Redis replicates asynchronously, so a write the primary answered can be gone after Sentinel promotes a
replica. ``WAIT`` counts the replicas that hold everything written before it on the same connection, so
the write and its ``WAIT`` go down one connection as one pipeline. docs/redis.md "HA" says which writes
wait and why.
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import RedisError

from pidispatch.common.redis import Redis
from pidispatch.common.settings import Settings


class ReplicaShortfall(RedisError):
    """Fewer replicas than asked held the write within the bound: it is on the primary only.

    ``replies`` are the write's own replies, so a caller that keeps a second copy knows what happened.
    """

    def __init__(self, held: int, wanted: int, replies: list[Any]) -> None:
        super().__init__(f"{held} of {wanted} replicas held the write")
        self.held = held
        self.wanted = wanted
        self.replies = replies


class Replicas:
    """How many replicas must hold a write (``PD_REPLICA_ACKS``) and how long to wait for them."""

    __slots__ = ("acks", "timeout_ms")

    def __init__(self, acks: int = 0, timeout_ms: int = 250) -> None:
        self.acks = acks
        self.timeout_ms = timeout_ms

    @classmethod
    def of(cls, settings: Settings) -> Replicas:
        return cls(settings.replica_acks, settings.replica_ack_timeout_ms)

    async def written(self, redis: Redis, *commands: tuple[Any, ...]) -> list[Any]:
        """Run ``commands`` in order on one connection, then ``WAIT`` for the replicas; their replies.

        Raises a command's own error first (the first one), then ``ReplicaShortfall``. With no replica
        asked for, the commands run as a plain pipeline.
        """
        async with redis.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            if self.acks:
                pipe.execute_command("WAIT", self.acks, self.timeout_ms)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        written = replies[: len(commands)]
        for reply in written:
            if isinstance(reply, Exception):
                raise reply
        if self.acks:
            held = replies[-1]
            if isinstance(held, Exception):
                raise held
            if int(held) < self.acks:
                raise ReplicaShortfall(int(held), self.acks, written)
        return written
