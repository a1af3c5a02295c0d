"""One timer for every in-flight Redis append, instead of one per request.

GitHub never retries a delivery that got no answer, so an append must end within the bound even when
Redis is frozen. ``asyncio.timeout`` arms a timer per request, a measurable share of the receiver's
hot path; here one sweeper task, alive only while appends are in flight, cancels the overdue ones.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

# The sweeper looks this often, so an append ends at most one tick after its deadline.
TICK_S = 0.05


class Deadlines:
    __slots__ = ("_bound_s", "_due", "_expired", "_sweeper")

    def __init__(self, bound_s: float) -> None:
        self._bound_s = bound_s
        self._due: dict[asyncio.Task[object], float] = {}
        self._expired: set[asyncio.Task[object]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    def __call__(self) -> _Guard:
        """``with deadlines():`` raises ``TimeoutError`` if the block outlives the bound."""
        return _Guard(self)

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._due:
                await asyncio.sleep(TICK_S)
                now = loop.time()
                for task, due in list(self._due.items()):
                    if due <= now and task not in self._expired:
                        self._expired.add(task)
                        task.cancel()
        finally:
            self._sweeper = None


class _Guard:
    __slots__ = ("_deadlines", "_task")

    def __init__(self, deadlines: Deadlines) -> None:
        self._deadlines = deadlines
        self._task: asyncio.Task[object] | None = None

    def __enter__(self) -> None:
        d = self._deadlines
        task = asyncio.current_task()
        assert task is not None
        loop = task.get_loop()
        self._task = task
        d._due[task] = loop.time() + d._bound_s - TICK_S
        if d._sweeper is None:
            d._sweeper = loop.create_task(d._sweep())

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        d, task = self._deadlines, self._task
        assert task is not None
        d._due.pop(task, None)
        if task in d._expired:
            d._expired.discard(task)
            # Our cancel, not someone else's (a shutdown): report it as the timeout it is.
            if exc_type is asyncio.CancelledError and task.uncancel() == 0:
                raise TimeoutError("Redis did not answer within the bound") from None
