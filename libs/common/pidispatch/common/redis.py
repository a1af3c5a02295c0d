"""The Redis client factory: one place decides timeouts, so no await on Redis can hang forever."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.connection import parse_url
from redis.asyncio.sentinel import Sentinel
from redis.exceptions import AuthenticationError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from pidispatch.common.errors import InfraError
from pidispatch.common.keys import READ_BLOCK_MS, REDIS_CONNECT_TIMEOUT_S, REDIS_OP_TIMEOUT_S
from pidispatch.common.secret import Secret
from pidispatch.common.settings import Settings

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


def _client_options() -> dict[str, Any]:
    # The socket timeout must outlast the longest blocking read (``READ_BLOCK_MS``), or a quiet stream
    # would look like a dead server.
    return {
        "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S,
        "socket_timeout": READ_BLOCK_MS / 1000 + REDIS_OP_TIMEOUT_S,
        "health_check_interval": 30,
        "decode_responses": False,
        **_POOL_OPTIONS,
    }


def create_redis(url: str, password: Secret[str] | None = None) -> Redis:
    """A client whose every call fails within seconds when Redis is gone, and that uses a fresh
    connection, not a dead pooled one, for the first call after Redis is back.

    ``password`` (``VALKEY_PASSWORD``/``REDIS_PASSWORD``) is for a URL without one; settings refuse both.
    """
    return aioredis.Redis.from_url(
        url,
        password=None if password is None else password.reveal(),  # a URL's own one would override it
        **_client_options(),
    )


class SentinelRedis(aioredis.Redis):
    """The primary's client behind sentinels: each new connection asks them where the primary is, and a
    connection to a demoted one is dropped at its first refused write (redis-py's Sentinel pool)."""

    sentinels: Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.sentinels is not None:  # its connections to the sentinels are this client's to close
            await self.sentinels.aclose()


def redis_for(settings: Settings) -> Redis:
    """The client every service and verb uses: REDIS_URL's server, or the primary the sentinels name
    (REDIS_SENTINELS), whose database, user and password still come from REDIS_URL and the password
    variables."""
    if not settings.redis_sentinels:
        return create_redis(settings.redis_url, settings.redis_password)
    # Everything REDIS_URL says but where the server is (the sentinels say that): database, user,
    # password, and its query's connection options.
    url = {k: v for k, v in parse_url(settings.redis_url).items()
           if k not in ("host", "port", "path", "connection_class")}
    if settings.redis_password is not None:
        url["password"] = settings.redis_password.reveal()
    sentinel_password = settings.redis_sentinel_password
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(settings.redis_sentinels),
        sentinel_kwargs={
            "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S,
            "socket_timeout": REDIS_OP_TIMEOUT_S,
            "password": None if sentinel_password is None else sentinel_password.reveal(),
        },
        ssl=settings.redis_url.startswith("rediss://"),
        **{**_client_options(), **url},
    )
    primary = sentinel.master_for(settings.redis_sentinel_master, redis_class=SentinelRedis)
    client = cast("SentinelRedis", primary)
    client.sentinels = sentinel
    return client


def redis_where(settings: Settings) -> str:
    """Where Redis was looked for, for messages: never a password."""
    if settings.redis_sentinels:
        hosts = ",".join(f"{host}:{port}" for host, port in settings.redis_sentinels)
        master = settings.redis_sentinel_master
        return f"the primary REDIS_SENTINEL_MASTER={master} of REDIS_SENTINELS={hosts}"
    return f"REDIS_URL ({redis_location(settings.redis_url)})"


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
