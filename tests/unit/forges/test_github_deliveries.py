"""pidispatch.forges.github.deliveries: GitHub's delivery log read in its documented shapes (items, the
Link header's cursor, the rate-limit headers), the pacing decisions, and the hooks GITHUB_HEAL_HOOKS names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.common.keys import HEAL_PAUSE_MAX_S
from pidispatch.forges.config import load_forge_config
from pidispatch.forges.github.auth import GithubAuth
from pidispatch.forges.github.config import block_of
from pidispatch.forges.github.deliveries import (
    RATE_RESERVE,
    DeliveryLog,
    LoggedDelivery,
    LogSource,
    LogUnread,
    attempt_verdict,
    next_cursor,
    older_than,
    parse_page,
    pause_s,
    sources_of,
)
from pidispatch.forges.http import BadBody, create_http
from tests.support.deliverylog import Attempt, hook_log, register_delivery_log
from tests.support.forges import PAT, FakeForge, github_forge

REPO, HOOK = "acme/app", 12
ITEM = {
    "id": 12345678, "guid": "0b989ba4-242f-11e5-81e1-c7b6966d2516", "delivered_at": "2019-06-03T00:57:16Z",
    "redelivery": False, "duration": 0.27, "status": "OK", "status_code": 200, "event": "issues",
    "action": "opened", "installation_id": 123, "repository_id": 456,
}


def test_an_item_reads_as_github_documents_it() -> None:
    [d] = parse_page([ITEM])
    at = int(datetime(2019, 6, 3, 0, 57, 16, tzinfo=UTC).timestamp() * 1000)
    assert d == LoggedDelivery(id=12345678, guid=ITEM["guid"], delivered_at=at, redelivery=False,
                               status_code=200, event="issues", action="opened")


def test_an_odd_item_is_skipped_and_a_missing_answer_is_status_0() -> None:
    odd = [{**ITEM, "id": "7"}, {**ITEM, "guid": ""}, {**ITEM, "delivered_at": "yesterday"},
           {**ITEM, "id": True}, "not an object", {k: v for k, v in ITEM.items() if k != "event"}]
    unanswered = {**ITEM, "status_code": None, "action": None, "redelivery": True}
    [d] = parse_page([*odd, unanswered])
    assert (d.status_code, d.action, d.redelivery) == (0, None, True)
    with pytest.raises(BadBody):
        parse_page({"message": "Not Found"})


def test_the_next_cursor_comes_from_the_link_headers_next_url() -> None:
    link = ('<https://api.github.com/app/hook/deliveries?per_page=100&cursor=v1_12077215967>; rel="next", '
            '<https://api.github.com/app/hook/deliveries?per_page=100>; rel="prev"')
    assert next_cursor(link) == "v1_12077215967"
    assert next_cursor('<https://api.github.com/app/hook/deliveries?per_page=2>; rel="prev"') is None
    assert next_cursor(None) is None and next_cursor("") is None


def test_a_page_reaches_past_the_window_when_its_oldest_item_is_older() -> None:
    page = [LoggedDelivery(2, "b", 2_000, False, 0, "issues"),
            LoggedDelivery(1, "a", 1_000, False, 0, "issues")]
    assert older_than(page, 1_500) and not older_than(page, 1_000) and not older_than([], 5)


def test_pacing_waits_the_pace_then_what_github_asks_and_stops_past_the_cap() -> None:
    now = 1_000_000.0
    assert pause_s({"x-ratelimit-remaining": "4000"}, 1.0, now) == 1.0
    assert pause_s({}, 0.0, now) == 0.0
    assert pause_s({"retry-after": "30"}, 1.0, now) == 30.0
    assert pause_s({"retry-after": str(int(HEAL_PAUSE_MAX_S) + 1)}, 1.0, now) is None
    # None left: until the reset, when it comes soon enough.
    soon, late = str(int(now) + 20), str(int(now) + 3000)
    assert pause_s({"x-ratelimit-remaining": "0", "x-ratelimit-reset": soon}, 1.0, now) == 20.0
    assert pause_s({"x-ratelimit-remaining": "0", "x-ratelimit-reset": late}, 1.0, now) is None
    assert pause_s({"x-ratelimit-remaining": "0"}, 1.0, now) is None
    # Running low: the rest is left to the router's lookups and the workers' jobs.
    assert pause_s({"x-ratelimit-remaining": str(RATE_RESERVE - 1)}, 1.0, now) is None
    assert pause_s({"x-ratelimit-remaining": str(RATE_RESERVE)}, 1.0, now) == 1.0


@pytest.mark.parametrize(("status", "headers", "verdict"), [
    (202, {}, "asked"), (None, {}, "retry"), (502, {}, "retry"), (429, {}, "retry"),
    (403, {"retry-after": "60"}, "retry"), (403, {}, "stop"), (401, {}, "stop"), (404, {}, "gone"),
    (422, {}, "gone"), (400, {}, "gone"),
])
def test_a_redelivery_answer_is_asked_retried_stopped_or_gone(
    status: int | None, headers: dict[str, str], verdict: str
) -> None:
    assert attempt_verdict(status, headers) == verdict


def test_the_logs_are_the_apps_then_each_hook_once() -> None:
    env = {"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": PAT,
           "GITHUB_HEAL_HOOKS": " acme/app:12, acme/app:12 ,other-org/x.y_z:3"}
    block = block_of(load_forge_config(env))
    assert block.heal_hooks == (("acme/app", 12), ("other-org/x.y_z", 3))
    other = "other-org/x.y_z"
    assert sources_of(block) == (LogSource("acme/app:12", "/repos/acme/app/hooks/12", "acme/app"),
                                 LogSource(f"{other}:3", f"/repos/{other}/hooks/3", other))
    assert sources_of(block_of(load_forge_config({"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": PAT}))) == ()


@pytest.mark.parametrize(("env", "message"), [
    ({"GITHUB_HEAL_HOOKS": "acme/app:12"}, "GITHUB_HEAL_HOOKS is set but GITHUB_AUTH_SOURCE is not"),
    ({"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": PAT, "GITHUB_HEAL_HOOKS": "acme/app"},
     "GITHUB_HEAL_HOOKS entry 'acme/app' is refused; accepted: owner/repo:hook_id"),
    ({"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": PAT, "GITHUB_HEAL_HOOKS": "acme/app:0"},
     "GITHUB_HEAL_HOOKS entry 'acme/app:0' is refused"),
    ({"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": PAT, "GITHUB_HEAL_HOOKS": "acme/app:1,../x:2"},
     "GITHUB_HEAL_HOOKS entry '../x:2' is refused"),
])
def test_a_bad_hook_list_is_refused_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_forge_config(env)


# --- against the stand-in GitHub ---------------------------------------------------------------------


@pytest.fixture
async def stand_in() -> AsyncIterator[FakeForge]:
    forge = github_forge()
    register_delivery_log(forge)
    async with forge:
        yield forge


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    session = create_http()
    yield session
    await session.close()


def _log(forge: FakeForge, n: int, start: datetime) -> None:
    """``n`` attempts a minute apart, the oldest first."""
    forge.state["delivery_logs"][hook_log(REPO, HOOK)] = [
        Attempt(1000 + i, f"guid-{i}", "issues", "labeled", start + timedelta(minutes=i), 0, False)
        for i in range(n)
    ]


def _reader(forge: FakeForge, http: aiohttp.ClientSession) -> tuple[DeliveryLog, LogSource]:
    env = {"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": PAT, "GITHUB_API_URL": forge.url,
           "GITHUB_HEAL_HOOKS": f"{REPO}:{HOOK}"}
    config = load_forge_config(env)
    return DeliveryLog(http, GithubAuth(config, http)), sources_of(block_of(config))[0]


async def test_the_log_is_read_page_by_page_newest_first_back_to_the_window(
    stand_in: FakeForge, http: aiohttp.ClientSession
) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=250)
    _log(stand_in, 250, start)
    log, source = _reader(stand_in, http)
    since = int((start + timedelta(minutes=30)).timestamp() * 1000)
    pages = [[d.id for d in page] async for page, _ in log.pages(source, since)]
    assert [len(p) for p in pages] == [100, 100, 20]  # the third page is cut at the window, and the last
    flat = [i for p in pages for i in p]
    assert flat == list(range(1249, 1029, -1))
    calls = stand_in.calls("hook_deliveries")
    assert [c.query.get("cursor") for c in calls] == [None, "v1_1150", "v1_1050"]
    assert {c.query["per_page"] for c in calls} == {"100"}
    assert calls[0].headers["authorization"] == f"Bearer {PAT}"


async def test_a_log_the_token_may_not_read_is_an_error_naming_the_status(
    stand_in: FakeForge, http: aiohttp.ClientSession
) -> None:
    log, source = _reader(stand_in, http)
    with pytest.raises(LogUnread) as err:  # no such hook: GitHub's 404
        await log.page(source, None)
    assert (err.value.reason, err.value.transient) == ("status-404", False)
    stand_in.answer("hook_deliveries", 403, headers={"X-RateLimit-Remaining": "0"})
    with pytest.raises(LogUnread) as err:
        await log.page(source, None)
    assert (err.value.reason, err.value.transient) == ("rate-limited", True)


async def test_a_redelivery_is_a_post_to_the_attempts_of_that_delivery(
    stand_in: FakeForge, http: aiohttp.ClientSession
) -> None:
    _log(stand_in, 1, datetime.now(UTC))
    stand_in.state["hook_url"] = "http://127.0.0.1:9/nowhere"
    log, source = _reader(stand_in, http)
    verdict, headers = await log.redeliver(source, 1000)
    assert verdict == "asked" and "x-ratelimit-remaining" in headers
    [call] = stand_in.calls("hook_redeliver")
    assert (call.method, call.path) == ("POST", f"/repos/{REPO}/hooks/{HOOK}/deliveries/1000/attempts")
    assert (await log.redeliver(source, 999))[0] == "gone"  # GitHub's 404 for a delivery it does not have
    await stand_in.state["redeliveries"][0]
