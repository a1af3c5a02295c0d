"""``pi-dispatch cancel`` and ``pi-dispatch status`` against a real Redis, run in-process.

The CLI runs in a thread (it calls asyncio.run) while the test plays the worker side on its own loop.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from pidispatch.common.delayed import Envelope, schedule
from pidispatch.common.embedded import free_port
from pidispatch.common.keys import CANCEL_ACK_TTL_MS, WORKER_GROUP, Keys
from pidispatch.common.models import job_to_fields
from pidispatch.common.redis import Redis
from pidispatch.common.streams import ensure_group, read_group
from pidispatch.console import control
from tests.support.cli import Cli
from tests.support.polling import wait_for
from tests.support.worker import issue_job


@pytest.fixture
def run(base_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    for name in ("REDIS_URL", "PD_KEY_PREFIX"):
        monkeypatch.setenv(name, base_env[name])
    # An unrelated broken setting must not stop an operator from cancelling or looking.
    monkeypatch.setenv("GITHUB_AUTH_SOURCE", "broken")
    return Cli(capsys, control.register)


async def enqueue(redis: Redis, stream: str, job_id: str, attempt: int = 1) -> str:
    fields = job_to_fields(issue_job("exit=0"), attempt)
    fields["id"] = job_id
    return (await redis.xadd(stream, fields)).decode()  # type: ignore[arg-type]


async def hand_to_worker(redis: Redis, stream: str, consumer: str) -> str:
    """XREADGROUP one entry as worker ``consumer``: it is now delivered and pending."""
    await ensure_group(redis, stream, WORKER_GROUP)
    [(_, entry_id, _)] = await read_group(redis, WORKER_GROUP, consumer, {stream: ">"}, count=1)
    return entry_id


async def stream_ids(redis: Redis, stream: str) -> list[bytes]:
    return [f[b"id"] for _, f in await redis.xrange(stream)]


async def test_a_queued_job_is_removed_and_a_second_cancel_exits_1(
    run: Cli, redis: Redis, keys: Keys
) -> None:
    await enqueue(redis, keys.jobs, "gh-ran")
    await hand_to_worker(redis, keys.jobs, "w1")  # the group exists and has handed out an earlier entry
    await enqueue(redis, keys.jobs, "gh-q")
    await enqueue(redis, keys.jobs, "gh-other")

    assert await run("cancel", "gh-q") == 0
    assert run.out.strip() == "cancelled gh-q: it was queued and never ran; no record was written"
    assert await stream_ids(redis, keys.jobs) == [b"gh-ran", b"gh-other"]
    assert await redis.hget(keys.job("gh-q"), "state") == b"cancelled"

    assert await run("cancel", "gh-q") == 1
    assert run.err.strip() == "nothing to cancel: gh-q already ended (cancelled)"


async def test_a_queued_job_on_a_host_stream_without_a_group_is_removed(
    run: Cli, redis: Redis, keys: Keys
) -> None:
    await enqueue(redis, keys.host_jobs("mini1"), "gh-host", attempt=2)
    assert await run("cancel", "gh-host", "--json") == 0
    result = run.json()
    assert (result["cancelled"], result["where"], result["attempt"]) == (True, "queued", 2)
    assert result["message"].endswith("(attempt 1 already ran; its record stays)")
    assert await redis.xlen(keys.host_jobs("mini1")) == 0


async def test_a_delayed_job_is_removed_and_the_message_says_whether_it_ran(
    run: Cli, redis: Redis, keys: Keys
) -> None:
    entry_id = await enqueue(redis, keys.jobs, "gh-retry")
    await hand_to_worker(redis, keys.jobs, "w1")
    fields = {**job_to_fields(issue_job("exit=0"), 2), "id": "gh-retry"}
    due = await schedule(
        redis, keys, source=keys.jobs, group=WORKER_GROUP, entry_id=entry_id, stream=keys.jobs,
        fields=fields, job_id="gh-retry", attempt=2, delay_ms=3_600_000,
    )  # fmt: skip
    assert due is not None
    never_ran = Envelope.build(job_id="gh-defer", attempt=1, stream=keys.jobs, fields={"id": "gh-defer"})
    await redis.zadd(keys.delayed, {never_ran.member: due})

    assert await run("cancel", "gh-retry") == 0
    assert run.out.strip() == (
        "cancelled gh-retry: it was waiting to run again (attempt 1 already ran; its record stays)"
    )
    assert await run("cancel", "gh-defer") == 0
    assert run.out.strip() == "cancelled gh-defer: it was waiting, it never ran; no record was written"
    assert await redis.zcard(keys.delayed) == 0
    assert await redis.hget(keys.job("gh-retry"), "state") == b"cancelled"
    assert await run("cancel", "gh-retry") == 1


async def test_a_running_job_is_cancelled_when_its_worker_acknowledges(
    run: Cli, redis: Redis, keys: Keys
) -> None:
    await enqueue(redis, keys.host_jobs("mini1"), "gh-run")
    await hand_to_worker(redis, keys.host_jobs("mini1"), "mini1")
    await redis.sadd(keys.hosts, "mini1")

    async def worker_side() -> bytes:
        # What the worker does on seeing the request: take it (DEL), stop the container, acknowledge.
        reason = await wait_for(lambda: redis.get(keys.cancel("gh-run")), what="the cancel request")
        await redis.delete(keys.cancel("gh-run"))
        await redis.set(keys.cancel_ack("gh-run"), "mini1", px=CANCEL_ACK_TTL_MS)
        return reason  # type: ignore[no-any-return]

    worker = asyncio.create_task(worker_side())
    assert await run("cancel", "gh-run") == 0
    assert run.out.strip() == "cancel accepted by mini1; the run record will say operator-cancel"
    assert await worker == b"operator-cancel"
    assert await redis.xlen(keys.host_jobs("mini1")) == 1  # a held job is the worker's to finish

    assert await run("cancel", "gh-run") == 1  # a second cancel does not claim a second success
    assert "already accepted by mini1" in run.err


async def test_without_an_acknowledgement_the_request_is_withdrawn_and_cancel_exits_1(
    run: Cli, redis: Redis, keys: Keys
) -> None:
    await enqueue(redis, keys.jobs, "gh-deaf")
    await hand_to_worker(redis, keys.jobs, "gone-host")
    seen = asyncio.create_task(wait_for(lambda: redis.exists(keys.cancel("gh-deaf")), what="the request"))

    assert await run("cancel", "gh-deaf", "--wait", "0.5") == 1
    assert await seen
    assert not await redis.exists(keys.cancel("gh-deaf"))
    assert run.err.strip() == (
        "no worker acknowledged: gh-deaf is held by gone-host, which has no live registry row; "
        "nothing was changed"
    )
    assert (await redis.xpending(keys.jobs, WORKER_GROUP))["pending"] == 1  # still the worker's


async def test_a_job_that_finishes_while_cancel_waits_is_reported_as_finished(
    run: Cli, redis: Redis, keys: Keys
) -> None:
    await enqueue(redis, keys.jobs, "gh-fast")
    entry_id = await hand_to_worker(redis, keys.jobs, "mini1")

    async def worker_finishes() -> None:
        # The run ends before the worker polls for cancels: it records and acks, and never acknowledges.
        await wait_for(lambda: redis.exists(keys.cancel("gh-fast")), what="the cancel request")
        await redis.hset(keys.job("gh-fast"), "state", "completed")
        await redis.xack(keys.jobs, WORKER_GROUP, entry_id)

    worker = asyncio.create_task(worker_finishes())
    assert await run("cancel", "gh-fast", "--wait", "0.5") == 1
    await worker
    assert run.err.strip() == (
        "cancel not confirmed: gh-fast finished meanwhile (completed); nothing was changed"
    )
    assert not await redis.exists(keys.cancel("gh-fast"))


async def test_an_unknown_or_malformed_job_id_exits_1(run: Cli, redis: Redis, keys: Keys) -> None:
    assert await run("cancel", "gh-nope") == 1
    assert run.err.strip() == "no job gh-nope is queued, waiting or running"
    assert await run("cancel", "gh bad id") == 1
    assert "is not a job id" in run.err


@pytest.mark.parametrize("argv", [("cancel", "gh-1"), ("status", "--json")])
async def test_redis_down_fails_fast_with_exit_1_naming_redis_url(
    run: Cli, monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...]
) -> None:
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    assert await asyncio.wait_for(run(*argv), 10) == 1
    assert "Redis at REDIS_URL (redis://" in run.err
    assert run.out == ""


async def test_status_counts_queued_running_delayed_dead_and_pauses(
    run: Cli, redis: Redis, keys: Keys
) -> None:
    assert await run("status", "--json") == 0
    assert run.json() == {
        "paused": False, "pausedHosts": [], "queued": 0, "running": 0, "delayed": 0, "dead": 0, "hosts": [],
        "heldByWindow": 0, "heldByWait": 0, "imageMissing": [], "egressOff": [],
    }  # fmt: skip

    for i in range(4):
        await enqueue(redis, keys.jobs, f"gh-{i}")
    await hand_to_worker(redis, keys.jobs, "mini1")  # running
    done = await hand_to_worker(redis, keys.jobs, "mini1")
    await redis.xack(keys.jobs, WORKER_GROUP, done)  # finished: neither queued nor running
    await enqueue(redis, keys.host_jobs("mini1"), "gh-host")  # a host stream without a group yet
    await enqueue(redis, keys.host_jobs("unregistered"), "gh-found-by-scan")
    await redis.sadd(keys.hosts, "mini1", "expired")
    await redis.hset(keys.host("mini1"), mapping={"name": "mini1"})
    await redis.zadd(keys.delayed, {"a": 1, "b": 2})
    # "a" waits for a quiet-hours window that closes in an hour; "old" for one that closed.
    await redis.zadd(keys.window_held, {"a": time.time() * 1000 + 3_600_000, "old": 1})
    await redis.xadd(keys.dead, {"source": keys.jobs, "reason": "malformed-job"})
    await redis.set(keys.paused, "1")
    await redis.set(keys.paused_host("mini2"), "1")

    assert await run("status", "--json") == 0
    assert run.json() == {
        "paused": True, "pausedHosts": ["mini2"], "queued": 4, "running": 1, "delayed": 2, "dead": 1,
        "hosts": ["mini1"], "heldByWindow": 1, "heldByWait": 0, "imageMissing": [], "egressOff": [],
    }  # fmt: skip

    assert await run("status") == 0
    lines = run.out.splitlines()
    assert lines[0] == "paused   yes, every worker (fleet); hosts paused: mini2"
    assert "queued   4" in lines and "hosts    mini1" in lines
    assert "windowed 1 of the delayed wait for a quiet-hours window" in lines
