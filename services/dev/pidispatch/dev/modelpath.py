"""Where job containers reach the stand-in model on this host, proven before dev points jobs at it.

The host's address on Docker's bridge comes from the daemon (the bridge's IPAM ``Gateway``, which some
daemons leave out), else from the bridge interface itself (``docker0``), else from what the daemon's
``host-gateway`` stands for. Each candidate is tried in turn: the stand-in listens on it, and a
throw-away container of the job image fetches the stand-in's ``/v1/models``; the first the stand-in
sees answered is used. A host firewall that drops the bridge's traffic fails every probe, and dev says
so rather than pointing jobs at an address they cannot reach.
"""

from __future__ import annotations

import asyncio
import fcntl
import secrets
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pidispatch.dev.modelstandin import (
    STANDIN_KEY_VAR,
    STANDIN_MODEL,
    STANDIN_PROVIDER,
    ModelStandIn,
    ipam_gateway,
    subnet_first_host,
)

SIOCGIFADDR = 0x8915
BRIDGE_NAME_OPTION = "com.docker.network.bridge.name"
PROBE_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Candidate:
    address: str
    source: str  # where the address came from, for the line that names a failed attempt


def bridge_interface(info: Mapping[str, Any]) -> str:
    """Pure: the host interface of the bridge network (``docker0`` unless the daemon names another)."""
    name = (info.get("Options") or {}).get(BRIDGE_NAME_OPTION)
    return name if isinstance(name, str) and name else "docker0"


def candidates(info: Mapping[str, Any], interface_address: str | None) -> list[Candidate]:
    """Pure: the addresses to try, the daemon's word first, each once."""
    found = [
        Candidate(a, s) for a, s in (
            (ipam_gateway(info), "the bridge's gateway"),
            (interface_address, f"{bridge_interface(info)}'s address"),
            (subnet_first_host(info), "the bridge subnet's first address"),
        ) if a
    ]
    unique: dict[str, Candidate] = {}
    for c in found:
        unique.setdefault(c.address, c)
    return list(unique.values())


def interface_address(name: str) -> str | None:
    """The IPv4 address of the host interface ``name`` (SIOCGIFADDR), None when it has none here."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def unreachable_line(tried: list[tuple[Candidate, str]]) -> str:
    """Pure: what dev says when no candidate was reached from a job container."""
    listed = "; ".join(f"{c.address} ({c.source}): {why}" for c, why in tried) or "no address found"
    return (f"pi-dispatch dev: job containers reach no address of this host for the stand-in model (tried "
            f"{listed}); jobs run with no model configured. Fix: let containers on Docker's bridge reach "
            "this host (a firewall dropping docker0's traffic is the usual cause), or set a provider key "
            "(e.g. ANTHROPIC_API_KEY) or PI_MODEL_BASE_URL")


async def _try(candidate: Candidate, key: str, docker: Any, image: str, labels: Mapping[str, str]
               ) -> tuple[ModelStandIn | None, str]:
    """The stand-in on ``candidate``, proven from a job container; else None and why not."""
    from pidispatch.worker.engine.modelprobe import fetch_from_job_image

    model = ModelStandIn(key, host=candidate.address)
    try:
        await model.start()
    except OSError as exc:
        return None, f"cannot listen there ({exc.strerror or type(exc).__name__})"
    result = await fetch_from_job_image(docker, image, f"{model.base_url}/models", labels, PROBE_TIMEOUT_S)
    if result.reached and model.probes:
        return model, ""
    await model.close()
    return None, result.error or f"HTTP {result.status} from something other than the stand-in"


async def proven_standin(docker: Any, image: str, labels: Mapping[str, str]) -> ModelStandIn | None:
    """A started stand-in that a container of ``image`` has reached, or None (said on stdout, with the
    fix)."""
    from pidispatch.worker.engine.modelprobe import host_gateway_address

    key = secrets.token_urlsafe(24)
    try:
        info = await (await docker.networks.get("bridge")).show()
    except Exception:
        info = {}
    tried: list[tuple[Candidate, str]] = []
    queue = candidates(info, await asyncio.to_thread(interface_address, bridge_interface(info)))
    asked_gateway = False
    while True:
        for candidate in queue:
            model, why = await _try(candidate, key, docker, image, labels)
            if model is not None:
                if tried:
                    print(f"pi-dispatch dev: the stand-in model listens on {candidate.address} "
                          f"({candidate.source}), reached from a {image} container", flush=True)
                return model
            tried.append((candidate, why))
        if asked_gateway:
            break
        asked_gateway = True
        address = await host_gateway_address(docker, image, labels, PROBE_TIMEOUT_S)
        done = {c.address for c, _ in tried}
        queue = [Candidate(address, "Docker's host-gateway")] if address and address not in done else []
    print(unreachable_line(tried), flush=True)
    return None


async def model_standin(env: dict[str, str], labels: Mapping[str, str]) -> ModelStandIn | None:
    """The real agent image runs against the stand-in model unless the operator configured a provider (a
    key for ``PI_PROVIDER``, or ``PI_MODEL_BASE_URL``): the demo then costs nothing and needs no account."""
    import aiodocker

    from pidispatch.common.envnames import PROVIDER_KEY_VARS

    provider = (env.get("PI_PROVIDER") or "anthropic").lower()
    if env.get("PI_MODEL_BASE_URL") or any(env.get(v) for v in PROVIDER_KEY_VARS.get(provider, ())):
        return None
    docker = aiodocker.Docker()
    try:
        model = await proven_standin(docker, env["PI_JOB_IMAGE"], labels)
    finally:
        await docker.close()
    if model is not None:
        env.update({"PI_PROVIDER": STANDIN_PROVIDER, "PI_MODEL": STANDIN_MODEL, STANDIN_KEY_VAR: model.key,
                    "PI_MODEL_BASE_URL": model.base_url})
    return model
