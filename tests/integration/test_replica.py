"""resolve_worker_name against the real daemon: the worker runs on the host in tests, so only where it reads
its own mount table is redirected, to one naming a container created here with compose's labels."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiodocker
import pytest

from pidispatch.common.errors import ConfigError, InfraError
from pidispatch.common.settings import load_settings
from pidispatch.worker import replica
from pidispatch.worker.replica import NOT_A_REPLICA, resolve_worker_name

MakeContainer = Callable[[dict[str, str]], Awaitable[str]]


@pytest.fixture
async def make_container(
    docker: aiodocker.Docker, test_image: str, worker_name: str
) -> AsyncIterator[MakeContainer]:
    made: list[str] = []

    async def make(labels: dict[str, str]) -> str:
        # Created, never started: inspect reads the labels all the same. pd.host lets the fixture sweep it.
        config = {"Image": test_image, "Labels": {"pd.host": worker_name, **labels}}
        container = await docker.containers.create(config)
        made.append(container.id)
        return container.id

    yield make
    for container_id in made:
        await docker.containers.container(container_id).delete(force=True)


def _inside(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, container_id: str) -> None:
    """As if this process ran in ``container_id``: the mount line Docker writes for /etc/hostname."""
    path = tmp_path / "mountinfo"
    path.write_text(
        "22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        f"85 22 254:0 /var/lib/docker/containers/{container_id}/hostname /etc/hostname rw - ext4 /dev/vda\n"
    )
    monkeypatch.setattr(replica, "MOUNTINFO", path)
    monkeypatch.setattr("socket.gethostname", lambda: "not-hex")


async def test_the_replica_number_label_names_the_worker(
    docker: aiodocker.Docker, make_container: MakeContainer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    labels = {"com.docker.compose.container-number": "2", "com.docker.compose.oneoff": "False"}
    _inside(monkeypatch, tmp_path, await make_container(labels))
    settings = load_settings({"PI_WORKER_NAME": "edge1-worker-{replica}"})
    resolved = await resolve_worker_name(settings, docker)
    assert (resolved.worker_name, resolved.worker_name_declared) == ("edge1-worker-2", True)
    assert resolved.concurrency == settings.concurrency


async def test_a_container_without_the_label_is_not_a_replica(
    docker: aiodocker.Docker, make_container: MakeContainer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _inside(monkeypatch, tmp_path, await make_container({}))
    with pytest.raises(ConfigError) as info:
        await resolve_worker_name(load_settings({"PI_WORKER_NAME": "worker-{replica}"}), docker)
    assert str(info.value) == NOT_A_REPLICA


async def test_an_id_this_daemon_does_not_know_is_not_a_replica(
    docker: aiodocker.Docker, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _inside(monkeypatch, tmp_path, secrets.token_hex(32))
    with pytest.raises(ConfigError) as info:
        await resolve_worker_name(load_settings({"PI_WORKER_NAME": "worker-{replica}"}), docker)
    assert str(info.value) == NOT_A_REPLICA


async def test_outside_any_container_the_template_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(replica, "MOUNTINFO", tmp_path / "absent")
    monkeypatch.setattr("socket.gethostname", lambda: "vm")
    unreachable = aiodocker.Docker(url=f"unix://{tmp_path / 'no.sock'}")
    try:
        with pytest.raises(ConfigError) as info:
            await resolve_worker_name(load_settings({"PI_WORKER_NAME": "worker-{replica}"}), unreachable)
    finally:
        await unreachable.close()
    assert str(info.value) == NOT_A_REPLICA


async def test_docker_not_answering_is_an_infrastructure_fault(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _inside(monkeypatch, tmp_path, secrets.token_hex(32))
    unreachable = aiodocker.Docker(url=f"unix://{tmp_path / 'no.sock'}")
    try:
        with pytest.raises(InfraError, match=r"^Docker did not answer"):
            await resolve_worker_name(load_settings({"PI_WORKER_NAME": "worker-{replica}"}), unreachable)
    finally:
        await unreachable.close()


@pytest.mark.parametrize("env", [{"PI_WORKER_NAME": "mini-1"}, {}])
async def test_a_fixed_or_default_name_needs_no_docker(env: dict[str, str], tmp_path: Path) -> None:
    settings = load_settings(env)
    unreachable = aiodocker.Docker(url=f"unix://{tmp_path / 'no.sock'}")
    try:
        assert await resolve_worker_name(settings, unreachable) is settings
    finally:
        await unreachable.close()
