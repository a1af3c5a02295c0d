"""A real ``pi-dispatch dev`` in a fresh folder, driven the way a new user drives it: the banner's commands
run as printed in a clean shell, the CLI verbs in the folder find the running dev, Ctrl-C stops it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pidispatch.common.embedded import free_port
from tests.support.polling import wait_for

CLI = str(Path(sys.executable).with_name("pi-dispatch"))
BANNER_END = " status\n"
CLEAN = {"HOME": os.environ.get("HOME", "/root"), "PATH": "/usr/bin:/bin"}


@pytest.fixture(scope="module")
def demo_image(docker_available: bool) -> str:
    if not docker_available:
        pytest.skip("no Docker daemon reachable")
    from pidispatch.dev.demoimage import DEMO_AGENT_SCRIPT, build_image
    from pidispatch.dev.stack import DEMO_IMAGE

    asyncio.run(build_image(DEMO_IMAGE, DEMO_AGENT_SCRIPT))
    return DEMO_IMAGE


class Dev:
    """``pi-dispatch dev`` started from a clean environment in ``folder``; output kept in files."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder, self.out, self.err = folder, folder / "dev.out", folder / "dev.err"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen([CLI, "dev"], cwd=folder, env={**CLEAN, **env}, stdout=out,
                                         stderr=err, start_new_session=True)

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def children(self) -> set[int]:
        """Every process descended from dev, now."""
        parents: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        found, frontier = set(), {self.proc.pid}
        while frontier:
            frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
            found |= frontier
        return found

    def stop(self) -> None:
        """Ctrl-C, as an operator stops it; its services run in sessions of their own, so a dev that
        does not stop in time has every descendant killed by pid, never left behind."""
        if self.proc.poll() is not None:
            return
        descendants = self.children()
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            for pid in (self.proc.pid, *descendants):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.wait()


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


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
    assert [pid for pid in children if _alive(pid)] == []
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
    assert [pid for pid in children if _alive(pid)] == []
    assert "pi-dispatch dev is running" not in started.text()
