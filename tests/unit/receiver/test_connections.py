"""pidispatch.receiver.connections: the descriptor budget and the accept-error log that never floods."""

from __future__ import annotations

import asyncio

import structlog

from pidispatch.receiver.connections import LISTEN_BACKLOG, AcceptErrors, Connections, client_cap


def test_client_cap_keeps_a_quarter_and_at_least_a_whole_accept_burst_plus_32_descriptors() -> None:
    # Under a flood, asyncio accepts up to the listen backlog before any connection is capped.
    assert LISTEN_BACKLOG == 128
    assert client_cap(256) == 96
    assert client_cap(1024) == 768
    assert client_cap(65536) == 49152
    assert client_cap(100) == 8  # never zero, however low the limit


async def test_a_burst_of_failed_accepts_is_one_log_line_with_the_count() -> None:
    loop = asyncio.get_running_loop()
    handler = AcceptErrors()
    context = {"message": "socket.accept() out of system resource", "exception": OSError(24, "Too many")}
    with structlog.testing.capture_logs() as logs:
        for _ in range(500):
            handler(loop, context)
    assert [(x["event"], x["count"], x["errno"]) for x in logs] == [("accept_failed", 1, 24)]


class _Handler:
    """What the cap reads of aiohttp's protocol: its transport, and force_close."""

    def __init__(self, name: str) -> None:
        self.name, self.transport = name, object()

    def force_close(self) -> None:
        self.transport = None


class _Server:
    def __init__(self) -> None:
        self.connections: list[_Handler] = []

    def __call__(self) -> _Handler:
        return _Handler("new")


def _cap_with(*names: str, cap: int) -> tuple[Connections, dict[str, _Handler]]:
    server = _Server()
    handlers = {name: _Handler(name) for name in names}
    server.connections.extend(handlers.values())
    connections = Connections(server, cap)  # type: ignore[arg-type]
    connections._count = len(names)
    return connections, handlers


async def test_past_the_cap_the_oldest_slow_or_idle_connections_go_first_and_a_request_in_hand_last() -> None:
    # A delivery that arrived in the middle of a flood of slow clients is older than the flood's tail:
    # it must still outlive every connection that has not sent a whole request head.
    connections, h = _cap_with("slow1", "delivery", "storing", "slow2", "idle", cap=4)
    connections.requesting.add(h["delivery"])
    connections.storing.add(h["storing"])
    connections()  # one more: two over the cap
    assert [n for n, x in h.items() if x.transport is None] == ["slow1", "slow2"]
    connections._count, connections.cap = 10, 2
    connections()  # under a tighter cap even the requests in hand must make room, the oldest first
    assert [n for n, x in h.items() if x.transport is None] == ["slow1", "delivery", "slow2", "idle"]
    assert h["storing"].transport is not None  # a delivery being stored is never cut


async def test_connections_already_closed_do_not_count_so_no_open_one_is_shed_in_their_place() -> None:
    # Under load their connection_lost callbacks lag; counting them cut the newest connection, a delivery.
    connections, h = _cap_with("closed1", "closed2", "closed3", "slow", "delivery", cap=3)
    for name in ("closed1", "closed2", "closed3"):
        h[name].force_close()
    connections()  # two open plus the new one: at the cap, one over with the closed ones counted
    assert h["slow"].transport is not None and h["delivery"].transport is not None
    connections._count = 10
    connections.requesting.add(h["delivery"])
    connections._server.connections.append(_Handler("later"))  # type: ignore[attr-defined]
    connections()  # three open plus the new one, one over: the slow one goes, not the delivery
    assert h["slow"].transport is None and h["delivery"].transport is not None
