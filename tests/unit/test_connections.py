"""pidispatch.receiver.connections: the descriptor budget and the accept-error log that never floods."""

from __future__ import annotations

import asyncio

import structlog

from pidispatch.receiver.connections import AcceptErrors, client_cap


def test_client_cap_keeps_a_quarter_and_at_least_32_descriptors() -> None:
    assert client_cap(256) == 192
    assert client_cap(100) == 68
    assert client_cap(65536) == 49152
    assert client_cap(20) == 8  # never zero, however low the limit


async def test_a_burst_of_failed_accepts_is_one_log_line_with_the_count() -> None:
    loop = asyncio.get_running_loop()
    handler = AcceptErrors()
    context = {"message": "socket.accept() out of system resource", "exception": OSError(24, "Too many")}
    with structlog.testing.capture_logs() as logs:
        for _ in range(500):
            handler(loop, context)
    assert [(x["event"], x["count"], x["errno"]) for x in logs] == [("accept_failed", 1, 24)]
