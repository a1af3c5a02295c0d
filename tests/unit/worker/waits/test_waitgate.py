"""The wait gate: its pure rules (conditions, backoff, answers, bounds), and the gate itself against a real
Redis with real check programs and an injected clock: holds until an instant, checks that answer not yet,
never or nothing, every bound, and the supersede lease that lets one job per target wait and run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pidispatch.common.keys import Keys
from pidispatch.common.models import Job, Matched, Target, Trigger
from pidispatch.common.redis import Redis
from pidispatch.common.waitsettings import WaitSettings, load_wait_settings
from pidispatch.worker.engine.runner import Abort
from pidispatch.worker.program import ProgramRun
from pidispatch.worker.waits import state as waitstate
from pidispatch.worker.waits.gate import (
    Defer,
    Refuse,
    WaitGate,
    after_check,
    answer,
    backoff_ms,
    dedup_id,
    read_conditions,
)
from tests.support.polling import wait_for
from tests.support.waits import check_program

NOW = 1_780_000_000_000
AFTER = "2026-06-01T00:00:00Z"  # 1780272000000


def job(job_id: str = "gh-1", *conditions: dict[str, str], number: int = 7) -> Job:
    return Job(id=job_id, kind="github", repo="octo/app", flow="fix",
               target=Target(type="issue", number=number),
               trigger=Trigger(event="issues", matched=Matched(index=2, type="label")),
               wait_for=list(conditions) or None)


# --- pure ------------------------------------------------------------------------------------------


def test_conditions_are_read_as_the_loader_accepts_them_and_anything_else_is_unreadable() -> None:
    read = read_conditions([{"after": AFTER}, {"profile": "ci"}, {"profile": "qa"}])
    assert read is not None and (read.after_ms, read.profiles) == (1_780_272_000_000, ("ci", "qa"))
    for bad in ([], [{"after": "tomorrow"}], [{"after": AFTER}, {"after": AFTER}], [{"until": AFTER}],
                [{"profile": "ci"}, {"profile": "ci"}], [{"profile": "a", "after": AFTER}],
                [{"profile": str(i)} for i in range(5)]):
        assert read_conditions(bad) is None, bad


def test_the_backoff_doubles_every_ten_intervals_within_its_bounds() -> None:
    assert [backoff_ms(60_000, e) for e in (0, 599_999, 600_000, 1_200_000, 10**9)] == [
        60_000, 60_000, 120_000, 240_000, 900_000]
    assert backoff_ms(2_000_000, 10**12) == 2_000_000  # a base above the cap is its own cap


@pytest.mark.parametrize(("run", "said"), [
    (ProgramRun(0, b"", 0, 0), "go"), (ProgramRun(3, b"", 0, 0), "not-yet"),
    (ProgramRun(2, b"", 0, 0), "never"),
    (ProgramRun(1, b"", 0, 0), "fault"), (ProgramRun(-9, b"", 0, 0), "fault"),
    (ProgramRun(None, b"", 0, 0, "timeout"), "fault"), (ProgramRun(None, b"", 0, 0, "spawn"), "fault"),
    (ProgramRun(None, b"", 0, 0, "abort"), "aborted"),
])
def test_a_checks_exit_code_is_its_answer(run: ProgramRun, said: str) -> None:
    assert answer(run) == said


def test_the_bounds_after_a_check() -> None:
    s = WaitSettings(max_faults=3, max_checks=4, max_ms=10_000)
    assert after_check(s, checks=3, faults=2, held_ms=9_999) is None
    assert after_check(s, checks=1, faults=3, held_ms=0) == "wait-unanswerable"
    assert after_check(s, checks=4, faults=0, held_ms=0) == "wait-expired"
    assert after_check(s, checks=1, faults=0, held_ms=10_000) == "wait-expired"


def test_a_wait_targets_the_item_its_flow_and_the_rule_that_matched() -> None:
    assert dedup_id(job()) == "octo/app#7:fix#2"


def test_the_interval_has_a_floor_only_tests_lower_and_bad_values_refuse() -> None:
    assert load_wait_settings({"PI_WAIT_INTERVAL_MS": "1000"}).interval_ms == 30_000
    lowered = {"PI_WAIT_INTERVAL_MS": "1000", "PD_WAIT_INTERVAL_FLOOR_MS": "500"}
    assert load_wait_settings(lowered).interval_ms == 1000
    from pidispatch.common.errors import ConfigError

    for env in ({"PI_WAIT_INTERVAL_MS": "0"}, {"PI_WAIT_MAX_FAULTS": "x"},
                {"PI_WAIT_PROFILES": "ci:relative"}, {"PI_WAIT_PROFILES": "ci:/a,ci:/b"},
                {"PI_WAIT_CHECK_SLOTS": "0"}):
        with pytest.raises(ConfigError, match=next(iter(env))):
            load_wait_settings(env)
    assert load_wait_settings({"PI_WAIT_PROFILES": "ci:/usr/bin/true"}).profiles == (("ci", "/usr/bin/true"),)


# --- the gate, with a real Redis and real check programs ---------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def gate(redis: Redis, keys: Keys, clock: Clock, **settings: Any) -> WaitGate:
    s = WaitSettings(**{"interval_ms": 30_000, **settings})
    return WaitGate(s, redis, keys, clock, {"PATH": "/usr/bin:/bin"}, rand=lambda: 0.0)


async def test_an_after_holds_until_the_instant_and_a_second_job_for_the_target_is_superseded(
    redis: Redis, keys: Keys
) -> None:
    clock = Clock()
    g = gate(redis, keys, clock)
    first, second, third = (job(f"gh-{n}", {"after": AFTER}) for n in (1, 2, 3))
    assert await g.decide(first, Abort()) == Defer(1_780_272_000_000 - NOW, "after")
    hold = await waitstate.read_hold(redis, keys, "gh-1")
    assert hold is not None and (hold.since, hold.next, hold.target, hold.held) == (
        NOW, 1_780_272_000_000, "octo/app#7", True)
    assert await redis.get(keys.wait_key(dedup_id(first))) == b"gh-1"
    assert await g.decide(second, Abort()) == Refuse("wait-superseded")
    assert await redis.exists(keys.wait_job("gh-2")) == 0
    clock.now = 1_780_272_000_000
    assert await g.decide(first, Abort()) is None  # the instant came: it runs
    assert await redis.exists(keys.wait_job("gh-1"), keys.wait_key(dedup_id(first))) == 0
    assert await redis.smembers(keys.wait_held) == set()
    # A duplicate arriving after the wait cleared is superseded too (for 15 minutes).
    assert await g.decide(third, Abort()) == Refuse("wait-superseded")
    assert 0 < await redis.pttl(keys.wait_done(dedup_id(first))) <= 15 * 60_000


async def test_a_profile_answering_not_yet_twice_then_go_runs_after_the_third_check(
    redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    clock = Clock()
    g = gate(redis, keys, clock, profiles=(("ci", check_program(tmp_path, 3, 3, 0)),))
    j = job("gh-1", {"profile": "ci"})
    seen = []
    for _ in range(3):
        verdict = await g.decide(j, Abort())
        seen.append(verdict)
        if isinstance(verdict, Defer):
            clock.now += verdict.delay_ms
    assert seen == [Defer(30_000, "check-not-yet"), Defer(30_000, "check-not-yet"), None]
    assert (tmp_path / "args").read_text().splitlines() == ["octo/app#7"] * 3
    assert await redis.exists(keys.wait_job("gh-1")) == 0
    assert await redis.get(keys.wait_done(dedup_id(j))) == b"gh-1"


async def test_a_profile_answering_never_is_refused_and_its_hold_released(
    redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    g = gate(redis, keys, Clock(), profiles=(("ci", check_program(tmp_path, 2)),))
    assert await g.decide(job("gh-1", {"profile": "ci"}), Abort()) == Refuse("wait-refused")
    assert await redis.exists(keys.wait_job("gh-1"), keys.wait_key(dedup_id(job()))) == 0


async def test_a_check_that_always_faults_is_unanswerable_after_the_max_faults(
    redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    clock = Clock()
    g = gate(redis, keys, clock, profiles=(("ci", check_program(tmp_path, 1)),), max_faults=3)
    j = job("gh-1", {"profile": "ci"})
    verdicts = []
    for _ in range(3):
        verdicts.append(verdict := await g.decide(j, Abort()))
        clock.now += verdict.delay_ms if isinstance(verdict, Defer) else 0
    assert verdicts == [Defer(30_000, "check-fault"), Defer(30_000, "check-fault"),
                        Refuse("wait-unanswerable")]


async def test_a_not_yet_resets_the_fault_run_and_the_checks_bound_expires_the_wait(
    redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    clock = Clock()
    g = gate(redis, keys, clock, profiles=(("ci", check_program(tmp_path, 1, 3, 1, 3)),), max_faults=2,
             max_checks=4)
    j = job("gh-1", {"profile": "ci"})
    verdicts = []
    for _ in range(4):
        verdicts.append(verdict := await g.decide(j, Abort()))
        clock.now += verdict.delay_ms if isinstance(verdict, Defer) else 0
    assert [type(v).__name__ for v in verdicts] == ["Defer", "Defer", "Defer", "Refuse"]
    assert verdicts[-1] == Refuse("wait-expired")


async def test_the_max_wait_bounds_a_profile_wait_and_the_delay_never_passes_it(
    redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    clock = Clock()
    g = gate(redis, keys, clock, profiles=(("ci", check_program(tmp_path, 3)),), max_ms=45_000)
    j = job("gh-1", {"profile": "ci"})
    first = await g.decide(j, Abort())
    assert first == Defer(30_000, "check-not-yet")
    clock.now += 30_000
    assert await g.decide(j, Abort()) == Defer(15_000, "check-not-yet")  # only what is left of the max
    clock.now += 15_000
    assert await g.decide(j, Abort()) == Refuse("wait-expired")


@pytest.mark.parametrize(("conditions", "reason"), [
    ([{"profile": "nobody-declared-it"}], "wait-profile-unknown"),
    ([{"after": "2099-01-01T00:00:00Z"}], "wait-after-beyond-max"),
    ([{"after": "not an instant"}], "wait-unreadable"),
])
async def test_what_this_worker_cannot_wait_for_is_refused_before_any_hold(
    redis: Redis, keys: Keys, conditions: list[dict[str, str]], reason: str
) -> None:
    assert await gate(redis, keys, Clock()).decide(job("gh-1", *conditions), Abort()) == Refuse(reason)
    assert await redis.exists(keys.wait_job("gh-1")) == 0


async def test_a_check_program_gone_since_boot_is_profile_unknown(
    redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    g = gate(redis, keys, Clock(), profiles=(("ci", str(tmp_path / "removed")),))
    assert await g.decide(job("gh-1", {"profile": "ci"}), Abort()) == Refuse("wait-profile-unknown")


async def test_with_every_check_slot_busy_a_job_is_deferred_and_counted_not_checked(
    redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    g = gate(redis, keys, Clock(), profiles=(("ci", check_program(tmp_path, 0)),))
    async with g.slots:
        verdict = await g.decide(job("gh-1", {"profile": "ci"}), Abort())
    assert verdict == Defer(11_000, "check-throttled")
    hold = await waitstate.read_hold(redis, keys, "gh-1")
    assert hold is not None and (hold.throttles, hold.checks) == (1, 0)
    assert not (tmp_path / "args").exists()


async def test_an_operator_cancel_during_a_check_refuses_it_as_cancelled(
    redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    slow = tmp_path / "slow"
    slow.write_text(f"#!/bin/sh\ntouch {tmp_path}/started\nexec sleep 30\n")
    slow.chmod(0o755)
    g = gate(redis, keys, Clock(), profiles=(("ci", str(slow)),))
    abort = Abort()
    decided = asyncio.create_task(g.decide(job("gh-1", {"profile": "ci"}), abort))
    await wait_for((tmp_path / "started").exists, 10, what="the check to start")
    abort.trigger("operator-cancel")
    assert await asyncio.wait_for(decided, 10) == Refuse("operator-cancel")


async def test_a_profile_wait_after_an_instant_counts_its_bounds_from_the_instant(
    redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    clock = Clock()
    g = gate(redis, keys, clock, profiles=(("ci", check_program(tmp_path, 3)),), max_ms=3_600_000)
    instant = NOW + 2 * 86_400_000  # two days ahead: longer than the profile wait may last
    j = job("gh-1", {"after": "2026-05-30T20:26:40Z"}, {"profile": "ci"})
    assert await g.decide(j, Abort()) == Defer(instant - NOW, "after")
    clock.now = instant
    assert await g.decide(j, Abort()) == Defer(30_000, "check-not-yet")  # not expired by the days before


async def test_a_throttled_job_is_listed_with_its_target(redis: Redis, keys: Keys, tmp_path: Path) -> None:
    g = gate(redis, keys, Clock(), profiles=(("ci", check_program(tmp_path, 0)),))
    async with g.slots:
        await g.decide(job("gh-1", {"profile": "ci"}), Abort())
    (hold,) = await waitstate.held_jobs(redis, keys)
    assert (hold.job, hold.target, hold.dedup_id) == ("gh-1", "octo/app#7", "octo/app#7:fix#2")
