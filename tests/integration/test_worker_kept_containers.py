"""Outcomes survive the worker: job containers are kept after their exit until their record is written, so a
worker killed -9 at any moment and restarted under the same name records each job's true outcome from its
container, starts no container twice, and removes every container after its record."""

from __future__ import annotations

import os
import time
from pathlib import Path

import aiodocker
import pytest

from pidispatch.common.keys import WORKER_GROUP, Keys
from pidispatch.common.redis import Redis
from tests.support.polling import wait_for
from tests.support.processes import ServiceProcess
from tests.support.worker import (
    container_starts,
    enqueue,
    git_repo,
    host_containers,
    issue_job,
    kill_tree,
    local_job,
    read_record,
)

FOLDER_OWNER = 4242 if os.geteuid() == 0 else None  # a local job's folder must not be root's


async def _nothing_pending(redis: Redis, stream: str) -> bool:
    return bool((await redis.xpending(stream, WORKER_GROUP))["pending"] == 0)


async def _none_running(docker: aiodocker.Docker, host: str) -> bool:
    return await host_containers(docker, host, running=True) == []


async def test_worker_killed_three_times_mid_run_records_eight_completed_from_eight_container_starts(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path,
    worker_name: str,
) -> None:
    since = int(time.time()) - 1
    jobs = [
        local_job(git_repo(tmp_path / f"project-{n}", owner=FOLDER_OWNER), "pd-test exit=0 sleep=3")
        for n in range(8)
    ]
    stream = keys.host_jobs(worker_name)
    for job in jobs:
        await enqueue(redis, keys, job, stream)
    logs_dir = env["PI_LOGS_DIR"]

    def recorded() -> int:
        return sum(read_record(logs_dir, j) is not None for j in jobs)

    procs: list[ServiceProcess] = []
    try:
        for n in range(3):
            proc = ServiceProcess("worker", env, tmp_path / f"worker-{n}.log")
            procs.append(proc)
            proc.start()
            await wait_for(lambda: proc.logged("job_started") or recorded() == 8, 60,  # noqa: B023
                           what=f"worker {n} to start a container")
            kill_tree(proc)
            if n == 0:
                # The running containers end while no worker watches: only the kept container knows how.
                await wait_for(lambda: _none_running(docker, worker_name), 30, what="the orphans to exit")
        last = ServiceProcess("worker", env, tmp_path / "worker-last.log")
        procs.append(last)
        last.start()
        await wait_for(lambda: recorded() == 8, 120, what="a record for every job")
        await wait_for(lambda: _nothing_pending(redis, stream), 30, what="every entry to be acked")
        assert last.stop() == 0
    finally:
        for proc in procs:
            proc.stop()
    records = [read_record(logs_dir, j) or {} for j in jobs]
    assert [(r["outcome"], r["exitCode"], r["attempt"]) for r in records] == [("completed", 0, 1)] * 8
    assert sorted(await container_starts(docker, worker_name, since)) == sorted(j.id for j in jobs)
    assert await host_containers(docker, worker_name) == []
    assert os.listdir(env["PI_JOBS_DIR"]) == []


@pytest.mark.parametrize(
    ("code", "outcome", "reason"), [(0, "completed", None), (2, "policy", "runner-policy")]
)
async def test_container_that_exits_while_its_worker_is_dead_is_recorded_with_its_true_exit_code(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path,
    worker_name: str, code: int, outcome: str, reason: str | None,
) -> None:
    since = int(time.time()) - 1
    job = issue_job(f"exit={code} sleep=2")
    first = ServiceProcess("worker", env, tmp_path / "first.log")
    second = ServiceProcess("worker", env, tmp_path / "second.log")
    try:
        first.start()
        await enqueue(redis, keys, job)
        await wait_for(lambda: first.logged("job_started"), 60, what="the container to start")
        kill_tree(first)
        await wait_for(lambda: _none_running(docker, worker_name), 30, what="the container to exit")
        assert len(await host_containers(docker, worker_name)) == 1  # exited, kept
        second.start()
        await wait_for(lambda: second.logged("job_finished"), 30, what="the restarted worker to finish")
        assert second.stop() == 0
    finally:
        first.stop()
        second.stop()
    rec = read_record(env["PI_LOGS_DIR"], job)
    assert rec is not None
    assert (rec["outcome"], rec["reason"], rec["exitCode"], rec["attempt"]) == (outcome, reason, code, 1)
    assert rec["turns"] == 1  # the exit line is read back from the kept container's output
    assert second.logged("job_reattached") and not second.logged("job_started")
    assert await container_starts(docker, worker_name, since) == [job.id]
    assert await host_containers(docker, worker_name) == []
    assert os.listdir(env["PI_JOBS_DIR"]) == []


async def test_worker_killed_between_the_record_and_the_removal_leaves_a_container_the_next_start_removes(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path,
    worker_name: str,
) -> None:
    since = int(time.time()) - 1
    job = issue_job("exit=0")
    first = ServiceProcess("worker", {**env, "PD_FAULT_INJECT": "worker_after_record"}, tmp_path / "a.log")
    second = ServiceProcess("worker", env, tmp_path / "b.log")
    try:
        first.start()
        await enqueue(redis, keys, job)
        await wait_for(lambda: first.proc is not None and first.proc.poll() is not None, 60,
                       what="the crash right after the record")
        assert (read_record(env["PI_LOGS_DIR"], job) or {}).get("outcome") == "completed"
        assert len(await host_containers(docker, worker_name)) == 1
        assert not await _nothing_pending(redis, keys.jobs)
        second.start()
        await wait_for(lambda: _nothing_pending(redis, keys.jobs), 30, what="the entry to be acked")
        await wait_for(lambda: second.logged("job_finished"), 10, what="the job to finish")
        assert second.stop() == 0
    finally:
        first.stop()
        second.stop()
    assert second.logged("job_already_recorded")
    assert not second.logged("job_started") and not second.logged("job_reattached")
    assert await container_starts(docker, worker_name, since) == [job.id]
    assert await host_containers(docker, worker_name) == []

