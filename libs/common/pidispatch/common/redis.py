"""The Redis client factory: one place decides timeouts, so no await on Redis can hang forever."""

from __future__ import annotations

import redis.asyncio as aioredis

from pidispatch.common.keys import READ_BLOCK_MS, REDIS_CONNECT_TIMEOUT_S, REDIS_OP_TIMEOUT_S

Redis = aioredis.Redis


def create_redis(url: str) -> Redis:
    """A client whose every call fails within seconds when Redis is gone.

    The socket timeout must outlast the longest blocking read (``READ_BLOCK_MS``), or a quiet stream
    would look like a dead server.
    """
    return aioredis.Redis.from_url(
        url,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
        socket_timeout=READ_BLOCK_MS / 1000 + REDIS_OP_TIMEOUT_S,
        health_check_interval=30,
        decode_responses=False,
    )
