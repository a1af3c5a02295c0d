"""The failure hook with a real worker, Redis and Docker: it runs for a terminal failure and an
after-spend stop, with the documented argv, and never for a completed job or a refusal before spend."""

from __future__ import annotations

import uuid
from pathlib import Path

import aiodocker
import msgspec
from structlog.testing import capture_logs

from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from tests.support.polling import wait_for
from tests.support.worker import enqueue, issue_job, record, running_worker


def hook_script(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "hook.log"
    script = tmp_path / "on-failure.sh"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    script.chmod(0o755)
    return script, log


async def test_the_hook_runs_for_a_terminal_failure_and_an_after_spend_stop_only(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    script, log = hook_script(tmp_path)
    env = {**env, "PI_ON_FAILURE": str(script), "PI_RETRY_ATTEMPTS": "1"}
    failed, stopped, completed = issue_job("exit=1"), issue_job("exit=2"), issue_job("exit=0")
    refused = msgspec.structs.replace(issue_job("exit=0"), image=f"pd-missing-{uuid.uuid4().hex[:8]}:nope")
    async with running_worker(env, redis, keys, docker) as (settings, _, _):
        for job in (failed, stopped, completed, refused):
            await enqueue(redis, keys, job)
        records = {job.id: await record(settings, job) for job in (failed, stopped, completed, refused)}
        await wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 2, what="two hook runs")
    # The worker lets running hooks finish before it stops: the log is complete here.
    assert records[refused.id]["outcome"] == "policy" and records[completed.id]["outcome"] == "completed"
    host = settings.worker_name
    assert sorted(log.read_text().splitlines()) == sorted([
        f"{failed.id} failed container-exit-1 {host}",
        f"{stopped.id} policy runner-policy {host}",
    ])


async def _state_is(redis: Redis, keys: Keys, job_id: str, wanted: bytes) -> bool:
    return await redis.hget(keys.job(job_id), "state") == wanted


async def test_a_hook_that_is_not_executable_is_logged_and_the_job_still_finishes(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    script, log = hook_script(tmp_path)
    script.chmod(0o644)
    env = {**env, "PI_ON_FAILURE": str(script), "PI_RETRY_ATTEMPTS": "1"}
    job = issue_job("exit=1")
    with capture_logs() as logs:
        async with running_worker(env, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            assert (await record(settings, job))["outcome"] == "failed"
            await wait_for(lambda: _state_is(redis, keys, job.id, b"failed"), what="the terminal state")
            await wait_for(lambda: [e for e in logs if e["event"] == "on_failure"], what="the hook's line")
    lines = [(e["job"], e["detail"]) for e in logs if e["event"] == "on_failure"]
    assert lines == [(job.id, "not-executable")]
    assert not log.exists()
