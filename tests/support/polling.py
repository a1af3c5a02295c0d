"""Waiting on a condition with a deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def poll_until(
    predicate: Callable[[], Awaitable[Any]] | Callable[[], Any], timeout: float, interval: float = 0.05
) -> Any:
    """Poll ``predicate`` (sync or async) until it returns something truthy, and return that; None once
    ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        await asyncio.sleep(interval)


async def wait_for(
    predicate: Callable[[], Awaitable[Any]] | Callable[[], Any],
    timeout: float = 10.0,
    interval: float = 0.05,
    what: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail naming ``what`` at the deadline."""
    value = await poll_until(predicate, timeout, interval)
    if value is None:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")
    return value
