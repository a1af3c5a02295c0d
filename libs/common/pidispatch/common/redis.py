"""The Redis client factory: one place decides timeouts, so no await on Redis can hang forever."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.exceptions import AuthenticationError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from pidispatch.common.errors import InfraError
from pidispatch.common.keys import READ_BLOCK_MS, REDIS_CONNECT_TIMEOUT_S, REDIS_OP_TIMEOUT_S
from pidispatch.common.secret import Secret

Redis = aioredis.Redis
T = TypeVar("T")


class RedisOpTimeout(RedisTimeoutError, TimeoutError):
    """A Redis call that outlived its bound: a ``RedisError`` to Redis-fault handlers and a
    ``TimeoutError`` to timeout handlers, so each caller's existing ``except`` still applies."""


# Logs and messages name an exception by its class: this one keeps the name both its parents have.
RedisOpTimeout.__name__ = "TimeoutError"


async def bounded(call: Awaitable[T], timeout_s: float = REDIS_OP_TIMEOUT_S) -> T:
    """``call`` within ``timeout_s``; pass a coroutine holding several calls to bound them together.

    The client's socket timeout must outlast a blocking read, so it cannot bound a frozen server's reply.
    """
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            return await call
    except TimeoutError:
        if not deadline.expired():
            raise  # the call's own timeout, not ours
        raise RedisOpTimeout(f"Redis did not answer within {timeout_s} s") from None


def _pool_options() -> dict[str, Any]:
    """redis-py >= 7 defaults maintenance notifications to "auto", which is truthy and makes the pool
    skip its check for pooled connections the server closed: after a Redis restart every stale one
    failed one command. Self-hosted Redis sends no such notifications, so they are off."""
    try:
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:  # older redis-py: no notifications, and the pool always checks
        return {}
    return {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}


_POOL_OPTIONS = _pool_options()


def create_redis(url: str, password: Secret[str] | None = None) -> Redis:
    """A client whose every call fails within seconds when Redis is gone, and that uses a fresh
    connection, not a dead pooled one, for the first call after Redis is back.

    ``password`` (``VALKEY_PASSWORD``/``REDIS_PASSWORD``) is for a URL without one; settings refuse both.
    The socket timeout must outlast the longest blocking read (``READ_BLOCK_MS``), or a quiet stream
    would look like a dead server.
    """
    return aioredis.Redis.from_url(
        url,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
        socket_timeout=READ_BLOCK_MS / 1000 + REDIS_OP_TIMEOUT_S,
        health_check_interval=30,
        decode_responses=False,
        password=None if password is None else password.reveal(),  # a URL's own one would override it
        **_POOL_OPTIONS,
    )


def redis_location(url: str) -> str:
    """The URL without user information or query, for messages: either may hold the password."""
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
    except ValueError:
        return "an unreadable REDIS_URL"
    return f"{parts.scheme}://{host}{parts.path}"


def auth_refused(url: str) -> InfraError:
    """Exit 1 for a Redis that refuses the credentials: names the variables to fix, never a value."""
    return InfraError(
        f"Redis at REDIS_URL refused this connection's credentials ({redis_location(url)}): set its "
        "password in VALKEY_PASSWORD or REDIS_PASSWORD, or in REDIS_URL"
    )


async def check_redis_auth(redis: Redis, url: str) -> None:
    """At start: exit 1 (``InfraError``) when Redis refuses the credentials, which waiting does not mend;
    a Redis that is down or slow is left to the caller's own outage handling."""
    try:
        await bounded(redis.ping())
    except AuthenticationError:
        raise auth_refused(url) from None
    except (RedisError, OSError, TimeoutError):
        return
