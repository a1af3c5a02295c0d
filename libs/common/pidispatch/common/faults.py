"""Crash points for the tests that prove delivery guarantees.

A guarantee about crashes ("a router killed after enqueueing but before acking creates no duplicate")
needs the kill to land exactly there, which timing cannot do. ``PD_FAULT_INJECT=<name>`` makes the
process SIGKILL itself when it reaches the point of that name. Unset in every real deployment; the
check is one dict lookup.
"""

from __future__ import annotations

import os
import signal

_ARMED = os.environ.get("PD_FAULT_INJECT", "")


def crash_point(name: str) -> None:
    """Die here, as ``kill -9`` would, if this point is armed."""
    if _ARMED and name == _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
