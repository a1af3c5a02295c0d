"""The worker against a real Redis and a real Docker daemon, run in-process with a stop event.

Jobs are enqueued the way the router does (``job_to_fields`` + XADD); the test image's agent reads
``pd-test exit=<n> sleep=<s>`` from the issue body in its prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import aiodocker
from structlog.testing import capture_logs

from pidispatch.common.keys import WORKER_GROUP, Keys
from pidispatch.common.models import Job
from pidispatch.common.redis import Redis, create_redis
from pidispatch.console.control import fleet_status
from tests.support.polling import wait_for
from tests.support.processes import RedisProcess
from tests.support.worker import DockerSocketProxy, enqueue, issue_job, record, running_worker


async def job_containers(docker: aiodocker.Docker, job: Job) -> list[Any]:
    return await docker.containers.list(all=True, filters=json.dumps({"label": [f"pd.job={job.id}"]}))


async def pending_ids(redis: Redis, keys: Keys) -> list[str]:
    rows = await redis.xpending_range(keys.jobs, WORKER_GROUP, min="-", max="+", count=100)
    return [r["message_id"].decode() for r in rows]


async def state(redis: Redis, keys: Keys, job: Job) -> dict[str, str]:
    raw = await redis.hgetall(keys.job(job.id))
    return {k.decode(): v.decode() for k, v in raw.items()}


async def _state_is(redis: Redis, keys: Keys, job: Job, wanted: str) -> dict[str, str] | None:
    st = await state(redis, keys, job)
    return st if st.get("state") == wanted else None


async def test_worker_runs_job_in_isolated_container_and_records_completed(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, worker_name: str
) -> None:
    # Long enough to inspect it running on a loaded machine (the suite runs several tests at a time).
    job = issue_job("exit=0 sleep=10")
    async with running_worker(env, redis, keys, docker) as (settings, _, _):
        await enqueue(redis, keys, job)
        containers = await wait_for(lambda: job_containers(docker, job), 60, what="the job's container")
        info = await containers[0].show()
        host = info["HostConfig"]
        assert host["CapDrop"] == ["ALL"]
        assert host["SecurityOpt"] == ["no-new-privileges"]
        assert host["PidsLimit"] == 512
        assert host["Memory"] == host["MemorySwap"] == 256 * 1024**2
        assert host["NanoCpus"] == 1_000_000_000
        assert host["Init"] is True and host["AutoRemove"] is False and host["Privileged"] is False
        assert info["Config"]["User"] == "1000:1000"
        # The image's own labels are inherited; the worker adds exactly these three (pd.instance: this
        # deployment's id, kept in Redis, by which it finds its own containers).
        own = {k: v for k, v in info["Config"]["Labels"].items() if not k.startswith("dev.pi-dispatch.")}
        instance = (await redis.get(keys.instance) or b"").decode()
        assert own == {"pd.job": job.id, "pd.host": worker_name, "pd.instance": instance} and instance
        assert info["Name"] == f"/pi-job-{job.id}"
        mounts = {m["Destination"]: m for m in info["Mounts"]}
        assert mounts["/job"]["RW"] is False and mounts["/workspace"]["RW"] is True
        assert not any(e.startswith(("REDIS_URL=", "PD_KEY_PREFIX=")) for e in info["Config"]["Env"])

        # The agent writes before it sleeps: the file is there while the container still runs.
        marker = Path(mounts["/workspace"]["Source"]) / "agent-was-here"
        # The agent creates the file, then writes it: wait for its content, not only for the name.
        written = await wait_for(
            lambda: marker.exists() and marker.read_text().strip(), 10, what="the agent's marker file"
        )
        assert written == "1000"
        assert marker.stat().st_uid == 1000
        # The hash says "running" once the worker has seen the start succeed (just after the agent began).
        st = await wait_for(
            lambda: _state_is(redis, keys, job, "running"), 10, what="the job hash to say running"
        )
        assert st["host"] == worker_name and st["attempt"] == "1"
        assert st["container"] == info["Id"]

        rec = await record(settings, job)
        assert (rec["outcome"], rec["reason"], rec["exitCode"], rec["turns"]) == ("completed", None, 0, 1)
        assert rec["tokens"] == {"input": 1, "output": 1, "total": 2, "cost": 0}
        assert rec["target"] == "Codertocat/Hello-World#1" and rec["host"] == worker_name
        await wait_for(lambda: _acked(redis, keys), 10, what="the entry to be acked")
        assert await job_containers(docker, job) == []
        assert not Path(mounts["/job"]["Source"]).exists()
        assert (await state(redis, keys, job))["state"] == "completed"


async def _acked(redis: Redis, keys: Keys) -> bool:
    return await pending_ids(redis, keys) == []


async def test_exit_code_decides_the_recorded_outcome(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    policy, failed = issue_job("exit=2"), issue_job("exit=1")
    async with running_worker(env, redis, keys, docker) as (settings, _, _):
        await enqueue(redis, keys, policy)
        await enqueue(redis, keys, failed)
        rec_policy, rec_failed = await record(settings, policy), await record(settings, failed)
        await wait_for(lambda: _acked(redis, keys), 10, what="both entries to be acked")
    assert (rec_policy["outcome"], rec_policy["reason"], rec_policy["exitCode"]) == (
        "policy", "runner-policy", 2,
    )
    assert (rec_failed["outcome"], rec_failed["reason"], rec_failed["exitCode"]) == (
        "failed", "container-exit-1", 1,
    )


async def test_missing_image_is_refused_without_starting_a_container(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    job = issue_job("exit=0")
    env = {**env, "PI_JOB_IMAGE": f"pd-test-missing-{uuid.uuid4().hex[:8]}:nope"}
    with capture_logs() as logs:
        async with running_worker(env, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            rec = await record(settings, job)
            await wait_for(lambda: _acked(redis, keys), 10, what="the refused entry to be acked")
            st = await state(redis, keys, job)
            shown = await fleet_status(redis, keys)
    # Said once at start, naming the fix, before any job was refused for it.
    (missing,) = [e for e in logs if e["event"] == "job_image_missing"]
    assert missing["image"] == env["PI_JOB_IMAGE"] and "pi-dispatch job-image build" in missing["fix"]
    assert shown["imageMissing"] == [settings.worker_name]  # and pi-dispatch status names the host
    assert (rec["outcome"], rec["reason"], rec["exitCode"], rec["turns"]) == (
        "policy", "job-image-missing", None, None,
    )
    assert st["container"] == "" and st["state"] == "policy"
    assert await job_containers(docker, job) == []
    assert os.listdir(settings.jobs_dir) == []  # refused before the workspace was made


async def test_worker_reads_no_more_entries_than_free_slots(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    first, second = issue_job("exit=0 sleep=3"), issue_job("exit=0")
    async with running_worker({**env, "PI_CONCURRENCY": "1"}, redis, keys, docker) as (settings, _, _):
        first_entry = await enqueue(redis, keys, first)
        await enqueue(redis, keys, second)
        await wait_for(lambda: _is_running(redis, keys, first), 60, what="the first job to run")
        # The second entry is undelivered, not pending: a peer with a free slot could still take it.
        assert await pending_ids(redis, keys) == [first_entry]
        assert await redis.hgetall(keys.job(second.id)) == {}
        assert (await record(settings, second))["outcome"] == "completed"
        assert (await record(settings, first))["outcome"] == "completed"


async def _is_running(redis: Redis, keys: Keys, job: Job) -> bool:
    return (await state(redis, keys, job)).get("state") == "running"


async def test_shutdown_past_its_grace_leaves_the_job_running_and_the_next_start_reattaches(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    job = issue_job("exit=0 sleep=4")
    no_grace = {**env, "PI_SHUTDOWN_GRACE": "0"}
    with capture_logs() as logs:
        async with running_worker(no_grace, redis, keys, docker) as (settings, stop, task):
            entry = await enqueue(redis, keys, job)
            await wait_for(lambda: _is_running(redis, keys, job), 60, what="the job to run")
            stop.set()
            await asyncio.wait_for(task, 30)
        assert "jobs_left_running" in [e["event"] for e in logs]
        assert len(await job_containers(docker, job)) == 1  # still running, nobody stopped it
        assert await pending_ids(redis, keys) == [entry]
        assert not (Path(settings.logs_dir) / f"{job.id}.json").exists()
        # The row stays until it expires, so no peer takes the job over while this host comes back.
        assert await redis.exists(keys.host(settings.worker_name))
        async with running_worker(env, redis, keys, docker):
            rec = await record(settings, job)
    events = [e["event"] for e in logs]
    assert events.count("job_started") == 1 and "job_reattached" in events
    assert (rec["outcome"], rec["exitCode"]) == ("completed", 0)
    assert await job_containers(docker, job) == []
    assert os.listdir(settings.jobs_dir) == []


async def test_malformed_entry_goes_to_dead_and_is_acked(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    async with running_worker(env, redis, keys, docker):
        entry = (await redis.xadd(keys.jobs, {"id": "gh-x", "kind": "github", "job": "{not json"})).decode()
        dead = await wait_for(lambda: redis.xrange(keys.dead), 10, what="the dead entry")
        await wait_for(lambda: _acked(redis, keys), 10, what="the malformed entry to be acked")
    fields = {k.decode(): v.decode() for k, v in dead[0][1].items()}
    assert (fields["reason"], fields["entry"], fields["source"]) == ("malformed-job", entry, keys.jobs)


async def test_worker_without_docker_stays_up_and_leaves_jobs_in_the_stream(
    base_env: dict[str, str], redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    docker = aiodocker.Docker(url=f"unix://{tmp_path}/no-docker.sock")
    job = issue_job("exit=0")
    try:
        with capture_logs() as logs:
            async with running_worker(base_env, redis, keys, docker) as (_, _, task):
                await enqueue(redis, keys, job)
                await wait_for(lambda: any(e["event"] == "docker_unreachable" for e in logs), 10,
                               what="docker_unreachable")
                assert not task.done()
            events = [e["event"] for e in logs]
    finally:
        await docker.close()
    assert events.count("docker_unreachable") == 1
    assert "worker_started" in events
    unreachable = next(e for e in logs if e["event"] == "docker_unreachable")
    assert "jobs wait in their stream" in unreachable["hint"]
    # Nothing was read: the job is still undelivered, ready for a worker that has Docker.
    assert await pending_ids(redis, keys) == []
    assert await redis.xlen(keys.jobs) == 1


async def test_job_past_its_timeout_is_stopped_and_recorded_worker_abort(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    job = issue_job("exit=0 sleep=60")
    async with running_worker({**env, "PI_JOB_TIMEOUT": "1"}, redis, keys, docker) as (settings, _, _):
        await enqueue(redis, keys, job)
        rec = await record(settings, job)
        await wait_for(lambda: _acked(redis, keys), 10, what="the entry to be acked")
    assert (rec["outcome"], rec["reason"]) == ("policy", "worker-abort")
    assert rec["turns"] == 1  # the exit line printed before the stop is still read
    assert await job_containers(docker, job) == []


async def deliver_to(redis: Redis, keys: Keys, consumer: str, job: Job) -> str:
    """Enqueue and deliver to ``consumer`` without acking: what a worker that died mid-job leaves."""
    entry_id = await enqueue(redis, keys, job)
    await redis.xgroup_create(keys.jobs, WORKER_GROUP, id="0", mkstream=True)
    await redis.xreadgroup(WORKER_GROUP, consumer, {keys.jobs: ">"}, count=1)
    return entry_id


async def test_recorded_but_unacked_job_is_acked_on_restart_without_running_again(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, worker_name: str
) -> None:
    job = issue_job("exit=0")
    await deliver_to(redis, keys, worker_name, job)
    await redis.hset(keys.job(job.id), mapping={"state": "completed", "attempt": "1", "container": "abc"})
    with capture_logs() as logs:
        async with running_worker(env, redis, keys, docker):
            await wait_for(lambda: _acked(redis, keys), 10, what="the recorded entry to be acked")
    events = [e["event"] for e in logs]
    assert "job_already_recorded" in events and "job_started" not in events
    assert not (Path(env["PI_LOGS_DIR"]) / f"{job.id}.json").exists()  # the record is not rewritten


async def test_job_whose_container_vanished_is_recorded_worker_lost_and_not_run_again(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, worker_name: str
) -> None:
    job = issue_job("exit=0")
    await deliver_to(redis, keys, worker_name, job)
    await redis.hset(keys.job(job.id), mapping={"state": "running", "attempt": "1", "container": "f" * 64})
    with capture_logs() as logs:
        async with running_worker(env, redis, keys, docker) as (settings, _, _):
            rec = await record(settings, job)
            await wait_for(lambda: _acked(redis, keys), 10, what="the entry to be acked")
    assert (rec["outcome"], rec["reason"], rec["exitCode"]) == ("failed", "worker-lost", None)
    assert "job_started" not in [e["event"] for e in logs]
    assert await job_containers(docker, job) == []


async def test_worker_waits_out_a_docker_outage_then_runs_the_waiting_job(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    proxy = DockerSocketProxy(tmp_path / "docker.sock")
    await proxy.start()
    proxied = aiodocker.Docker(url=proxy.url)
    job = issue_job("exit=0")
    try:
        with capture_logs() as logs:
            async with running_worker(env, redis, keys, proxied) as (settings, _, _):
                await wait_for(lambda: any(e["event"] == "worker_started" for e in logs), 10)
                await proxy.stop()
                await enqueue(redis, keys, job)
                # The job's preflight finds Docker gone: the entry stays pending instead of being refused.
                await wait_for(lambda: any(e["event"] == "docker_unreachable" for e in logs), 15,
                               what="docker_unreachable")
                await proxy.start()
                rec = await record(settings, job, timeout=20)
                await wait_for(lambda: _acked(redis, keys), 10, what="the entry to be acked")
        events = [e["event"] for e in logs]
    finally:
        await proxied.close()
        with contextlib.suppress(Exception):
            await proxy.stop()
    assert rec["outcome"] == "completed"
    assert events.count("docker_unreachable") == 1 and events.count("docker_reachable") == 1
    order = [events.index(e) for e in ("docker_unreachable", "docker_reachable", "job_finished")]
    assert order == sorted(order)


async def test_worker_rides_out_a_redis_outage_and_logs_each_transition_once(
    env: dict[str, str], keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    server = RedisProcess(tmp_path / "redis")
    server.start()
    client = create_redis(server.url)
    job = issue_job("exit=0")
    try:
        with capture_logs() as logs:
            own_redis = {**env, "REDIS_URL": server.url}
            async with running_worker(own_redis, client, keys, docker) as (settings, _, task):
                await wait_for(lambda: any(e["event"] == "worker_started" for e in logs), 10)
                server.stop()
                await wait_for(lambda: any(e["event"] == "redis_unreachable" for e in logs), 15,
                               what="redis_unreachable")
                server.start()  # an empty Redis: the worker recreates its group
                await wait_for(lambda: any(e["event"] == "redis_restored" for e in logs), 60,
                               what="redis_restored")
                assert not task.done()
                await enqueue(client, keys, job)
                rec = await record(settings, job, timeout=20)
        events = [e["event"] for e in logs]
    finally:
        await client.aclose()
        server.stop()
    assert rec["outcome"] == "completed"
    assert events.count("redis_unreachable") == 1 and events.count("redis_restored") == 1
