"""The ports dev's services listen on: the receiver's (refused, naming its holder, when taken), Redis's
(kept across restarts so printed ``redis-cli`` lines and a running ``web`` stay valid) and the metrics
ports (one each for the router and the worker, which would otherwise both bind ``PD_METRICS_PORT``)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path

from pidispatch.common.embedded import free_port
from pidispatch.common.errors import ConfigError
from pidispatch.dev.processes import command_line

PORT_FILE = "port"
LISTEN = "0A"  # the state column of /proc/net/tcp for a listening socket


def listening_inodes(table: str, port: int) -> set[str]:
    """Pure: the socket inodes listening on ``port`` in a /proc/net/tcp or tcp6 text."""
    found = set()
    for line in table.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 10 or cols[3] != LISTEN:
            continue
        local_port = cols[1].rsplit(":", 1)[-1]
        if int(local_port, 16) == port:
            found.add(cols[9])
    return found


def _owners(inodes: set[str]) -> Iterable[int]:
    targets = {f"socket:[{i}]" for i in inodes}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:  # another user's process, or gone
            continue
        if any(_link(fd) in targets for fd in fds):
            yield int(entry.name)


def _link(fd: Path) -> str:
    try:
        return os.readlink(fd)
    except OSError:  # closed meanwhile (the listing's own descriptor, for one)
        return ""


def port_holder(port: int) -> str | None:
    """Who listens on ``port``, as ``pid N (command)``, when /proc lets this user see it."""
    inodes: set[str] = set()
    for name in ("tcp", "tcp6"):
        try:
            inodes |= listening_inodes(Path(f"/proc/net/{name}").read_text(), port)
        except OSError:
            continue
    for pid in _owners(inodes) if inodes else ():
        return f"pid {pid} ({command_line(pid)})"
    return None


def require_free_port(bind: str, port: int) -> None:
    """Refuse a receiver port something else holds: a server there that never answers would otherwise
    pass for a receiver that is slow to start."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the receiver binds
        try:
            probe.bind((bind, port))
        except OSError:
            holder = port_holder(port)
            by = f"by {holder}" if holder else "by another process"
            raise ConfigError(
                f"RECEIVER_PORT={port} is in use on {bind} {by}; accepted: a free port (start dev with "
                f"RECEIVER_PORT={free_port()}, or stop what listens there)"
            ) from None


def is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def redis_port(data_dir: Path) -> int:
    """The port the last dev here gave its Redis when it is free, else a new one (remembered)."""
    path = data_dir / PORT_FILE
    try:
        kept = int(path.read_text().strip())
    except (OSError, ValueError):
        kept = 0
    if 0 < kept < 65536 and is_free(kept):
        return kept
    port = free_port()
    path.write_text(f"{port}\n")
    return port


def metrics_ports(env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Per service, the ``PD_METRICS_PORT`` it gets: the router the one set, the worker the next one, so
    two processes on one machine never bind one port. Nothing when it is unset."""
    value = env.get("PD_METRICS_PORT", "").strip()
    if not value:
        return {}
    if not value.isdigit() or not 1 <= int(value) <= 65534:
        raise ConfigError(f"PD_METRICS_PORT={value!r} is refused under dev; accepted: 1-65534 (the router "
                          "listens there, the worker on the next port)")
    port = int(value)
    return {"router": {"PD_METRICS_PORT": str(port)}, "worker": {"PD_METRICS_PORT": str(port + 1)}}
