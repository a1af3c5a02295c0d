"""The egress proxy image (``pi-egress:latest``) as the worker runs it: on Docker's default bridge, with no
capabilities at all and ``no-new-privileges``, the allow rules in ``PD_EGRESS_RULES``. What the rules
allow is forwarded; anything else answers 403 without reaching its server, and the refusal is a
``TCP_DENIED/403`` line with the client's address on the container's stdout, which the worker counts.

The image is built before the tests (``pi-dispatch egress-image build``; ``.ci/run`` runs it, skipped by
its build hash when nothing changed). Without it the tests are skipped naming that command, unless
``PD_REQUIRE_DOCKER=1`` (CI), which makes that a failure.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiodocker
import aiohttp
import pytest
from aiodocker.containers import DockerContainer
from aiohttp import web

from pidispatch.dev.modelstandin import bridge_gateway
from tests.support.images import require_built
from tests.support.polling import wait_for

pytestmark = pytest.mark.docker

EGRESS_IMAGE = "pi-egress:latest"
REQUIRE = os.environ.get("PD_REQUIRE_DOCKER") == "1"
TEST_LABEL = {"pd.test": "egress-image"}
READY_LINE = "Accepting HTTP Socket connections"
TIMEOUT = aiohttp.ClientTimeout(total=30)


@dataclass
class Origin:
    """A plain HTTP server on the host, on every address: it records the requests that reach it."""

    port: int
    seen: list[dict[str, str]] = field(default_factory=list)


@dataclass
class Proxy:
    container: DockerContainer
    url: str
    gateway: str


@pytest.fixture
def egress_image(require_docker: None) -> str:
    return require_built(EGRESS_IMAGE, "egress-image", required=REQUIRE, flag="PD_REQUIRE_DOCKER")


@contextlib.asynccontextmanager
async def origin() -> AsyncIterator[Origin]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("0.0.0.0", 0))
    server = Origin(port=sock.getsockname()[1])

    async def handle(request: web.Request) -> web.Response:
        server.seen.append(dict(request.headers))
        return web.Response(text="origin")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    try:
        yield server
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def egress_proxy(docker: aiodocker.Docker, image: str, rules: str | None) -> AsyncIterator[Proxy]:
    """A proxy container started exactly as the worker starts it; removed whatever happens."""
    gateway = await bridge_gateway(docker)
    assert gateway is not None, "Docker's bridge network names no gateway"
    config: dict[str, Any] = {
        "Image": image,
        "Env": [] if rules is None else [f"PD_EGRESS_RULES={rules}"],
        "Labels": TEST_LABEL,
        "HostConfig": {"NetworkMode": "bridge", "CapDrop": ["ALL"], "SecurityOpt": ["no-new-privileges"]},
    }
    container = await docker.containers.create(config)
    try:
        await container.start()
        await wait_for(lambda: said(container, READY_LINE, stderr=True), 30, 0.1, what="squid to listen")
        address = (await container.show())["NetworkSettings"]["Networks"]["bridge"]["IPAddress"]
        yield Proxy(container, f"http://{address}:3128", gateway)
    finally:
        with contextlib.suppress(aiodocker.DockerError):
            await container.delete(force=True)


async def said(container: DockerContainer, text: str, *, stderr: bool = False) -> bool:
    lines = await container.log(stdout=not stderr, stderr=stderr)
    return any(text in line for line in lines)


async def access_log(proxy: Proxy) -> list[list[str]]:
    """The container's access log lines (squid's native format), split into fields."""
    return [line.split() for line in await proxy.container.log(stdout=True) if line.strip()]


async def denied_lines(proxy: Proxy, url: str) -> list[list[str]]:
    return [f for f in await access_log(proxy) if f[3].startswith("TCP_DENIED/403") and f[6] == url]


def allow_only(gateway: str, port: int) -> str:
    """The worker's rules for one host port on the bridge, beside a name rule that matches nothing here.
    ``-n``: a refused request never waits on DNS (no reverse lookup of an address, no lookup of a name)."""
    return "\n".join([
        "acl pd_allow_1 dstdomain -n .github.com api.example.org",
        "http_access allow pd_allow_1",
        f"acl pd_allow_2 dst -n {gateway}",
        f"acl pd_allow_2_port port {port}",
        "http_access allow pd_allow_2 pd_allow_2_port",
    ])


async def test_the_allowed_port_is_forwarded_and_another_is_refused_403_logged_with_the_client(
    docker: aiodocker.Docker, egress_image: str
) -> None:
    async with origin() as a, origin() as b:
        gateway = await bridge_gateway(docker)
        assert gateway is not None
        async with egress_proxy(docker, egress_image, allow_only(gateway, a.port)) as proxy:
            async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
                async with session.get(f"http://{gateway}:{a.port}/ok", proxy=proxy.url) as allowed:
                    assert (allowed.status, await allowed.text()) == (200, "origin")
                async with session.get(f"http://{gateway}:{b.port}/no", proxy=proxy.url) as refused:
                    assert refused.status == 403
            denied = await wait_for(
                lambda: denied_lines(proxy, f"http://{gateway}:{b.port}/no"), 10, what="the denied line"
            )
            fields = await access_log(proxy)
    assert len(a.seen) == 1 and b.seen == []
    # Nothing of the job's side leaves through the proxy (via off, forwarded_for delete).
    assert not {"Via", "X-Forwarded-For"} & set(a.seen[0])
    assert [f[2] for f in denied] == [gateway]
    (passed,) = [f for f in fields if f[6] == f"http://{gateway}:{a.port}/ok"]
    assert (passed[2], passed[3]) == (gateway, "TCP_MISS/200")



async def test_names_not_allowed_are_refused_403_for_plain_http_and_connect(
    docker: aiodocker.Docker, egress_image: str
) -> None:
    async with origin() as a:
        gateway = await bridge_gateway(docker)
        assert gateway is not None
        async with egress_proxy(docker, egress_image, allow_only(gateway, a.port)) as proxy:
            async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
                async with session.get("http://example.invalid/", proxy=proxy.url) as plain:
                    assert plain.status == 403
                with pytest.raises(aiohttp.ClientHttpProxyError) as tunnel:
                    await session.get("https://other.invalid/", proxy=proxy.url)
            assert tunnel.value.status == 403
            await wait_for(
                lambda: denied_lines(proxy, "other.invalid:443"), 10, what="the refused CONNECT's line"
            )
            fields = await access_log(proxy)
    refused = {(f[2], f[3], f[5], f[6]) for f in fields if f[3].startswith("TCP_DENIED/")}
    assert refused == {
        (gateway, "TCP_DENIED/403", "GET", "http://example.invalid/"),
        (gateway, "TCP_DENIED/403", "CONNECT", "other.invalid:443"),
    }
    assert a.seen == []


async def test_without_rules_everything_is_refused(docker: aiodocker.Docker, egress_image: str) -> None:
    async with origin() as a, egress_proxy(docker, egress_image, None) as proxy:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            url = f"http://{proxy.gateway}:{a.port}/"
            async with session.get(url, proxy=proxy.url) as refused:
                assert refused.status == 403
        info = await proxy.container.show()
    assert a.seen == []
    # The image starts squid as its unprivileged user: no capability is needed, so none is given.
    assert info["Config"]["User"] == "proxy" and info["HostConfig"]["CapDrop"] == ["ALL"]
