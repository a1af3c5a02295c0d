"""``pi-dispatch waits``, and what ``status`` and ``cancel`` do with jobs held on their wait-for conditions,
each run as an operator would (a fresh process) against a real Redis seeded with holds as the gate writes
them (``take_hold``, ``mark_deferred``) and the held job's envelope in ``pd:delayed``."""

from __future__ import annotations

import json
from typing import Any

from pidispatch.common.delayed import Envelope
from pidispatch.common.embedded import free_port
from pidispatch.common.keys import WORKER_GROUP, Keys
from pidispatch.common.models import job_to_fields
from pidispatch.common.redis import Redis
from pidispatch.common.streams import ensure_group, read_group
from pidispatch.worker.waits.state import conditions_json, mark_deferred, take_hold
from tests.support.cli import run_cli
from tests.support.worker import issue_job

T0 = 1_780_000_000_000  # 2026-05-28T20:26:40.000Z
HOUR_MS = 3_600_000
AFTER = [{"after": "2026-05-29T06:00:00Z"}, {"profile": "ci-green"}]


def operator_env(base_env: dict[str, str]) -> dict[str, str]:
    # Only what these verbs read: an operator's shell need not hold the rest of the deployment's settings.
    return {name: base_env[name] for name in ("REDIS_URL", "PD_KEY_PREFIX")}


def cli(base_env: dict[str, str], *argv: str, code: int = 0) -> str:
    done = run_cli(operator_env(base_env), *argv)
    assert done.returncode == code, (done.stdout, done.stderr)
    return done.stdout if code == 0 else done.stderr


def cli_json(base_env: dict[str, str], *argv: str, code: int = 0) -> Any:
    done = run_cli(operator_env(base_env), *argv, "--json")
    assert done.returncode == code, done.stderr
    return json.loads(done.stdout)


async def hold(
    redis: Redis, keys: Keys, job_id: str, target: str, *, since: int = T0, next_ms: int | None = None,
    delayed: bool = True,
) -> None:
    """A job the gate holds on ``target``: its hold (lease, hash, index) and, unless told not to, its
    envelope waiting in pd:delayed."""
    fields = {"target": target, "dedupId": f"d-{target}", "conditions": conditions_json(AFTER)}
    holder = await take_hold(redis, keys, job_id=job_id, dedup_id=f"d-{target}", ttl_ms=HOUR_MS,
                             now_ms=since, fields=fields)  # fmt: skip
    assert holder is None
    if next_ms is not None:
        await mark_deferred(redis, keys, job_id, next_ms=next_ms, ttl_ms=HOUR_MS)
    if delayed:
        envelope = Envelope.build(job_id=job_id, attempt=1, stream=keys.jobs, fields={"id": job_id})
        await redis.zadd(keys.delayed, {envelope.member: next_ms or T0 + HOUR_MS})


async def hold_keys(redis: Redis, keys: Keys, job_id: str, target: str) -> tuple[bool, bool, bytes | None]:
    """(hash exists, in the index, the target's lease value)."""
    return (bool(await redis.exists(keys.wait_job(job_id))),
            bool(await redis.sismember(keys.wait_held, job_id)),
            await redis.get(keys.wait_key(f"d-{target}")))  # fmt: skip


async def enqueue(redis: Redis, keys: Keys, job_id: str) -> None:
    fields = {**job_to_fields(issue_job("exit=0"), 1), "id": job_id}
    await redis.xadd(keys.jobs, fields)  # type: ignore[arg-type]


async def test_waits_lists_held_jobs_oldest_first_and_prunes_a_member_whose_hash_is_gone(
    redis: Redis, keys: Keys, base_env: dict[str, str]
) -> None:
    assert cli_json(base_env, "waits") == []
    assert cli(base_env, "waits").strip() == "no job is waiting on a condition"

    await hold(redis, keys, "gh-new", "owner/app#2", since=T0 + 5_000)
    await hold(redis, keys, "gh-old", "owner/app#1", since=T0, next_ms=T0 + 60_123)
    await redis.sadd(keys.wait_held, "gh-gone")  # its hash expired: an index member only

    rows = cli_json(base_env, "waits")
    assert rows == [
        {"job": "gh-old", "target": "owner/app#1", "conditions": AFTER, "since": "2026-05-28T20:26:40.000Z",
         "checks": 0, "faults": 0, "next": "2026-05-28T20:27:40.123Z"},
        {"job": "gh-new", "target": "owner/app#2", "conditions": AFTER, "since": "2026-05-28T20:26:45.000Z",
         "checks": 0, "faults": 0, "next": None},
    ]  # fmt: skip
    order = ("job", "target", "conditions", "since", "checks", "faults", "next")
    assert [tuple(r) for r in rows] == [order, order]  # the JSON keeps the documented key order
    assert not await redis.sismember(keys.wait_held, "gh-gone")

    table = cli(base_env, "waits").splitlines()
    assert table[0].split() == ["JOB", "TARGET", "SINCE", "NEXT", "CHECKS", "FAULTS", "CONDITIONS"]
    assert table[1].split() == [
        "gh-old", "owner/app#1", "2026-05-28T20:26:40.000Z", "2026-05-28T20:27:40.123Z", "0", "0",
        "after=2026-05-29T06:00:00Z,", "profile=ci-green",
    ]  # fmt: skip
    assert table[2].split()[:4] == ["gh-new", "owner/app#2", "2026-05-28T20:26:45.000Z", "-"]


