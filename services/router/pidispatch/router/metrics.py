"""The router's Prometheus series, in the registry its ``PD_METRICS_PORT`` endpoint serves.

Label values come from fixed sets only: decision outcomes and reason tokens, forge names, lookup results;
never a delivery id, a repository or a login. The backlog gauges are read from Redis by a timer
(``refresh_backlog``), never by a scrape, so ``/metrics`` does no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from pidispatch.common.keys import ROUTER_GROUP, Keys
from pidispatch.common.luascript import Script
from pidispatch.common.models import text
from pidispatch.common.redis import Redis

# How often the backlog gauges are read: two small commands, whatever the stream's length.
BACKLOG_REFRESH_S = 5.0
# A page is read, decided and enqueued in milliseconds; a forge lookup may take seconds (bounded at 5 s).
ENQUEUE_BUCKETS = (1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# What a forge lookup came to: the actor may (allowed) or may not (denied) trigger work, the forge could
# not answer (failed: the event is retried), or a recent determinate answer was reused (cached).
LOOKUP_RESULTS = ("allowed", "denied", "failed", "cached")


def reason_token(reason: str) -> str:
    """A reason as a label: ``lookup-failed:<why>`` keeps only its fixed head (the tail names a status or
    an exception type, which is not a vocabulary a dashboard should grow with)."""
    return reason.split(":", 1)[0]


# The router group's pending count, last-delivered id and lag (-1 when Redis has none: before 7, or after
# a deletion it cannot account for), and the stream's last id; computed server-side, so no entry's body
# crosses the network (XINFO STREAM's reply carries the first and last entries whole).
_BACKLOG = Script("""
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local last = '0-0'
local info = redis.call('XINFO', 'STREAM', KEYS[1])
for i = 1, #info, 2 do
  if info[i] == 'last-generated-id' then last = info[i + 1] end
end
for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local f = {}
  for i = 1, #group, 2 do f[group[i]] = group[i + 1] end
  if f['name'] == ARGV[1] then
    local lag = f['lag']
    if type(lag) ~= 'number' then lag = -1 end
    return {f['pending'], f['last-delivered-id'], last, lag}
  end
end
return false
""")


def group_backlog(reply: Any) -> tuple[int | None, int | None]:
    """Pure: (lag, pending) from ``_BACKLOG``'s reply, None where not known. Without Redis 7's own lag,
    the lag is 0 when the group was handed the stream's newest entry, else not known."""
    if not reply:
        return None, None  # no stream or no router group yet
    pending, delivered, last, lag = reply
    if int(lag) >= 0:
        return int(lag), int(pending)
    return (0 if text(delivered) == text(last) else None), int(pending)


class _Backlog(Collector):
    """The backlog gauges as last read; a value not known is absent from the scrape, never a guess."""

    def __init__(self) -> None:
        self.lag: int | None = None
        self.pending: int | None = None

    def collect(self) -> Iterable[GaugeMetricFamily]:
        lag = GaugeMetricFamily(
            "pd_router_lag_entries",
            "Entries of pd:events not yet delivered to the router group (Redis 7's XINFO GROUPS lag; before "
            "Redis 7: 0 when caught up, absent otherwise). The group's, so every router reports the same.",
        )
        pending = GaugeMetricFamily(
            "pd_router_pending_entries",
            "Entries of pd:events delivered to a router and not yet acked (XPENDING), over the whole group.",
        )
        for family, value in ((lag, self.lag), (pending, self.pending)):
            if value is not None:
                family.add_metric([], value)
            yield family


class RouterMetrics:
    """Every series the router exports; one call at each point the router already logs."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """``registry``: the one the endpoint serves; by default one nobody serves (kept in memory)."""
        self.registry = registry = registry or CollectorRegistry(auto_describe=True)
        self._read = Counter(
            "pd_router_events_read", "Entries of pd:events taken by this router: new, re-read after a "
            "restart, claimed from a peer, or retried.", registry=registry,
        )
        self._decisions = Counter(
            "pd_router_decisions", "Decisions recorded, by outcome (queued, dropped, deduplicated, pending: "
            "retried later, dead: parked) and reason token (empty when queued; job-id or semantic-window "
            "when deduplicated).",
            ("outcome", "reason"), registry=registry,
        )
        self._enqueue = Histogram(
            "pd_router_enqueue_seconds", "From reading an entry to its jobs' ENQUEUE (XADD) answered, "
            "forge lookups included.", buckets=ENQUEUE_BUCKETS, registry=registry,
        )
        self._lookups = Counter(
            "pd_router_forge_lookups", "Forge authority lookups, by forge and result (allowed, denied, "
            "failed, cached).", ("forge", "result"), registry=registry,
        )
        self._healed = Counter(
            "pd_router_healed", "Redeliveries the forge accepted to send again, asked for by this router's "
            "healer: deliveries of a stored event type in its delivery log that the receiver never stored.",
            registry=registry,
        )
        self._backlog = _Backlog()
        registry.register(self._backlog)
        # What a dashboard divides by exists from the start.
        for reason in ("semantic-window", "job-id"):
            self._decisions.labels("deduplicated", reason)
        self._decisions.labels("queued", "")

    def read(self, entries: int) -> None:
        self._read.inc(entries)

    def decided(self, outcome: str, reason: str = "", count: int = 1) -> None:
        self._decisions.labels(outcome, reason_token(reason)).inc(count)

    def enqueued(self, seconds: float) -> None:
        self._enqueue.observe(seconds)

    def looked_up(self, forge: str, result: str) -> None:
        self._lookups.labels(forge, result).inc()

    def healed(self, count: int = 1) -> None:
        self._healed.inc(count)

    def backlog(self, lag: int | None, pending: int | None) -> None:
        self._backlog.lag, self._backlog.pending = lag, pending

    async def refresh_backlog(self, redis: Redis, keys: Keys) -> None:
        """Read the group's lag and pending count (the timer's step; a Redis fault keeps the last values)."""
        self.backlog(*group_backlog(await _BACKLOG(redis, [keys.events], [ROUTER_GROUP])))
