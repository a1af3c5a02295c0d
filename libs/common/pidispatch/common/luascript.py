"""How a server-side script is called: EVALSHA, and on NOSCRIPT (a restarted or flushed Redis lost its
cache) EVAL once, which runs the source and caches it again; on the hot paths (the receiver's append, the
router's pages) ``run_calls``, packed in C and sent as one write. The scripts themselves are in ``scripts``.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import Any, cast

import hiredis
import msgspec
from redis.asyncio.client import Pipeline
from redis.exceptions import NoScriptError, ResponseError
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


# A script call for ``run_calls``: (script, keys, args); what hiredis can pack.
Arg = str | bytes | int | float
Call = tuple[Script, Sequence[str], Sequence[Arg]]


async def run_calls(redis: Redis, calls: Sequence[Call]) -> list[Any]:
    """Every call in one pipeline, replies in order (an exception in place of a failed one). Unlike
    ``in_pipeline`` it asks no SCRIPT EXISTS first (a round trip per pipeline on the router's hot path):
    a call answered NOSCRIPT ran nothing, so its script is loaded and just those calls go again."""
    replies = await _pipelined(redis, calls)
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if missing:
        for script in {calls[i][0] for i in missing}:
            await redis.script_load(script.script)
        for i, reply in zip(missing, await _pipelined(redis, [calls[i] for i in missing]), strict=True):
            replies[i] = reply
    return replies


async def run_call(redis: Redis, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any:
    """One call the ``run_calls`` way (for a hot path): its reply, or its error raised."""
    (reply,) = await run_calls(redis, [(script, keys, args)])
    if isinstance(reply, Exception):
        raise reply
    return reply


async def _pipelined(redis: Redis, calls: Sequence[Call]) -> list[Any]:
    # hiredis packs the commands in C (redis-py's asyncio client packs each argument in Python, a
    # microsecond apiece: the largest cost of a router page after decoding its payloads), and they go
    # down one pooled connection as one write, their replies read in order.
    packed = b"".join(
        hiredis.pack_command(cast("Any", ("EVALSHA", script.sha, len(keys), *keys, *args)))
        for script, keys, args in calls
    )
    pool = redis.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        await conn.send_packed_command(packed)
        replies: list[Any] = []
        for _ in calls:
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:  # an error reply leaves the connection in step: read on
                replies.append(exc)
        return replies
    except BaseException:
        await conn.disconnect()  # replies may be left unread on it
        raise
    finally:
        await pool.release(conn)


def lua_bytes(value: bytes) -> msgspec.Raw:
    """``value`` as a msgpack str, for an argument a script reads with ``cmsgpack.unpack``: the cmsgpack of
    Redis 7.0 predates msgpack's bin type and refuses it, while a str may hold any bytes there."""
    n = len(value)
    if n < 32:
        head = bytes((0xA0 | n,))
    elif n < 0x100:
        head = bytes((0xD9, n))
    elif n < 0x10000:
        head = struct.pack(">BH", 0xDA, n)
    else:
        head = struct.pack(">BI", 0xDB, n)
    return msgspec.Raw(head + value)
