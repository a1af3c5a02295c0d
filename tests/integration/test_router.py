"""The router against a real redis-server: what it enqueues, what it records, and what survives a crash."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog

from pidispatch.common.keys import ROUTER_GROUP, Keys
from pidispatch.common.models import Event, job_from_fields
from pidispatch.common.redis import Redis, create_redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.settings import Settings, load_settings
from pidispatch.common.streams import ensure_group, read_group
from pidispatch.forges import pipeline
from pidispatch.router.service import READ_COUNT, run_router
from pidispatch.triggers import decisionlog
from pidispatch.triggers.loader import Rules, RulesRef, parse_triggers
from tests.support.decisions import bucket_of, decision_fields
from tests.support.payloads import FIXTURES
from tests.support.polling import wait_for
from tests.support.processes import RedisProcess, ServiceProcess

LABELED = (FIXTURES / "github" / "issues.labeled.json").read_text()  # issue #1, label "bug"
BUG_RULE = {"on": {"type": "label", "any": ["bug"]}, "run": {"kind": "github", "flow": "fix"}}
# A rule of another forge at index 0: the matched rule's index is its raw position in the file.
OTHER_FORGE = {"on": {"type": "label", "any": ["bug"]}, "run": {"kind": "gitlab", "flow": "nightly"}}


def rules_of(*entries: dict[str, Any]) -> Rules:
    return parse_triggers(json.dumps({"triggers": list(entries)}))


def settings_for(env: dict[str, str], **extra: str) -> Settings:
    return load_settings({**env, **extra})


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


async def append(
    redis: Redis, keys: Keys, *, delivery: str | None = None, body: str = LABELED, event: str = "issues",
    forge: str = "github",
) -> tuple[str, str]:
    delivery = delivery or str(uuid.uuid4())
    fields = Event(forge=forge, event=event, delivery=delivery, received_at=now_ms(), body=body).to_fields()
    return delivery, _s(await redis.xadd(keys.events, fields))  # type: ignore[arg-type]


async def decision(redis: Redis, keys: Keys, delivery: str, forge: str = "github") -> dict[str, str]:
    return await decision_fields(redis, keys, forge, delivery)


async def pending(redis: Redis, keys: Keys) -> int:
    return int((await redis.xpending(keys.events, ROUTER_GROUP))["pending"])


async def _zero(redis: Redis, keys: Keys) -> bool:
    return await pending(redis, keys) == 0


@asynccontextmanager
async def running_router(
    settings: Settings, redis: Redis, keys: Keys, rules: Rules, consumer: str = "router-a"
) -> AsyncIterator[asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_router(settings, redis, keys, RulesRef(rules), stop, now_ms, consumer=consumer)
    )
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)  # re-raises if the router crashed


async def test_router_enqueues_one_job_for_a_matching_label(
    base_env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    async with running_router(settings_for(base_env), redis, keys, rules_of(OTHER_FORGE, BUG_RULE)):
        delivery, entry = await append(redis, keys)
        d = await wait_for(lambda: decision(redis, keys, delivery), what="the decision hash")
    [(_, fields)] = await redis.xrange(keys.jobs)
    job, attempt = job_from_fields(fields)
    assert (job.id, job.kind, job.repo, attempt) == (f"gh-{delivery}", "github", "Codertocat/Hello-World", 1)
    assert (job.target.type, job.target.number) == ("issue", 1)  # type: ignore[union-attr]
    assert job.flow == "fix" and job.enqueued_at is not None
    matched = job.trigger.matched  # type: ignore[union-attr]
    assert (matched.index, matched.type, matched.label) == (1, "label", "bug")  # type: ignore[union-attr]
    assert job.trigger.sender.id == 21031067  # type: ignore[union-attr]

    assert d["outcome"] == "queued" and d["reason"] == ""
    assert d["jobs"] == f"gh-{delivery}" and d["trigger"] == "1" and d["entry"] == entry
    assert int(d["decidedAt"]) > 0
    # Kept 7 full days after the entry's day: its bucket goes at the end of that day + 7.
    assert 0 < await redis.ttl(bucket_of(keys, "github", delivery, entry)) <= 8 * 24 * 3600
    assert await pending(redis, keys) == 0  # acked in the same MULTI
    assert await redis.get(keys.dedup("Codertocat/Hello-World#1:fix")) == f"gh-{delivery}".encode()


async def test_router_fans_out_replicas_into_distinct_jobs(
    base_env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    rule = {**BUG_RULE, "run": {"kind": "github", "flow": "fix", "replicas": 2}}
    async with running_router(settings_for(base_env), redis, keys, rules_of(rule)):
        delivery, _ = await append(redis, keys)
        d = await wait_for(lambda: decision(redis, keys, delivery), what="the decision hash")
    ids = [job_from_fields(f)[0].id for _, f in await redis.xrange(keys.jobs)]
    assert ids == [f"gh-{delivery}-r1", f"gh-{delivery}-r2"]
    assert d["jobs"] == ",".join(ids) and d["outcome"] == "queued"


async def test_router_records_drop_reason_and_enqueues_nothing(
    base_env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    only_other_label = {"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}
    ping = (FIXTURES / "github" / "ping.json").read_text()
    async with running_router(settings_for(base_env), redis, keys, rules_of(only_other_label)):
        no_label, _ = await append(redis, keys)
        pinged, _ = await append(redis, keys, event="ping", body=ping)
        gitlab, _ = await append(redis, keys, forge="gitlab", event="Issue Hook", body="{}")
        drops = {}
        for delivery, forge in ((no_label, "github"), (pinged, "github"), (gitlab, "gitlab")):
            drops[delivery] = await wait_for(lambda d=delivery, f=forge: decision(redis, keys, d, f),
                                             what="a drop decision")
    assert drops[no_label]["outcome"] == "dropped" and drops[no_label]["reason"] == "no-allowlisted-label"
    assert drops[pinged]["reason"] == "unhandled-event"
    # An empty GitLab body has no user: dropped before any lookup could be asked for.
    assert drops[gitlab]["reason"] == "missing-sender-id"
    assert all(d["jobs"] == "" and d["trigger"] == "" for d in drops.values())
    assert await redis.xlen(keys.jobs) == 0
    assert await pending(redis, keys) == 0


async def test_a_second_delivery_for_the_same_issue_and_flow_is_deduplicated(
    base_env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    async with running_router(settings_for(base_env), redis, keys, rules_of(BUG_RULE)):
        first, _ = await append(redis, keys)
        await wait_for(lambda: decision(redis, keys, first), what="the first decision")
        second, _ = await append(redis, keys)
        d = await wait_for(lambda: decision(redis, keys, second), what="the second decision")
    assert d["outcome"] == "deduplicated" and d["jobs"] == f"gh-{first}"
    assert await redis.xlen(keys.jobs) == 1


async def test_router_killed_after_enqueue_before_ack_creates_no_duplicate_job(
    base_env: dict[str, str], redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    """kill -9 lands exactly between the enqueue and the ack (a crash point); a second router claims
    the idle entry, re-processes it, and the job script answers "duplicate": exactly one job."""
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": [BUG_RULE]}))
    delivery, entry = await append(redis, keys)
    env = {**base_env, "PD_CLAIM_IDLE_MS": "200"}
    doomed = ServiceProcess(
        "router", {**env, "PD_ROUTER_NAME": "router-doomed", "PD_FAULT_INJECT": "router-after-enqueue"},
        tmp_path / "doomed.log",
    )
    doomed.start()
    assert doomed.proc is not None
    await wait_for(lambda: doomed.proc.poll() is not None, timeout=15, what="the router to die")  # type: ignore[union-attr]
    assert doomed.proc.returncode == -9
    assert await redis.xlen(keys.jobs) == 1 and await pending(redis, keys) == 1
    assert await decision(redis, keys, delivery) == {}

    peer = ServiceProcess("router", {**env, "PD_ROUTER_NAME": "router-peer", "PD_LOG_LEVEL": "debug"},
                          tmp_path / "peer.log")
    peer.start()
    try:
        d = await wait_for(lambda: decision(redis, keys, delivery), timeout=15, what="the peer's decision")
        await wait_for(lambda: _zero(redis, keys), what="the entry to be acked")
    finally:
        assert peer.stop() == 0
    assert d["outcome"] == "queued" and d["jobs"] == f"gh-{delivery}" and d["entry"] == entry
    assert await redis.xlen(keys.jobs) == 1
    assert [line["existing"] for line in peer.logged("enqueued")] == [True]


async def test_a_router_killed_with_the_next_page_read_ahead_decides_every_entry_once_after_a_restart(
    base_env: dict[str, str], redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    """Busy, the router reads the next page while it processes one; killed after its first enqueue, both
    pages stay pending under its name, and the same name restarted decides each entry once."""
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": [BUG_RULE]}))
    deliveries = []
    for i in range(2 * READ_COUNT + 10):
        body = json.loads(LABELED)
        body["issue"]["number"] = 100 + i  # distinct issues, so the semantic window keeps them all
        deliveries.append((await append(redis, keys, body=json.dumps(body)))[0])
    env = {**base_env, "PD_ROUTER_NAME": "router-a"}
    doomed = ServiceProcess("router", {**env, "PD_FAULT_INJECT": "router-after-enqueue"}, tmp_path / "a.log")
    doomed.start()
    assert doomed.proc is not None
    await wait_for(lambda: doomed.proc.poll() is not None, timeout=15, what="the router to die")  # type: ignore[union-attr]
    assert await pending(redis, keys) >= READ_COUNT and await redis.xlen(keys.jobs) == READ_COUNT
    again = ServiceProcess("router", env, tmp_path / "b.log")
    again.start()
    try:
        await wait_for(lambda: _all_decided(redis, keys, deliveries), timeout=30, what="every decision")
        await wait_for(lambda: _zero(redis, keys), what="every entry acked")
    finally:
        assert again.stop() == 0
    assert await redis.xlen(keys.jobs) == len(deliveries)
    outcomes = [(await decision(redis, keys, d))["outcome"] for d in deliveries]
    assert outcomes == ["queued"] * len(deliveries)


async def test_two_routers_in_one_group_share_the_work_without_duplicates(
    base_env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    settings = settings_for(base_env)
    rules = rules_of(BUG_RULE)
    async with running_router(settings, redis, keys, rules, consumer="router-a"), \
            running_router(settings, redis, keys, rules, consumer="router-b"):
        deliveries = []
        for i in range(40):
            body = json.loads(LABELED)
            body["issue"]["number"] = 100 + i  # distinct issues, so the semantic window keeps them all
            deliveries.append((await append(redis, keys, body=json.dumps(body)))[0])
        await wait_for(lambda: _all_decided(redis, keys, deliveries), timeout=20, what="every decision")
        await wait_for(lambda: _zero(redis, keys), what="every entry acked")
    assert await redis.xlen(keys.jobs) == 40
    consumers = {_s(c["name"]) for c in await redis.xinfo_consumers(keys.events, ROUTER_GROUP)}
    assert consumers == {"router-a", "router-b"}


async def _all_decided(redis: Redis, keys: Keys, deliveries: list[str]) -> bool:
    for d in deliveries:
        if not await decision(redis, keys, d):
            return False
    return True


async def test_restarted_router_finishes_its_own_pending_entries_first(
    base_env: dict[str, str], redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    """A router SIGKILLed after reading leaves the entry pending under its name; the same name restarted
    (claim idle 60 s, so no claim can be what rescues it) re-reads its own pending list and routes it."""
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": [BUG_RULE]}))
    delivery, _ = await append(redis, keys)
    await ensure_group(redis, keys.events, ROUTER_GROUP)
    await read_group(redis, ROUTER_GROUP, "router-a", {keys.events: ">"}, 10)

    proc = ServiceProcess("router", {**base_env, "PD_ROUTER_NAME": "router-a"}, tmp_path / "router.log")
    proc.start()
    try:
        d = await wait_for(lambda: decision(redis, keys, delivery), timeout=15, what="the decision hash")
        started = await wait_for(lambda: proc.logged("router_started"), what="router_started")
    finally:
        code = proc.stop()
    assert d["outcome"] == "queued" and await redis.xlen(keys.jobs) == 1
    assert started[0]["consumer"] == "router-a"
    assert proc.logged("self_identity")[0] == {**proc.logged("self_identity")[0], "forge": "github",
                                                "resolved": True, "source": "GITHUB_SELF_ID"}
    assert code == 0  # SIGTERM is a clean shutdown
    assert "Codertocat" not in (tmp_path / "router.log").read_text()  # no logins, titles or repos in logs


async def test_poison_event_goes_to_dead_and_does_not_block_the_next(
    base_env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    async with running_router(settings_for(base_env), redis, keys, rules_of(BUG_RULE)):
        missing = _s(await redis.xadd(keys.events, {"forge": "github", "event": "issues"}))
        _, bad_shape = await append(redis, keys, body='{"action": "labeled", "issue": "a string"}')
        good, _ = await append(redis, keys)
        await wait_for(lambda: decision(redis, keys, good), what="the good event's decision")
        await wait_for(lambda: _zero(redis, keys), what="every entry finished")
    dead = await redis.xrange(keys.dead)
    parked = {_s(f[b"entry"]): {_s(k): _s(v) for k, v in f.items()} for _, f in dead}
    assert set(parked) == {missing, bad_shape}
    assert all(p["reason"] == "malformed-event" and p["source"] == keys.events for p in parked.values())
    assert parked[bad_shape]["body"] == '{"action": "labeled", "issue": "a string"}'  # kept for replay
    assert await redis.xlen(keys.jobs) == 1


async def test_an_entry_that_keeps_failing_is_retried_then_parked_after_max_deliveries(
    base_env: dict[str, str], redis: Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_plan = pipeline.planned
    calls: list[str] = []

    def flaky(event: Event, rules: Rules, self_ids: Any) -> Any:
        if event.delivery == "boom":
            calls.append(event.delivery)
            raise RuntimeError("bug in a filter")
        return real_plan(event, rules, self_ids)

    monkeypatch.setattr(pipeline, "planned", flaky)
    settings = settings_for(base_env, PD_CLAIM_IDLE_MS="100", PD_MAX_DELIVERIES="2")
    async with running_router(settings, redis, keys, rules_of(BUG_RULE)):
        _, boom_entry = await append(redis, keys, delivery="boom")
        good, _ = await append(redis, keys)
        # The failing entry does not hold up the one behind it.
        await wait_for(lambda: decision(redis, keys, good), what="the good event's decision")
        [(_, parked)] = await wait_for(lambda: redis.xrange(keys.dead), what="the entry parked in dead")
    assert _s(parked[b"entry"]) == boom_entry and _s(parked[b"reason"]) == "processing-failed"
    assert _s(parked[b"deliveries"]) == "2" and calls == ["boom", "boom"]
    assert await pending(redis, keys) == 0
    assert (await decision(redis, keys, "boom"))["outcome"] == "dead"


async def test_a_pending_entry_deleted_from_the_stream_is_acked_not_claimed_for_ever(
    base_env: dict[str, str], redis: Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_plan = pipeline.planned

    def fails_once(event: Event, rules: Rules, self_ids: Any) -> Any:
        if event.delivery == "doomed":
            raise RuntimeError("a bug, once")
        return real_plan(event, rules, self_ids)

    monkeypatch.setattr(pipeline, "planned", fails_once)
    with structlog.testing.capture_logs() as logs:
        async with running_router(settings_for(base_env), redis, keys, rules_of(BUG_RULE)):
            _, entry = await append(redis, keys, delivery="doomed")
            await wait_for(lambda: any(e["event"] == "event_failed" for e in logs), what="the failure")
            await redis.xdel(keys.events, entry)  # an operator's XDEL while it waits for its retry
            await wait_for(lambda: any(e["event"] == "event_entry_gone" for e in logs), what="the ack")
    assert await pending(redis, keys) == 0
    assert await redis.xlen(keys.dead) == 0  # nothing to park: there is no entry left


async def test_router_survives_redis_restart(base_env: dict[str, str], keys: Keys, tmp_path: Path) -> None:
    server = RedisProcess(tmp_path / "redis")
    server.start()
    router_client = create_redis(server.url)
    settings = settings_for(base_env, REDIS_URL=server.url)
    try:
        with structlog.testing.capture_logs() as logs:
            async with running_router(settings, router_client, keys, rules_of(BUG_RULE)):
                before = create_redis(server.url)
                first, _ = await append(before, keys)
                await wait_for(lambda: decision(before, keys, first), what="the first decision")
                await before.aclose()
                await asyncio.to_thread(server.stop)
                await wait_for(lambda: any(e["event"] == "redis_unreachable" for e in logs),
                               what="redis_unreachable")
                await asyncio.to_thread(server.start)
                # The restarted Redis is empty: the router must recreate its group and keep routing.
                after = create_redis(server.url)
                second, _ = await append(after, keys)
                d = await wait_for(lambda: decision(after, keys, second), timeout=20,
                                   what="the second decision")
                await after.aclose()
        assert d["outcome"] == "queued"
        events = [e["event"] for e in logs]
        assert events.count("redis_unreachable") == 1 and events.count("redis_restored") == 1
    finally:
        await router_client.aclose()
        server.stop()


@pytest.mark.parametrize(
    ("triggers", "extra_env", "named"),
    [
        ({"triggers": [BUG_RULE, {"on": {"type": "label", "any": "bug"},
                                  "run": {"kind": "github", "flow": "x"}}]}, {}, "triggers[1].on.any"),
        ({"triggers": [BUG_RULE]}, {"GITHUB_AUTH_SOURCE": "pat"}, "GITHUB_PAT"),
        ({"triggers": [{"on": {"type": "label", "any": ["x"]},
                        "run": {"kind": "gitlab", "flow": "x"}}]}, {}, "GITLAB_TOKEN"),
        ({"triggers": [BUG_RULE]}, {"PD_ROUTER_NAME": "bad name"}, "PD_ROUTER_NAME"),
    ],
)
def test_router_refuses_bad_triggers_file_with_exit_2(
    base_env: dict[str, str], triggers: dict[str, Any], extra_env: dict[str, str], named: str
) -> None:
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps(triggers))
    proc = subprocess.run(
        [sys.executable, "-m", "pidispatch.router"], env={**base_env, **extra_env}, capture_output=True,
        text=True, timeout=30, check=False,
    )
    assert proc.returncode == 2
    assert named in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


async def _log(redis: Redis, keys: Keys) -> list[decisionlog.Logged]:
    return await decisionlog.newest(redis, keys, 1_000)


async def test_every_outcome_reads_in_the_decision_log_with_what_the_delivery_was_about(
    base_env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    unlabeled = (FIXTURES / "github" / "issues.unlabeled.json").read_text()
    async with running_router(settings_for(base_env), redis, keys, rules_of(BUG_RULE)):
        first, _ = await append(redis, keys)
        await wait_for(lambda: decision(redis, keys, first), what="the first decision")
        second, _ = await append(redis, keys)  # the same issue and rule within 10 minutes
        dropped, _ = await append(redis, keys, body=unlabeled)
        broken, _ = await append(redis, keys, body="{")
        await wait_for(lambda: decision(redis, keys, broken), what="the last decision")
        # An operator's replay of the first: its job id exists already, from the first entry.
        fields = Event(forge="github", event="issues", delivery=first, received_at=now_ms(), body=LABELED)
        await redis.xadd(keys.events, {**fields.to_fields(), "replayedAt": "1"})  # type: ignore[dict-item]
        await wait_for(lambda: _count(redis, keys, 5), what="the replay's line")
    rows = {(d.delivery, d.replay): d for d in await _log(redis, keys)}
    jobs_of_first = (f"gh-{first}",)
    queued = rows[first, False]
    assert (queued.outcome, queued.event, queued.action, queued.target) == (
        "queued", "issues", "labeled", "Codertocat/Hello-World#1"
    )
    assert (queued.jobs, queued.streams, queued.trigger) == (jobs_of_first, (keys.jobs,), 0)
    window = rows[second, False]
    assert (window.outcome, window.reason, window.jobs, window.streams) == (
        "deduplicated", "semantic-window", jobs_of_first, ()
    )
    replay = rows[first, True]
    assert (replay.outcome, replay.reason, replay.jobs) == ("deduplicated", "job-id", jobs_of_first)
    assert (rows[dropped, False].outcome, rows[dropped, False].action) == ("dropped", "unlabeled")
    assert (rows[broken, False].outcome, rows[broken, False].reason) == ("dead", "malformed-event")
    # The raw lines, as redis-cli shows them: one line each, the time first, newest first.
    raw = [m.decode() for m in await redis.zrevrange(keys.decisions, 0, -1)]
    assert raw[0].split(" ")[1:4] == ["deduplicated", "github", "issues/labeled"] and "replay=yes" in raw[0]
    assert all(line[:4].isdigit() and line[23] == "Z" for line in raw)
    # Where the queued job is, without scanning a stream.
    located = await redis.hmget(keys.job(f"gh-{first}"), ["stream", "eventEntry"])
    assert _s(located[0]) == keys.jobs and _s(located[1]) == queued.entry


async def _count(redis: Redis, keys: Keys, n: int) -> bool:
    return int(await redis.zcard(keys.decisions)) >= n


async def test_the_decision_log_keeps_the_newest_lines_up_to_events_maxlen(
    base_env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    unlabeled = (FIXTURES / "github" / "issues.unlabeled.json").read_text()
    settings = settings_for(base_env, PD_EVENTS_MAXLEN="100")
    async with running_router(settings, redis, keys, rules_of(BUG_RULE)):
        deliveries = [(await append(redis, keys, body=unlabeled))[0] for _ in range(130)]
        await wait_for(lambda: decision(redis, keys, deliveries[-1]), what="the last decision")
        await wait_for(lambda: _zero(redis, keys), what="every entry acked")
    logged = await _log(redis, keys)
    assert len(logged) == 100 == await redis.zcard(keys.decisions)
    assert [d.decided_at for d in logged] == sorted((d.decided_at for d in logged), reverse=True)
    # What was cut was decided no later than anything kept (lines of one millisecond order by their text).
    kept = {d.delivery for d in logged}
    cut = [int((await decision(redis, keys, d))["decidedAt"]) for d in deliveries if d not in kept]
    assert len(cut) == 30 and max(cut) <= logged[-1].decided_at


async def test_an_entry_an_older_receiver_wrote_is_still_routed(
    base_env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    """A rolling upgrade: the entry names its receive time ``received_at``, as receivers before the
    camelCase fields did."""
    delivery = str(uuid.uuid4())
    fields = {"forge": "github", "event": "issues", "delivery": delivery, "received_at": "1764583200000",
              "body": LABELED}
    await redis.xadd(keys.events, fields)  # type: ignore[arg-type]
    async with running_router(settings_for(base_env), redis, keys, rules_of(BUG_RULE)):
        found = await wait_for(lambda: decision(redis, keys, delivery), what="the decision")
    assert (found["outcome"], found["jobs"]) == ("queued", f"gh-{delivery}")
    [(_, entry)] = await redis.xrange(keys.jobs)
    job, _ = job_from_fields(entry)
    assert job.trigger is not None and job.trigger.delivery_id == delivery
