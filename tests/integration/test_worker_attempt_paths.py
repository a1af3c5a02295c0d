"""Every way one attempt can end short of its container's exit, with a real worker, Redis and Docker: a
shutdown past its grace, Docker or Redis going away mid-run, and a bug. Each ends with exactly one record (at
once or after the next pass), the budget slot given back exactly when nothing started, no job folder left
behind, and never a second container."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Mapping, MutableMapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiodocker
import pytest
from structlog.testing import capture_logs

from pidispatch.common.keys import WORKER_GROUP, Keys
from pidispatch.common.models import text
from pidispatch.common.redis import Redis, create_redis
from pidispatch.worker import ladder
from pidispatch.worker.engine.runner import RunResult
from pidispatch.worker.limits import budget
from tests.support.polling import wait_for
from tests.support.processes import RedisProcess
from tests.support.worker import (
    DockerSocketProxy,
    container_starts,
    enqueue,
    host_containers,
    issue_job,
    read_record,
    record,
    running_worker,
)


def today_budget(keys: Keys) -> str:
    return keys.budget_day(datetime.now(UTC).strftime("%Y-%m-%d"))


async def counter(redis: Redis, key: str) -> int:
    return int(await redis.get(key) or 0)


def events(logs: Sequence[Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    return [e for e in logs if e["event"] == name]


async def _pending(redis: Redis, keys: Keys) -> int:
    return int((await redis.xpending(keys.jobs, WORKER_GROUP))["pending"])


async def _terminal(redis: Redis, keys: Keys, job_id: str) -> bool:
    """The job's state hash says it ended (the record is written and the entry acked)."""
    return text(await redis.hget(keys.job(job_id), "state") or b"") in ("completed", "policy", "failed")


async def _none_running(docker: aiodocker.Docker, host: str) -> bool:
    return await host_containers(docker, host, running=True) == []


async def test_shutdown_past_its_grace_writes_no_record_and_the_next_start_records_the_true_outcome(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, worker_name: str
) -> None:
    since = int(time.time()) - 1
    job = issue_job("exit=0 sleep=2")
    with capture_logs() as logs:
        async with running_worker({**env, "PI_SHUTDOWN_GRACE": "0"}, redis, keys, docker) as (s, stop, task):
            await enqueue(redis, keys, job)
            await wait_for(lambda: events(logs, "job_started"), 60, what="the container to start")
            stop.set()
            await asyncio.wait_for(task, 30)
        assert read_record(s.logs_dir, job) is None and await _pending(redis, keys) == 1
        assert len(os.listdir(s.jobs_dir)) == 1  # the container still mounts its folder
        # It ends while no worker runs; the next start reads its exit from the kept container.
        await wait_for(lambda: _none_running(docker, worker_name), 30, what="the container to exit")
        async with running_worker(env, redis, keys, docker):
            rec = await record(s, job)
            await wait_for(lambda: _terminal(redis, keys, job.id), 10, what="the terminal state")
    assert not events(logs, "job_crashed")
    assert (rec["outcome"], rec["exitCode"], rec["budgetReserved"]) == ("completed", 0, True)
    assert await counter(redis, today_budget(keys)) == 1
    assert await container_starts(docker, worker_name, since) == [job.id]
    assert await host_containers(docker, worker_name) == [] and os.listdir(s.jobs_dir) == []


