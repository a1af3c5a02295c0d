"""``pi-dispatch pause``/``resume``: a paused worker takes no new job (it waits in the stream, undelivered,
for any worker that is not paused), and resumes where it left off."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import structlog

from pidispatch.common.keys import WORKER_GROUP, Keys
from pidispatch.common.redis import Redis
from pidispatch.worker.service import PAUSE_CHECK_S
from tests.support.polling import wait_for
from tests.support.worker import enqueue, issue_job, record, running_worker


def cli(environment: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pidispatch.common.cli", *args], env=environment, capture_output=True,
        text=True, timeout=30, check=False,
    )


async def _undelivered(redis: Redis, keys: Keys) -> bool:
    groups = {g["name"].decode(): g for g in await redis.xinfo_groups(keys.jobs)}
    group = groups.get(WORKER_GROUP)
    return group is not None and group["last-delivered-id"] == b"0-0" and group["pending"] == 0


async def test_a_fleet_pause_holds_new_jobs_in_the_stream_until_resume(
    env: dict[str, str], redis: Redis, keys: Keys, docker: object
) -> None:
    paused = cli(env, "pause")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith("paused — every worker will stop taking new jobs")
    job = issue_job("exit=0")
    with structlog.testing.capture_logs() as logs:
        async with running_worker(env, redis, keys, docker) as (settings, _, _):  # type: ignore[arg-type]
            await wait_for(lambda: any(x["event"] == "worker_paused" for x in logs), what="the pause seen")
            await enqueue(redis, keys, job)
            # A negative guarantee needs a window: two of the worker's pause checks, and still nobody
            # has taken the job.
            await asyncio.sleep(2 * PAUSE_CHECK_S + 0.5)
            assert await _undelivered(redis, keys)
            resumed = cli(env, "resume", "--json")
            assert resumed.returncode == 0, resumed.stderr
            assert json.loads(resumed.stdout) == {"paused": False, "scope": "fleet", "fleetPaused": False}
            rec = await record(settings, job)
    assert rec["outcome"] == "completed"
    assert [x["event"] for x in logs if x["event"].startswith("worker_")].count("worker_resumed") == 1


async def test_a_host_pause_holds_only_that_host(
    env: dict[str, str], redis: Redis, keys: Keys, docker: object, worker_name: str
) -> None:
    assert cli(env, "pause", "--host", "some-other-host").returncode == 0
    job = issue_job("exit=0")
    async with running_worker(env, redis, keys, docker) as (settings, _, _):  # type: ignore[arg-type]
        await enqueue(redis, keys, job)
        assert (await record(settings, job))["outcome"] == "completed"
    assert cli(env, "pause", "--host", worker_name).returncode == 0
    assert await redis.get(keys.paused_host(worker_name)) == b"1"
    out = cli(env, "resume", "--host", worker_name)
    assert out.returncode == 0 and out.stdout.strip() == f"resumed worker {worker_name}"
    assert not await redis.exists(keys.paused_host(worker_name))


def test_pause_refuses_a_bad_host_name_with_exit_2(env: dict[str, str]) -> None:
    out = cli(env, "pause", "--host", "../etc")
    assert out.returncode == 2 and "--host" in out.stderr


async def test_pausing_a_host_never_seen_warns_and_still_pauses(
    env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    from pidispatch.common.runtime import now_ms
    from pidispatch.worker.history.mirror import mirror_record
    from pidispatch.worker.history.records import build_record

    past = build_record(issue_job("past"), attempt=1, outcome="completed", reason=None, exit_code=0,
                        exit_info=None, started_at_ms=now_ms() - 5000, ended_at_ms=now_ms(), host="past-1")
    await redis.hset(keys.host("live-1"), mapping={"name": "live-1", "beatAt": str(now_ms())})
    await redis.sadd(keys.hosts, "live-1")
    assert await mirror_record(redis, keys, past, retention_days=30, now_ms=now_ms())
    ghost = cli(env, "pause", "--host", "liv-1")
    assert ghost.returncode == 0 and await redis.exists(keys.paused_host("liv-1"))
    [line] = ghost.stderr.splitlines()
    assert "no worker named liv-1 has been seen (live now: live-1)" in line
    for seen in ("live-1", "past-1"):
        known = cli(env, "pause", "--host", seen)
        assert known.returncode == 0 and known.stderr == "", known.stderr
    assert cli(env, "resume", "--host", "liv-1").stderr == ""
