"""Real processes a test owns: a redis-server it may stop, kill and restart, and the services run as their
operators run them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis as sync_redis

from pidispatch.common.embedded import find_redis_server, free_port, redis_server_argv


class RedisProcess:
    """A real redis-server a test owns, so it can stop, kill and restart it."""

    def __init__(
        self, data_dir: Path, *, persist: bool = False, port: int | None = None,
        requirepass: str | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.persist = persist
        self.port = port or free_port()
        self.requirepass = requirepass  # a server that refuses every command until AUTH with this password
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = redis_server_argv(find_redis_server(), self.port, self.data_dir, persist=self.persist)
        if self.requirepass is not None:
            argv += ["--requirepass", self.requirepass]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = sync_redis.Redis(port=self.port, socket_connect_timeout=0.2, password=self.requirepass)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if client.ping():
                    break
            except sync_redis.ConnectionError:
                pass
            except sync_redis.BusyLoadingError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.02)
        client.close()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)
        self.proc = None


class ServiceProcess:
    """One service run as its operators run it: ``python -m pidispatch.<name>`` with an environment."""

    def __init__(self, name: str, env: dict[str, str], log_path: Path, args: list[str] | None = None) -> None:
        self.name = name
        self.env = env
        self.log_path = log_path
        self.args = args or []
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root"), **self.env}
        # Line-buffered logs so tests can read events as they happen.
        env["PYTHONUNBUFFERED"] = "1"
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"pidispatch.{self.name}", *self.args],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log_lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def logged(self, event: str) -> list[dict[str, Any]]:
        return [line for line in self.log_lines() if line.get("event") == event]

    def kill(self) -> None:
        """SIGKILL: the crash a guarantee must survive."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode
