"""The shared waits and background loop: each ends as soon as the stop event is set, and the loop logs an
outage once, backs off, and survives a bug only when told to."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from pidispatch.common.health import Health
from pidispatch.common.runtime import every, stopped, unless_stopped


async def test_stopped_times_out_false_and_returns_true_once_stop_is_set() -> None:
    stop = asyncio.Event()
    assert await stopped(stop, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, stop.set)
    assert await asyncio.wait_for(stopped(stop, None), 1) is True


async def test_stopped_wakes_on_the_wake_event_without_stopping() -> None:
    stop, wake = asyncio.Event(), asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, wake.set)
    assert await asyncio.wait_for(stopped(stop, None, wake=wake), 1) is False


async def test_unless_stopped_returns_the_result_or_none_and_cancels_the_call() -> None:
    stop = asyncio.Event()

    async def quick() -> int:
        return 7

    assert await unless_stopped(quick(), stop) == 7
    cancelled = asyncio.Event()

    async def slow() -> int:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 1

    asyncio.get_running_loop().call_later(0.01, stop.set)
    assert await asyncio.wait_for(unless_stopped(slow(), stop), 1) is None
    assert cancelled.is_set()


async def test_unless_stopped_raises_the_calls_own_error() -> None:
    async def broken() -> int:
        raise RedisConnectionError("gone")

    with pytest.raises(RedisConnectionError):
        await unless_stopped(broken(), asyncio.Event())


async def test_every_backs_off_on_a_fault_marks_health_and_recovers() -> None:
    stop, calls = asyncio.Event(), 0
    health = Health("x_down", "x_up")

    async def step() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RedisConnectionError("gone")
        assert health.down  # the fault was reported before the retry
        stop.set()

    await asyncio.wait_for(every(0.01, step, stop, health), 5)
    assert calls == 2 and not health.down


async def test_every_goes_again_at_once_when_the_step_asks() -> None:
    stop, calls = asyncio.Event(), 0

    async def step() -> bool:
        nonlocal calls
        calls += 1
        if calls == 3:
            stop.set()
        return True

    await asyncio.wait_for(every(60, step, stop, None), 1)
    assert calls == 3


async def test_every_survives_a_bug_only_with_a_bug_event() -> None:
    stop, calls = asyncio.Event(), 0

    async def step() -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            stop.set()
        raise ValueError("bug")

    await asyncio.wait_for(every(0.01, step, stop, None, bug_event="x_error"), 1)
    assert calls == 2
    with pytest.raises(ValueError):
        await every(0.01, step, asyncio.Event(), None)
