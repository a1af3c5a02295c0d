"""``status``: the fleet's pause and each host's, said apart."""

from __future__ import annotations

import pytest

from pidispatch.console.control import paused_text


@pytest.mark.parametrize(("fleet", "hosts", "said"), [
    (False, [], "no"),
    (True, [], "yes, every worker"),
    # A paused host must not read as "no (paused …)": the "no" is the fleet's alone.
    (False, ["mini2"], "no (fleet); hosts paused: mini2"),
    (True, ["mini1", "mini2"], "yes, every worker (fleet); hosts paused: mini1, mini2"),
])
def test_the_fleet_pause_and_the_paused_hosts_are_said_apart(
    fleet: bool, hosts: list[str], said: str
) -> None:
    assert paused_text(fleet, hosts) == said
