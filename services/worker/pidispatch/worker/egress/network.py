"""Job networks: internal, with no address for the host, and two members while a job runs, the job and the
egress proxy. A worker keeps a pool of them and hands each job a free one: making and removing a network
for every job cost ~80 ms before its start and ~140 ms after its end (measured), the pool costs one inspect.

A network is free when no running container but an egress proxy is on it (Docker lists running members
only; a job's container that exited never runs again), so a job re-attached after a restart keeps its
network to itself. The boot reaper removes this host's idle networks (never another host's).
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
from typing import Any

import aiodocker
import aiohttp
from aiodocker.exceptions import DockerError

from pidispatch.common.egresssettings import DEFAULT_SUBNETS, JOB_PREFIX_LEN
from pidispatch.common.instance import LABEL_INSTANCE
from pidispatch.common.log import get_logger
from pidispatch.worker.egress.rules import LABEL_ROLE, PROXY_PREFIX
from pidispatch.worker.engine.container import LABEL_HOST
from pidispatch.worker.engine.runner import DockerUnavailable

ROLE_NETWORK = "egress-net"
NETWORK_PREFIX = "pd-net-"
DENIED = "TCP_DENIED/"
# More than any PI_CONCURRENCY needs: a pool this full means networks held by something else.
POOL_LIMIT = 512
SUBNET_TRIES = 64


def network_name(instance: str, host: str, slot: int) -> str:
    return f"{NETWORK_PREFIX}{instance}-{host}-{slot}"


def _unavailable(exc: BaseException) -> DockerUnavailable:
    return DockerUnavailable(f"Docker unavailable: {type(exc).__name__}")


def members(info: dict[str, Any]) -> list[str]:
    """Pure: the names of the containers on an inspected network."""
    return [str(m.get("Name") or "") for m in (info.get("Containers") or {}).values()]


def holds_a_job(names: list[str]) -> bool:
    """Pure: a network with any member but an egress proxy is a running job's."""
    return any(not name.startswith(PROXY_PREFIX) for name in names)


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


def candidate_subnets(within: ipaddress.IPv4Network, name: str) -> list[str]:
    """Pure: the /29s a network named ``name`` tries, in order: from a spot its name picks, so each
    network of each host and deployment usually gets its first choice, then the ones after it."""
    count = within.num_addresses >> (32 - JOB_PREFIX_LEN)
    start = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest(), "big") % count
    base = int(within.network_address)
    size = 1 << (32 - JOB_PREFIX_LEN)
    return [f"{ipaddress.IPv4Address(base + ((start + k) % count) * size)}/{JOB_PREFIX_LEN}"
            for k in range(min(SUBNET_TRIES, count))]


