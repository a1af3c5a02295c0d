"""The router's and the worker's series on real processes: real deliveries routed, real containers run,
``/metrics`` scraped over HTTP and read with prometheus-client's own parser."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pidispatch.common.embedded import free_port
from pidispatch.common.keys import Keys
from pidispatch.common.models import Event
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.streams import wire
from tests.support.decisions import decision_fields
from tests.support.payloads import FIXTURES
from tests.support.polling import wait_for
from tests.support.processes import ServiceProcess
from tests.support.scrape import Samples, parse, sample

BUG_RULE = {"on": {"type": "label", "any": ["bug"]}, "run": {"kind": "github", "flow": "fix"}}
FAST = {
    "PD_HOST_BEAT_MS": "200", "PD_HOST_TTL_MS": "1500",  # the budget gauge rides on the beat
    "PI_RETRY_ATTEMPTS": "2", "PI_RETRY_BASE_MS": "10",  # a failed run runs once more, at once
    "PI_DAILY_CAP": "3",  # three reservations run; the fourth is refused before anything is spent
}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        yield session


@contextmanager
def served(name: str, env: dict[str, str], log: Path) -> Iterator[str]:
    """The service run as its operators run it, its endpoint on a free port; yields the /metrics URL."""
    port = free_port()
    proc = ServiceProcess(name, {**env, "PD_METRICS_PORT": str(port)}, log)
    proc.start()
    try:
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        code = proc.stop()
    assert code == 0, log.read_text()[-2000:]


async def scrape(http: aiohttp.ClientSession, url: str) -> Samples | None:
    try:
        async with http.get(url) as response:
            return parse(await response.text()) if response.status == 200 else None
    except (aiohttp.ClientError, TimeoutError):
        return None  # not listening yet


def until(http: aiohttp.ClientSession, url: str, holds: Callable[[Samples], bool]) -> Callable[[], Any]:
    async def check() -> Samples | None:
        got = await scrape(http, url)
        return got if got is not None and holds(got) else None

    return check


async def deliver(redis: Redis, keys: Keys, *, issue: int, steer: str, event: str = "issues") -> str:
    """A labelled-issue delivery as the receiver stores it; the test agent obeys ``pd-test <steer>``."""
    payload = json.loads((FIXTURES / "github/issues.labeled.json").read_text())
    payload["issue"]["number"] = issue
    payload["issue"]["body"] = f"pd-test {steer}"
    delivery = str(uuid.uuid4())
    body = json.dumps(payload)
    stored = Event(forge="github", event=event, delivery=delivery, received_at=now_ms(), body=body)
    await redis.xadd(keys.events, wire(stored.to_fields()))
    return delivery


def jobs(got: Samples, outcome: str, reason: str = "") -> float:
    return sample(got, "pd_worker_jobs_total", outcome=outcome, reason=reason) or 0


async def test_routed_and_run_jobs_show_on_both_endpoints(
    require_docker: None, env: dict[str, str], redis: Redis, keys: Keys, tmp_path: Path,
    http: aiohttp.ClientSession,
) -> None:
    Path(env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": [BUG_RULE]}))
    env = {**env, **FAST}
    with (
        served("router", {**env, "PD_ROUTER_NAME": "router-metrics"}, tmp_path / "router.log") as router,
        served("worker", env, tmp_path / "worker.log") as worker,
    ):
        await deliver(redis, keys, issue=1, steer="exit=0")
        await deliver(redis, keys, issue=2, steer="exit=1")
        again = await deliver(redis, keys, issue=1, steer="exit=0")  # same issue and flow: deduplicated
        dropped = await deliver(redis, keys, issue=3, steer="exit=0", event="watch")  # no rule for it
        ran = await wait_for(until(http, worker, lambda got: (
            jobs(got, "completed") == 1 and jobs(got, "failed", "container-exit-1") == 2
        )), 120, what="one completed run and a failed one run twice, on the worker's /metrics")
        # The budget's three slots are spent: the next job is refused before anything runs.
        await deliver(redis, keys, issue=4, steer="exit=0")
        done = await wait_for(until(http, worker, lambda got: (
            jobs(got, "policy", "over-budget") == 1
            and sample(got, "pd_worker_budget_used", window="day") == 4  # a refused slot stays counted
        )), 60, what="the over-budget refusal and the day's budget gauge")
        routed = await wait_for(until(http, router, lambda got: (
            sample(got, "pd_router_pending_entries") == 0 and sample(got, "pd_router_lag_entries") == 0
            and sample(got, "pd_router_events_read_total") == 5
        )), 30, what="the router caught up, its backlog gauges refreshed")

    dropped_reason = (await decision_fields(redis, keys, "github", dropped))["reason"]
    assert (await decision_fields(redis, keys, "github", again))["outcome"] == "deduplicated"
    assert sample(routed, "pd_router_decisions_total", outcome="queued", reason="") == 3
    assert sample(routed, "pd_router_decisions_total", outcome="deduplicated", reason="semantic-window") == 1
    assert sample(routed, "pd_router_decisions_total", outcome="dropped", reason=dropped_reason) == 1
    # Every firing entry is timed from its read to its ENQUEUE, the deduplicated one included.
    assert sample(routed, "pd_router_enqueue_seconds_count") == 4
    assert sample(routed, "pd_service_info", service="router", version=_version(routed)) == 1

    assert (jobs(ran, "completed"), jobs(ran, "failed", "container-exit-1")) == (1, 2)
    assert sample(ran, "pd_worker_retries_total") == 1
    # Three containers started and ran (the completed one, the failed one twice); the refusal ran none.
    assert sample(done, "pd_worker_container_start_seconds_count") == 3
    assert sample(done, "pd_worker_run_seconds_count") == 3
    assert sample(done, "pd_worker_refusals_total", reason="over-budget") == 1
    assert sample(done, "pd_worker_slots") == 2 and sample(done, "pd_worker_running") == 0
    assert sample(done, "pd_worker_takeovers_total") == sample(done, "pd_worker_reattaches_total") == 0


def _version(got: Samples) -> str:
    return next(dict(labels)["version"] for (name, labels) in got if name == "pd_service_info")
