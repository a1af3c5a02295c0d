"""The egress proxy: one squid container per worker host and deployment (and set of rules), brought up by
the worker itself (``pi-dispatch egress-image build`` makes its image), on Docker's bridge so it can reach
out.

Jobs never share the bridge with it: each job's internal network has two members, the job and this proxy.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import aiodocker
import aiohttp
from aiodocker.exceptions import DockerError

from pidispatch.common.egresssettings import DEFAULT_SUBNETS
from pidispatch.common.instance import LABEL_INSTANCE
from pidispatch.common.log import get_logger
from pidispatch.common.settings import Settings
from pidispatch.worker.egress.network import NetworkPool
from pidispatch.worker.egress.rules import (
    LABEL_ROLE,
    destinations,
    proxy_name,
    squid_rules,
    unreachable_providers,
)
from pidispatch.worker.engine import dockerapi
from pidispatch.worker.engine.container import LABEL_HOST
from pidispatch.worker.engine.runner import DockerUnavailable, force_remove, is_unreachable

ROLE_PROXY = "egress-proxy"
# The image runs squid as its own unprivileged user (proxy, uid 13) with no capability at all; the one
# file it writes at start (its rules) lives on a tmpfs, so its root filesystem is read-only.
RULES_DIR = "/run/pd-egress"
PROXY_UID = 13
PROXY_MEMORY = 256 * 1024**2
READY_LINE = "Accepting HTTP Socket connections"
READY_S = 20.0


class EgressRefused(Exception):
    """The proxy cannot be brought up for a reason a retry will not fix: the job is refused with
    ``reason`` (``egress-proxy-missing``: no image on this daemon; ``egress-proxy-failed``: Docker refused
    to create or start it)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True)
class ProxySpec:
    name: str
    host: str  # the worker that owns it: its label, as on that worker's job containers
    instance: str  # this deployment's id (common.instance): found by it, never by the host alone
    image: str
    rules: str


def proxy_config(spec: ProxySpec) -> dict[str, Any]:
    """Pure: the Docker create body of the proxy container. Not configurable downward, like a job's."""
    return {
        "Image": spec.image,
        "Env": [f"PD_EGRESS_RULES={spec.rules}"],
        "Labels": {LABEL_ROLE: ROLE_PROXY, LABEL_HOST: spec.host, LABEL_INSTANCE: spec.instance},
        "HostConfig": {
            "NetworkMode": "bridge",
            "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges"],
            "ReadonlyRootfs": True,
            "Tmpfs": {RULES_DIR: f"uid={PROXY_UID},gid={PROXY_UID},mode=0755,size=1m"},
            "Memory": PROXY_MEMORY,
            "MemorySwap": PROXY_MEMORY,
            "PidsLimit": 256,
            "Init": True,
            # Back after a daemon restart; a worker that finds it stopped starts it again anyway.
            "RestartPolicy": {"Name": "unless-stopped"},
        },
    }


async def _state(docker: aiodocker.Docker, name: str) -> dict[str, object] | None:
    try:
        info = await docker.containers.get(name)
        state = info["State"]
        return state if isinstance(state, dict) else {}
    except DockerError as exc:
        if exc.status == 404:
            return None
        raise


async def _ready(docker: aiodocker.Docker, name: str) -> None:
    """Until squid says it accepts connections (about a second after its start), bounded."""
    deadline = time.monotonic() + READY_S
    container = docker.containers.container(name)
    while time.monotonic() < deadline:
        lines = await container.log(stdout=True, stderr=True, tail=200)
        if any(READY_LINE in line for line in lines):
            return
        await asyncio.sleep(0.1)
    get_logger().warning("egress_proxy_slow", proxy=name, waited_s=READY_S)


