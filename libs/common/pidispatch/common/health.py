"""How services ride out a dependency outage: back off exponentially, log each transition once."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from pidispatch.common.keys import RETRY_BASE_S, RETRY_CAP_S
from pidispatch.common.log import get_logger


class Backoff:
    """Exponential delays from RETRY_BASE_S, doubling up to RETRY_CAP_S."""

    def __init__(self) -> None:
        self.delay = RETRY_BASE_S

    def next(self) -> float:
        delay, self.delay = self.delay, min(self.delay * 2, RETRY_CAP_S)
        return delay

    def reset(self) -> None:
        self.delay = RETRY_BASE_S

    async def pause(self, stop: asyncio.Event) -> None:
        """Sleep the next delay, or less if ``stop`` is set meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), self.next())


class Health:
    """A dependency's state, logged once per transition rather than once per failed call."""

    def __init__(self, down_event: str, up_event: str) -> None:
        self.down_event, self.up_event, self.down = down_event, up_event, False

    def failed(self, **fields: Any) -> None:
        if not self.down:
            self.down = True
            get_logger().warning(self.down_event, **fields)

    def ok(self) -> None:
        if self.down:
            self.down = False
            get_logger().info(self.up_event)
