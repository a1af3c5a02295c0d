"""The boot reaper: a container labelled for this host that no pending job owns is removed before the
worker starts any job; one a pending job owns is left for re-attach."""

from __future__ import annotations

import contextlib

import aiodocker
import structlog

from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from tests.helpers import wait_for
from tests.worker_support import running_worker


async def _exists(docker: aiodocker.Docker, container_id: str) -> bool:
    try:
        await docker.containers.get(container_id)
        return True
    except aiodocker.DockerError:
        return False


async def test_stray_container_of_this_host_is_removed_at_boot_and_others_are_left(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, worker_name: str,
    test_image: str,
) -> None:
    def config(host: str, job: str) -> dict[str, object]:
        return {"Image": test_image, "Cmd": ["/bin/sleep", "60"],
                "Labels": {"pd.job": job, "pd.host": host}, "HostConfig": {"AutoRemove": False}}

    stray = await docker.containers.run(config(worker_name, "gh-stray"), name=f"pi-job-stray-{worker_name}")
    other = await docker.containers.create(config("another-host", "gh-other"))
    try:
        with structlog.testing.capture_logs() as logs:
            async with running_worker(env, redis, keys, docker):
                await wait_for(
                    lambda: any(x["event"] == "stray_container_removed" for x in logs), 30,
                    what="the reaper's removal",
                )
        assert not await _exists(docker, stray.id)
        assert await _exists(docker, other.id)  # another host's container is not ours to touch
        removed = [x for x in logs if x["event"] == "stray_container_removed"]
        assert [x["job"] for x in removed] == ["gh-stray"]
    finally:
        for c in (stray, other):
            with contextlib.suppress(aiodocker.DockerError):
                await c.delete(force=True)
