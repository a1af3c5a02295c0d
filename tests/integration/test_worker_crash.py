"""Crash safety of the worker with real processes killed -9, a real Redis restarted with its append-only file,
and real containers: nothing lost, nothing run twice, nothing paid twice."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import aiodocker
import pytest

from pidispatch.common.keys import WORKER_GROUP, Keys
from pidispatch.common.models import Job, decode_fields
from pidispatch.common.redis import Redis, create_redis
from tests.support.polling import wait_for
from tests.support.processes import RedisProcess, ServiceProcess
from tests.support.worker import enqueue, issue_job, kill_tree

# Short liveness so a dead host's row expires in a second or two instead of 90 s.
FAST_LIVENESS = {"PD_HOST_BEAT_MS": "200", "PD_HOST_TTL_MS": "1500"}


async def job_state(redis: Redis, keys: Keys, job: Job) -> dict[str, str]:
    return decode_fields(await redis.hgetall(keys.job(job.id)))


async def job_containers(docker: aiodocker.Docker, job: Job) -> list[Any]:
    return await docker.containers.list(all=True, filters=json.dumps({"label": [f"pd.job={job.id}"]}))


def read_record(env: dict[str, str], job: Job) -> dict[str, Any] | None:
    path = Path(env["PI_LOGS_DIR"]) / f"{job.id}.json"
    return json.loads(path.read_text()) if path.exists() else None


async def test_restarted_worker_reattaches_and_exactly_one_container_runs_and_one_record_completes(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    job = issue_job("exit=0 sleep=3")
    first = ServiceProcess("worker", env, tmp_path / "first.log")
    second = ServiceProcess("worker", env, tmp_path / "second.log")
    try:
        first.start()
        await enqueue(redis, keys, job)
        await wait_for(lambda: first.logged("job_started"), 60, what="the container to start")
        container = (await job_state(redis, keys, job))["container"]
        kill_tree(first)
        assert len(await job_containers(docker, job)) == 1  # it keeps running without its worker
        second.start()
        await wait_for(lambda: second.logged("job_finished"), 30, what="the restarted worker to finish")
        assert second.stop() == 0
    finally:
        first.stop()
        second.stop()
    assert second.logged("job_reattached")[0]["container"] == container[:12]
    assert not second.logged("job_started")
    assert [e["job"] for e in first.logged("job_started")] == [job.id]
    rec = read_record(env, job)
    assert rec is not None and (rec["outcome"], rec["exitCode"], rec["attempt"]) == ("completed", 0, 1)
    assert rec["turns"] == 1  # output printed before the re-attach is replayed
    assert (await job_state(redis, keys, job))["container"] == container
    assert (await redis.xpending(keys.jobs, WORKER_GROUP))["pending"] == 0
    assert await job_containers(docker, job) == []
    assert os.listdir(env["PI_JOBS_DIR"]) == []


async def test_peer_records_a_dead_hosts_started_job_worker_lost_and_starts_no_second_container(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    job = issue_job("exit=0 sleep=60")
    dead = ServiceProcess("worker", {**env, **FAST_LIVENESS}, tmp_path / "dead.log")
    peer_env = {**env, **FAST_LIVENESS, "PI_WORKER_NAME": env["PI_WORKER_NAME"] + "-peer"}
    peer = ServiceProcess("worker", peer_env, tmp_path / "peer.log")
    try:
        dead.start()
        await enqueue(redis, keys, job)
        await wait_for(lambda: dead.logged("job_started"), 60, what="the container to start")
        kill_tree(dead)  # never restarted
        # The dead host's Docker is out of the peer's sight (here: its container is gone with it).
        (gone,) = await job_containers(docker, job)
        await gone.delete(force=True)
        peer.start()
        await wait_for(lambda: read_record(env, job), 30, what="the peer to record the lost job")
        await wait_for(lambda: peer.logged("job_finished"), 10, what="the peer to ack it")
        assert peer.stop() == 0
    finally:
        dead.stop()
        peer.stop()
    rec = read_record(env, job)
    assert rec is not None and (rec["outcome"], rec["reason"], rec["host"]) == (
        "failed", "worker-lost", peer_env["PI_WORKER_NAME"]
    )
    assert peer.logged("jobs_taken_over") and not peer.logged("job_started")
    assert await job_containers(docker, job) == []  # no second container
    assert await redis.xpending(keys.jobs, WORKER_GROUP) == {
        "pending": 0, "min": None, "max": None, "consumers": []
    }


async def test_peer_on_the_dead_hosts_docker_daemon_records_its_containers_true_outcome(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    job = issue_job("exit=0 sleep=3")
    dead = ServiceProcess("worker", {**env, **FAST_LIVENESS}, tmp_path / "dead.log")
    peer_env = {**env, **FAST_LIVENESS, "PI_WORKER_NAME": env["PI_WORKER_NAME"] + "-peer"}
    peer = ServiceProcess("worker", peer_env, tmp_path / "peer.log")
    try:
        dead.start()
        await enqueue(redis, keys, job)
        await wait_for(lambda: dead.logged("job_started"), 60, what="the container to start")
        kill_tree(dead)  # never restarted; its container, labelled with its name, runs on
        peer.start()
        await wait_for(lambda: peer.logged("job_finished"), 60, what="the peer to finish the job")
        assert peer.stop() == 0
    finally:
        dead.stop()
        peer.stop()
    rec = read_record(env, job)
    assert rec is not None
    assert (rec["outcome"], rec["exitCode"], rec["host"]) == ("completed", 0, peer_env["PI_WORKER_NAME"])
    assert peer.logged("job_reattached") and not peer.logged("job_started")
    assert await job_containers(docker, job) == []  # removed after the record, under its own label
    assert os.listdir(env["PI_JOBS_DIR"]) == []


# The first worker dies (SIGKILL, at a fixed point) before any container exists, or once its container is
# created and not started. The second case was found by the schedule fault test: a peer seeing the dead
# host's never-started container recorded worker-lost, though nothing was spent; it removes it and runs.
@pytest.mark.parametrize(("point", "state", "removes_one", "deadline_s"), [
    ("worker_before_launch", "starting", False, 30),
    ("worker_after_create", "launching", True, 60),
])
async def test_job_delivered_but_never_started_on_a_dead_host_runs_once_on_the_peer(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path,
    point: str, state: str, removes_one: bool, deadline_s: float,
) -> None:
    job = issue_job("exit=0")
    dead_env = {**env, **FAST_LIVENESS, "PD_FAULT_INJECT": point}
    dead = ServiceProcess("worker", dead_env, tmp_path / "dead.log")
    peer_env = {**env, **FAST_LIVENESS, "PI_WORKER_NAME": env["PI_WORKER_NAME"] + "-peer"}
    peer = ServiceProcess("worker", peer_env, tmp_path / "peer.log")
    try:
        dead.start()
        await enqueue(redis, keys, job)
        await wait_for(lambda: dead.proc is not None and dead.proc.poll() is not None, 60, what="the crash")
        assert (await job_state(redis, keys, job))["state"] == state
        peer.start()
        await wait_for(lambda: peer.logged("job_finished"), deadline_s, what="the peer to run the job")
        assert peer.stop() == 0
    finally:
        dead.stop()
        peer.stop()
    assert bool(peer.logged("job_never_started")) == removes_one
    assert [e["job"] for e in peer.logged("job_started")] == [job.id]
    rec = read_record(env, job)
    assert rec is not None and (rec["outcome"], rec["host"]) == ("completed", peer_env["PI_WORKER_NAME"])
    assert await job_containers(docker, job) == []


async def test_redis_restarted_with_its_append_only_file_loses_and_doubles_no_job(
    env: dict[str, str], docker: aiodocker.Docker, tmp_path: Path, key_prefix: str
) -> None:
    server = RedisProcess(tmp_path / "redis", persist=True)
    server.start()
    worker_env = {**env, "REDIS_URL": server.url, "PI_CONCURRENCY": "2"}
    worker = ServiceProcess("worker", worker_env, tmp_path / "worker.log")
    jobs = [issue_job("exit=0 sleep=2", number=n) for n in range(1, 7)]
    redis = create_redis(server.url)
    keys = Keys(key_prefix)
    try:
        for job in jobs:
            await enqueue(redis, keys, job)
        worker.start()
        await wait_for(lambda: len(worker.logged("job_started")) >= 2, 30, what="two jobs to run")
        server.stop()  # two containers run, four jobs wait in the stream
        await wait_for(lambda: worker.logged("redis_unreachable"), 60, what="the worker to notice")
        server.start()
        await redis.aclose()
        redis = create_redis(server.url)  # the old connection died with the server
        await wait_for(
            lambda: all(read_record(env, j) for j in jobs) and len(worker.logged("job_finished")) >= 6,
            90, what="every job to finish",
        )
        pending = await redis.xpending(keys.jobs, WORKER_GROUP)
        states = [(await job_state(redis, keys, j)).get("state") for j in jobs]
    finally:
        worker.stop()
        await redis.aclose()
        server.stop()
    started = sorted(e["job"] for e in worker.logged("job_started"))
    assert started == sorted(j.id for j in jobs)  # each job's container started exactly once
    assert sorted(e["job"] for e in worker.logged("job_finished")) == sorted(j.id for j in jobs)
    assert all((read_record(env, j) or {}).get("outcome") == "completed" for j in jobs)
    assert pending["pending"] == 0 and states == ["completed"] * 6


@pytest.mark.parametrize("point", ["worker_after_launching", "worker_after_create"])
async def test_worker_killed_between_launching_and_the_start_runs_the_job_once_on_restart(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path, point: str
) -> None:
    # Found by the chaos suite: the state said "launching", no container had started, and the restarted
    # worker recorded worker-lost for a job that never ran.
    job = issue_job("exit=0")
    dead = ServiceProcess("worker", {**env, "PD_FAULT_INJECT": point}, tmp_path / "dead.log")
    again = ServiceProcess("worker", env, tmp_path / "again.log")
    try:
        dead.start()
        await enqueue(redis, keys, job)
        await wait_for(lambda: dead.proc is not None and dead.proc.poll() is not None, 60, what="the crash")
        assert (await job_state(redis, keys, job))["state"] == "launching"
        again.start()
        await wait_for(lambda: again.logged("job_finished"), 60, what="the restarted worker to run it")
        assert again.stop() == 0
    finally:
        dead.stop()
        again.stop()
    assert again.logged("job_never_started")
    assert [e["job"] for e in again.logged("job_started")] == [job.id]
    assert not dead.logged("job_started")
    rec = read_record(env, job)
    assert rec is not None and (rec["outcome"], rec["attempt"]) == ("completed", 1)
    assert await job_containers(docker, job) == []
