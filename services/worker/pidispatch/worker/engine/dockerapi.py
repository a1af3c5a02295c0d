"""The Engine API calls aiodocker has no public method for, and the one field it keeps unexposed.

Everything here leans on aiodocker's private ``_query``/``_do_query`` and ``DockerContainer._container``,
so an aiodocker upgrade that moves them breaks this module alone.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import aiodocker
import aiohttp
from aiodocker.containers import DockerContainer

# Long-lived requests (wait, events) must not time out on reads, but must fail fast on a dead daemon.
LONG_REQUEST = aiohttp.ClientTimeout(total=None, sock_read=None, connect=5, sock_connect=5)


async def wait_exit(docker: aiodocker.Docker, container_id: str) -> aiohttp.ClientResponse:
    """An open ``wait`` on ``not-running``: its JSON body (``StatusCode``) arrives once the container is
    not running, at once if it already exited. Armed before a start, it cannot miss a quick exit.
    The caller releases the response."""
    return await docker._do_query(
        f"containers/{container_id}/wait", "POST", params={"condition": "not-running"},
        timeout=LONG_REQUEST,
    )  # fmt: skip


async def logs(docker: aiodocker.Docker, container_id: str, params: dict[str, Any]) -> aiohttp.ClientResponse:
    """The container's output as Docker's raw multiplexed stream (8-byte frame headers), which aiodocker
    would decode line by line. The caller releases the response."""
    return await docker._do_query(f"containers/{container_id}/logs", "GET", params=params)


def events(
    docker: aiodocker.Docker, params: dict[str, Any]
) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
    """The daemon's event log as newline-separated JSON, read raw; open until ``until`` (if given) or
    until the caller leaves the block."""
    return docker._query("events", "GET", params=params, timeout=LONG_REQUEST)


def import_image(
    docker: aiodocker.Docker,
    params: dict[str, Any],
    data: Any,
    *,
    timeout: aiohttp.ClientTimeout,
) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
    """``images/create`` from a tar body (``fromSrc=-``) with the caller's query parameters as given.
    ``data`` may be a file object: it is streamed, not sent in one go."""
    return docker._query(
        "images/create", "POST", params=params, data=data,
        headers={"Content-Type": "application/x-tar"}, timeout=timeout,
    )  # fmt: skip


def listed(container: DockerContainer) -> dict[str, Any]:
    """What the list call said about ``container`` (State, Labels, Mounts): no extra inspect round trip."""
    return container._container


DEFAULT_SOCKET = "unix:///var/run/docker.sock"


def create_docker() -> aiodocker.Docker:
    """A client even when no daemon is there yet: the worker must start and wait for Docker."""
    # Short calls (create, inspect, stop) fail fast on a hung daemon; long ones (wait, attach) set their own.
    timeout = aiohttp.ClientTimeout(total=60, connect=5, sock_connect=5)
    try:
        return aiodocker.Docker(timeout=timeout)
    except Exception:
        # No socket found at construction; calls fail (and are retried) until a daemon appears.
        return aiodocker.Docker(url=DEFAULT_SOCKET, timeout=timeout)
