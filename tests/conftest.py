"""Shared fixtures: a real redis-server per test session, a key prefix per test, a real Docker daemon
and a tiny test image built by ``docker import``.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from pidispatch.common.keys import Keys
from pidispatch.common.log import configure_logging
from pidispatch.common.redis import Redis, create_redis
from tests.support.forges import ISSUE_REPO, PAT, GithubStandIn, github_forge, set_repo
from tests.support.gitserver import git_server
from tests.support.processes import RedisProcess
from tests.support.receiver import TEST_SECRET

REQUIRE_DOCKER = os.environ.get("PD_REQUIRE_DOCKER") == "1"


@pytest.fixture(autouse=True, scope="session")
def _logging_as_in_production() -> None:
    """In-process services log through the same configuration (level info) as a deployed one."""
    configure_logging("test", "info")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = RedisProcess(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server.url
    server.stop()


@pytest.fixture
def key_prefix() -> str:
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
def keys(key_prefix: str) -> Keys:
    return Keys(key_prefix)


@pytest.fixture
async def redis(redis_server: str) -> AsyncIterator[Redis]:
    client = create_redis(redis_server)
    yield client
    await client.aclose()


@pytest.fixture
def base_env(redis_server: str, key_prefix: str, tmp_path: Path) -> dict[str, str]:
    """The environment of one isolated deployment: its own prefix, folders and secret."""
    return {
        "REDIS_URL": redis_server,
        "PD_KEY_PREFIX": key_prefix,
        "WEBHOOK_SECRET": TEST_SECRET,
        "PI_LOGS_DIR": str(tmp_path / "logs"),
        "PI_JOBS_DIR": str(tmp_path / "jobs"),
        "PD_SPOOL_DIR": str(tmp_path / "spool"),
        "PI_TRIGGERS_FILE": str(tmp_path / "triggers.json"),
        # Its own host name: a worker's boot reaper takes stray containers labelled with its host, and
        # tests run side by side on one Docker daemon.
        "PI_WORKER_NAME": f"testhost-{key_prefix}",
        # The harness's own GitHub account, so a router with GitHub rules and no credentials may start;
        # no test payload's sender has this id.
        "GITHUB_SELF_ID": "424242",
        # Test schedules fire every few seconds (the default floor is a minute).
        "PI_CRON_MIN_INTERVAL_S": "1",
        # The egress filter (on by default) is proven by the tests that name it (test_egress.py, the
        # real agent's); the rest run their jobs on the bridge, as PI_EGRESS=0 does.
        "PI_EGRESS": "0",
    }


async def _docker_reachable() -> bool:
    import aiodocker

    try:
        docker = aiodocker.Docker()
    except Exception:
        return False
    try:
        await asyncio.wait_for(docker.version(), 3)
        return True
    except Exception:
        return False
    finally:
        await docker.close()


@pytest.fixture(scope="session")
def docker_available() -> bool:
    return asyncio.run(_docker_reachable())


@pytest.fixture
def require_docker(docker_available: bool) -> None:
    if not docker_available:
        if REQUIRE_DOCKER:
            pytest.fail("PD_REQUIRE_DOCKER=1 but no Docker daemon is reachable (start dockerd)")
        pytest.skip("no Docker daemon reachable (set DOCKER_HOST or start dockerd)")


@pytest.fixture(scope="session")
def test_image(docker_available: bool) -> str:
    """The test agent image: reads /job, writes /workspace, prints an exit line, exits as told.

    The issue body in prompt.md steers it: ``pd-test exit=<code> sleep=<seconds>``.
    """
    if not docker_available:
        if REQUIRE_DOCKER:
            pytest.fail("PD_REQUIRE_DOCKER=1 but no Docker daemon is reachable (start dockerd)")
        pytest.skip("no Docker daemon reachable (set DOCKER_HOST or start dockerd)")
    from pidispatch.dev.demoimage import TEST_AGENT_SCRIPT, build_image

    tag = "pd-test-agent:latest"
    asyncio.run(build_image(tag, TEST_AGENT_SCRIPT))
    return tag


@pytest.fixture
async def github(tmp_path: Path) -> AsyncIterator[GithubStandIn]:
    forge = github_forge()
    await forge.start()
    async with git_server(tmp_path / "git", username="x-access-token", token=PAT) as git:
        sha = await git.add_commit({"README.md": "Hello World\n"}, message="initial")
        set_repo(forge, ISSUE_REPO, sha=sha, clone_url=git.url, protected=True)
        try:
            yield GithubStandIn(forge, git, sha)
        finally:
            await forge.close()