async def test_status_counts_the_held_jobs_without_a_pruned_member(
    redis: Redis, keys: Keys, base_env: dict[str, str]
) -> None:
    await hold(redis, keys, "gh-1", "owner/app#1")
    await hold(redis, keys, "gh-2", "owner/app#2")
    await redis.sadd(keys.wait_held, "gh-gone")

    status = cli_json(base_env, "status")
    assert list(status)[-4:] == ["heldByWindow", "heldByWait", "imageMissing", "egressOff"]
    assert (status["delayed"], status["heldByWindow"], status["heldByWait"]) == (2, 0, 2)
    assert await redis.smembers(keys.wait_held) == {b"gh-1", b"gh-2"}
    assert "waiting  2 of the delayed wait for a condition (pi-dispatch waits)" in cli(base_env, "status")


async def test_cancel_of_a_held_job_removes_it_and_its_hold_but_not_a_lease_another_job_took(
    redis: Redis, keys: Keys, base_env: dict[str, str]
) -> None:
    await hold(redis, keys, "gh-c", "owner/app#1")
    await hold(redis, keys, "gh-a", "owner/app#2")
    await redis.set(keys.wait_key("d-owner/app#2"), "gh-b")  # a later job holds gh-a's target now
    await hold(redis, keys, "gh-keep", "owner/app#3")

    result = cli_json(base_env, "cancel", "gh-c")
    assert (result["cancelled"], result["where"], result["waitingOn"]) == (True, "delayed", True)
    assert result["message"] == (
        "cancelled gh-c: it was waiting on a condition, it never ran; no record was written"
    )
    assert await hold_keys(redis, keys, "gh-c", "owner/app#1") == (False, False, None)

    assert "waiting on a condition" in cli(base_env, "cancel", "gh-a")
    assert await hold_keys(redis, keys, "gh-a", "owner/app#2") == (False, False, b"gh-b")

    left = [e.id for m in await redis.zrange(keys.delayed, 0, -1) if (e := Envelope.parse(m))]
    assert left == ["gh-keep"]
    assert await hold_keys(redis, keys, "gh-keep", "owner/app#3") == (True, True, b"gh-keep")
    assert [r["job"] for r in cli_json(base_env, "waits")] == ["gh-keep"]


async def test_cancel_of_a_held_job_queued_for_its_next_check_removes_its_hold(
    redis: Redis, keys: Keys, base_env: dict[str, str]
) -> None:
    await hold(redis, keys, "gh-q", "owner/app#1", delayed=False)
    await enqueue(redis, keys, "gh-q")  # promoted from pd:delayed, not yet read by a worker

    result = cli_json(base_env, "cancel", "gh-q")
    assert (result["cancelled"], result["where"], result["waitingOn"]) == (True, "queued", True)
    assert result["message"] == (
        "cancelled gh-q: it was queued, waiting on a condition, and never ran; no record was written"
    )
    assert await hold_keys(redis, keys, "gh-q", "owner/app#1") == (False, False, None)


async def test_a_hold_that_outlived_its_job_is_removed_and_cancel_still_exits_1(
    redis: Redis, keys: Keys, base_env: dict[str, str]
) -> None:
    await hold(redis, keys, "gh-stale", "owner/app#1", delayed=False)

    result = cli_json(base_env, "cancel", "gh-stale", code=1)
    assert (result["cancelled"], result["waitingOn"]) == (False, True)
    assert result["message"] == (
        "no job gh-stale is queued, waiting or running; its leftover wait-for hold was removed"
    )
    assert await hold_keys(redis, keys, "gh-stale", "owner/app#1") == (False, False, None)
    assert cli_json(base_env, "cancel", "gh-stale", code=1)["waitingOn"] is False


async def test_a_held_job_a_worker_is_checking_keeps_its_hold_when_no_worker_acknowledges(
    redis: Redis, keys: Keys, base_env: dict[str, str]
) -> None:
    await hold(redis, keys, "gh-run", "owner/app#1", delayed=False)
    await enqueue(redis, keys, "gh-run")
    await ensure_group(redis, keys.jobs, WORKER_GROUP)
    await read_group(redis, WORKER_GROUP, "gone-host", {keys.jobs: ">"}, count=1)  # delivered, pending

    result = cli_json(base_env, "cancel", "gh-run", "--wait", "0.3", code=1)
    assert (result["where"], result["waitingOn"]) == ("running", False)
    # The worker holding the job ends its hold (its gate releases it), not the operator's cancel.
    assert await hold_keys(redis, keys, "gh-run", "owner/app#1") == (True, True, b"gh-run")


async def test_waits_with_redis_down_exits_1_naming_redis_url(base_env: dict[str, str]) -> None:
    down = {**base_env, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    done = run_cli(operator_env(down), "waits")
    assert done.returncode == 1
    assert "Redis at REDIS_URL (redis://" in done.stderr
    assert done.stdout == ""
