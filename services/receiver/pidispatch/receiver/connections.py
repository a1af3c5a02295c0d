"""Client connections under a file-descriptor budget: slow or idle clients never starve a delivery.

aiohttp closes a connection that has not completed its request headers (or sat idle after a response)
within its keep-alive timeout; the receiver bounds the body read itself. Those deadlines alone would
still let a few hundred slow clients hold every descriptor for seconds, so the listener also caps open
connections below ``RLIMIT_NOFILE`` and, past the cap, closes the oldest connections that have not sent
a whole request head (or sit idle after one), then, only if that is not enough, the oldest requests
still reading their body. A request storing a verified delivery is never closed. Age alone would not
do: while a flood goes on, a valid delivery that arrived before its tail becomes the oldest.
"""

from __future__ import annotations

import asyncio
import resource
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from pidispatch.common.log import get_logger

# Descriptors kept for everything but clients: Redis connections, the spool, logs, the listener.
RESERVE_MIN = 32
# The listen queue. asyncio accepts up to this many connections in one go before any of them reaches the
# cap (the protocol factory runs later, per connection), so the reserve must hold a whole burst: an
# accept that fails with EMFILE stops accepting for a second, and a valid delivery waits in the queue.
LISTEN_BACKLOG = 128
# asyncio logs every failed accept (EMFILE) at error with a traceback; the receiver logs one line per
# this many seconds instead, with the count (and the same for connections it sheds).
LOG_INTERVAL_S = 10.0
_ACCEPT_ERROR = "socket.accept() out of system resource"


def descriptor_budget() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard one, and return how many clients fit under it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        wanted = 65536 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return client_cap(soft)


def client_cap(limit: int) -> int:
    """Open client connections allowed under a descriptor limit: a quarter is reserved, and at least a
    whole accept burst plus ``RESERVE_MIN``."""
    return max(8, limit - max(RESERVE_MIN + LISTEN_BACKLOG, limit // 4))


class Connections:
    """The listener's protocol factory: aiohttp's, plus the cap. The receiver keeps two sets of
    protocols: ``requesting`` (a whole request head arrived; shed last) and ``storing`` (past the body
    read; never shed)."""

    def __init__(self, server: web.Server, cap: int) -> None:
        self._server = server
        self.cap = cap
        self._count = 0  # connections made since the last recount; an upper bound of the open ones
        self.requesting: set[object] = set()
        self.storing: set[object] = set()
        self.shed = 0
        self._log = _Throttled("connections_shed")

    def __call__(self) -> RequestHandler:
        handler = self._server()
        self._count += 1
        if self._count > self.cap:
            self._make_room()
        return handler

    def _make_room(self) -> None:
        # Oldest first: aiohttp keeps them in connection order. One closed but not yet gone (its
        # connection_lost is still queued) frees its descriptor soon whatever we do: counting it would
        # only make this shed open connections too many, the newest of which may be a valid delivery.
        live = [h for h in self._server.connections if h.transport is not None]
        excess = len(live) + 1 - self.cap
        shed = 0
        for spare in (self.requesting | self.storing, self.storing):
            for handler in live:
                if shed >= excess:
                    break
                if handler.transport is not None and handler not in spare:
                    handler.force_close()
                    shed += 1
        self.shed += shed
        self._count = len(live) + 1 - shed
        if shed:
            self._log.count(shed, open=self._count, cap=self.cap)


class _Throttled:
    """A warning that repeats at most once per interval, carrying how many times it happened."""

    def __init__(self, event: str) -> None:
        self._event = event
        self._count = 0
        self._logged_at = float("-inf")

    def count(self, amount: int = 1, **fields: Any) -> None:
        self._count += amount
        now = asyncio.get_running_loop().time()
        if now - self._logged_at >= LOG_INTERVAL_S:
            get_logger().warning(self._event, count=self._count, **fields)
            self._logged_at, self._count = now, 0


class AcceptErrors:
    """A loop exception handler that turns asyncio's per-accept EMFILE reports into one line per
    interval; every other report goes to the default handler."""

    def __init__(self) -> None:
        self._log = _Throttled("accept_failed")

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != _ACCEPT_ERROR:
            loop.default_exception_handler(context)
            return
        error = context.get("exception")
        self._log.count(error=type(error).__name__, errno=getattr(error, "errno", None))
