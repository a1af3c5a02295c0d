"""This deployment's id: one Redis and key prefix are one deployment, whatever its hosts are called.

Docker objects a deployment makes (job containers, the egress proxy, job networks) carry it as the
``pd.instance`` label, and every lookup filters on it, so two deployments on one daemon, or a dev stack
beside a production worker of the same host name, never touch each other's.
"""

from __future__ import annotations

import secrets

from pidispatch.common.keys import Keys
from pidispatch.common.models import text
from pidispatch.common.redis import Redis

LABEL_INSTANCE = "pd.instance"


async def instance_id(redis: Redis, keys: Keys) -> str:
    """The id, made on first use (SET NX: the first process to ask wins, every later one reads it)."""
    await redis.set(keys.instance, secrets.token_hex(6), nx=True)
    found = await redis.get(keys.instance)
    if found is None:  # deleted between the two calls: make it again, no other process saw the first
        made = secrets.token_hex(6)
        await redis.set(keys.instance, made)
        return made
    return text(found)
