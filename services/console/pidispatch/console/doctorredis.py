"""What ``doctor`` asks Redis: whether it answers and persists, its replication, the stream groups, and
the state the services keep there (budget, clock, hosts, dead entries)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pidispatch.common.keys import ROUTER_GROUP, WORKER_GROUP, Keys
from pidispatch.common.redis import Redis, bounded
from pidispatch.common.settings import Settings
from pidispatch.console import diagnosis as dx
from pidispatch.console.diagnosis import Check
from pidispatch.console.topology import read_topology

REDIS_DOWN = "redis unreachable"
NO_REDIS_FIX = "fix the redis check first"
FIX_CONFIG = "fix the config check first"
T = TypeVar("T")


async def within(call: Awaitable[T], timeout_s: float) -> T:
    """``call`` or ``TimeoutError`` after ``timeout_s``: no dependency can hang the doctor."""
    async with asyncio.timeout(timeout_s):
        return await call


def late(timeout_s: float) -> str:
    return f"did not answer within {timeout_s:g} s"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _config_get(redis: Redis, name: str, timeout_s: float) -> str | None:
    answer = await bounded(redis.config_get(name), timeout_s)
    found = {_text(k): _text(v) for k, v in answer.items()}
    return found.get(name)


async def redis_check_into(checks: list[Check], redis: Redis | None, timeout_s: float) -> bool:
    """Append the redis check; True when Redis answers."""
    from redis.exceptions import AuthenticationError, RedisError, ResponseError

    if redis is None:
        checks.append(dx.skipped("redis", "REDIS_URL refused (config)", FIX_CONFIG))
        return False
    try:
        await bounded(redis.ping(), timeout_s)
    except AuthenticationError:
        refusal = "refused the credentials (VALKEY_PASSWORD/REDIS_PASSWORD/REDIS_URL)"
        checks.append(dx.redis_check(refusal, None))
        return False
    except TimeoutError:
        checks.append(dx.redis_check(late(timeout_s), None))
        return False
    except (RedisError, OSError) as exc:
        checks.append(dx.redis_check(f"unreachable ({type(exc).__name__})", None))
        return False
    try:
        facts = dx.RedisFacts(
            appendonly=await _config_get(redis, "appendonly", timeout_s),
            save=await _config_get(redis, "save", timeout_s),
            policy=await _config_get(redis, "maxmemory-policy", timeout_s),
        )
    except ResponseError:  # CONFIG renamed or disabled, as managed services do
        facts = None
    except (RedisError, OSError, TimeoutError) as exc:
        checks.append(dx.redis_check(f"answers PING, then failed ({type(exc).__name__})", None))
        return False
    checks.append(dx.redis_check(None, facts))
    return True


async def topology(redis: Redis | None, settings: Settings, timeout_s: float) -> Check:
    from redis.exceptions import RedisError

    if redis is None:
        return dx.skipped("topology", REDIS_DOWN, NO_REDIS_FIX)
    try:
        return dx.topology_check(await read_topology(redis, settings, timeout_s))
    except (RedisError, OSError, TimeoutError) as exc:
        return Check("topology", dx.FAIL, f"INFO replication failed ({type(exc).__name__})", NO_REDIS_FIX)


async def streams(redis: Redis | None, keys: Keys, timeout_s: float, refused: bool) -> Check:
    from redis.exceptions import RedisError, ResponseError

    if redis is None:
        return dx.skipped("streams", "REDIS_URL refused (config)" if refused else REDIS_DOWN, NO_REDIS_FIX)
    missing: list[tuple[str, str]] = []
    for stream, group in ((keys.events, ROUTER_GROUP), (keys.jobs, WORKER_GROUP)):
        try:
            groups = await bounded(redis.xinfo_groups(stream), timeout_s)
        except ResponseError:  # no such stream yet
            groups = []
        except (RedisError, OSError, TimeoutError) as exc:
            return dx.Check("streams", dx.FAIL, f"XINFO failed ({type(exc).__name__})", NO_REDIS_FIX)
        if group not in {_text(value) for g in groups for k, value in g.items() if _text(k) == "name"}:
            missing.append((stream, group))
    return dx.streams_check(missing)


async def redis_state(redis: Redis, keys: Keys, settings: Settings, timeout_s: float,
                       spend_refused: bool) -> list[Check]:
    """budget, clock, hosts, dead: each bounded, each failing on its own."""
    found: list[Check] = []
    readers: tuple[tuple[str, Callable[[], Awaitable[Check]]], ...] = (
        ("budget", lambda: _budget(redis, keys, settings, spend_refused)),
        ("clock", lambda: _clock(redis)),
        ("hosts", lambda: _hosts(redis, keys, timeout_s)),
        ("dead", lambda: _dead(redis, keys)),
    )
    for name, read in readers:
        try:
            found.append(await within(read(), timeout_s))
        except TimeoutError:
            found.append(dx.Check(name, dx.FAIL, f"Redis {late(timeout_s)}", NO_REDIS_FIX))
        except Exception as exc:
            found.append(dx.Check(name, dx.FAIL, f"could not read ({type(exc).__name__})", NO_REDIS_FIX))
    return found


async def _budget(redis: Redis, keys: Keys, settings: Settings, refused: bool) -> Check:
    from pidispatch.worker.limits.budget import token_key, windows

    if refused:
        return dx.skipped("budget", "a spend variable is refused (config)", FIX_CONFIG)
    now = int(time.time() * 1000)
    found = windows(settings, now, keys)
    names = [w.key for w in found]
    if settings.daily_token_cap is not None:
        names.append(token_key(keys, now))
    values = await redis.mget(names)
    used = [int(v) if v is not None else 0 for v in values]
    caps = [(w.name, w.cap) for w in found]
    if settings.daily_token_cap is not None:
        caps.append(("tokens", settings.daily_token_cap))
    rows = [dx.WindowUse(n, u, c) for (n, c), u in zip(caps, used, strict=True)]
    return dx.budget_check(rows, settings.soft_hold_pct)


async def _clock(redis: Redis) -> Check:
    before = time.time()
    seconds, micros = await redis.time()
    after = time.time()
    return dx.clock_check((before + after) / 2 - (seconds + micros / 1e6))


async def _hosts(redis: Redis, keys: Keys, timeout_s: float) -> Check:
    from pidispatch.common.registry import is_live, read_live_hosts

    rows = await read_live_hosts(redis, keys, int(time.time() * 1000), timeout_s=timeout_s)
    return dx.hosts_check([
        dx.HostLoad(h.name, h.running, h.concurrency, tuple(sorted(h.caps))) for h in rows if is_live(h)
    ])


async def _dead(redis: Redis, keys: Keys) -> Check:
    return dx.dead_check(int(await redis.xlen(keys.dead)), keys.dead)
