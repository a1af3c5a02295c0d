"""Hostile clients against the real receiver process: deadlines for headers, bodies and idle keep-alive
connections, and slow connections that outnumber the file descriptors the receiver may open."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pidispatch.common.embedded import free_port
from pidispatch.common.keys import RECEIVER_BODY_TIMEOUT_S, RECEIVER_HEADER_TIMEOUT_S
from tests.support.payloads import FIXTURES
from tests.support.polling import wait_for
from tests.support.receiver import TEST_SECRET, github_signature

ISSUES_LABELED = (FIXTURES / "github" / "issues.labeled.json").read_bytes()
FD_LIMIT = 256
SLOW_CLIENTS = 400


class Receiver:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out


@pytest.fixture
async def receiver(base_env: dict[str, str], tmp_path: Path) -> AsyncIterator[Receiver]:
    """The receiver with RLIMIT_NOFILE lowered to 256 (soft and hard, so it cannot raise it)."""
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "PYTHONUNBUFFERED": "1",
        **base_env,
        "RECEIVER_PORT": str(port),
        "RECEIVER_BIND": "127.0.0.1",
        "PD_SPOOL_DIR": str(tmp_path / "spool"),
    }
    log = tmp_path / "receiver.log"
    # The limit is set in the child before it execs the receiver (no preexec_fn in a threaded parent).
    limited = (
        "import os, resource, sys; "
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({FD_LIMIT}, {FD_LIMIT})); "
        "os.execv(sys.executable, [sys.executable, '-m', 'pidispatch.receiver'])"
    )
    with log.open("wb") as out:
        proc = await asyncio.to_thread(
            subprocess.Popen, [sys.executable, "-c", limited], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    service = Receiver(proc, port, log)
    try:
        await wait_for(
            lambda: any(x.get("event") == "receiver_started" for x in service.lines()),
            timeout=15,
            what="receiver_started",
        )
        yield service
    finally:
        proc.kill()
        proc.wait(10)


def _request_head(delivery: str, length: int = len(ISSUES_LABELED)) -> bytes:
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": github_signature(TEST_SECRET, ISSUES_LABELED),
        "Content-Length": str(length),
    }
    return (
        "POST /github HTTP/1.1\r\nHost: x\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    ).encode()


async def _closed_by_server(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, trickle: bytes
) -> float:
    """Send ``trickle`` a byte per second until the server closes; the seconds that took."""
    started = time.monotonic()
    for byte in trickle:
        try:
            data = await asyncio.wait_for(reader.read(65536), 1.0)
        except TimeoutError:
            data = None
        if data == b"" or (data is not None and data.startswith(b"HTTP/1.1 4")):
            break
        with contextlib.suppress(ConnectionError):
            writer.write(bytes([byte]))
            await writer.drain()
    else:
        raise AssertionError("the server never closed a trickling client")
    writer.close()
    return time.monotonic() - started


async def _deliver(port: int, delivery: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(_request_head(delivery) + ISSUES_LABELED)
        await writer.drain()
        return await reader.readuntil(b"}")
    finally:
        writer.close()


async def test_slow_headers_slow_body_and_idle_keepalive_are_cut_off(receiver: Receiver) -> None:
    port = receiver.port
    slow_head = await asyncio.open_connection("127.0.0.1", port)
    slow_body = await asyncio.open_connection("127.0.0.1", port)
    slow_body[1].write(_request_head("slow-body"))
    idle = await asyncio.open_connection("127.0.0.1", port)
    idle[1].write(_request_head("keepalive") + ISSUES_LABELED)
    assert (await idle[0].readuntil(b"}")).startswith(b"HTTP/1.1 202 ")
    trickled = await asyncio.gather(
        _closed_by_server(*slow_head, _request_head("slow-head")),
        _closed_by_server(*slow_body, ISSUES_LABELED),
        asyncio.wait_for(idle[0].read(), RECEIVER_HEADER_TIMEOUT_S + 3),
    )
    head_s, body_s, idle_end = trickled
    assert head_s < RECEIVER_HEADER_TIMEOUT_S + 3
    assert body_s < RECEIVER_BODY_TIMEOUT_S + 3
    assert idle_end == b""  # the server closed the idle keep-alive connection


async def test_400_slow_connections_never_starve_a_delivery_at_256_descriptors(receiver: Receiver) -> None:
    port = receiver.port
    slow: list[asyncio.StreamWriter] = []

    async def hold() -> None:
        with contextlib.suppress(OSError, TimeoutError):
            _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
            writer.write(b"POST /github HTTP/1.1\r\nHo")  # and never the rest
            slow.append(writer)

    try:
        await asyncio.gather(*(hold() for _ in range(SLOW_CLIENTS)))
        started = time.monotonic()
        deliveries = asyncio.gather(*(_deliver(port, str(uuid.uuid4())) for _ in range(5)))
        answers = await asyncio.wait_for(deliveries, RECEIVER_HEADER_TIMEOUT_S / 2)
        took = time.monotonic() - started
    finally:
        for writer in slow:
            writer.close()
    assert all(a.startswith(b"HTTP/1.1 202 ") for a in answers), answers
    assert took < RECEIVER_HEADER_TIMEOUT_S / 2
    assert receiver.proc.poll() is None
    # Accept failures and shed connections are reported, a line per interval at most, never per accept.
    text = receiver.log.read_text()
    assert text.count("out of system resource") == 0
    assert sum(1 for x in receiver.lines() if x.get("event") in ("accept_failed", "connections_shed")) <= 4
