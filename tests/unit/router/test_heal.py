"""pidispatch.router.heal: which logged deliveries are asked for, what each answer does to the pass and to
the memory of having asked, and the receiver's dedup memory read without a write (real redis-server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from pidispatch.common.dedup import remembered
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.scripts import INGEST, REMEMBERED
from pidispatch.forges.github.deliveries import LoggedDelivery, LogSource
from pidispatch.router.heal import Healer, HealMarks, candidates, ends_pass, identity, to_ask

NOW = now_ms()  # the dedup tables expire by Redis's clock: a fixed instant long past would be gone
APP = LogSource("app", "/app/hook")
HOOK = LogSource("acme/app:12", "/repos/acme/app/hooks/12", "acme/app")
STORED = frozenset({"issues", "issue_comment"})


def attempt(ident: int, guid: str, event: str = "issues", status: int = 0) -> LoggedDelivery:
    return LoggedDelivery(ident, guid, NOW - ident, ident % 2 == 0, status, event, "labeled")


def test_each_delivery_of_a_stored_type_is_a_candidate_once_by_its_newest_attempt() -> None:
    seen: set[str] = set()
    page = [attempt(9, "a"), attempt(8, "push-1", "push"), attempt(7, "a"), attempt(6, "b", status=202)]
    assert [d.id for d in candidates(page, STORED, seen)] == [9, 6]
    # The next page of the same pass: a delivery seen before is not a candidate again.
    assert [d.id for d in candidates([attempt(5, "b"), attempt(4, "c")], STORED, seen)] == [4]
    assert seen == {"a", "b", "c"}  # only stored types are remembered as seen


def test_only_the_never_stored_and_never_asked_are_asked_for() -> None:
    found = [attempt(1, "stored"), attempt(2, "asked-before"), attempt(3, "lost")]
    ask, before = to_ask(found, [True, False, False], [True, True, False])
    assert [d.guid for d in ask] == ["lost"] and before == 1


@pytest.mark.parametrize(("error", "source", "ends"), [
    ("rate-limited", HOOK, True), ("unavailable", HOOK, True), ("lease-lost", APP, True),
    ("stopped", HOOK, True),
    ("credentials", APP, True), ("credentials", HOOK, False), ("status-404", HOOK, False),
    ("status-401", APP, True), ("network", APP, False), ("status-502", HOOK, False),
])
def test_what_ends_the_pass_and_what_ends_one_hooks_part(error: str, source: LogSource, ends: bool) -> None:
    assert ends_pass(error, source) is ends


async def test_the_membership_check_answers_without_writing(redis: Redis, keys: Keys) -> None:
    kept = remembered(keys.deliveries, identity("kept"), NOW)
    await INGEST(redis, [*kept.keys, keys.events], [*kept.args, "forge", "github", "delivery", "kept"])
    table = kept.keys[0]
    before = await redis.get(table)
    assert await REMEMBERED(redis, kept.keys, kept.args) == 1
    other = remembered(keys.deliveries, identity("never"), NOW)
    assert await REMEMBERED(redis, other.keys, other.args) == 0
    assert await redis.get(table) == before  # the same bytes: a check keeps nothing
    if other.keys[0] != table:
        assert not await redis.exists(other.keys[0])
    # The receiver's own spelling: what it remembered as "<forge>:<delivery>" is found by the guid.
    assert identity("kept") == "github:kept"


class StubLog:
    """A delivery log of pages and scripted redelivery answers (``forges.github.deliveries.DeliveryLog``)."""

    def __init__(self, pages: list[list[LoggedDelivery]], answers: list[tuple[str, dict[str, str]]]) -> None:
        self._pages, self.answers, self.asked = pages, answers, []

    async def pages(
        self, source: LogSource, since_ms: int
    ) -> AsyncIterator[tuple[list[LoggedDelivery], dict[str, str]]]:
        for page in self._pages:
            yield page, {}

    async def redeliver(self, source: LogSource, delivery_id: int) -> tuple[str, dict[str, str]]:
        self.asked.append(delivery_id)
        return self.answers.pop(0) if self.answers else ("asked", {})


def _healer(redis: Redis, keys: Keys, log: StubLog, counted: list[int] | None = None) -> Healer:
    on_asked = counted.append if counted is not None else None
    return Healer(redis, keys, log, [HOOK], 24 * 3_600_000, lambda: NOW, pace_s=0.0,  # type: ignore[arg-type]
                  on_asked=on_asked)


async def test_a_pass_asks_once_remembers_having_asked_and_a_second_asks_nothing(
    redis: Redis, keys: Keys
) -> None:
    page = [attempt(3, "g3"), attempt(2, "g2"), attempt(1, "g1", "push")]
    counted: list[int] = []
    log = StubLog([page], [])
    report = await _healer(redis, keys, log, counted).run_pass("router-a", asyncio.Event())
    assert log.asked == [3, 2] and report.asked == 2 and sum(counted) == 2
    marks = await HealMarks(redis, keys).of([("github", "g3"), ("github", "g2"), ("github", "g1")])
    assert marks == [True, True, False]
    assert 0 < await redis.pttl(keys.heal_asked) <= 24 * 3_600_000
    again = await _healer(redis, keys, StubLog([page], [])).run_pass("router-a", asyncio.Event())
    assert again.asked == 0 and again.sources[0].before == 2


async def test_a_dry_run_asks_nothing_and_writes_nothing(redis: Redis, keys: Keys) -> None:
    log = StubLog([[attempt(3, "g3")]], [])
    report = await _healer(redis, keys, log).run_pass("router-a", asyncio.Event(), dry_run=True)
    assert log.asked == [] and report.asked == 1 and [r.guid for r in report.rows] == ["g3"]
    assert await redis.keys(f"{keys.prefix}:*") == []


async def test_a_refused_delivery_is_not_asked_again_but_a_failed_ask_is(redis: Redis, keys: Keys) -> None:
    page = [attempt(5, "gone"), attempt(4, "later"), attempt(3, "never-reached")]
    log = StubLog([page], [("gone", {}), ("retry", {"x-ratelimit-remaining": "0"})])
    report = await _healer(redis, keys, log).run_pass("router-a", asyncio.Event())
    part = report.sources[0]
    assert log.asked == [5, 4] and (part.gone, part.asked, part.error) == (1, 0, "rate-limited")
    assert await HealMarks(redis, keys).of([("github", "gone"), ("github", "later")]) == [True, False]


async def test_low_rate_limit_stops_the_pass_before_the_next_request(redis: Redis, keys: Keys) -> None:
    log = StubLog([[attempt(5, "a"), attempt(4, "b")]], [("asked", {"x-ratelimit-remaining": "3"})])
    report = await _healer(redis, keys, log).run_pass("router-a", asyncio.Event())
    assert log.asked == [5] and report.sources[0].error == "rate-limited" and report.asked == 1


async def test_marks_cost_no_command_a_page_while_nothing_was_asked(redis: Redis, keys: Keys) -> None:
    marks = HealMarks(redis, keys)
    assert await marks.of([("github", "g1")]) == [False]  # reads EXISTS once
    await redis.zadd(keys.heal_asked, {identity("g1"): 1})
    before = (await redis.info("commandstats")).get("cmdstat_zmscore", {}).get("calls", 0)
    assert await marks.of([("github", "g1")]) == [False]  # within the second: still known absent
    after = (await redis.info("commandstats")).get("cmdstat_zmscore", {}).get("calls", 0)
    assert after == before
