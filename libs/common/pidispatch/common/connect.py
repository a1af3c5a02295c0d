"""How an operator's verb reaches Redis: settings from the Redis variables alone, and a connection whose
failure is one line that says what was not done."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from redis.exceptions import AuthenticationError, RedisError

from pidispatch.common.devstate import not_here
from pidispatch.common.envnames import REDIS_SETTINGS_VARS
from pidispatch.common.errors import InfraError
from pidispatch.common.redis import Redis, auth_refused, redis_for, redis_where
from pidispatch.common.settings import Settings, load_settings

_SETTINGS_VARS = (*REDIS_SETTINGS_VARS, "PD_KEY_PREFIX")


def redis_settings() -> Settings:
    """Settings from the Redis address, its password and PD_KEY_PREFIX only: a bad unrelated variable must
    not stop an operator from cancelling or looking."""
    return load_settings({k: os.environ[k] for k in _SETTINGS_VARS if k in os.environ})


def unreachable(settings: Settings, error: str, consequence: str) -> InfraError:
    """Exit 1 for a Redis that did not answer: where it was looked for, and, when that was only the
    default, that no dev runs here either."""
    hint = not_here(os.environ, Path.cwd())
    where = redis_where(settings)
    tail = f"; {hint}" if hint else ""
    return InfraError(f"Redis at {where} did not answer ({error}); {consequence}{tail}")


@contextlib.asynccontextmanager
async def connected(settings: Settings, on_failure: str) -> AsyncIterator[Redis]:
    redis = redis_for(settings)
    try:
        yield redis
    except AuthenticationError:
        raise auth_refused(settings.redis_url) from None
    except (RedisError, OSError) as exc:
        raise unreachable(settings, type(exc).__name__, on_failure) from None
    finally:
        await redis.aclose()