async def _bring_up(docker: aiodocker.Docker, spec: ProxySpec) -> None:
    state = await _state(docker, spec.name)
    if state is not None and state.get("Running"):
        return
    if state is None:
        try:
            await docker.containers.create(proxy_config(spec), name=spec.name)
        except DockerError as exc:
            if exc.status == 404:
                raise EgressRefused("egress-proxy-missing", f"no image {spec.image}") from None
            if exc.status != 409:  # 409: another worker on this daemon created it first
                raise
    try:
        await docker.containers.container(spec.name).start()
    except DockerError as exc:
        if exc.status != 304:  # 304: already started by another worker
            raise
    get_logger().info("egress_proxy_started", proxy=spec.name)
    await _ready(docker, spec.name)


class EgressProxy:
    """Brings the proxy up once per worker, and again whenever a job finds it gone or stopped. Its name,
    labels and networks need this deployment's id, known once Redis answered: ``start`` sets it."""

    def __init__(
        self, docker: aiodocker.Docker, *, host: str, image: str, rules: str, subnets: str = DEFAULT_SUBNETS,
    ) -> None:
        self.docker, self.host, self.image, self.rules, self.subnets = docker, host, image, rules, subnets
        self._lock = asyncio.Lock()
        self.spec = ProxySpec(name="", host=host, instance="", image=image, rules=rules)
        self.networks = NetworkPool(docker, host, "", "")

    def start(self, instance: str) -> None:
        name = proxy_name(self.host, instance, self.rules, self.image)
        self.spec = ProxySpec(name=name, host=self.host, instance=instance, image=self.image,
                              rules=self.rules)
        self.networks = NetworkPool(self.docker, self.host, name, instance, self.subnets)

    @property
    def name(self) -> str:
        return self.spec.name

    async def ensure(self) -> None:
        """Raises ``EgressRefused`` or ``DockerUnavailable`` (the daemon does not answer)."""
        if not self.spec.instance:
            raise DockerUnavailable("the deployment's id is not known yet (Redis has not answered)")
        async with self._lock:
            try:
                await _bring_up(self.docker, self.spec)
            except DockerError as exc:
                if is_unreachable(exc):
                    raise DockerUnavailable(f"Docker unavailable: {exc.message}") from None
                raise EgressRefused("egress-proxy-failed", f"{exc.status}: {exc.message}"[:200]) from None
            except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
                raise DockerUnavailable(f"Docker unavailable: {type(exc).__name__}") from None


def egress_for(
    settings: Settings, docker: aiodocker.Docker, forge_urls: tuple[str, ...],
) -> EgressProxy | None:
    """This worker's proxy, or None with egress off; either way said once at start."""
    log = get_logger()
    if not settings.egress.enabled:
        log.warning("egress_off", why="PI_EGRESS=0: job containers sit on Docker's bridge, the network open")
        return None
    dests = destinations(settings, forge_urls)
    rules = squid_rules(dests)
    log.info("egress_on", destinations=len(dests), image=settings.egress.image)
    for provider in unreachable_providers(settings):
        log.warning("egress_provider_unknown", provider=provider,
                    fix="name its API host in PI_EGRESS_ALLOWLIST, or set PI_MODEL_BASE_URL")
    return EgressProxy(docker, host=settings.worker_name, image=settings.egress.image, rules=rules,
                       subnets=settings.egress.subnets)


async def reap_proxies(docker: aiodocker.Docker, host: str, instance: str, keep: str | None) -> int:
    """At boot: remove this host's proxies of this deployment other than ``keep`` (made for rules or an
    image it no longer has) that no job network holds any more. Returns how many; Docker failing skips it."""
    mine = json.dumps({"label": [f"{LABEL_ROLE}={ROLE_PROXY}", f"{LABEL_HOST}={host}",
                                 f"{LABEL_INSTANCE}={instance}"]})
    removed = 0
    try:
        for container in await docker.containers.list(all=True, filters=mine):
            info = dockerapi.listed(container)
            names = [str(n).lstrip("/") for n in info.get("Names") or []]
            networks = set((info.get("NetworkSettings") or {}).get("Networks") or {})
            if keep in names or networks - {"bridge"}:
                continue
            await force_remove(container)
            removed += 1
    except DockerError as exc:
        get_logger().warning("egress_proxy_reap_skipped", status=exc.status)
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        get_logger().warning("egress_proxy_reap_skipped", error=type(exc).__name__)
    return removed
