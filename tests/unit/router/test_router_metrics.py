"""pidispatch.router.metrics: the router's series, fixed label values, the backlog gauges read by a timer."""

from __future__ import annotations

import uuid

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from pidispatch.common.keys import ROUTER_GROUP, Keys
from pidispatch.common.monitor import service_registry
from pidispatch.common.redis import Redis
from pidispatch.common.streams import ensure_group, read_group
from pidispatch.router.metrics import RouterMetrics, group_backlog
from tests.support.scrape import labelled, parse, sample


def scrape(metrics: RouterMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return parse(generate_latest(metrics.registry).decode())


def test_every_series_counts_what_it_names() -> None:
    metrics = RouterMetrics(CollectorRegistry())
    metrics.read(3)
    metrics.read(1)
    metrics.decided("queued")
    metrics.decided("queued")
    metrics.decided("dropped", "no-allowlisted-label")
    metrics.decided("pending", "lookup-failed:status-502")
    metrics.decided("dead", "malformed-event")
    metrics.enqueued(0.004)
    metrics.enqueued(3.0)
    metrics.looked_up("github", "allowed")
    metrics.looked_up("github", "cached")
    got = scrape(metrics)
    assert sample(got, "pd_router_events_read_total") == 4
    assert sample(got, "pd_router_decisions_total", outcome="queued", reason="") == 2
    assert sample(got, "pd_router_decisions_total", outcome="dropped", reason="no-allowlisted-label") == 1
    # The lookup's own failure token stays in the log: the label is the fixed head only.
    assert sample(got, "pd_router_decisions_total", outcome="pending", reason="lookup-failed") == 1
    assert sample(got, "pd_router_decisions_total", outcome="dead", reason="malformed-event") == 1
    # From the start:
    assert sample(got, "pd_router_decisions_total", outcome="deduplicated", reason="job-id") == 0
    assert sample(got, "pd_router_enqueue_seconds_count") == 2
    assert sample(got, "pd_router_enqueue_seconds_bucket", le="0.005") == 1
    assert sample(got, "pd_router_enqueue_seconds_sum") == 3.004
    assert sample(got, "pd_router_forge_lookups_total", forge="github", result="allowed") == 1
    assert sample(got, "pd_router_forge_lookups_total", forge="github", result="cached") == 1
    assert {"reason": "lookup-failed:status-502", "outcome": "pending"} not in labelled(
        got, "pd_router_decisions_total"
    )


def test_backlog_gauges_are_absent_until_known() -> None:
    metrics = RouterMetrics(CollectorRegistry())
    assert sample(scrape(metrics), "pd_router_lag_entries") is None
    assert sample(scrape(metrics), "pd_router_pending_entries") is None
    metrics.backlog(None, 2)
    assert sample(scrape(metrics), "pd_router_lag_entries") is None
    assert sample(scrape(metrics), "pd_router_pending_entries") == 2
    metrics.backlog(7, 0)
    assert sample(scrape(metrics), "pd_router_lag_entries") == 7


def test_group_backlog_uses_redis_7_lag_else_only_what_is_certain() -> None:
    assert group_backlog(None) == (None, None)  # no stream or no router group yet
    assert group_backlog([3, b"5-0", b"9-0", 4]) == (4, 3)  # Redis 7 counts it
    assert group_backlog([3, b"9-0", b"9-0", -1]) == (0, 3)  # before 7: handed the newest entry
    assert group_backlog([0, b"5-0", b"9-0", -1]) == (None, 0)  # before 7, behind: not known


def test_the_series_join_the_service_registry() -> None:
    registry = service_registry("router")
    RouterMetrics(registry)
    got = parse(generate_latest(registry).decode())
    assert labelled(got, "pd_service_info")[0]["service"] == "router"
    assert sample(got, "pd_router_events_read_total") == 0


async def test_refresh_reads_the_groups_pending_and_lag_from_redis(redis: Redis, keys: Keys) -> None:
    metrics = RouterMetrics(CollectorRegistry())
    await metrics.refresh_backlog(redis, keys)  # no stream yet
    assert sample(scrape(metrics), "pd_router_pending_entries") is None
    await ensure_group(redis, keys.events, ROUTER_GROUP)
    for _ in range(2):
        await redis.xadd(keys.events, {"delivery": str(uuid.uuid4())})
    await metrics.refresh_backlog(redis, keys)
    info = await redis.info("server")
    redis7 = int(str(info["redis_version"]).split(".")[0]) >= 7
    got = scrape(metrics)
    assert sample(got, "pd_router_pending_entries") == 0
    assert sample(got, "pd_router_lag_entries") == (2 if redis7 else None)
    await read_group(redis, ROUTER_GROUP, "router-t", {keys.events: ">"}, count=10)
    await metrics.refresh_backlog(redis, keys)
    got = scrape(metrics)
    assert sample(got, "pd_router_pending_entries") == 2
    assert sample(got, "pd_router_lag_entries") == 0
