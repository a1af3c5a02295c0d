"""How a run ends is classified by the abort flag first, then the exit code."""

from __future__ import annotations

import pytest

from pidispatch.worker.engine.runner import Abort, RunResult, classify, never_started_code


def result(code: int, *, aborted: bool = False, reason: str | None = None) -> RunResult:
    return RunResult(exit_code=code, aborted=aborted, abort_reason=reason, tail=b"", container_id="c")


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (0, ("completed", None)),
        (1, ("failed", "container-exit-1")),
        (2, ("policy", "runner-policy")),
        (125, ("failed", "container-never-started")),
        (126, ("failed", "container-never-started")),
        (127, ("failed", "container-never-started")),
        # An OOM kill is 137 too: without a worker abort it is an unknown failure, not a policy stop.
        (137, ("failed", "container-exit-137")),
        (143, ("failed", "container-exit-143")),
    ],
)
def test_exit_codes_without_abort(code: int, expected: tuple[str, str | None]) -> None:
    assert classify(result(code)) == expected


@pytest.mark.parametrize("code", [0, 1, 2, 125, 137, 143])
def test_abort_flag_decides_whatever_the_code(code: int) -> None:
    assert classify(result(code, aborted=True, reason="job-timeout")) == ("policy", "worker-abort")


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("operator-cancel", "operator-cancel"),
        ("shutdown", "worker-abort"),
        ("job-timeout", "worker-abort"),
        ("operator-cancel ", "worker-abort"),
        ("Operator-Cancel", "worker-abort"),
        (None, "worker-abort"),
    ],
)
def test_only_the_exact_operator_cancel_reason_is_reported_as_such(reason: str | None, expected: str) -> None:
    assert classify(result(137, aborted=True, reason=reason)) == ("policy", expected)


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ('exec: "/bin/agent": stat /bin/agent: no such file or directory: unknown', 127),
        ('exec: "agent": executable file not found in $PATH: unknown', 127),
        ('exec: "/bin/agent": permission denied: unknown', 126),
        ("OCI runtime create failed: container_linux.go: cgroup error", 125),
    ],
)
def test_start_refusals_map_to_the_docker_run_codes(message: str, code: int) -> None:
    assert never_started_code(message) == code


async def test_abort_keeps_the_first_reason() -> None:
    abort = Abort()
    abort.trigger("operator-cancel")
    abort.trigger("shutdown", stop_timeout_s=3)
    assert abort.is_set()
    assert (abort.reason, abort.stop_timeout_s) == ("operator-cancel", 5)
