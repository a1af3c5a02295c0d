"""A benchmark's own redis-server, and what Redis itself spent per unit of work (``INFO commandstats``)."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import redis as sync_redis

from pidispatch.common.embedded import find_redis_server, free_port, redis_server_argv
from pidispatch.common.redis import Redis

# Left out of the per-command figures: the benchmark's own reads of Redis, not the work measured.
_OWN_COMMANDS = frozenset({"cmdstat_config", "cmdstat_info", "cmdstat_xlen", "cmdstat_xpending"})


@contextlib.contextmanager
def private_redis(workdir: Path) -> Iterator[str]:
    """A non-persistent redis-server on loopback with its files in ``workdir``, answering PING before the
    caller goes on (10 s at most); its URL. Stopped on the way out."""
    port = free_port()
    server = subprocess.Popen(redis_server_argv(find_redis_server(), port, workdir, persist=False),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = sync_redis.Redis(port=port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except (sync_redis.ConnectionError, sync_redis.BusyLoadingError):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"redis-server on port {port} did not start") from None
                time.sleep(0.02)
        client.close()
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(10)


async def redis_us_by_command(r: Redis, per: int) -> dict[str, float]:
    """Redis's own µs by command since the last CONFIG RESETSTAT, divided by ``per``."""
    stats = await r.info("commandstats")
    return {name.removeprefix("cmdstat_"): float(s["usec"]) / max(per, 1) for name, s in stats.items()
            if name not in _OWN_COMMANDS}
