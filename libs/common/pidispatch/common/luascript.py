"""How a server-side script is called: EVALSHA, and on NOSCRIPT (a restarted or flushed Redis lost its
cache) EVAL once, which runs the source and caches it again. The scripts themselves are in ``scripts``."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, cast

from redis.asyncio.client import Pipeline
from redis.exceptions import NoScriptError
from redis.typing import EncodableT, KeyT

from pidispatch.common.redis import Redis
from pidispatch.common.replication import Replicas


class Script:
    """One Lua script, known by its SHA1. ``script`` and ``sha`` are the names redis-py's pipeline reads."""

    __slots__ = ("script", "sha")

    def __init__(self, source: str) -> None:
        self.script = source
        self.sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()

    async def __call__(
        self, redis: Redis, keys: Sequence[KeyT], args: Sequence[EncodableT] = ()
    ) -> Any:
        """Run it; the reply as Redis sends it (bytes, ints, lists, None for false)."""
        try:
            return await redis.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await redis.eval(self.script, len(keys), *keys, *args)

    async def held(
        self, redis: Redis, replicas: Replicas, keys: Sequence[KeyT], args: Sequence[EncodableT] = ()
    ) -> Any:
        """Run it and wait for ``replicas`` to hold what it wrote (``Replicas.written``): its reply, or
        ``ReplicaShortfall`` carrying that reply."""
        try:
            replies = await replicas.written(redis, ("EVALSHA", self.sha, len(keys), *keys, *args))
        except NoScriptError:
            replies = await replicas.written(redis, ("EVAL", self.script, len(keys), *keys, *args))
        return replies[0]

    def in_pipeline(self, pipe: Pipeline, keys: Sequence[KeyT], args: Sequence[EncodableT] = ()) -> None:
        """Queue it on ``pipe``; the pipeline's execute loads it first if Redis lost it (SCRIPT EXISTS)."""
        # redis-py's pipeline keeps script objects by duck type: it reads .sha and .script only.
        cast("set[object]", pipe.scripts).add(self)
        pipe.evalsha(self.sha, len(keys), *keys, *args)
