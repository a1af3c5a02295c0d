"""Each job's own internal network: no route out, and two members, the job and the egress proxy.

It is made before the job's container and removed with it (after the run's record), so a re-attach after
a crash finds it still there. Networks carry the job's and this host's labels; the boot reaper removes
this host's leftovers, never another's.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import aiodocker
import aiohttp
from aiodocker.exceptions import DockerError

from pidispatch.common.log import get_logger
from pidispatch.worker.egress.proxy import LABEL_ROLE
from pidispatch.worker.egress.rules import PROXY_PREFIX
from pidispatch.worker.engine.container import LABEL_HOST, LABEL_JOB, container_name
from pidispatch.worker.engine.runner import DockerUnavailable, is_unreachable

ROLE_NETWORK = "egress-net"
DENIED = "TCP_DENIED/"


def network_name(job_id: str) -> str:
    return container_name(job_id) + "-net"


def _unavailable(exc: BaseException) -> DockerUnavailable:
    return DockerUnavailable(f"Docker unavailable: {type(exc).__name__}")


async def open_network(docker: aiodocker.Docker, job_id: str, host: str, proxy: str) -> str:
    """Create (or find, after a crash) the job's network and connect the proxy; returns its name.

    Raises ``DockerUnavailable`` when the daemon does not answer or refuses: the job is held, not spent.
    """
    name = network_name(job_id)
    labels = {LABEL_JOB: job_id, LABEL_HOST: host, LABEL_ROLE: ROLE_NETWORK}
    try:
        try:
            net = await docker.networks.create({
                "Name": name, "Internal": True, "CheckDuplicate": True, "Labels": labels,
                # No address for the host on this bridge: an internal network still routes a job to the
                # host itself (any service listening on 0.0.0.0 there), and this takes that route away.
                "Options": {"com.docker.network.bridge.inhibit_ipv4": "true"},
            })
        except DockerError as exc:
            if exc.status != 409:
                raise
            net = await docker.networks.get(name)  # made by an attempt that did not get further
        try:
            await net.connect({"Container": proxy})
        except DockerError as exc:
            if exc.status != 403 and "already exists" not in exc.message:  # connected by that attempt
                raise
    except DockerError as exc:
        if not is_unreachable(exc):
            get_logger().warning("egress_network_failed", job=job_id, status=exc.status)
        raise _unavailable(exc) from None
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        raise _unavailable(exc) from None
    return name


async def _job_networks(docker: aiodocker.Docker, job_id: str | None, host: str) -> list[dict[str, Any]]:
    labels = [f"{LABEL_HOST}={host}", f"{LABEL_ROLE}={ROLE_NETWORK}"]
    if job_id is not None:
        labels.append(f"{LABEL_JOB}={job_id}")
    found = await docker.networks.list(filters={"label": labels})
    return found


def count_denied(lines: list[str], subnets: list[str]) -> int:
    """Pure: the proxy's refusals (squid's native log: time, elapsed, client, TCP_DENIED/403, ...) of
    clients inside ``subnets``, the job's network."""
    nets = []
    for subnet in subnets:
        try:
            nets.append(ipaddress.ip_network(subnet, strict=False))
        except ValueError:
            continue
    n = 0
    for line in lines:
        fields = line.split()
        if len(fields) < 4 or not fields[3].startswith(DENIED):
            continue
        try:
            client = ipaddress.ip_address(fields[2])
        except ValueError:
            continue
        n += any(client in net for net in nets)
    return n


async def _denied(docker: aiodocker.Docker, proxy: str, info: dict[str, Any], since: int) -> int:
    subnets = [c.get("Subnet", "") for c in ((info.get("IPAM") or {}).get("Config") or [])]
    try:
        lines = await docker.containers.container(proxy).log(stdout=True, since=since)
    except DockerError:
        return 0
    return count_denied(lines, subnets)


async def close_networks(
    docker: aiodocker.Docker, job_id: str | None, host: str, *, since: int = 0,
) -> int:
    """Remove this host's job networks (one job's, or all: the reaper, once their containers are gone):
    the proxy is disconnected first. Returns the proxy's refusals of those jobs since ``since`` (epoch s).

    A network that will not go is logged and left for the next boot's reaper: it never changes an outcome.
    """
    denied = 0
    try:
        for row in await _job_networks(docker, job_id, host):
            denied += await _close_one(docker, row, since)
    except DockerError as exc:
        get_logger().warning("egress_network_left", job=job_id, status=exc.status)
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        raise _unavailable(exc) from None
    return denied


async def _close_one(docker: aiodocker.Docker, row: dict[str, Any], since: int) -> int:
    net = await docker.networks.get(row["Id"])
    info = await net.show()
    members = info.get("Containers") or {}
    denied = 0
    for member in members.values():
        name = str(member.get("Name") or "")
        if name.startswith(PROXY_PREFIX):
            denied += await _denied(docker, name, info, since)
            try:
                await net.disconnect({"Container": name, "Force": True})
            except DockerError as exc:
                if exc.status != 404:
                    raise
    await net.delete()
    return denied



async def reap_networks(docker: aiodocker.Docker, host: str) -> int:
    """At boot, after the container reaper: remove this host's job networks whose job has no container
    left (its run was recorded, or none ever started). Returns how many; Docker failing skips it."""
    removed = 0
    try:
        for row in await _job_networks(docker, None, host):
            job_id = (row.get("Labels") or {}).get(LABEL_JOB, "")
            mine = json.dumps({"label": [f"{LABEL_JOB}={job_id}", f"{LABEL_HOST}={host}"]})
            if job_id and await docker.containers.list(all=True, filters=mine):
                continue  # its container is kept for a re-attach: so is its network
            await _close_one(docker, row, since=0)
            removed += 1
    except DockerError as exc:
        get_logger().warning("egress_network_reap_skipped", status=exc.status)
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        get_logger().warning("egress_network_reap_skipped", error=type(exc).__name__)
    if removed:
        get_logger().warning("egress_networks_removed", count=removed)
    return removed
