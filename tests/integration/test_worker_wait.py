"""Wait-for conditions through real workers, Redis, Docker and a stand-in GitHub: an ``after`` instant is
honoured to the second; a profile check's answers (not yet, go, never, faults) decide when or whether the
job runs, before anything is reserved; a job needing a profile runs only on the host that declares it; two
jobs for one item never both run."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from pathlib import Path
from typing import Any

import aiodocker
import msgspec
from structlog.testing import capture_logs

from pidispatch.common.keys import Keys
from pidispatch.common.models import Job
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.worker.forgework import sentences
from pidispatch.worker.waits.gate import dedup_id
from tests.support.cli import run_cli
from tests.support.forges import ISSUE_REPO, GithubStandIn, posted
from tests.support.polling import wait_for
from tests.support.waits import check_program
from tests.support.worker import enqueue, issue_job, read_record, record, running_worker

Logs = list[dict[str, Any]]
# Checks come back after one second here (a deployment's floor is 30 s).
FAST_CHECKS = {"PD_WAIT_INTERVAL_FLOOR_MS": "1000", "PI_WAIT_INTERVAL_MS": "1000"}


def with_check(env: dict[str, str], tmp_path: Path, *codes: int, **extra: str) -> dict[str, str]:
    """The worker's environment with a profile ``ci`` whose check answers ``codes`` in turn."""
    check = check_program(tmp_path / "ci", *codes)
    return {**env, **FAST_CHECKS, "PI_WAIT_PROFILES": f"ci:{check}", **extra}


def events(logs: Logs, name: str, job: Job | None = None) -> Logs:
    return [e for e in logs if e["event"] == name and (job is None or e.get("job") == job.id)]


def waiting(job: Job, *conditions: dict[str, str]) -> Job:
    return msgspec.structs.replace(job, wait_for=list(conditions))


def iso(ms: int) -> str:
    at = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def epoch_ms(value: str) -> int:
    return int(dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)


