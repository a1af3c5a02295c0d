"""Whether a job container reaches its model: a short-lived container of the job image, on Docker's bridge
(where a job, or the egress proxy it goes out through, sits), fetches a URL with the image's own node.

``pi-dispatch dev`` proves the stand-in model's address with it before using it, and ``pi-dispatch
doctor`` checks the configured provider (or dev's stand-in) the same way. Any HTTP answer counts as
reached (a provider answers 401 to a request without a key): only no answer is a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pidispatch.worker.egress.rules import LABEL_ROLE

ROLE_PROBE = "model-probe"
PROBE_PREFIX = "pd-model-probe-"
# A name the probe's /etc/hosts maps to Docker's ``host-gateway`` (the host, as the daemon sees it).
GATEWAY_ALIAS = "pd-host-gateway"
MARK = "pd-probe"
# node's fetch, bounded; one line: "pd-probe http <status>" or "pd-probe error <code>".
_FETCH_JS = (
    "const u=process.argv[1];"
    "fetch(u,{signal:AbortSignal.timeout(+process.argv[2])})"
    f".then(r=>console.log('{MARK} http '+r.status),"
    "e=>{const c=e.cause||e;"
    f"console.log('{MARK} error '+(c.code||c.message||c.name||'unknown'));process.exitCode=3}})"
)
# The address /etc/hosts gives the alias: what ``host-gateway`` is on this daemon.
_HOSTS_JS = (
    "const l=require('fs').readFileSync('/etc/hosts','utf8').split('\\n')"
    f".find(x=>x.trim().split(/\\s+/).slice(1).includes('{GATEWAY_ALIAS}'));"
    f"console.log('{MARK} addr '+(l?l.trim().split(/\\s+/)[0]:''))"
)


@dataclass(frozen=True)
class ProbeResult:
    """``status``: the HTTP status the URL answered; else ``error`` says why it was not reached."""

    status: int | None = None
    error: str | None = None

    @property
    def reached(self) -> bool:
        return self.status is not None


def parse_output(text: str) -> tuple[str, str] | None:
    """Pure: the probe's (kind, value) from its output, None when it printed no probe line."""
    for line in reversed(text.splitlines()):
        parts = line.strip().split(" ", 2)
        if len(parts) >= 2 and parts[0] == MARK:
            return parts[1], parts[2] if len(parts) == 3 else ""
    return None


def probe_result(output: str, exit_code: int | None) -> ProbeResult:
    """Pure: what one fetch probe's output and exit code say."""
    found = parse_output(output)
    if found is None:
        if exit_code is None:
            return ProbeResult(error="the probe container did not finish in time")
        return ProbeResult(error=f"the probe container exited {exit_code} without an answer (no node in "
                                 "the image?)")
    kind, value = found
    if kind == "http" and value.isdigit():
        return ProbeResult(status=int(value))
    return ProbeResult(error=value or "no answer")


async def _run(
    docker: Any, image: str, argv: list[str], labels: Mapping[str, str], timeout_s: float,
    extra_hosts: list[str] | None = None,
) -> tuple[str, int | None]:
    """Run ``argv`` in a throw-away container of ``image``; its output and exit code (None: timed out).
    Removed in every case, so a probe never outlives its caller's deadline by more than the removal."""
    config: dict[str, Any] = {
        "Image": image, "Entrypoint": argv[:1], "Cmd": argv[1:], "Labels": {**labels, LABEL_ROLE: ROLE_PROBE},
        "HostConfig": {"NetworkMode": "bridge", "ExtraHosts": extra_hosts or [], "Memory": 256 * 2**20,
                       "PidsLimit": 64, "CapDrop": ["ALL"], "SecurityOpt": ["no-new-privileges"]},
    }
    container = await docker.containers.create(config=config, name=PROBE_PREFIX + secrets.token_hex(5))
    try:
        await container.start()
        try:
            answer = await asyncio.wait_for(container.wait(), timeout_s)
            code: int | None = int(answer.get("StatusCode", -1))
        except TimeoutError:
            code = None
        lines = await container.log(stdout=True, stderr=True)
        return "".join(lines), code
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(container.delete(force=True), 10)


async def fetch_from_job_image(
    docker: Any, image: str, url: str, labels: Mapping[str, str], timeout_s: float = 10.0,
) -> ProbeResult:
    """Whether a container of ``image`` on the bridge gets an HTTP answer from ``url``."""
    fetch_ms = max(1000, int((timeout_s - 2) * 1000))
    try:
        output, code = await _run(docker, image, ["node", "-e", _FETCH_JS, url, str(fetch_ms)], labels,
                                  timeout_s)
    except Exception as exc:  # the daemon refused the container: say so, never raise past a probe
        return ProbeResult(error=f"could not run a probe container ({type(exc).__name__})")
    return probe_result(output, code)


async def host_gateway_address(
    docker: Any, image: str, labels: Mapping[str, str], timeout_s: float = 10.0
) -> str | None:
    """The address Docker's ``host-gateway`` stands for on this daemon, as a container's /etc/hosts says;
    None when the daemon does not know the name (before 20.10) or the probe did not answer."""
    try:
        output, _ = await _run(docker, image, ["node", "-e", _HOSTS_JS], labels, timeout_s,
                               [f"{GATEWAY_ALIAS}:host-gateway"])
    except Exception:
        return None
    found = parse_output(output)
    return found[1] if found is not None and found[0] == "addr" and found[1] else None
