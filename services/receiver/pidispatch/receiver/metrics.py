"""The receiver's Prometheus metrics, in a registry of its own (one per app, so apps never collide).

Label values come from fixed sets only (forge names, outcomes, the refusal tokens of ``refusals``),
never from a request. Children are bound once, so a request pays a dict lookup and an increment.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from pidispatch.receiver.spool import Spool

OUTCOMES = ("accepted", "duplicate", "spooled", "ignored", "refused", "failed")
CONTENT_TYPE = CONTENT_TYPE_LATEST

# An HMAC over a few KiB takes microseconds; a 2 MiB body a few milliseconds.
VERIFY_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2)
# One script round trip to Redis, bounded at 2 s by the caller.
APPEND_BUCKETS = (2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.0)
BODY_BUCKETS = (1024, 4096, 16384, 65536, 262144, 1048576, 2097152)


class SpoolSeries:
    """The spool's series: what was drained from it, and its depth and size. Off the request path: a
    drain is rare, and the gauges are read only when scraped."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._drained = Counter(
            "pd_receiver_spool_drained",
            "Spooled deliveries drained to the events stream, by forge and outcome (accepted, or duplicate "
            "when the forge's redelivery or an earlier drain stored it first).",
            ("forge", "outcome"),
            registry=registry,
        )
        self._depth = Gauge(
            "pd_receiver_spool_depth", "Deliveries in the spool, not yet in Redis.", registry=registry
        )
        self._bytes = Gauge(
            "pd_receiver_spool_bytes",
            "Size of the spool file (bounded by PD_SPOOL_MAX_BYTES).",
            registry=registry,
        )

    def drained(self, forge: str, outcome: str) -> None:
        self._drained.labels(forge, outcome).inc()

    def watch(self, spool: Spool) -> None:
        """The spool gauges are read when scraped: the request path pays nothing for them."""
        self._depth.set_function(lambda: spool.depth)
        self._bytes.set_function(lambda: spool.size)
        self._registry.register(_Quarantined(spool))


class _Quarantined:
    """``pd_receiver_spool_quarantined_total``: records the spool moved to its quarantine file, read from
    the spool when scraped."""

    def __init__(self, spool: Spool) -> None:
        self._spool = spool

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "pd_receiver_spool_quarantined",
            "Spool records (or spans of bytes that are no whole record) moved to spool.quarantine: damaged "
            "on disk, or the tail of a write a crash cut short.",
            value=self._spool.quarantined,
        )


class Metrics:
    """Every series the receiver exports; ``render`` is the ``/metrics`` body."""

    def __init__(self, forges: tuple[str, ...]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._deliveries = Counter(
            "pd_receiver_deliveries",
            "Deliveries answered, by forge and outcome; reason is the refusal token (empty otherwise).",
            ("forge", "outcome", "reason"),
            registry=self.registry,
        )
        self._ignored = Counter(
            "pd_receiver_ignored",
            "Deliveries answered 204 (no rule can act on the event), by forge and event type.",
            ("forge", "event"),
            registry=self.registry,
        )
        previous = Counter(
            "pd_receiver_verified_with_previous_secret",
            "Deliveries verified by the previous secret: when this stays at zero, drop the *_PREVIOUS "
            "variable.",
            ("forge",),
            registry=self.registry,
        )
        verify = Histogram(
            "pd_receiver_verify_seconds",
            "Time to check a delivery's credential over its raw body.",
            ("forge",),
            buckets=VERIFY_BUCKETS,
            registry=self.registry,
        )
        self._append = Histogram(
            "pd_receiver_append_seconds",
            "Time to append a verified delivery to the events stream (successful appends).",
            buckets=APPEND_BUCKETS,
            registry=self.registry,
        )
        append_failures = Counter(
            "pd_receiver_append_failures",
            "Appends that failed (Redis unreachable, or slower than the bound): answered 503.",
            ("forge",),
            registry=self.registry,
        )
        body = Histogram(
            "pd_receiver_body_bytes",
            "Size of the bodies read (within the 2 MiB limit).",
            ("forge",),
            buckets=BODY_BUCKETS,
            registry=self.registry,
        )
        # Registered last, as before the split: the order of the /metrics body follows registration.
        self._spool = SpoolSeries(self.registry)
        replica_short = Counter(
            "pd_receiver_replica_shortfall",
            "Appends the primary took but too few replicas held within PD_REPLICA_ACK_TIMEOUT_MS: also "
            "spooled, answered 202 spooled.",
            ("forge",),
            registry=self.registry,
        )
        self._replica_short = {forge: replica_short.labels(forge) for forge in forges}
        self._previous = {forge: previous.labels(forge) for forge in forges}
        self._verify = {forge: verify.labels(forge) for forge in forges}
        self._append_failures = {forge: append_failures.labels(forge) for forge in forges}
        self._body = {forge: body.labels(forge) for forge in forges}
        self._outcome_children: dict[tuple[str, str, str], Counter] = {}
        for forge in forges:  # the series a dashboard expects exist from the start, at zero
            for outcome in ("accepted", "duplicate", "ignored"):
                self.delivery(forge, outcome, "", 0)

    def delivery(self, forge: str, outcome: str, reason: str = "", amount: int = 1) -> None:
        key = (forge, outcome, reason)
        child = self._outcome_children.get(key)
        if child is None:
            child = self._outcome_children[key] = self._deliveries.labels(forge, outcome, reason)
        child.inc(amount)

    def ignored(self, forge: str, event: str) -> None:
        self._ignored.labels(forge, event).inc()

    def verified_with_previous(self, forge: str) -> None:
        self._previous[forge].inc()

    def verify_time(self, forge: str, seconds: float) -> None:
        self._verify[forge].observe(seconds)

    def append_time(self, seconds: float) -> None:
        self._append.observe(seconds)

    def replica_shortfall(self, forge: str) -> None:
        self._replica_short[forge].inc()

    def append_failed(self, forge: str) -> None:
        self._append_failures[forge].inc()

    def spool_drained(self, forge: str, outcome: str) -> None:
        self._spool.drained(forge, outcome)

    def watch_spool(self, spool: Spool) -> None:
        self._spool.watch(spool)

    def body_bytes(self, forge: str, size: int) -> None:
        self._body[forge].observe(size)

    def render(self) -> bytes:
        return generate_latest(self.registry)
