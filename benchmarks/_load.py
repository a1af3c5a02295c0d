"""A small HTTP load generator for the benchmarks: closed loop for capacity, open loop for latency.

Closed loop: N workers each send the next request when their last one answers, so the server sets the
pace (max throughput). Open loop: sends are fired on a timer whatever the answers, so a slow server
cannot slow the client down and hide its own queueing (no coordinated omission); each latency is
measured from the moment the request was *due*, not from when the client got round to sending it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiohttp

Headers = Callable[[], Mapping[str, str]]  # a fresh header set per request (e.g. a new delivery id)
REQUEST_TIMEOUT_S = 10.0


@dataclass
class Result:
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # transport failures, by exception class
    latencies_ms: list[float] = field(default_factory=list)
    late_ms: list[float] = field(default_factory=list)  # open loop: how late the client fired each send
    elapsed_s: float = 0.0

    @property
    def answered(self) -> int:
        return sum(self.statuses.values())

    @property
    def rate(self) -> float:
        return self.answered / self.elapsed_s if self.elapsed_s else 0.0

    def unexpected(self, status: int) -> int:
        """Answers other than ``status`` plus requests that got no answer at all."""
        return self.answered - self.statuses[status] + sum(self.errors.values())


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (no interpolation: p99 is a latency some request really had)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def new_session(connections: int) -> aiohttp.ClientSession:
    """Keep-alive client with a bounded pool: at most ``connections`` sockets to the target."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections, limit_per_host=connections),
        timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
        skip_auto_headers=("User-Agent",),
    )


async def _post(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: Headers, result: Result, t0: float
) -> None:
    try:
        async with session.post(url, data=body, headers=headers()) as resp:
            await resp.read()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        result.errors[type(exc).__name__] += 1
        return
    result.latencies_ms.append((time.perf_counter() - t0) * 1000)
    result.statuses[status] += 1


async def closed_loop(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: Headers, concurrency: int,
    duration_s: float,
) -> Result:
    """``concurrency`` workers post back to back until ``duration_s`` has passed; the rate counts every
    answer up to the last one in flight at the deadline."""
    result = Result()
    start = time.perf_counter()
    deadline = start + duration_s

    async def worker() -> None:
        while (t0 := time.perf_counter()) < deadline:
            await _post(session, url, body, headers, result, t0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.elapsed_s = time.perf_counter() - start
    return result


async def open_loop(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: Headers, rate: float, duration_s: float
) -> Result:
    """Fire ``rate * duration_s`` requests at a fixed schedule, then wait for every answer."""
    result = Result()
    count = round(rate * duration_s)
    tasks: set[asyncio.Task[None]] = set()
    start = time.perf_counter()
    for i in range(count):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        result.late_ms.append((time.perf_counter() - due) * 1000)
        task = asyncio.create_task(_post(session, url, body, headers, result, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)  # the set only keeps running tasks alive
    while tasks:
        await asyncio.gather(*tasks)
    result.elapsed_s = time.perf_counter() - start
    return result
