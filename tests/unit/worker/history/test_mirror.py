"""The run-record mirror: window, index cap, reader pruning, merge."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from structlog.testing import capture_logs

from pidispatch.common.keys import Keys
from pidispatch.common.models import Job, Matched, RunRecord, Sender, Target, Trigger
from pidispatch.common.redis import Redis, create_redis
from pidispatch.worker.engine.exitline import ExitInfo
from pidispatch.worker.history import mirror as mirror_module
from pidispatch.worker.history.mirror import (
    DAY_MS,
    RUNS_INDEX_MAX,
    Mirror,
    hosts_of,
    merge_runs,
    mirror_record,
    mirror_window_ms,
    read_mirror,
)
from pidispatch.worker.history.records import build_record, encode_record
from tests.support.processes import RedisProcess

T0 = 1_700_000_000_000
MINUTE = 60_000
NOW = T0 + 10 * MINUTE


def job(job_id: str) -> Job:
    return Job(
        id=job_id, kind="github", repo="Codertocat/Hello-World", flow="triage",
        target=Target(type="issue", number=1, title="Spelling error in the README file", body="body"),
        trigger=Trigger(event="issues", action="labeled", delivery_id=job_id, sender=Sender(id=21031067),
                        matched=Matched(index=0, type="label", label="bug")),
    )


def rec(job_id: str, ended_ms: int, *, host: str = "hostA", attempt: int = 1, outcome: str = "completed"
        ) -> RunRecord:
    return build_record(
        job(job_id), attempt=attempt, outcome=outcome, reason=None, exit_code=0,
        exit_info=ExitInfo(turns=1, tokens={"input": 1, "output": 1, "total": 2, "cost": 0}),
        started_at_ms=ended_ms - 5000, ended_at_ms=ended_ms, host=host,
    )


async def put(redis: Redis, keys: Keys, record: RunRecord, *, now: int = NOW, retention: int = 30) -> None:
    assert await mirror_record(redis, keys, record, retention_days=retention, now_ms=now)


# ---- the window --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("retention", "days"), [(30, 30), (1, 1), (92, 92), (0, 92), (400, 92)])
def test_window_is_the_file_retention_capped_at_92_days(retention: int, days: int) -> None:
    assert mirror_window_ms(retention) == days * DAY_MS


@pytest.mark.parametrize(("retention", "days"), [(30, 30), (0, 92), (400, 92)])
async def test_record_and_index_live_one_window(redis: Redis, keys: Keys, retention: int, days: int) -> None:
    record = rec("gh-a:1", T0)
    await put(redis, keys, record, retention=retention)
    window = days * DAY_MS
    for key in (keys.run_rec("gh-a_3a1"), keys.runs_index):  # member and key use the file name
        ttl = await redis.pttl(key)
        assert window - MINUTE < ttl <= window
    # The exact record JSON: the file's bytes without the newline, and it decodes to the same record.
    body = await redis.get(keys.run_rec("gh-a_3a1"))
    assert body == encode_record(record).rstrip(b"\n")
    assert msgspec.json.decode(body, type=RunRecord) == record
    assert await redis.zscore(keys.runs_index, "gh-a_3a1") == T0  # endedAt


async def test_score_falls_back_to_started_at_then_now(redis: Redis, keys: Keys) -> None:
    no_end = msgspec.structs.replace(rec("gh-s", T0), ended_at="")
    neither = msgspec.structs.replace(rec("gh-n", T0), ended_at="", started_at="not a time")
    await put(redis, keys, no_end)
    await put(redis, keys, neither)
    assert await redis.zscore(keys.runs_index, "gh-s") == T0 - 5000
    assert await redis.zscore(keys.runs_index, "gh-n") == NOW


async def test_index_keeps_the_newest_5000(redis: Redis, keys: Keys) -> None:
    # Fill to the cap plus two directly (fast), then one real write pushes three past it.
    await redis.zadd(keys.runs_index, {f"old-{i}": T0 + i for i in range(RUNS_INDEX_MAX + 2)})
    await put(redis, keys, rec("gh-new", T0 + RUNS_INDEX_MAX + 10))
    assert await redis.zcard(keys.runs_index) == RUNS_INDEX_MAX
    gone = [await redis.zscore(keys.runs_index, f"old-{i}") for i in range(3)]
    assert gone == [None, None, None]
    assert await redis.zscore(keys.runs_index, "old-3") is not None
    assert await redis.zscore(keys.runs_index, "gh-new") is not None


async def test_two_ids_that_sanitise_alike_keep_two_mirror_entries(redis: Redis, keys: Keys) -> None:
    await put(redis, keys, rec("gh-a:b", T0), retention=30)
    await put(redis, keys, rec("gh-a_b", T0 + 1), retention=30)
    assert await redis.zcard(keys.runs_index) == 2


async def test_writer_drops_members_older_than_the_window(redis: Redis, keys: Keys) -> None:
    window = mirror_window_ms(30)
    await redis.zadd(keys.runs_index, {"too-old": NOW - window - 1, "just-in": NOW - window})
    await put(redis, keys, rec("gh-x", NOW))
    assert await redis.zscore(keys.runs_index, "too-old") is None
    assert await redis.zscore(keys.runs_index, "just-in") is not None


async def test_a_retry_overwrites_the_same_member(redis: Redis, keys: Keys) -> None:
    await put(redis, keys, rec("gh-r", T0, outcome="failed"))
    await put(redis, keys, rec("gh-r", T0 + MINUTE, attempt=2, host="hostB"))
    runs, _ = await read_mirror(redis, keys, since_ms=0, limit=10)
    assert [(r.job_id, r.attempt, r.host) for r in runs] == [("gh-r", 2, "hostB")]


# ---- the reader --------------------------------------------------------------------------------------


async def test_reader_lists_newest_first_after_since(redis: Redis, keys: Keys) -> None:
    for i in range(3):
        await put(redis, keys, rec(f"gh-{i}", T0 + i * MINUTE))
    runs, degraded = await read_mirror(redis, keys, since_ms=0, limit=10)
    assert ([r.job_id for r in runs], degraded) == (["gh-2", "gh-1", "gh-0"], "ok")
    # ``since`` is exclusive: a run ending exactly then is not shown.
    runs, _ = await read_mirror(redis, keys, since_ms=T0 + MINUTE, limit=10)
    assert [r.job_id for r in runs] == ["gh-2"]


async def test_reader_drops_and_prunes_members_whose_record_is_gone(redis: Redis, keys: Keys) -> None:
    for name in ("gh-kept", "gh-expired", "gh-torn", "gh-invalid"):
        await put(redis, keys, rec(name, T0))
    await redis.delete(keys.run_rec("gh-expired"))  # as if its PX had fired
    await redis.set(keys.run_rec("gh-torn"), b'{"jobId": "gh-torn", "kind"')
    await redis.set(keys.run_rec("gh-invalid"), b'{"jobId": "gh-invalid"}')  # JSON, but not a record
    runs, degraded = await read_mirror(redis, keys, since_ms=0, limit=10)
    assert ([r.job_id for r in runs], degraded) == (["gh-kept"], "ok")
    assert await redis.zrange(keys.runs_index, 0, -1) == [b"gh-kept"]


async def test_pruning_spares_a_record_rewritten_after_the_read(redis: Redis, keys: Keys) -> None:
    # The reader saw no body, then a writer mirrored the run again before the prune ran.
    await put(redis, keys, rec("gh-back", T0))
    await mirror_module._prune(redis, keys, [(b"gh-back", b"")])
    assert await redis.zscore(keys.runs_index, "gh-back") == T0


async def test_degraded_off_when_there_is_no_index(redis: Redis, keys: Keys) -> None:
    assert await read_mirror(redis, keys, since_ms=0, limit=10) == ([], "off")


async def test_degraded_truncated_when_the_index_holds_the_limit(redis: Redis, keys: Keys) -> None:
    for i in range(3):
        await put(redis, keys, rec(f"gh-{i}", T0 + i * MINUTE))
    runs, degraded = await read_mirror(redis, keys, since_ms=0, limit=3)
    assert (len(runs), degraded) == (3, "truncated")
    runs, degraded = await read_mirror(redis, keys, since_ms=0, limit=2)
    assert ([r.job_id for r in runs], degraded) == (["gh-2", "gh-1"], "truncated")


async def test_degraded_unreachable_names_the_error_and_does_not_raise(keys: Keys) -> None:
    down = create_redis("redis://127.0.0.1:1/0")
    try:
        assert await read_mirror(down, keys, since_ms=0, limit=10) == ([], "unreachable (ConnectionError)")
    finally:
        await down.aclose()


async def test_writer_failure_logs_once_per_transition(tmp_path: Path, keys: Keys) -> None:
    server = RedisProcess(tmp_path / "redis")
    server.start()
    client = create_redis(server.url)
    writer = Mirror(client, keys, retention_days=30)
    try:
        with capture_logs() as logs:
            assert await writer.write(rec("gh-1", T0), NOW)
            server.stop()
            assert not await writer.write(rec("gh-2", T0), NOW)  # returns, never raises
            assert not await writer.write(rec("gh-3", T0), NOW)
            server.start()
            assert await writer.write(rec("gh-4", T0), NOW)
            assert await writer.write(rec("gh-5", T0), NOW)
    finally:
        await client.aclose()
        server.stop()
    events = [e for e in logs if e["event"].startswith("run_mirror")]
    assert [e["event"] for e in events] == ["run_mirror_failed", "run_mirror_restored"]
    assert events[0]["job"] == "gh-2"
    assert events[0]["reason"] == "ConnectionError"  # the class, never the server address


# ---- the merge (pure) --------------------------------------------------------------------------------


def test_merge_later_attempt_on_another_host_beats_the_local_one() -> None:
    local = [rec("gh-r", T0, host="hostA", outcome="failed")]
    mirrored = [rec("gh-r", T0 + MINUTE, host="hostB", attempt=2)]
    merged = merge_runs(mirrored, local, 10)
    assert [(r.host, r.attempt, r.outcome) for r in merged] == [("hostB", 2, "completed")]


def test_merge_local_wins_an_exact_tie_and_a_later_local_wins() -> None:
    tie = merge_runs([rec("gh-t", T0, host="hostB")], [rec("gh-t", T0, host="hostA")], 10)
    assert [r.host for r in tie] == ["hostA"]
    later = merge_runs([rec("gh-l", T0, host="hostB")], [rec("gh-l", T0 + 1, host="hostA")], 10)
    assert [r.host for r in later] == ["hostA"]


def test_merge_sorts_newest_first_then_cuts() -> None:
    mirrored = [rec(f"gh-m{i}", T0 + i * 2 * MINUTE, host="hostB") for i in range(3)]
    local = [rec(f"gh-l{i}", T0 + (i * 2 + 1) * MINUTE) for i in range(3)]
    merged = merge_runs(mirrored, local, 4)
    assert [r.job_id for r in merged] == ["gh-l2", "gh-m2", "gh-l1", "gh-m1"]
    assert merge_runs(mirrored, local, 0) == []
    assert hosts_of(merged) == ["hostA", "hostB"]


def test_hosts_are_distinct_sorted_and_skip_unnamed() -> None:
    records = [rec(name, T0, host=host) for name, host in (("a", "w2"), ("b", "w1"), ("c", "w2"), ("d", ""))]
    assert hosts_of(records) == ["w1", "w2"]
