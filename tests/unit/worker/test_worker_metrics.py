"""pidispatch.worker.metrics: the worker's series, fixed label values, gauges read from memory."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from pidispatch.worker.engine.attempt import AttemptOutcome
from pidispatch.worker.engine.runner import RunResult
from pidispatch.worker.metrics import WorkerMetrics
from tests.support.scrape import Samples, labelled, parse, sample


def scrape(metrics: WorkerMetrics) -> Samples:
    return parse(generate_latest(metrics.registry).decode())


def ran(code: int) -> RunResult:
    return RunResult(exit_code=code, aborted=False, abort_reason=None, tail=b"", container_id="c")


def test_records_count_by_outcome_and_refusals_apart() -> None:
    metrics = WorkerMetrics(CollectorRegistry())
    metrics.recorded(AttemptOutcome("completed", None, ran(0)), 12.0)
    metrics.recorded(AttemptOutcome("failed", "container-exit-1", ran(1), retry=True), 3.0)
    metrics.recorded(AttemptOutcome("policy", "job-image-missing"), 0.1)  # refused: no container
    metrics.recorded(AttemptOutcome("failed", "worker-lost"), 0.0)  # lost, not a refusal
    got = scrape(metrics)
    assert sample(got, "pd_worker_jobs_total", outcome="completed", reason="") == 1
    assert sample(got, "pd_worker_jobs_total", outcome="failed", reason="container-exit-1") == 1
    assert sample(got, "pd_worker_jobs_total", outcome="policy", reason="job-image-missing") == 1
    assert sample(got, "pd_worker_jobs_total", outcome="failed", reason="worker-lost") == 1
    assert labelled(got, "pd_worker_refusals_total") == [{"reason": "job-image-missing"}]
    assert sample(got, "pd_worker_refusals_total", reason="job-image-missing") == 1
    # Only attempts that ran a container are timed.
    assert sample(got, "pd_worker_run_seconds_count") == 2
    assert sample(got, "pd_worker_run_seconds_sum") == 15.0
    assert sample(got, "pd_worker_run_seconds_bucket", le="5.0") == 1


def test_the_other_series() -> None:
    metrics = WorkerMetrics(CollectorRegistry())
    held: dict[str, str] = {}
    metrics.watch_slots(held, 4)
    metrics.started(0.3)
    metrics.retried()
    metrics.took_over(3)
    metrics.reattached()
    metrics.budget_used({"day": 5, "month": 40})
    got = scrape(metrics)
    assert (sample(got, "pd_worker_running"), sample(got, "pd_worker_slots")) == (0, 4)
    held["a"] = held["b"] = "x"
    assert sample(scrape(metrics), "pd_worker_running") == 2  # read when scraped
    assert sample(got, "pd_worker_container_start_seconds_count") == 1
    assert sample(got, "pd_worker_container_start_seconds_bucket", le="0.5") == 1
    assert sample(got, "pd_worker_retries_total") == 1
    assert sample(got, "pd_worker_takeovers_total") == 3
    assert sample(got, "pd_worker_reattaches_total") == 1
    assert sample(got, "pd_worker_budget_used", window="day") == 5
    assert sample(got, "pd_worker_budget_used", window="month") == 40
    assert sample(got, "pd_worker_budget_used", window="week") is None  # not capped: not reported


def test_the_series_a_dashboard_divides_by_exist_at_zero() -> None:
    got = scrape(WorkerMetrics())
    assert sample(got, "pd_worker_jobs_total", outcome="completed", reason="") == 0
    assert sample(got, "pd_worker_retries_total") == 0
