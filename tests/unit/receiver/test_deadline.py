from __future__ import annotations

import asyncio

import pytest

from pidispatch.receiver.deadline import Deadlines


async def test_a_block_that_outlives_the_bound_raises_timeout_error() -> None:
    deadlines = Deadlines(0.2)
    with pytest.raises(TimeoutError), deadlines():
        await asyncio.sleep(5)


async def test_a_quick_block_is_untouched_and_the_sweeper_stops_when_idle() -> None:
    deadlines = Deadlines(1.0)
    with deadlines():
        await asyncio.sleep(0)
    sweeper = deadlines._sweeper
    assert sweeper is not None
    await asyncio.wait_for(sweeper, 1.0)  # nothing in flight: the sweeper ends by itself
    assert deadlines._sweeper is None


async def test_many_concurrent_blocks_expire_independently() -> None:
    deadlines = Deadlines(0.2)

    async def slow() -> str:
        with deadlines():
            await asyncio.sleep(5)
        return "finished"

    async def fast() -> str:
        with deadlines():
            await asyncio.sleep(0.01)
        return "finished"

    results = await asyncio.gather(slow(), fast(), slow(), return_exceptions=True)
    assert isinstance(results[0], TimeoutError) and isinstance(results[2], TimeoutError)
    assert results[1] == "finished"


async def test_someone_elses_cancel_stays_a_cancel() -> None:
    deadlines = Deadlines(10.0)
    started = asyncio.Event()

    async def guarded() -> None:
        with deadlines():
            started.set()
            await asyncio.sleep(5)

    task = asyncio.create_task(guarded())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