async def test_an_after_instant_starts_the_container_no_earlier_and_wakes_at_that_instant(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    instant = (now_ms() // 1000 + 10) * 1000  # an instant on a whole second, 9-10 s ahead
    job = waiting(issue_job("exit=0"), {"after": iso(instant)})
    with capture_logs() as logs:
        async with running_worker(env, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            await wait_for(lambda: events(logs, "wait_deferred", job), 30, what="the hold")
            held = await redis.hgetall(keys.wait_job(job.id))
            seen = await wait_for(lambda: events(logs, "job_started", job) and now_ms(), 30, interval=0.02,
                                  what="the container to start")
            rec = await record(settings, job)
    assert int(held[b"next"]) == instant and int(held[b"since"]) < instant
    assert instant <= epoch_ms(rec["startedAt"])  # the attempt, and so its container, began after it
    # The hold wakes at the instant (``next`` above); how long the start then takes is the daemon's, and
    # on a machine running four tests at once it passed a second: only a missed wake would take this long.
    assert seen - instant <= 5000, seen - instant
    assert (rec["outcome"], rec["attempt"]) == ("completed", 1)
    assert await redis.exists(keys.wait_job(job.id)) == 0 and await redis.smembers(keys.wait_held) == set()


async def test_a_profile_answering_not_yet_twice_runs_after_the_third_check(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    profile_env = with_check(env, tmp_path, 3, 3, 0)
    job = waiting(issue_job("exit=0", number=5), {"profile": "ci"})
    with capture_logs() as logs:
        async with running_worker(profile_env, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            rec = await record(settings, job)
    checked = [e["answer"] for e in events(logs, "wait_checked", job)]
    assert checked == ["not-yet", "not-yet", "go"]
    assert len(events(logs, "job_started", job)) == 1 and (rec["outcome"], rec["attempt"]) == ("completed", 1)
    assert (tmp_path / "ci" / "args").read_text().splitlines() == [f"{ISSUE_REPO}#5"] * 3
    assert await redis.exists(keys.wait_job(job.id)) == 0


async def test_a_profile_answering_never_is_refused_with_no_container_and_no_budget(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, github: GithubStandIn,
    tmp_path: Path,
) -> None:
    profile_env = with_check(env, tmp_path, 2)
    job = waiting(issue_job("exit=0", number=6), {"profile": "ci"})
    with capture_logs() as logs:
        async with running_worker(profile_env, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            rec = await record(settings, job)
            await wait_for(lambda: events(logs, "comment_posted"), 10, what="the answer on the issue")
    assert (rec["outcome"], rec["reason"], rec["budgetReserved"], rec.get("provider")) == (
        "policy", "wait-refused", False, None)
    assert not events(logs, "job_started") and await redis.keys(keys.budget_day("*")) == []
    text = sentences.refusal("wait-refused", local=False)
    assert posted(github.forge) == [{"repo": ISSUE_REPO, "on": "issue", "number": 6, "body": text}]


async def test_a_check_that_always_faults_is_unanswerable_after_the_max_faults(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    profile_env = with_check(env, tmp_path, 1, PI_WAIT_MAX_FAULTS="3")
    job = waiting(issue_job("exit=0", number=8), {"profile": "ci"})
    with capture_logs() as logs:
        async with running_worker(profile_env, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            rec = await record(settings, job)
    assert (rec["outcome"], rec["reason"]) == ("policy", "wait-unanswerable")
    assert [e["answer"] for e in events(logs, "wait_checked", job)] == ["fault"] * 3
    assert not events(logs, "job_started")


async def test_a_second_job_for_the_same_item_while_the_first_waits_never_runs(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    profile_env = with_check(env, tmp_path, 3, 3, 0)
    first = waiting(issue_job("exit=0", number=9), {"profile": "ci"})
    # A redelivery after the router's dedup window: another job id, the same item, flow and rule.
    second = msgspec.structs.replace(first, id=first.id + "-again")
    with capture_logs() as logs:
        async with running_worker(profile_env, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, first)
            await wait_for(lambda: events(logs, "wait_deferred", first), 30, what="the first to wait")
            await enqueue(redis, keys, second)
            refused = await record(settings, second)
            done = await record(settings, first)
    assert (refused["outcome"], refused["reason"]) == ("policy", "wait-superseded")
    assert done["outcome"] == "completed"
    assert [e["job"] for e in events(logs, "job_started")] == [first.id]


async def test_a_job_needing_a_profile_runs_only_on_the_host_that_declares_it(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    a_env = {**env, "PI_WORKER_NAME": env["PI_WORKER_NAME"] + "-a"}
    b_env = with_check(env, tmp_path, 0, PI_WORKER_NAME=env["PI_WORKER_NAME"] + "-b")
    jobs = [waiting(issue_job("exit=0", number=20 + n), {"profile": "ci"}) for n in range(4)]
    with capture_logs() as logs:
        async with running_worker(a_env, redis, keys, docker) as _a, \
                running_worker(b_env, redis, keys, docker) as (b_settings, _, _):
            async def b_advertises() -> bool:
                return b"w:ci" in (await redis.hget(keys.host(b_env["PI_WORKER_NAME"]), "caps") or b"")

            await wait_for(b_advertises, 30, what="b advertising its profile")
            for job in jobs:
                await enqueue(redis, keys, job)  # the shared stream: either host may read each
            recs = [await record(b_settings, job) for job in jobs]
    assert {r["host"] for r in recs} == {b_env["PI_WORKER_NAME"]}
    assert {r["outcome"] for r in recs} == {"completed"}
    assert len(events(logs, "job_started")) == 4
    assert all(e["to_host"] == b_env["PI_WORKER_NAME"] for e in events(logs, "job_forwarded"))


async def test_a_cancelled_held_job_never_runs_and_its_hold_keys_are_gone(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> None:
    # Far enough out that a loaded machine still holds, cancels (a CLI process) and only then passes it.
    instant = now_ms() + 15_000
    job = waiting(issue_job("exit=0", number=11), {"after": iso(instant)})
    with capture_logs() as logs:
        async with running_worker(env, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            await wait_for(lambda: events(logs, "wait_deferred", job), 30, what="the hold")
            held_keys = [keys.wait_job(job.id), keys.wait_key(dedup_id(job))]
            assert await redis.exists(*held_keys) == 2
            done = await asyncio.to_thread(run_cli, env, "cancel", job.id, "--json")
            # Past the instant, with the promoter and the worker running: nothing comes back.
            assert now_ms() < instant, "the cancel came after the instant: the test's own timing failed"
            await wait_for(lambda: now_ms() > instant + 3_000, 25, what="the instant to pass")
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["waitingOn"] is True
    assert await redis.exists(*held_keys) == 0 and await redis.smembers(keys.wait_held) == set()
    assert not events(logs, "job_started") and read_record(settings.logs_dir, job) is None
    assert await redis.zcard(keys.delayed) == 0
