"""A real ``pi-dispatch dev`` in a fresh folder, driven the way a new user drives it: the banner's commands
run as printed in a clean shell, the CLI verbs in the folder find the running dev, Ctrl-C stops it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pidispatch.common.embedded import free_port
from tests.support.dev import BANNER_END, CLEAN, CLI, Dev, alive
from tests.support.polling import wait_for


@pytest.fixture
def dev_env(tmp_path: Path, demo_image: str) -> dict[str, str]:
    return {"RECEIVER_PORT": str(free_port()), "PI_JOB_IMAGE": demo_image,
            "PI_WORKER_NAME": f"devtest-{os.getpid()}-{tmp_path.name[-12:]}"}


@pytest.fixture
def started(tmp_path: Path, dev_env: dict[str, str]) -> Iterator[Dev]:
    dev = Dev(tmp_path, dev_env)
    try:
        yield dev
    finally:
        dev.stop()


def _shell(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in CLEAN.items()), "bash", "-c", line],
                          cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


async def test_the_banner_runs_as_printed_and_the_folder_finds_dev(started: Dev, tmp_path: Path) -> None:
    await wait_for(lambda: BANNER_END in started.text(), 30, what="the banner")
    banner = started.text().split("pi-dispatch dev is running", 1)[1]
    state = tmp_path / ".pi-dispatch" / "dev.json"
    assert oct(state.stat().st_mode & 0o777) == "0o600"
    commands = [li.strip() for li in banner.splitlines() if li.strip().startswith(("curl ", "cd ", "/"))]
    curl, *rest = commands
    assert curl.startswith("curl ") and f"cd {tmp_path}" in rest and len(rest) >= 8
    fired = _shell(curl, tmp_path)
    assert fired.returncode == 0 and " 202 " in fired.stdout.splitlines()[0], fired.stdout + fired.stderr
    for line in rest:
        done = _shell(line, tmp_path)
        if line.endswith(" doctor"):  # warnings allowed (a vfs Docker is one), no failure: dev is whole
            assert done.returncode in (0, 1) and " fail " not in done.stdout, done.stdout + done.stderr
            continue
        assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
        assert "REDIS_URL" not in done.stderr  # nothing stale, nothing to export

    async def dev_run_listed() -> bool:
        listed = await asyncio.to_thread(_shell, f"{CLI} runs", tmp_path)
        return listed.returncode == 0 and "demo" in listed.stdout

    await wait_for(dev_run_listed, 60, interval=0.5, what="`runs` in the folder to list dev's run")
    stale = _shell(f"REDIS_URL=redis://127.0.0.1:1/0 {CLI} status", tmp_path)
    assert stale.returncode == 1
    assert stale.stderr.splitlines()[0].startswith("pi-dispatch: REDIS_URL is set to redis://127.0.0.1:1/0")


async def test_ctrl_c_stops_dev_within_five_seconds_with_no_child_left(started: Dev, tmp_path: Path) -> None:
    await wait_for(lambda: BANNER_END in started.text(), 30, what="the banner")
    children = started.children()
    assert len(children) >= 4  # redis-server, receiver, router, worker
    sent = time.monotonic()
    started.proc.send_signal(signal.SIGINT)
    code = await asyncio.to_thread(started.proc.wait, 10)
    took = time.monotonic() - sent
    assert took < 5.0, f"dev took {took:.1f}s to stop"
    assert code == 0
    assert [pid for pid in children if alive(pid)] == []
    assert not (tmp_path / ".pi-dispatch" / "dev.json").exists()


async def test_a_port_held_by_a_silent_server_is_named_within_ten_seconds(
    tmp_path: Path, dev_env: dict[str, str]
) -> None:
    with socket.socket() as silent:
        silent.bind(("0.0.0.0", 0))
        silent.listen(16)  # accepts connections (the kernel does) and never answers
        port = silent.getsockname()[1]
        dev = Dev(tmp_path, {**dev_env, "RECEIVER_PORT": str(port)})
        try:
            code = await asyncio.to_thread(dev.proc.wait, 10)
        finally:
            dev.stop()
    lines = dev.err.read_text().strip().splitlines()
    assert code == 2
    assert f"RECEIVER_PORT={port}" in lines[-1], lines


async def test_ctrl_c_during_the_start_stops_dev_too(started: Dev, tmp_path: Path) -> None:
    await wait_for((tmp_path / ".pi-dispatch" / "redis").exists, 30, what="the start to begin")
    sent = time.monotonic()
    started.proc.send_signal(signal.SIGINT)
    children = started.children()
    code = await asyncio.to_thread(started.proc.wait, 10)
    assert time.monotonic() - sent < 5.0 and code == 0
    assert [pid for pid in children if alive(pid)] == []
    assert "pi-dispatch dev is running" not in started.text()
