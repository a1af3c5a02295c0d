"""Reading a Prometheus text exposition as tests assert it: parsed by prometheus-client's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample of ``text``, keyed by its name and its sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    """One sample's value; None when the series is absent (not the same as 0)."""
    return samples.get((name, tuple(sorted(labels.items()))))


def labelled(samples: Samples, name: str) -> list[dict[str, str]]:
    """The label sets ``name`` has samples for."""
    return [dict(labels) for (n, labels) in samples if n == name]
