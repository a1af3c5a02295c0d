"""Fixtures of the integration tests: real job containers, and a Redis a test may kill and restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiodocker
import pytest

from tests.support.forges import GithubStandIn
from tests.support.processes import RedisProcess
from tests.support.worker import watching_starts


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    """A redis-server of the test's own, with its append-only file: one it may kill and restart."""
    server = RedisProcess(tmp_path / "own-redis", persist=True)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def worker_name(key_prefix: str) -> str:
    return f"w-{key_prefix}"


@pytest.fixture
def env(
    base_env: dict[str, str], worker_name: str, test_image: str, github: GithubStandIn
) -> dict[str, str]:
    return {
        **base_env,
        **github.env(),
        "PI_WORKER_NAME": worker_name,
        "PI_JOB_IMAGE": test_image,
        "PI_JOB_MEMORY": "256m",
        "PI_JOB_CPUS": "1",
        "PI_CONCURRENCY": "2",
    }


@pytest.fixture
async def docker(require_docker: None, worker_name: str) -> AsyncIterator[aiodocker.Docker]:
    client = aiodocker.Docker()
    try:
        async with watching_starts(client, worker_name):  # what container_starts reads
            yield client
    finally:
        # No container may outlive its test, whatever the test (or the watcher) did.
        leftovers = json.dumps({"label": [f"pd.host={worker_name}"]})
        for c in await client.containers.list(all=True, filters=leftovers):
            with contextlib.suppress(aiodocker.DockerError):
                await c.delete(force=True)
        # Nor a job network (egress on).
        for net in await client.networks.list(filters={"label": [f"pd.host={worker_name}"]}):
            with contextlib.suppress(aiodocker.DockerError):
                await (await client.networks.get(net["Id"])).delete()
        await client.close()


@pytest.fixture(scope="module")
def demo_image(docker_available: bool) -> str:
    """The demo agent image dev runs by default, built once per module."""
    if not docker_available:
        pytest.skip("no Docker daemon reachable")
    from pidispatch.dev.demoimage import DEMO_AGENT_SCRIPT, build_image
    from pidispatch.dev.stack import DEMO_IMAGE

    asyncio.run(build_image(DEMO_IMAGE, DEMO_AGENT_SCRIPT))
    return DEMO_IMAGE
