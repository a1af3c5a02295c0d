"""``pi-dispatch dev``'s lifecycle, run as a user runs it: it removes only what it started (a container of
the same host name that it did not start survives its start and exit), its children die with it (SIGHUP
and ``kill -9`` included), the next start names and stops what an earlier dev here left running, and a
second dev in the folder is refused naming the first."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import aiodocker
import pytest

from pidispatch.common.embedded import free_port
from pidispatch.dev.ports import is_free
from pidispatch.dev.processes import command_line, start_time
from tests.support.dev import BANNER_END, Dev, alive
from tests.support.polling import poll_until, wait_for


@pytest.fixture
def dev_env(tmp_path: Path, demo_image: str) -> dict[str, str]:
    return {"RECEIVER_PORT": str(free_port()), "PI_JOB_IMAGE": demo_image,
            "PI_WORKER_NAME": f"devlife-{os.getpid()}-{tmp_path.name[-12:]}"}


async def _banner(dev: Dev) -> None:
    await wait_for(lambda: BANNER_END in dev.text(), 30, what="the banner")


async def _exits(dev: Dev, within: float) -> int:
    return await asyncio.to_thread(dev.proc.wait, within)


@pytest.fixture
async def foreign(dev_env: dict[str, str], demo_image: str) -> AsyncIterator[list[str]]:
    """Containers labelled for dev's host name that dev did not start: one with the host label alone, one
    that looks like a job of another deployment on this host."""
    docker = aiodocker.Docker()
    host = dev_env["PI_WORKER_NAME"]
    made = []
    another_job = {"pd.host": host, "pd.job": "gh-not-devs", "pd.instance": "0therdeploy"}
    for labels in ({"pd.host": host}, another_job, {"pd.host": socket.gethostname()}):
        config = {"Image": demo_image, "Entrypoint": ["sleep", "600"], "Labels": labels}
        container = await docker.containers.create(config=config, name=f"pd-foreign-{os.urandom(4).hex()}")
        await container.start()
        made.append(container.id)
    try:
        yield made
    finally:
        for cid in made:
            await (await docker.containers.get(cid)).delete(force=True)
        await docker.close()


async def _running(ids: list[str]) -> list[str]:
    docker = aiodocker.Docker()
    try:
        found = []
        for cid in ids:
            info = await (await docker.containers.get(cid)).show()
            if info["State"]["Running"]:
                found.append(cid)
        return found
    finally:
        await docker.close()


async def test_a_container_labelled_for_this_host_that_dev_did_not_start_survives_its_start_and_exit(
    tmp_path: Path, dev_env: dict[str, str], foreign: list[str]
) -> None:
    dev = Dev(tmp_path, dev_env)
    try:
        await _banner(dev)
        dev.proc.send_signal(signal.SIGINT)
        assert await _exits(dev, 10) == 0
    finally:
        dev.stop()
    assert await _running(foreign) == foreign
    # A failed start (its port taken) is an exit too.
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen(1)
        failed = Dev(tmp_path, {**dev_env, "RECEIVER_PORT": str(held.getsockname()[1])}, name="failed")
        try:
            assert await _exits(failed, 20) == 2
        finally:
            failed.stop()
    assert f"by pid {os.getpid()}" in failed.err.read_text()  # the holder is named
    assert await _running(foreign) == foreign


async def test_kill_9_of_dev_takes_its_children_down_and_the_next_start_runs(
    tmp_path: Path, dev_env: dict[str, str]
) -> None:
    dev = Dev(tmp_path, dev_env)
    try:
        await _banner(dev)
        children = dev.children()
        assert len(children) >= 4
        dev.proc.send_signal(signal.SIGKILL)
        await _exits(dev, 5)
        gone = await poll_until(lambda: not [p for p in children if alive(p)], 15)
        left = [command_line(p) for p in sorted(children) if alive(p)]
        assert gone, f"dev's children still running 15 s after it was killed: {left}"
    finally:
        dev.stop()
    again = Dev(tmp_path, dev_env, name="again")
    try:
        await _banner(again)
    finally:
        again.stop()


async def test_orphans_of_an_earlier_dev_are_named_and_stopped_and_a_reused_pid_is_left_alone(
    tmp_path: Path, dev_env: dict[str, str]
) -> None:
    # What a dev whose children outlived it (no death signal: another OS, an older version) leaves: a
    # receiver still running, and a router pid that has since gone to an unrelated process (this one).
    orphan = await asyncio.create_subprocess_exec("sleep", "600")
    gone = await asyncio.create_subprocess_exec("true")
    await gone.wait()
    try:
        state = tmp_path / ".pi-dispatch"
        state.mkdir(mode=0o700)
        children = [{"name": "receiver", "pid": orphan.pid, "start": start_time(orphan.pid)},
                    {"name": "router", "pid": os.getpid(), "start": 1}]
        earlier = {"dev": {"pid": gone.pid, "start": 1}, "children": children}
        (state / "dev.pids").write_text(json.dumps(earlier))
        dev = Dev(tmp_path, dev_env)
        try:
            await _banner(dev)
            text = dev.text()
            assert f"an earlier dev here (pid {gone.pid}) left receiver pid {orphan.pid} running" in text
            assert "router" not in text.split("left", 1)[1].splitlines()[0]
            assert await asyncio.wait_for(orphan.wait(), 5) == -signal.SIGTERM
        finally:
            dev.stop()
    finally:
        if orphan.returncode is None:
            orphan.kill()
            await orphan.wait()


async def test_a_second_dev_in_the_folder_is_refused_naming_the_first(
    tmp_path: Path, dev_env: dict[str, str]
) -> None:
    first = Dev(tmp_path, dev_env)
    try:
        await _banner(first)
        second = Dev(tmp_path, {**dev_env, "RECEIVER_PORT": str(free_port())}, name="second")
        try:
            assert await _exits(second, 15) == 1
        finally:
            second.stop()
        err = second.err.read_text()
        assert f"dev pid {first.proc.pid} already runs here" in err
        assert "RECEIVER_PORT" not in err.splitlines()[-1] and "PD_SPOOL_DIR" not in err
        assert first.proc.poll() is None  # the first goes on
    finally:
        first.stop()


async def test_sighup_stops_dev_and_every_child(tmp_path: Path, dev_env: dict[str, str]) -> None:
    dev = Dev(tmp_path, dev_env)
    try:
        await _banner(dev)
        children = dev.children()
        dev.proc.send_signal(signal.SIGHUP)
        assert await _exits(dev, 10) == 0
        assert [p for p in children if alive(p)] == []
    finally:
        dev.stop()


def _healthz(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
        return int(answer.status)


async def test_router_and_worker_each_bind_their_own_metrics_port(
    tmp_path: Path, dev_env: dict[str, str]
) -> None:
    port = free_port()
    while port >= 65535 or not is_free(port + 1):
        port = free_port()
    dev = Dev(tmp_path, {**dev_env, "PD_METRICS_PORT": str(port)})
    try:
        await _banner(dev)
        assert f"the router on port {port}, the worker on port {port + 1}" in dev.text()
        for each in (port, port + 1):
            await wait_for(lambda p=each: _answers(p), 15, what=f"/healthz on {each}")
        assert dev.proc.poll() is None
    finally:
        dev.stop()


def _answers(port: int) -> bool:
    try:
        return _healthz(port) == 200
    except OSError:
        return False
