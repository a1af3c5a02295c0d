"""A highly available Redis a test owns: a primary, a replica and three sentinels from Debian's packages,
on loopback, with clocks short enough that a failover takes a few seconds."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis as sync_redis

from pidispatch.common.embedded import find_redis_server, free_port, redis_server_argv

MASTER = "pi-dispatch"
DOWN_AFTER_MS = 1000  # how long a silent primary is subjectively down
FAILOVER_TIMEOUT_MS = 5000


def sentinel_binary() -> list[str] | None:
    """``redis-sentinel``, or ``redis-server --sentinel`` where only the server is installed; None when
    neither is (the caller skips, or fails under PD_REQUIRE_SENTINEL=1)."""
    found = shutil.which("redis-sentinel")
    if found:
        return [found]
    server = shutil.which("redis-server")
    return [server, "--sentinel"] if server else None


def require_sentinel() -> list[str]:
    binary = sentinel_binary()
    if binary is None:
        if os.environ.get("PD_REQUIRE_SENTINEL") == "1":
            pytest.fail("PD_REQUIRE_SENTINEL=1 and no redis-sentinel: apt-get install redis-sentinel")
        pytest.skip("no redis-sentinel (apt-get install redis-sentinel)")
    return binary


def _wait(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(sync_redis.RedisError, OSError):
            if check():  # type: ignore[operator]
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {timeout} s")
        time.sleep(0.05)


class Node:
    """One redis-server (primary or replica) on a fixed port, so a killed one comes back where it was."""

    def __init__(self, root: Path, name: str, replica_of: int | None = None) -> None:
        self.dir = root / name
        self.port = free_port()
        self.replica_of = replica_of
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = redis_server_argv(find_redis_server(), self.port, self.dir, persist=True)
        if self.replica_of is not None:
            argv += ["--replicaof", "127.0.0.1", str(self.replica_of)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = sync_redis.Redis(port=self.port, socket_connect_timeout=0.2)
        try:
            _wait(client.ping, 10, f"redis-server on port {self.port} did not start")
        finally:
            client.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def client(self) -> sync_redis.Redis:
        return sync_redis.Redis(port=self.port, socket_connect_timeout=0.5, socket_timeout=2)


class SentinelNode:
    def __init__(self, root: Path, index: int, primary_port: int, binary: list[str]) -> None:
        self.dir = root / f"sentinel-{index}"
        self.port = free_port()
        self.primary_port = primary_port
        self.binary = binary
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        conf = self.dir / "sentinel.conf"  # a sentinel rewrites its own file: each has one
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndaemonize no\ndir {self.dir}\n"
            f"logfile {self.dir / 'sentinel.log'}\n"
            f"sentinel monitor {MASTER} 127.0.0.1 {self.primary_port} 2\n"
            f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {MASTER} 1\n"
        )
        self.proc = subprocess.Popen(
            [*self.binary, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        client = self.client()
        try:
            _wait(client.ping, 10, f"redis-sentinel on port {self.port} did not start")
        finally:
            client.close()

    def client(self) -> sync_redis.Redis:
        return sync_redis.Redis(port=self.port, socket_connect_timeout=0.5, socket_timeout=2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


class RedisHA:
    """Primary + replica + 3 sentinels (quorum 2). ``env`` points services at it through the sentinels."""

    def __init__(self, root: Path, binary: list[str]) -> None:
        self.primary = Node(root, "primary")
        self.replica = Node(root, "replica", replica_of=self.primary.port)
        self.sentinels = [SentinelNode(root, i, self.primary.port, binary) for i in range(3)]

    @property
    def env(self) -> dict[str, str]:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return {"REDIS_SENTINELS": hosts, "REDIS_SENTINEL_MASTER": MASTER}

    def start(self) -> None:
        self.primary.start()
        self.replica.start()
        for s in self.sentinels:
            s.start()
        replica = self.replica.client()
        try:
            _wait(
                lambda: replica.info("replication").get("master_link_status") == "up",
                15,
                "the replica did not sync",
            )
        finally:
            replica.close()
        # Every sentinel must know the replica and the other sentinels before a failover can elect.
        for s in self.sentinels:
            client = s.client()
            try:
                _wait(
                    lambda c=client: (
                        len(c.sentinel_slaves(MASTER)) == 1  # type: ignore[misc]
                        and len(c.sentinel_sentinels(MASTER)) == 2
                    ),
                    20,
                    "sentinels did not discover each other",
                )
            finally:
                client.close()

    def primary_port(self) -> int:
        """The port the sentinels name now."""
        client = self.sentinels[0].client()
        try:
            _host, port = client.sentinel_get_master_addr_by_name(MASTER)
            return int(port)
        finally:
            client.close()

    def wait_promoted(self, timeout: float = 30.0) -> None:
        _wait(lambda: self.primary_port() == self.replica.port, timeout, "no replica was promoted")

    def stop(self) -> None:
        for s in self.sentinels:
            s.stop()
        self.replica.kill()
        self.primary.kill()
