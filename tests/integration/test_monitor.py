"""``PD_METRICS_PORT`` on the real router and worker processes: alive while they serve, ready only while
their dependencies answer, and the process series on ``/metrics``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pidispatch.common.embedded import free_port
from tests.support.polling import wait_for
from tests.support.processes import RedisProcess, ServiceProcess

Answer = tuple[int, Any]


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    # Short bounds: a poll that hangs would eat the deadline the test waits on.
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        yield session


async def ask(http: aiohttp.ClientSession, url: str) -> Answer | None:
    """The status and JSON body, or None while nothing listens yet."""
    try:
        async with http.get(url) as response:
            return response.status, await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError):
        return None


def answered(http: aiohttp.ClientSession, url: str, status: int) -> Callable[[], Any]:
    async def check() -> Answer | None:
        got = await ask(http, url)
        return got if got is not None and got[0] == status else None

    return check


@contextmanager
def service(name: str, env: dict[str, str], log: Path) -> Iterator[str]:
    """The service run as its operators run it, with the endpoint on a free port; yields its base URL."""
    port = free_port()
    proc = ServiceProcess(name, {**env, "PD_METRICS_PORT": str(port)}, log)
    proc.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        code = proc.stop()
    assert code == 0, log.read_text()[-2000:]


async def test_router_readyz_follows_redis_while_healthz_stays_ok(
    own_redis: RedisProcess, base_env: dict[str, str], tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": []}))
    env = {**base_env, "REDIS_URL": own_redis.url, "PD_ROUTER_NAME": "router-monitor"}
    with service("router", env, tmp_path / "router.log") as base:
        await wait_for(answered(http, f"{base}/readyz", 200), 15, what="the router's /readyz 200")
        assert await ask(http, f"{base}/healthz") == (200, {"status": "ok"})
        own_redis.stop()
        unready = await wait_for(answered(http, f"{base}/readyz", 503), 10, what="/readyz 503")
        assert unready == (503, {"status": "unready", "down": ["redis"]})
        assert await ask(http, f"{base}/healthz") == (200, {"status": "ok"})
        own_redis.start()
        await wait_for(answered(http, f"{base}/readyz", 200), 15, what="/readyz 200 once Redis is back")
        async with http.get(f"{base}/metrics") as response:
            body = await response.text()
    samples = {s.name: s for f in text_string_to_metric_families(body) for s in f.samples}
    assert samples["pd_service_info"].labels["service"] == "router"
    assert "process_cpu_seconds_total" in samples


async def test_worker_readyz_names_docker_until_it_answers(
    base_env: dict[str, str], tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    env = {**base_env, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    with service("worker", env, tmp_path / "worker.log") as base:
        await wait_for(answered(http, f"{base}/healthz", 200), 15, what="the worker's /healthz 200")
        unready = await wait_for(answered(http, f"{base}/readyz", 503), 5, what="/readyz 503")
        assert unready == (503, {"status": "unready", "down": ["docker"]})


async def test_worker_readyz_is_ready_with_redis_and_docker(
    require_docker: None, base_env: dict[str, str], key_prefix: str, tmp_path: Path,
    http: aiohttp.ClientSession,
) -> None:
    env = {**base_env, "PI_WORKER_NAME": f"w-{key_prefix}"}
    with service("worker", env, tmp_path / "worker.log") as base:
        await wait_for(answered(http, f"{base}/readyz", 200), 15, what="the worker's /readyz 200")
        assert await ask(http, f"{base}/healthz") == (200, {"status": "ok"})