async def test_shutdown_before_the_container_started_gives_the_slot_back_and_leaves_the_entry_pending(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, worker_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    since = int(time.time()) - 1
    job = issue_job("exit=0")
    reached = asyncio.Event()

    async def slow_create(*args: object, **kwargs: object) -> RunResult:
        reached.set()  # the slot is reserved; the daemon takes its time to create the container
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    with capture_logs() as logs:
        with monkeypatch.context() as patch:
            patch.setattr(ladder, "run_container", slow_create)
            async with running_worker({**env, "PI_SHUTDOWN_GRACE": "0"}, redis, keys, docker) as (s, stop, _):
                await enqueue(redis, keys, job)
                await asyncio.wait_for(reached.wait(), 60)
                assert await counter(redis, today_budget(keys)) == 1
                stop.set()
        assert await counter(redis, today_budget(keys)) == 0  # given back: nothing started
        assert read_record(s.logs_dir, job) is None and await _pending(redis, keys) == 1
        assert os.listdir(s.jobs_dir) == []
        async with running_worker(env, redis, keys, docker):
            rec = await record(s, job)
    assert not events(logs, "job_crashed")
    assert (rec["outcome"], rec["attempt"]) == ("completed", 1)
    assert await counter(redis, today_budget(keys)) == 1
    assert await container_starts(docker, worker_name, since) == [job.id]


async def test_docker_going_away_mid_run_holds_the_job_and_records_its_true_outcome_once_it_is_back(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path,
    worker_name: str,
) -> None:
    since = int(time.time()) - 1
    proxy = DockerSocketProxy(tmp_path / "docker.sock")
    await proxy.start()
    proxied = aiodocker.Docker(url=proxy.url)
    job = issue_job("exit=0 sleep=2")
    try:
        with capture_logs() as logs:
            async with running_worker(env, redis, keys, proxied) as (s, _, _):
                await enqueue(redis, keys, job)
                await wait_for(lambda: events(logs, "job_started"), 60, what="the container to start")
                await proxy.stop()
                await wait_for(lambda: events(logs, "job_held"), 15, what="the job to be held")
                assert read_record(s.logs_dir, job) is None
                assert len(os.listdir(s.jobs_dir)) == 1  # the running container still mounts it
                await wait_for(lambda: _none_running(docker, worker_name), 30, what="the exit")
                await proxy.start()
                rec = await record(s, job, timeout=30)
                await wait_for(lambda: _terminal(redis, keys, job.id), 10, what="the terminal state")
    finally:
        await proxied.close()
        with contextlib.suppress(Exception):
            await proxy.stop()
    assert not events(logs, "job_crashed") and events(logs, "job_reattached")
    assert (rec["outcome"], rec["exitCode"], rec["budgetReserved"], rec["turns"]) == ("completed", 0, True, 1)
    assert await counter(redis, today_budget(keys)) == 1
    assert await container_starts(docker, worker_name, since) == [job.id]
    assert await host_containers(docker, worker_name) == [] and os.listdir(s.jobs_dir) == []


async def test_redis_going_away_mid_attempt_holds_the_job_then_runs_it_once_with_one_slot(
    env: dict[str, str], keys: Keys, docker: aiodocker.Docker, tmp_path: Path, worker_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    since = int(time.time()) - 1
    server = RedisProcess(tmp_path / "redis", persist=True)
    server.start()
    client = create_redis(server.url)
    job = issue_job("exit=0")
    real_cap_check = budget.token_cap_refusal
    gone = asyncio.Event()

    async def redis_dies_here(*args: Any, **kwargs: Any) -> Any:
        # Redis goes away at the first budget step of the attempt (its folder exists, nothing reserved).
        if not gone.is_set():
            gone.set()
            await asyncio.to_thread(server.stop)
        return await real_cap_check(*args, **kwargs)

    monkeypatch.setattr(budget, "token_cap_refusal", redis_dies_here)
    try:
        with capture_logs() as logs:
            async with running_worker({**env, "REDIS_URL": server.url}, client, keys, docker) as (s, _, _):
                await enqueue(client, keys, job)
                await wait_for(lambda: events(logs, "job_held"), 30, what="the job to be held")
                assert read_record(s.logs_dir, job) is None and os.listdir(s.jobs_dir) == []
                await asyncio.to_thread(server.start)
                rec = await record(s, job, timeout=60)
                await wait_for(lambda: _terminal(client, keys, job.id), 30, what="the terminal state")
            slots = await counter(client, today_budget(keys))
    finally:
        await client.aclose()
        server.stop()
    assert not events(logs, "job_crashed")
    assert (rec["outcome"], rec["attempt"], rec["budgetReserved"]) == ("completed", 1, True)
    assert slots == 1
    assert await container_starts(docker, worker_name, since) == [job.id]


async def _run_with_a_bug(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, monkeypatch: pytest.MonkeyPatch,
    name: str,
) -> tuple[dict[str, Any], list[MutableMapping[str, Any]], str]:
    def boom(*args: object, **kwargs: object) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(ladder, name, boom)
    job = issue_job("exit=0")
    with capture_logs() as logs:
        async with running_worker(env, redis, keys, docker) as (s, _, _):
            await enqueue(redis, keys, job)
            rec = await record(s, job)
            await wait_for(lambda: _terminal(redis, keys, job.id), 10, what="the terminal state")
            assert await _pending(redis, keys) == 0
    assert os.listdir(s.jobs_dir) == []
    return rec, logs, job.id


async def test_a_bug_after_the_container_ran_is_recorded_internal_error_once_and_keeps_the_slot(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, worker_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    since = int(time.time()) - 1
    rec, logs, job_id = await _run_with_a_bug(env, redis, keys, docker, monkeypatch, "settle_result")
    assert (rec["outcome"], rec["reason"], rec["attempt"], rec["budgetReserved"]) == (
        "failed", "internal-error", 1, True
    )
    assert [e["job"] for e in events(logs, "job_crashed")] == [job_id]
    assert await counter(redis, today_budget(keys)) == 1
    assert await container_starts(docker, worker_name, since) == [job_id]
    assert await host_containers(docker, worker_name) == []


async def test_a_bug_before_the_container_is_recorded_internal_error_once_and_gives_the_slot_back(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, worker_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    since = int(time.time()) - 1
    rec, _, _ = await _run_with_a_bug(env, redis, keys, docker, monkeypatch, "container_env")
    assert (rec["outcome"], rec["reason"], rec["budgetReserved"]) == ("failed", "internal-error", False)
    assert await counter(redis, today_budget(keys)) == 0
    assert await container_starts(docker, worker_name, since) == []
