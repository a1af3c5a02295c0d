"""``Replicas.written`` against a real redis-server that has no replica: the shortfall is reported with
the write's own replies, and a command's error comes first."""

from __future__ import annotations

import pytest
from redis.exceptions import ResponseError

from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from pidispatch.common.replication import Replicas, ReplicaShortfall


async def test_no_replica_asked_for_is_a_plain_pipeline(redis: Redis, keys: Keys) -> None:
    key = keys.job("r1")
    assert await Replicas(0).written(redis, ("HSET", key, "state", "launching"), ("HGET", key, "state")) == [
        1, b"launching"
    ]


async def test_a_write_no_replica_holds_is_a_shortfall_carrying_its_replies(redis: Redis, keys: Keys) -> None:
    key = keys.job("r2")
    with pytest.raises(ReplicaShortfall) as caught:
        await Replicas(1, 20).written(redis, ("HSET", key, "state", "launching"))
    assert (caught.value.held, caught.value.wanted, caught.value.replies) == (0, 1, [1])
    assert await redis.hget(key, "state") == b"launching"  # on the primary all the same


async def test_a_command_error_is_raised_before_the_shortfall(redis: Redis, keys: Keys) -> None:
    with pytest.raises(ResponseError):
        await Replicas(1, 20).written(redis, ("HSET", keys.job("r3")))
