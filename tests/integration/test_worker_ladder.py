"""The paid path end to end with a real worker, Redis and Docker: the pre-spend ladder refuses before
anything costs money, infrastructure faults are retried through ``pd:delayed``, refunds happen exactly
when nothing ran, cancel stops a running job, and local jobs run in the operator's folder."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiodocker
import msgspec
import pytest
from structlog.testing import capture_logs

from pidispatch.common.keys import WORKER_GROUP, Keys
from pidispatch.common.models import Job, job_to_fields
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.console.control import cancel_job
from pidispatch.dev.demoimage import TEST_AGENT_SCRIPT, build_image
from pidispatch.worker.engine.preflight import CAPABILITIES_LABEL, FORGES_LABEL
from pidispatch.worker.local import local_job_id
from tests.support.polling import wait_for
from tests.support.worker import enqueue, git_repo, issue_job, record, running_worker


def today_budget(keys: Keys) -> str:
    return keys.budget_day(datetime.now(UTC).strftime("%Y-%m-%d"))


async def counter(redis: Redis, key: str) -> int:
    return int(await redis.get(key) or 0)


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name]


async def job_containers(docker: aiodocker.Docker, job: Job) -> list[Any]:
    return await docker.containers.list(all=True, filters=json.dumps({"label": [f"pd.job={job.id}"]}))


async def test_over_budget_is_refused_after_the_folder_and_before_the_container_and_keeps_its_slot(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    job = issue_job("exit=0")
    with capture_logs() as logs:
        async with running_worker({**env, "PI_DAILY_CAP": "0"}, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            rec = await record(settings, job)
    assert (rec["outcome"], rec["reason"], rec["budgetReserved"]) == ("policy", "over-budget", True)
    assert rec["exitCode"] is None and not events(logs, "job_started")
    assert await counter(redis, today_budget(keys)) == 1  # a refused reservation is not given back
    assert os.listdir(settings.jobs_dir) == []


async def test_an_image_that_excludes_the_forge_is_refused_before_any_spend(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    tag = f"pd-test-gitlab-only-{uuid.uuid4().hex[:8]}:latest"
    labels = {FORGES_LABEL: "gitlab", CAPABILITIES_LABEL: "anyUid"}
    await build_image(tag, TEST_AGENT_SCRIPT, docker, labels=labels)
    job = issue_job("exit=0")
    try:
        async with running_worker({**env, "PI_JOB_IMAGE": tag}, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            rec = await record(settings, job)
    finally:
        await docker.images.delete(tag, force=True)
    assert (rec["outcome"], rec["reason"], rec["budgetReserved"]) == (
        "policy", "job-image-forge-unsupported", False
    )
    assert await redis.exists(today_budget(keys)) == 0


async def test_the_container_gets_the_lower_of_the_deployment_and_trigger_dollar_caps(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    tag = f"pd-test-cost-cap-{uuid.uuid4().hex[:8]}:latest"
    await build_image(tag, TEST_AGENT_SCRIPT, docker, labels={CAPABILITIES_LABEL: "anyUid,costCap"})
    job = msgspec.structs.replace(issue_job("exit=0 sleep=3"), max_cost_usd="0.1")
    capped = {**env, "PI_JOB_IMAGE": tag, "PI_MAX_COST_USD": "2"}
    try:
        with capture_logs() as logs:
            async with running_worker(capped, redis, keys, docker) as (settings, _, _):
                await enqueue(redis, keys, job)
                await wait_for(lambda: events(logs, "job_started"), 60, what="the container")
                info = await (await job_containers(docker, job))[0].show()
                rec = await record(settings, job)
    finally:
        await docker.images.delete(tag, force=True)
    assert [e for e in info["Config"]["Env"] if e.startswith("PI_MAX_COST")] == ["PI_MAX_COST_MICROS=100000"]
    assert rec["outcome"] == "completed"


async def test_a_deployment_dollar_cap_alone_refuses_an_image_without_the_capability_before_spend(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    job = issue_job("exit=0")
    async with running_worker({**env, "PI_MAX_COST_USD": "2"}, redis, keys, docker) as (settings, _, _):
        await enqueue(redis, keys, job)
        rec = await record(settings, job)
    assert (rec["outcome"], rec["reason"], rec["budgetReserved"]) == (
        "policy", "job-image-cost-cap-unsupported", False
    )
    assert await redis.exists(today_budget(keys)) == 0


async def test_infra_failure_is_retried_once_through_delayed_then_recorded_failed(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    job = issue_job("exit=1")
    with capture_logs() as logs:
        fast_retry = {**env, "PI_RETRY_BASE_MS": "100"}
        async with running_worker(fast_retry, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            await wait_for(lambda: events(logs, "job_finished"), 30, what="the last attempt")
            rec = await record(settings, job)
    assert (rec["outcome"], rec["reason"], rec["attempt"], rec["exitCode"]) == (
        "failed", "container-exit-1", 2, 1
    )
    assert [e["attempt"] for e in events(logs, "job_retry_scheduled")] == [1]
    assert len(events(logs, "job_started")) == 2
    assert await counter(redis, today_budget(keys)) == 2  # exit 1 ran: both slots stay spent
    assert await redis.zcard(keys.delayed) == 0
    assert (await redis.xpending(keys.jobs, WORKER_GROUP))["pending"] == 0


async def test_a_runtime_that_never_started_the_runner_is_retried_and_refunded(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    job = issue_job("exit=125")
    with capture_logs() as logs:
        fast_retry = {**env, "PI_RETRY_BASE_MS": "100"}
        async with running_worker(fast_retry, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            await wait_for(lambda: events(logs, "job_finished"), 30, what="the last attempt")
            rec = await record(settings, job)
    assert (rec["outcome"], rec["reason"], rec["budgetReserved"]) == (
        "failed", "container-never-started", False
    )
    assert await counter(redis, today_budget(keys)) == 0  # each attempt's slot given back exactly once


async def test_runner_policy_reason_comes_from_the_exit_line_only_inside_exit_2(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    job = issue_job("exit=2")
    async with running_worker(env, redis, keys, docker) as (settings, _, _):
        await enqueue(redis, keys, job)
        rec = await record(settings, job)
    # The test agent's exit line names no reason: the closed default applies, and it is not retried.
    assert (rec["outcome"], rec["reason"], rec["attempt"], rec["budgetReserved"]) == (
        "policy", "runner-policy", 1, True
    )


async def test_resolved_secret_reaches_only_the_container_env(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    resolver = tmp_path / "resolver.sh"
    resolver.write_text('#!/bin/sh\n[ "$1" = "vault/db" ] || exit 2\nprintf \'s3cret-value\\n\'\n')
    resolver.chmod(0o755)
    job = msgspec.structs.replace(issue_job("exit=0 sleep=3"), secrets={"DB_PASSWORD": "vault/db"})
    with capture_logs() as logs:
        async with running_worker(
            {**env, "PI_SECRET_PROFILES": f"default:{resolver}"}, redis, keys, docker
        ) as (settings, _, _):
            await enqueue(redis, keys, job)
            await wait_for(lambda: events(logs, "job_started"), 60, what="the container")
            container = (await job_containers(docker, job))[0]
            info = await container.show()
            rec = await record(settings, job)
    assert "DB_PASSWORD=s3cret-value" in info["Config"]["Env"]
    assert rec["outcome"] == "completed"
    record_text = (Path(settings.logs_dir) / f"{job.id}.json").read_text()
    assert "s3cret" not in record_text and "vault/db" not in record_text
    assert "s3cret" not in repr(logs) and "vault/db" not in repr(logs)


async def test_unresolved_secret_is_refused_before_any_spend(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    resolver = tmp_path / "resolver.sh"
    resolver.write_text("#!/bin/sh\nexit 2\n")
    resolver.chmod(0o755)
    job = msgspec.structs.replace(issue_job("exit=0"), secrets={"DB_PASSWORD": "vault/db"})
    async with running_worker(
        {**env, "PI_SECRET_PROFILES": f"default:{resolver}"}, redis, keys, docker
    ) as (settings, _, _):
        await enqueue(redis, keys, job)
        rec = await record(settings, job)
    assert (rec["outcome"], rec["reason"], rec["budgetReserved"]) == ("policy", "secret-unresolved", False)
    assert await redis.exists(today_budget(keys)) == 0


async def test_cancel_stops_a_running_job_and_records_operator_cancel(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    job = issue_job("exit=0 sleep=60")
    with capture_logs() as logs:
        async with running_worker(env, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            await wait_for(lambda: events(logs, "job_started"), 60, what="the container")
            result = await cancel_job(redis, keys, job.id, wait_s=10, poll_s=0.1)
            rec = await record(settings, job)
    assert result.cancelled and result.host == settings.worker_name
    assert (rec["outcome"], rec["reason"], rec["attempt"]) == ("policy", "operator-cancel", 1)
    assert await job_containers(docker, job) == []
    assert await redis.get(keys.cancel(job.id)) is None


def local_job(folder: Path, steer: str, minute_ms: int) -> Job:
    job_id = local_job_id(str(folder), flow=None, task=steer, model=None, image=None, now_ms=minute_ms)
    return Job(id=job_id, kind="local", repo=f"local:{folder.name}", folder=str(folder), task=steer)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the folder another owner")
async def test_local_jobs_on_one_folder_run_one_at_a_time_as_the_folders_owner(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path,
    worker_name: str,
) -> None:
    folder = git_repo(tmp_path / "project", owner=4242)
    first = local_job(folder, "pd-test exit=0 sleep=2", now_ms())
    second = local_job(folder, "pd-test exit=0", now_ms() + 60_000)
    with capture_logs() as logs:
        async with running_worker(env, redis, keys, docker) as (settings, _, _):
            for job in (first, second):
                await redis.xadd(keys.host_jobs(worker_name), job_to_fields(job))  # type: ignore[arg-type]
            rec1, rec2 = await record(settings, first), await record(settings, second, timeout=40)
    assert rec1["outcome"] == rec2["outcome"] == "completed"
    assert rec1["target"] == f"local:{folder.name}" and str(tmp_path) not in json.dumps([rec1, rec2])
    # The second waited for the first instead of sharing the folder with it.
    assert events(logs, "job_deferred")
    order = [(e["event"], e["job"]) for e in logs if e["event"] in ("job_started", "job_finished")]
    assert order.index(("job_finished", first.id)) < order.index(("job_started", second.id))
    written = folder / "agent-was-here"
    assert (written.stat().st_uid, written.read_text().strip()) == (4242, "4242")


async def test_local_job_on_a_folder_that_is_not_a_repository_is_refused_before_spend(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path,
    worker_name: str,
) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    job = local_job(folder, "pd-test exit=0", now_ms())
    async with running_worker(env, redis, keys, docker) as (settings, _, _):
        await redis.xadd(keys.host_jobs(worker_name), job_to_fields(job))  # type: ignore[arg-type]
        rec = await record(settings, job)
    assert (rec["outcome"], rec["reason"], rec["budgetReserved"]) == (
        "policy", "local-folder-not-a-repo", False
    )
    assert await redis.exists(today_budget(keys)) == 0
    assert os.listdir(settings.jobs_dir) == []


async def test_host_row_is_written_with_its_fields_and_removed_on_a_clean_stop(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, worker_name: str
) -> None:
    fast = {**env, "PD_HOST_BEAT_MS": "100", "PD_HOST_TTL_MS": "1000"}
    async with running_worker(fast, redis, keys, docker):
        await wait_for(lambda: redis.exists(keys.host(worker_name)), 10, what="the host row")
        row = {k.decode(): v.decode() for k, v in (await redis.hgetall(keys.host(worker_name))).items()}
        ttl = await redis.pttl(keys.host(worker_name))
        assert await redis.sismember(keys.hosts, worker_name)
    assert row["name"] == worker_name and row["routes"] == "true" and row["concurrency"] == "2"
    assert {"beatAt", "startedAt", "version", "running", "tz", "image"} <= row.keys()
    assert 0 < ttl <= 1000
    await asyncio.sleep(0)  # the row is deleted before run_worker returns
    assert await redis.exists(keys.host(worker_name)) == 0
    assert not await redis.sismember(keys.hosts, worker_name)


async def test_captured_output_lands_beside_the_record_only_when_asked(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    quiet, loud = issue_job("exit=0"), issue_job("exit=0")
    # The loud one first: its log file is opened before the logs folder exists.
    async with running_worker({**env, "PI_CAPTURE_JOB_LOGS": "1"}, redis, keys, docker) as (settings, _, _):
        await enqueue(redis, keys, loud)
        assert (await record(settings, loud))["turns"] == 1  # the tail still reads the exit line
    async with running_worker(env, redis, keys, docker) as (settings, _, _):
        await enqueue(redis, keys, quiet)
        await record(settings, quiet)
    logs = Path(settings.logs_dir)
    assert not (logs / f"{quiet.id}.log").exists()
    captured = (logs / f"{loud.id}.log").read_bytes()
    assert b'{"event":"exit"' in captured
    assert (logs / f"{loud.id}.log").stat().st_mode & 0o777 == 0o600
