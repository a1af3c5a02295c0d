"""worker.hook: when the failure hook fires and with what argv (pure), and that a slow hook is stopped."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from pidispatch.worker.hook import hook_args, run_hook
from tests.support.polling import wait_for


@pytest.mark.parametrize(
    ("outcome", "reason", "expected"),
    [
        ("failed", "container-exit-1", ["j", "failed", "container-exit-1", "h"]),
        ("failed", None, ["j", "failed", "infra", "h"]),
        ("failed", "Has Spaces", ["j", "failed", "infra", "h"]),  # not a token: never passed on as is
        ("policy", "runner-policy", ["j", "policy", "runner-policy", "h"]),
        ("policy", "worker-abort", ["j", "policy", "worker-abort", "h"]),
        ("policy", "cost-cap", ["j", "policy", "cost-cap", "h"]),  # the runner's own stop
        ("policy", "operator-cancel", None),
        ("policy", "job-image-missing", None),  # refused before spend
        ("completed", None, None),
    ],
)
def test_when_the_hook_fires(outcome: str, reason: str | None, expected: list[str] | None) -> None:
    assert hook_args("j", outcome, reason, "h") == expected


def test_an_argument_that_reads_as_an_option_stops_the_hook() -> None:
    assert hook_args("-rf", "failed", "infra", "h") is None


async def test_a_hook_past_its_timeout_is_stopped(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = tmp_path / "slow.sh"
    script.write_text(f"#!/bin/sh\nsleep 30 &\necho $! > {pid_file}\nwait\n")  # a child of the hook too
    script.chmod(0o755)
    started = time.monotonic()
    with capture_logs() as logs:
        assert await run_hook(str(script), ["j", "failed", "infra", "h"], 300, dict(os.environ)) is None
    assert time.monotonic() - started < 5
    stat = Path(f"/proc/{int(pid_file.read_text())}/stat")

    def stopped() -> bool:
        # Gone, or a zombie waiting for whoever adopted it: either way no longer running. The group's
        # SIGKILL is delivered asynchronously, so a loaded machine may show it running for a moment.
        try:
            return stat.read_text().split(") ", 1)[1].startswith("Z")
        except FileNotFoundError:
            return True

    await wait_for(stopped, 5, what="the hook's child to be stopped")
    assert [(e["event"], e["detail"]) for e in logs] == [("on_failure", "timeout")]


async def test_a_hook_exit_code_is_logged(tmp_path: Path) -> None:
    script = tmp_path / "exit3.sh"
    script.write_text("#!/bin/sh\nexit 3\n")
    script.chmod(0o755)
    with capture_logs() as logs:
        assert await run_hook(str(script), ["j", "failed", "infra", "h"], 5000, {}) == 3
    assert logs[0]["code"] == 3 and logs[0]["job"] == "j"
