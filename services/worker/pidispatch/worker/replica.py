"""``{replica}`` in ``PI_WORKER_NAME``: the compose replica number, read from this worker's own container.

Under ``docker-compose up --scale worker=N`` every replica has the same environment, so no fixed name can
be declared; the container's ``com.docker.compose.container-number`` label is distinct per replica and
survives a recreate, so a recreated worker takes its old name back and re-attaches to its job containers.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from pidispatch.common.configsyntax import REPLICA, check_worker_name
from pidispatch.common.errors import ConfigError, InfraError
from pidispatch.common.log import get_logger
from pidispatch.common.settings import Settings
from pidispatch.worker.engine.dockerapi import create_docker

if TYPE_CHECKING:
    import aiodocker

NUMBER_LABEL = "com.docker.compose.container-number"
ONEOFF_LABEL = "com.docker.compose.oneoff"
MOUNTINFO = Path("/proc/self/mountinfo")

# Docker bind-mounts these three files from <data-root>/containers/<id>/ into every container.
_OWN_MOUNT = re.compile(r"/containers/([0-9a-f]{64})/(?:hostname|hosts|resolv\.conf)(?:\s|$)")
_HEX_ID = re.compile(r"[0-9a-f]{12}|[0-9a-f]{64}")
_NUMBER = re.compile(r"[1-9][0-9]{0,8}")

NOT_A_REPLICA = (
    f"PI_WORKER_NAME uses {REPLICA} but this worker is not a compose replica (its container has no "
    f"{NUMBER_LABEL} label); accepted: run it under docker-compose, or a fixed name"
)
ONEOFF = (
    f"PI_WORKER_NAME uses {REPLICA} but this worker runs in a one-off container (docker-compose run), "
    "whose number a service replica also has; accepted: docker-compose up, or a fixed name"
)


def own_container_id(mountinfo: str, hostname: str) -> str | None:
    """Pure: this process's container id from its mount table, else a hostname that is a container id
    (Docker's default), else None (not in a Docker container, or one that hides both)."""
    for line in mountinfo.splitlines():
        found = _OWN_MOUNT.search(line)
        if found:
            return found.group(1)
    return hostname if _HEX_ID.fullmatch(hostname) else None


def replica_name(template: str, labels: Mapping[str, str]) -> str:
    """Pure: ``template`` with ``{replica}`` replaced by the container's compose number label.

    Raises ``ConfigError`` when the label is missing or not a positive integer, for a one-off container,
    and when the resulting name is not a valid worker name (a long template with a many-digit number)."""
    number = labels.get(NUMBER_LABEL)
    if number is None or not _NUMBER.fullmatch(number):
        raise ConfigError(NOT_A_REPLICA)
    if labels.get(ONEOFF_LABEL, "").lower() == "true":
        raise ConfigError(ONEOFF)
    name = template.replace(REPLICA, number, 1)
    check_worker_name(name)
    return name


async def resolve_worker_name(
    settings: Settings, docker: aiodocker.Docker, *, announce: bool = True
) -> Settings:
    """``settings`` with its ``{replica}`` filled in from this container's labels; unchanged (and no
    Docker call) for a fixed or default name. ConfigError outside a compose replica, InfraError when
    Docker does not answer."""
    if REPLICA not in settings.worker_name:
        return settings
    container_id = await _own_id()
    if container_id is None:
        raise ConfigError(NOT_A_REPLICA)
    labels = await _labels(docker, container_id)
    name = replica_name(settings.worker_name, labels)
    if announce:  # the worker's log, once; a CLI command keeps its stdout for its own output
        get_logger().info("worker_name_resolved", name=name, replica=labels[NUMBER_LABEL])
    return msgspec.structs.replace(settings, worker_name=name)


async def own_stream_settings(settings: Settings) -> Settings:
    """For a command that queues to this host's stream (``run``, ``run --trigger``) inside a replica:
    the same resolution, with its own short-lived Docker client, so the job is not queued to a stream
    literally named ``pd:jobs:worker-{replica}`` that no worker drains."""
    if REPLICA not in settings.worker_name:
        return settings

    docker = create_docker()
    try:
        return await resolve_worker_name(settings, docker, announce=False)
    finally:
        await docker.close()


async def _own_id() -> str | None:
    import socket

    def read() -> str:
        try:
            return MOUNTINFO.read_text()
        except OSError:  # not Linux, or /proc not mounted: fall back to the hostname alone
            return ""

    return own_container_id(await asyncio.to_thread(read), socket.gethostname())


async def _labels(docker: aiodocker.Docker, container_id: str) -> dict[str, str]:
    from aiodocker.exceptions import DockerError

    try:
        data = await docker.containers.container(container_id).show()
    except DockerError as exc:
        if exc.status == 404:
            # A hex hostname that is not a container here (or another daemon's socket): no labels to read.
            raise ConfigError(NOT_A_REPLICA) from None
        raise _unreachable(exc) from None
    except Exception as exc:
        raise _unreachable(exc) from None
    labels = (data.get("Config") or {}).get("Labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


def _unreachable(exc: BaseException) -> InfraError:
    return InfraError(
        f"Docker did not answer when the worker read its own container's labels for {REPLICA} in "
        f"PI_WORKER_NAME ({type(exc).__name__})"
    )
