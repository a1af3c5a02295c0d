"""The boot reaper: a container labelled for this host that no job owns, or whose job is recorded, is
removed before the worker starts any job; one a pending job owns is left for re-attach, and one whose
outcome nobody has recorded yet is never removed."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiodocker
import msgspec
import structlog

from pidispatch.common.instance import instance_id
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from pidispatch.worker.history.records import build_record, write_record
from tests.support.polling import wait_for
from tests.support.worker import issue_job, running_worker


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
    mine = await instance_id(redis, keys)

    def config(host: str, job: str, instance: str | None = mine) -> dict[str, Any]:
        labels = {"pd.job": job, "pd.host": host} | ({"pd.instance": instance} if instance else {})
        return {"Image": test_image, "Cmd": ["/bin/sleep", "60"], "Labels": labels,
                "HostConfig": {"AutoRemove": False}}

    stray = await docker.containers.run(config(worker_name, "gh-stray"), name=f"pi-job-stray-{worker_name}")
    other = await docker.containers.create(config("another-host", "gh-other"))
    # Another deployment on this daemon with a worker of the same name (a dev stack beside production,
    # say): its stray-looking container, and one from before the label whose job is unknown here.
    foreign = await docker.containers.create(config(worker_name, "gh-theirs", instance="another-one"))
    legacy = await docker.containers.create(config(worker_name, "gh-unknown", instance=None))
    try:
        with structlog.testing.capture_logs() as logs:
            async with running_worker(env, redis, keys, docker):
                await wait_for(
                    lambda: any(x["event"] == "stray_container_removed" for x in logs), 30,
                    what="the reaper's removal",
                )
        assert not await _exists(docker, stray.id)
        assert await _exists(docker, other.id)  # another host's container is not ours to touch
        assert await _exists(docker, foreign.id) and await _exists(docker, legacy.id)  # nor these
        removed = [x for x in logs if x["event"] == "stray_container_removed"]
        assert [x["job"] for x in removed] == ["gh-stray"]
    finally:
        for c in (stray, other, foreign, legacy):
            with contextlib.suppress(aiodocker.DockerError):
                await c.delete(force=True)


async def _exited(docker: aiodocker.Docker, config: dict[str, Any]) -> str:
    container = await docker.containers.run(config)
    await asyncio.wait_for(container.wait(), 30)
    return container.id


async def test_reaper_keeps_an_exited_container_whose_outcome_is_not_recorded_and_removes_recorded_ones(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, worker_name: str,
    test_image: str,
) -> None:
    def config(job: str) -> dict[str, Any]:
        labels = {"pd.job": job, "pd.host": worker_name}
        return {"Image": test_image, "Cmd": ["/bin/sleep", "0"], "Labels": labels}

    # Held by another host now (taken over while this one was down) and not recorded yet: its exit
    # code is the only trace of a paid run, so it stays.
    await redis.hset(keys.job("gh-held"), mapping={"state": "running", "attempt": "1", "host": "peer"})
    held = await _exited(docker, config("gh-held"))
    # Recorded (terminal), or recorded and waiting in pd:delayed for its retry: nothing more to read.
    await redis.hset(keys.job("gh-done"), mapping={"state": "completed", "attempt": "1"})
    done = await _exited(docker, config("gh-done"))
    await redis.hset(keys.job("gh-retry"), mapping={"state": "running", "attempt": "1"})
    retried = msgspec.structs.replace(issue_job("x"), id="gh-retry")
    await write_record(env["PI_LOGS_DIR"], build_record(
        retried, attempt=1, outcome="failed", reason="container-exit-1", exit_code=1, exit_info=None,
        started_at_ms=1, ended_at_ms=2, host=worker_name,
    ))
    retry = await _exited(docker, config("gh-retry"))
    try:
        with structlog.testing.capture_logs() as logs:
            async with running_worker(env, redis, keys, docker):
                await wait_for(
                    lambda: any(x["event"] == "stray_container_kept" for x in logs), 30,
                    what="the reaper to keep the unrecorded one",
                )
        assert await _exists(docker, held)
        assert not await _exists(docker, done) and not await _exists(docker, retry)
        removed = sorted(x["job"] for x in logs if x["event"] == "stray_container_removed")
        assert removed == ["gh-done", "gh-retry"]
    finally:
        with contextlib.suppress(aiodocker.DockerError):
            await docker.containers.container(held).delete(force=True)
