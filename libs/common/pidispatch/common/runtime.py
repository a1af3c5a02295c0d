"""Process lifecycle shared by the services: signals become one stop event the main loop awaits, and the
waits and background loops that must end as soon as that event is set."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import RedisError

from pidispatch.common.health import Backoff, Health
from pidispatch.common.log import get_logger

T = TypeVar("T")

# One alias per kind of time, so a signature says which clock it wants.
EpochMsClock = Callable[[], int]  # wall-clock epoch milliseconds, for stamping records
MonotonicMsClock = Callable[[], int]  # monotonic milliseconds; only differences mean anything


def stop_on_signals() -> asyncio.Event:
    """An event set by the first SIGTERM or SIGINT; call inside the running loop."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop


def now_ms() -> int:
    """Wall-clock epoch milliseconds; the one clock services stamp records with."""
    import time

    return time.time_ns() // 1_000_000


def iso_ms(epoch_ms: int) -> str:
    """``2024-05-01T12:00:00.000Z``, the shape JavaScript's ``toISOString`` gives. On the receiver's and
    the router's hot paths: the second's text is kept, so most calls format only the milliseconds."""
    seconds, ms = divmod(epoch_ms, 1000)
    if seconds != _iso_second[0]:
        t = time.gmtime(seconds)
        _iso_second[:] = [seconds, f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:"
                                   f"{t.tm_min:02d}:{t.tm_sec:02d}."]
    return f"{_iso_second[1]}{ms:03d}Z"


_iso_second: list[Any] = [None, ""]  # (epoch second, its text up to the milliseconds)


def monotonic_ms() -> int:
    """Monotonic milliseconds, for measuring ages and timeouts."""
    return time.monotonic_ns() // 1_000_000


async def stopped(stop: asyncio.Event, timeout_s: float | None, *, wake: asyncio.Event | None = None) -> bool:
    """Wait up to ``timeout_s`` (None: no limit) for ``stop``, or for ``wake`` if given; True once
    ``stop`` is set."""
    waits = [asyncio.ensure_future(stop.wait())]
    if wake is not None:
        waits.append(asyncio.ensure_future(wake.wait()))
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    return stop.is_set()


async def unless_stopped(call: Awaitable[T], stop: asyncio.Event) -> T | None:
    """``call``'s result, or None when ``stop`` is set first. The call is then cancelled: safe for a
    blocking stream read, whose delivered entries stay pending and are read again."""
    work = asyncio.ensure_future(call)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await work
    return None if work.cancelled() else work.result()


async def every(
    interval_s: float,
    step: Callable[[], Awaitable[bool | None]],
    stop: asyncio.Event,
    health: Health | None,
    *,
    faults: tuple[type[BaseException], ...] = (RedisError,),
    back_off: bool = True,
    bug_event: str | None = None,
) -> None:
    """Run ``step`` every ``interval_s`` until ``stop``; a step that returns True goes again at once.

    A fault (one of ``faults``) marks ``health`` down, logged once per outage, and is retried after an
    exponential backoff (``back_off``) or the interval. With ``bug_event`` any other exception is logged
    under that name and the loop carries on (housekeeping must not stop a service); else it ends the loop.
    """
    backoff = Backoff()
    while not stop.is_set():
        try:
            again = await step()
        except faults as exc:
            if health is not None:
                health.failed(reason=getattr(exc, "reason", type(exc).__name__))
            if back_off:
                await backoff.pause(stop)
                continue
        except Exception as exc:
            if bug_event is None:
                raise
            get_logger().error(bug_event, error=type(exc).__name__)
        else:
            if health is not None:
                health.ok()
            backoff.reset()
            if again:
                await asyncio.sleep(0)  # more may be waiting: go again after letting others run
                continue
        await stopped(stop, interval_s)
