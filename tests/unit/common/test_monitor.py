"""The monitoring endpoint (``PD_METRICS_PORT``) served for real on a free port and asked over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from pidispatch.common import __version__
from pidispatch.common.embedded import free_port
from pidispatch.common.errors import InfraError
from pidispatch.common.monitor import Monitor, monitoring, service_registry


class Down:
    """A readiness callable the test flips, as a service's loop flips its Health."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self) -> list[str]:
        return self.names


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, Down, aiohttp.ClientSession]]:
    down = Down()
    async with (
        Monitor(free_port(), down, service_registry("router")) as monitor,
        aiohttp.ClientSession() as http,
    ):
        yield f"http://127.0.0.1:{monitor.port}", down, http


async def answer(http: aiohttp.ClientSession, method: str, url: str) -> tuple[int, bytes]:
    async with http.request(method, url) as response:
        return response.status, await response.read()


async def test_healthz_answers_ok_whatever_is_down(
    served: tuple[str, Down, aiohttp.ClientSession],
) -> None:
    base, down, http = served
    assert await answer(http, "GET", f"{base}/healthz") == (200, b'{"status":"ok"}')
    down.names = ["redis"]
    assert await answer(http, "GET", f"{base}/healthz") == (200, b'{"status":"ok"}')
    assert await answer(http, "HEAD", f"{base}/healthz") == (200, b"")


async def test_readyz_names_what_is_down(served: tuple[str, Down, aiohttp.ClientSession]) -> None:
    base, down, http = served
    assert await answer(http, "GET", f"{base}/readyz") == (200, b'{"status":"ready"}')
    down.names = ["redis", "docker"]
    assert await answer(http, "GET", f"{base}/readyz") == (
        503, b'{"status":"unready","down":["redis","docker"]}'
    )
    assert (await answer(http, "HEAD", f"{base}/readyz"))[0] == 503
    down.names = []
    assert (await answer(http, "GET", f"{base}/readyz"))[0] == 200


async def test_metrics_is_the_prometheus_text_of_the_service_registry(
    served: tuple[str, Down, aiohttp.ClientSession],
) -> None:
    base, _, http = served
    async with http.get(f"{base}/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == CONTENT_TYPE_LATEST
        body = await response.text()
    samples = {s.name: s for family in text_string_to_metric_families(body) for s in family.samples}
    assert samples["pd_service_info"].labels == {"service": "router", "version": __version__}
    assert samples["pd_service_info"].value == 1
    assert "process_cpu_seconds_total" in samples
    assert "python_info" in samples


async def test_other_paths_and_methods_are_refused(served: tuple[str, Down, aiohttp.ClientSession]) -> None:
    base, _, http = served
    assert await answer(http, "GET", f"{base}/") == (404, b'{"error":"not found"}')
    assert await answer(http, "GET", f"{base}/healthz/x") == (404, b'{"error":"not found"}')
    for path in ("/healthz", "/readyz", "/metrics"):
        assert await answer(http, "POST", f"{base}{path}") == (405, b'{"error":"method not allowed"}')


async def test_a_taken_port_is_an_infra_error_naming_the_variable() -> None:
    port = free_port()
    async with Monitor(port, list, service_registry("worker")):
        with pytest.raises(InfraError) as info:
            await Monitor(port, list, service_registry("worker")).start()
    message = str(info.value)
    assert message.startswith(f"cannot listen on PD_METRICS_PORT 127.0.0.1:{port}")
    assert "\n" not in message


async def test_an_unset_port_serves_nothing() -> None:
    async with monitoring(None, "worker", list) as monitor:
        assert monitor is None


async def test_the_port_is_free_again_after_close() -> None:
    port = free_port()
    async with monitoring(port, "worker", list) as monitor:
        assert monitor is not None
    async with monitoring(port, "worker", list), aiohttp.ClientSession() as http:
        assert (await answer(http, "GET", f"http://127.0.0.1:{port}/healthz"))[0] == 200