class NetworkPool:
    """This worker's job networks: ``take`` one for a job before its container exists, ``release`` it
    after the job's container is removed (its refusals counted on the way)."""

    def __init__(
        self, docker: aiodocker.Docker, host: str, proxy: str, instance: str, subnets: str = DEFAULT_SUBNETS,
    ) -> None:
        self.docker, self.host, self.proxy, self.instance = docker, host, proxy, instance
        self.subnets = ipaddress.IPv4Network(subnets)
        self._lock = asyncio.Lock()
        self._held: dict[str, str] = {}  # network name -> the job it was handed to

    async def take(self, job_id: str) -> str:
        """A free network with the proxy on it. Raises ``DockerUnavailable`` (the job is held, not spent)
        when the daemon does not answer or refuses, e.g. with every address pool in use."""
        try:
            async with self._lock:
                held = next((n for n, j in self._held.items() if j == job_id), None)
                if held is not None:  # taken before a hold (Docker away before the start): still its own
                    return held
                for slot in range(POOL_LIMIT):
                    name = network_name(self.instance, self.host, slot)
                    if name in self._held:
                        continue
                    info = await self._ensure(name)
                    names = members(info)
                    if holds_a_job(names):
                        continue  # a re-attached job's, until its record
                    await self._join(name, names)
                    self._held[name] = job_id
                    return name
        except DockerError as exc:
            get_logger().warning("egress_network_failed", job=job_id, status=exc.status)
            raise _unavailable(exc) from None
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
            raise _unavailable(exc) from None
        raise DockerUnavailable(f"all {POOL_LIMIT} job networks of this host are in use")

    async def _ensure(self, name: str) -> dict[str, Any]:
        try:
            return await (await self.docker.networks.get(name)).show()
        except DockerError as exc:
            if exc.status != 404:
                raise
        labels = {LABEL_HOST: self.host, LABEL_ROLE: ROLE_NETWORK, LABEL_INSTANCE: self.instance}
        for subnet in candidate_subnets(self.subnets, name):
            try:
                net = await self.docker.networks.create({
                    "Name": name, "Internal": True, "CheckDuplicate": True, "Labels": labels,
                    # No address for the host on this bridge: an internal network still routes a job to
                    # the host itself (any service listening on 0.0.0.0 there), and this takes that away.
                    "Options": {"com.docker.network.bridge.inhibit_ipv4": "true"},
                    "IPAM": {"Config": [{"Subnet": subnet}]},
                })
            except DockerError as exc:
                if exc.status == 403 and "overlap" in exc.message.lower():
                    continue  # another network holds this /29: the next candidate
                if exc.status != 409:  # 409: made meanwhile by this host's previous process
                    raise
                net = await self.docker.networks.get(name)
            return await net.show()
        raise DockerError(503, f"no free /{JOB_PREFIX_LEN} in {self.subnets} after {SUBNET_TRIES} tries")

    async def _join(self, name: str, names: list[str]) -> None:
        """The current proxy on, and a proxy made for other rules off (its rules are not today's)."""
        net = await self.docker.networks.get(name)
        for other in names:
            if other != self.proxy:
                await net.disconnect({"Container": other, "Force": True})
        if self.proxy not in names:
            await net.connect({"Container": self.proxy})

    async def release(self, job_id: str, *, since: int) -> int:
        """Free the network handed to ``job_id``; returns the proxy's refusals of it since ``since``
        (epoch seconds). A job this process did not start (re-attached) frees nothing to count."""
        name = next((n for n, j in self._held.items() if j == job_id), None)
        if name is None:
            return 0
        try:
            info = await (await self.docker.networks.get(name)).show()
            subnets = [c.get("Subnet", "") for c in ((info.get("IPAM") or {}).get("Config") or [])]
            lines = await self.docker.containers.container(self.proxy).log(stdout=True, since=since)
            return count_denied(lines, subnets)
        except (DockerError, aiohttp.ClientError, TimeoutError, ConnectionError):
            return 0
        finally:
            self._held.pop(name, None)


async def reap_networks(docker: aiodocker.Docker, host: str, instance: str) -> int:
    """Remove ``host``'s job networks of this deployment that no job holds (no member but a proxy): at
    boot, and for a dead host whose jobs a peer took over. Returns how many; Docker failing skips it."""
    removed = 0
    try:
        labelled = await docker.networks.list(filters={"label": [
            f"{LABEL_HOST}={host}", f"{LABEL_ROLE}={ROLE_NETWORK}", f"{LABEL_INSTANCE}={instance}"]})
        for row in labelled:
            net = await docker.networks.get(row["Id"])
            names = members(await net.show())
            if holds_a_job(names):
                continue  # its job's container is kept for a re-attach: so is its network
            for name in names:
                await net.disconnect({"Container": name, "Force": True})
            await net.delete()
            removed += 1
    except DockerError as exc:
        get_logger().warning("egress_network_reap_skipped", status=exc.status)
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        get_logger().warning("egress_network_reap_skipped", error=type(exc).__name__)
    if removed:
        get_logger().info("egress_networks_removed", host=host, count=removed)
    return removed
