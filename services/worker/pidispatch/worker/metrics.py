"""The worker's Prometheus series, in the registry its ``PD_METRICS_PORT`` endpoint serves.

Label values come from fixed sets only: record outcomes and reason tokens (``container-exit-<code>``
is bounded by the 256 exit codes), budget window names; never a job id, a target, a login or a path.
The gauges are read from memory when scraped (slots) or set by the heartbeat (budget), so ``/metrics``
does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sized

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pidispatch.worker.engine.attempt import AttemptOutcome

# Create + start through the Engine API: tens of milliseconds, seconds on a loaded daemon or vfs.
START_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# An attempt from its start to its record: seconds for a refusal, minutes to PI_JOB_TIMEOUT for a run.
RUN_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)


class WorkerMetrics:
    """Every series the worker exports; one call at each point the worker already logs."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """``registry``: the one the endpoint serves; by default one nobody serves (kept in memory)."""
        self.registry = registry = registry or CollectorRegistry(auto_describe=True)
        self._jobs = Counter(
            "pd_worker_jobs", "Attempts recorded, by outcome (completed, policy, failed) and reason token "
            "(empty when completed).", ("outcome", "reason"), registry=registry,
        )
        self._refusals = Counter(
            "pd_worker_refusals", "Attempts refused before anything ran (preflight, the pre-spend ladder, "
            "wait-for, budget), by reason token; each is also in pd_worker_jobs_total as policy.",
            ("reason",), registry=registry,
        )
        self._start = Histogram(
            "pd_worker_container_start_seconds", "From launching a job's container to the runtime "
            "reporting it started.", buckets=START_BUCKETS, registry=registry,
        )
        self._run = Histogram(
            "pd_worker_run_seconds", "Attempts that ran a container, from the attempt's start to its "
            "record (a re-attached run from its first start).", buckets=RUN_BUCKETS, registry=registry,
        )
        self._running = Gauge(
            "pd_worker_running", "Slots in use: jobs this worker holds (running, or on their way to).",
            registry=registry,
        )
        self._slots = Gauge("pd_worker_slots", "This worker's slots (PI_CONCURRENCY).", registry=registry)
        self._budget = Gauge(
            "pd_worker_budget_used", "Job-count budget reserved in each active window (day, and week or "
            "month when capped), fleet-wide, as of this worker's last heartbeat.", ("window",),
            registry=registry,
        )
        self._retries = Counter(
            "pd_worker_retries", "Failed attempts scheduled to run again.", registry=registry
        )
        self._takeovers = Counter(
            "pd_worker_takeovers", "Pending job entries taken over from hosts whose liveness row expired.",
            registry=registry,
        )
        self._reattaches = Counter(
            "pd_worker_reattaches", "Containers an earlier worker process left that this one followed to "
            "their end.", registry=registry,
        )
        self._egress_denied = Counter(
            "pd_worker_egress_denied", "Requests of this worker's jobs the egress proxy refused (a host "
            "not on the allowlist), counted when each job's network is removed.", registry=registry,
        )
        self._replica_short = Counter(
            "pd_worker_replica_shortfall", "Container starts whose launching mark fewer than PD_REPLICA_ACKS "
            "replicas held in time: a failover then could run the job again.", registry=registry,
        )
        self._jobs.labels("completed", "")  # what a dashboard divides by exists from the start

    def recorded(self, done: AttemptOutcome, seconds: float) -> None:
        """One attempt's record was written; ``seconds`` from the attempt's start to its end."""
        reason = done.reason or ""
        self._jobs.labels(done.outcome, reason).inc()
        if done.result is not None:
            self._run.observe(seconds)
        elif done.outcome == "policy":  # a policy end with no container is a refusal before any spend
            self._refusals.labels(reason).inc()

    def started(self, seconds: float) -> None:
        self._start.observe(seconds)

    def watch_slots(self, held: Sized, slots: int) -> None:
        """The slot gauges read ``held`` when scraped: the job path pays nothing for them."""
        self._running.set_function(lambda: len(held))
        self._slots.set(slots)

    def budget_used(self, used: Mapping[str, int]) -> None:
        """Only the active windows: the caps are read at start, so the set never changes while it runs."""
        for window, reserved in used.items():
            self._budget.labels(window).set(reserved)

    def retried(self) -> None:
        self._retries.inc()

    def took_over(self, entries: int) -> None:
        self._takeovers.inc(entries)

    def reattached(self) -> None:
        self._reattaches.inc()

    def replica_shortfall(self) -> None:
        self._replica_short.inc()

    def egress_denied(self, requests: int) -> None:
        self._egress_denied.inc(requests)
