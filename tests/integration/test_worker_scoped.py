"""Scoped limits with real workers, Redis and Docker: a full scoped day refuses ``scope-cap`` before any
spend, a refusing global window gives the scoped slot back, a ``concurrent`` ceiling holds across two
workers, and a bad limits file refuses the worker's start."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiodocker
from structlog.testing import capture_logs

from pidispatch.common.keys import Keys
from pidispatch.common.models import Job
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.settings import load_settings
from pidispatch.worker.limits.scoped import load_limits, rows_for
from pidispatch.worker.limits.scopedbudget import scoped_windows
from pidispatch.worker.service import run_worker
from tests.support.polling import wait_for
from tests.support.worker import enqueue, host_containers, issue_job, read_record, record, running_worker


def limits_file(tmp_path: Path, job: Job, **limit: int) -> Path:
    path = tmp_path / "scoped-limits.json"
    path.write_text(json.dumps({"version": 1, "limits": [{"scope": job.repo, **limit}]}))
    return path


async def scoped_day(redis: Redis, keys: Keys, path: Path, job: Job) -> int:
    [window] = scoped_windows(rows_for(load_limits(str(path)), job), now_ms(), keys)
    return int(await redis.get(window.key) or 0)


async def test_a_full_scoped_day_refuses_the_second_job_before_spend(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    first, second = issue_job("exit=0", number=1), issue_job("exit=0", number=2)
    path = limits_file(tmp_path, first, day=1)
    worker_env = {**env, "PI_SCOPED_LIMITS_FILE": str(path)}
    with capture_logs() as logs:
        async with running_worker(worker_env, redis, keys, docker) as (s, _, _):
            await enqueue(redis, keys, first)
            rec1 = await record(s, first)
            await enqueue(redis, keys, second)
            rec2 = await record(s, second)
    assert rec1["outcome"] == "completed"
    assert (rec2["outcome"], rec2["reason"], rec2["budgetReserved"]) == ("policy", "scope-cap", False)
    assert rec2["exitCode"] is None
    assert [e["job"] for e in logs if e["event"] == "job_started"] == [first.id]
    assert await scoped_day(redis, keys, path, first) == 1
    assert int(await redis.get(keys.budget_day(rec1["startedAt"][:10])) or 0) == 1  # no global slot taken


async def test_the_scoped_slot_is_given_back_when_the_global_cap_refuses(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    job = issue_job("exit=0")
    path = limits_file(tmp_path, job, day=5)
    worker_env = {**env, "PI_SCOPED_LIMITS_FILE": str(path), "PI_DAILY_CAP": "0"}
    async with running_worker(worker_env, redis, keys, docker) as (settings, _, _):
        await enqueue(redis, keys, job)
        rec = await record(settings, job)
    assert (rec["outcome"], rec["reason"], rec["budgetReserved"]) == ("policy", "over-budget", True)
    assert await scoped_day(redis, keys, path, job) == 0


async def test_a_concurrent_ceiling_of_one_holds_across_two_workers_and_every_job_completes(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path, worker_name: str
) -> None:
    jobs = [issue_job("exit=0 sleep=2", number=n) for n in range(3)]
    path = limits_file(tmp_path, jobs[0], concurrent=1)
    names = [f"{worker_name}-a", f"{worker_name}-b"]
    stop = asyncio.Event()
    workers = []
    for name in names:
        worker_env = {**env, "PI_SCOPED_LIMITS_FILE": str(path), "PI_WORKER_NAME": name,
                      "PI_CONCURRENCY": "3"}
        settings = load_settings(worker_env)
        run = run_worker(settings, redis, keys, docker, stop, now_ms, worker_env)
        workers.append(asyncio.create_task(run))
    most = 0

    async def all_recorded() -> bool:
        nonlocal most
        running = [c for name in names for c in await host_containers(docker, name, running=True)]
        most = max(most, len(running))
        return all(read_record(settings.logs_dir, job) is not None for job in jobs)

    try:
        with capture_logs() as logs:
            for job in jobs:
                await enqueue(redis, keys, job)
            await wait_for(all_recorded, timeout=120, interval=0.1, what="three records")
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*workers), 60)
        await remove_containers(docker, names)
    recs: list[dict[str, Any]] = [read_record(settings.logs_dir, job) or {} for job in jobs]
    assert [(r["outcome"], r["attempt"]) for r in recs] == [("completed", 1)] * 3  # deferrals used none
    assert most == 1
    assert any(e["event"] == "job_deferred" and e["why"] == "scope-concurrent" for e in logs)
    assert not await redis.exists(keys.scoped_lease(load_limits(str(path))[0].digest))  # all given back


async def remove_containers(docker: aiodocker.Docker, names: list[str]) -> None:
    for name in names:
        for c in await host_containers(docker, name):
            with contextlib.suppress(aiodocker.DockerError):
                await c.delete(force=True)


def test_a_bad_limits_file_refuses_the_start(env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "scoped-limits.json"
    path.write_text(json.dumps({"version": 2, "limits": [{"scope": "owner/app", "day": 1, "dayUsd": 3}]}))
    proc = subprocess.run(
        [sys.executable, "-m", "pidispatch.worker"], env={**env, "PI_SCOPED_LIMITS_FILE": str(path)},
        check=False, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "limits[0].dayUsd is not implemented" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


async def test_a_good_edit_applies_and_a_bad_one_keeps_the_last_good_limits(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    first, second = issue_job("exit=0", number=1), issue_job("exit=0", number=2)
    path = limits_file(tmp_path, first, day=5)
    worker_env = {**env, "PI_SCOPED_LIMITS_FILE": str(path)}
    with capture_logs() as logs:
        async with running_worker(worker_env, redis, keys, docker) as (settings, _, _):
            await wait_for(lambda: any(e["event"] == "scoped_limits_watching" for e in logs), 10)
            path.write_text(json.dumps({"version": 1, "limits": [{"scope": first.repo, "day": 0}]}))
            await wait_for(lambda: any(e["event"] == "scoped_limits_reloaded" for e in logs), 10)
            path.write_text(json.dumps({"version": 1, "limits": [{"scope": first.repo, "day": "lots"}]}))
            await wait_for(lambda: any(e["event"] == "scoped_limits_reload_invalid" for e in logs), 10)
            await enqueue(redis, keys, second)
            rec = await record(settings, second)
    assert (rec["outcome"], rec["reason"]) == ("policy", "scope-cap")  # day: 0 kept, the bad edit ignored
    [bad] = [e for e in logs if e["event"] == "scoped_limits_reload_invalid"]
    assert "limits[0].day is refused" in bad["error"] and bad["kept"] is True
