from __future__ import annotations

import asyncio

import pytest

from pidispatch.common.health import Backoff, Health
from pidispatch.common.keys import RETRY_BASE_S, RETRY_CAP_S


def test_backoff_doubles_to_the_cap_and_resets() -> None:
    b = Backoff()
    delays = [b.next() for _ in range(12)]
    assert delays[0] == RETRY_BASE_S
    assert delays[1] == RETRY_BASE_S * 2
    assert max(delays) == RETRY_CAP_S
    b.reset()
    assert b.next() == RETRY_BASE_S


async def test_backoff_pause_returns_early_on_stop() -> None:
    b = Backoff()
    b.delay = 60.0
    stop = asyncio.Event()
    stop.set()
    await asyncio.wait_for(b.pause(stop), 1.0)


def test_health_logs_each_transition_once(capsys: pytest.CaptureFixture[str]) -> None:
    from pidispatch.common.log import configure_logging

    configure_logging("test")
    h = Health("thing_down", "thing_up")
    for _ in range(3):
        h.failed(error="X")
    h.ok()
    h.ok()
    h.failed(error="Y")
    out = capsys.readouterr().out
    assert out.count('"thing_down"') == 2
    assert out.count('"thing_up"') == 1

