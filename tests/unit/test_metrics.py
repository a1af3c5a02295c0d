"""pidispatch.receiver.metrics: the series /metrics exports, per app registry, fixed label values."""

from __future__ import annotations

from pidispatch.receiver.metrics import CONTENT_TYPE, Metrics
from tests.support.receiver import metric


def test_configured_forges_start_with_zero_series() -> None:
    text = Metrics(("github", "azure")).render().decode()
    for forge in ("github", "azure"):
        for outcome in ("accepted", "duplicate", "ignored"):
            series = f'pd_receiver_deliveries_total{{forge="{forge}",outcome="{outcome}",reason=""}}'
            assert f"{series} 0.0\n" in text  # present, at zero
    assert 'forge="gitlab"' not in text
    for name in (
        "pd_receiver_deliveries_total",
        "pd_receiver_verified_with_previous_secret_total",
        "pd_receiver_verify_seconds",
        "pd_receiver_append_seconds",
        "pd_receiver_append_failures_total",
        "pd_receiver_body_bytes",
    ):
        assert f"# HELP {name}" in text


def test_every_series_counts_what_it_names() -> None:
    metrics = Metrics(("github", "gitlab"))
    metrics.delivery("github", "accepted")
    metrics.delivery("github", "accepted")
    metrics.delivery("gitlab", "refused", "invalid-timestamp")
    metrics.delivery("azure", "refused", "not-configured")  # an unconfigured forge's 404 still counts
    metrics.verified_with_previous("gitlab")
    metrics.verify_time("github", 2e-5)
    metrics.append_time(0.003)
    metrics.append_failed("gitlab")
    metrics.body_bytes("github", 5000)
    text = metrics.render().decode()
    assert metric(text, "pd_receiver_deliveries_total", forge="github", outcome="accepted", reason="") == 2
    refused = {"forge": "gitlab", "outcome": "refused", "reason": "invalid-timestamp"}
    assert metric(text, "pd_receiver_deliveries_total", **refused) == 1
    not_configured = {"forge": "azure", "outcome": "refused", "reason": "not-configured"}
    assert metric(text, "pd_receiver_deliveries_total", **not_configured) == 1
    assert metric(text, "pd_receiver_verified_with_previous_secret_total", forge="gitlab") == 1
    assert metric(text, "pd_receiver_verified_with_previous_secret_total", forge="github") == 0
    assert metric(text, "pd_receiver_verify_seconds_bucket", forge="github", le="2.5e-05") == 1
    assert metric(text, "pd_receiver_verify_seconds_bucket", forge="github", le="1e-05") == 0
    assert metric(text, "pd_receiver_append_seconds_count") == 1
    assert metric(text, "pd_receiver_append_failures_total", forge="gitlab") == 1
    assert metric(text, "pd_receiver_body_bytes_bucket", forge="github", le="16384.0") == 1
    assert metric(text, "pd_receiver_body_bytes_bucket", forge="github", le="4096.0") == 0


def test_each_instance_has_its_own_registry() -> None:
    first, second = Metrics(("github",)), Metrics(("github",))
    first.delivery("github", "accepted")
    labels = {"forge": "github", "outcome": "accepted", "reason": ""}
    assert metric(first.render().decode(), "pd_receiver_deliveries_total", **labels) == 1
    assert metric(second.render().decode(), "pd_receiver_deliveries_total", **labels) == 0


def test_exposition_content_type_is_prometheus_text() -> None:
    assert CONTENT_TYPE.startswith("text/plain; version=")
