"""Process lifecycle shared by the services: signals become one stop event the main loop awaits."""

from __future__ import annotations

import asyncio
import contextlib
import signal


def stop_on_signals() -> asyncio.Event:
    """An event set by the first SIGTERM or SIGINT; call inside the running loop."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop


def now_ms() -> int:
    """Wall-clock epoch milliseconds; the one clock services stamp records with."""
    import time

    return time.time_ns() // 1_000_000
