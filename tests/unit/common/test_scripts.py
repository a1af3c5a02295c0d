"""The script registry against a real redis-server: every script compiles, a call, a pipelined call and
``run_calls`` survive a Redis that lost its script cache, binary arguments reach cmsgpack intact, and
``bounded`` cuts a slow call as a Redis timeout."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from redis.exceptions import RedisError

from pidispatch.common import scripts, workerscripts
from pidispatch.common.keys import Keys
from pidispatch.common.luascript import Script, lua_bytes, run_calls
from pidispatch.common.redis import Redis, bounded
from pidispatch.common.scripts import TRIM_MARK, TRIM_STEP


def registered() -> list[Script]:
    return [v for m in (scripts, workerscripts) for v in vars(m).values() if isinstance(v, Script)]


async def test_every_registered_script_compiles(redis: Redis) -> None:
    assert len(registered()) >= 13
    for script in registered():
        assert (await redis.script_load(script.script)) == script.sha


async def test_a_call_after_the_script_cache_was_flushed_loads_it_once(redis: Redis, keys: Keys) -> None:
    mark = [keys.events, keys.events_trimmed, keys.events_marks]
    await redis.xadd(keys.events, {"a": "1"})
    await redis.xadd(keys.events, {"a": "2"})
    await redis.script_flush()
    assert await TRIM_MARK(redis, mark, [1, 10]) == 2
    assert (await redis.script_exists(TRIM_MARK.sha)) == [True]
    await redis.xadd(keys.events, {"a": "3"})
    assert await TRIM_MARK(redis, mark, [1, 10]) == 3
    assert await redis.zcard(keys.events_marks) == 2


async def test_a_pipelined_call_after_the_script_cache_was_flushed_loads_it_first(
    redis: Redis, keys: Keys
) -> None:
    await redis.xadd(keys.events, {"a": "1"})
    await redis.script_flush()
    async with redis.pipeline(transaction=False) as pipe:
        TRIM_MARK.in_pipeline(pipe, [keys.events, keys.events_trimmed, keys.events_marks], [1, 10])
        TRIM_MARK.in_pipeline(pipe, [keys.jobs, keys.jobs_trimmed, keys.events_marks], [1, 10])
        assert await pipe.execute() == [1, None]  # the second stream does not exist


async def test_run_calls_after_the_script_cache_was_flushed_runs_each_call_once(
    redis: Redis, keys: Keys
) -> None:
    await redis.xadd(keys.events, {"a": "1"})
    await redis.script_flush()
    calls = [
        (TRIM_MARK, [keys.events, keys.events_trimmed, keys.events_marks], [1, 10]),
        (TRIM_STEP, [keys.jobs, keys.jobs_trimmed], ["0-1", 10]),  # a stream that does not exist
        (TRIM_MARK, [keys.jobs, keys.jobs_trimmed, keys.events_marks], [1, 10]),
    ]
    assert await run_calls(redis, calls) == [1, 0, None]
    assert await redis.script_exists(TRIM_MARK.sha, TRIM_STEP.sha) == [True, True]
    assert await redis.zcard(keys.events_marks) == 1  # the first call ran once
    await redis.xadd(keys.events, {"a": "2"})
    assert await run_calls(redis, calls[:1]) == [2]


async def test_lua_bytes_decode_in_the_servers_cmsgpack(redis: Redis) -> None:
    encoder = msgspec.msgpack.Encoder()
    for n in (0, 1, 31, 32, 255, 256, 65_535, 65_536):
        value = (bytes(range(256)) * (n // 256 + 1))[:n]
        got = await redis.eval("return cmsgpack.unpack(ARGV[1])", 0, encoder.encode([lua_bytes(value), 7]))
        assert got == [value, 7], n


async def test_bounded_passes_the_reply_through(redis: Redis) -> None:
    assert await bounded(redis.ping()) is True


async def test_bounded_cuts_a_slow_call_as_both_a_redis_fault_and_a_timeout() -> None:
    with pytest.raises(RedisError) as caught:
        await bounded(asyncio.sleep(5), 0.05)
    assert isinstance(caught.value, TimeoutError)
    # Logs and error messages name it by class, as they did before the helper existed.
    assert type(caught.value).__name__ == "TimeoutError"


async def test_bounded_leaves_the_calls_own_timeout_alone() -> None:
    async def own() -> None:
        raise TimeoutError("inner")

    with pytest.raises(TimeoutError, match="inner"):
        await bounded(own(), 1)
