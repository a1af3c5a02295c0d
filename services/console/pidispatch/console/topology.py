"""What ``doctor`` reads of Redis's replication: the primary's ``INFO replication`` and
``min-replicas-to-write``, and how many sentinels watch it."""

from __future__ import annotations

from redis.asyncio import Redis as PlainRedis
from redis.exceptions import RedisError, ResponseError

from pidispatch.common.redis import Redis, bounded
from pidispatch.common.settings import Settings
from pidispatch.console.diagnosis import Topology


async def read_topology(redis: Redis, settings: Settings, timeout_s: float) -> Topology:
    """Raises ``RedisError``/``OSError``/``TimeoutError`` when the primary does not answer."""
    info = await bounded(redis.info("replication"), timeout_s)
    try:
        answer = await bounded(redis.config_get("min-replicas-to-write"), timeout_s)
        raw = next(iter(answer.values()), None)
        min_replicas = int(raw) if raw is not None else None
    except ResponseError:  # CONFIG renamed or disabled, as managed services do
        min_replicas = None
    sentinels, error = await _sentinels(settings, timeout_s) if settings.redis_sentinels else (None, None)
    return Topology(
        role=str(info.get("role", "unknown")),
        replicas=int(info.get("connected_slaves", 0)),
        min_replicas=min_replicas,
        acks=settings.replica_acks,
        sentinels=sentinels,
        sentinel_error=error,
    )


async def _sentinels(settings: Settings, timeout_s: float) -> tuple[int | None, str | None]:
    """The sentinels watching the primary, by the first sentinel that answers; or why none did."""
    password = settings.redis_sentinel_password
    failures: list[str] = []
    for host, port in settings.redis_sentinels:
        client = PlainRedis(
            host=host, port=port, socket_connect_timeout=timeout_s, socket_timeout=timeout_s,
            password=None if password is None else password.reveal(),
        )  # fmt: skip
        try:
            others = await bounded(client.sentinel_sentinels(settings.redis_sentinel_master), timeout_s)
            return (len(others) if isinstance(others, list) else 0) + 1, None
        except ResponseError as exc:  # it answers, and knows no primary by that name
            return None, f"{host}:{port} answers {str(exc)[:80]!r} for {settings.redis_sentinel_master}"
        except (RedisError, OSError, TimeoutError) as exc:
            failures.append(f"{host}:{port} {type(exc).__name__}")
        finally:
            await client.aclose()
    return None, "none answered (" + ", ".join(failures) + ")"
