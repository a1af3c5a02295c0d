"""The proxy's refusals of one job: squid's native log lines from clients inside the job's network."""

from __future__ import annotations

from pidispatch.worker.egress.network import count_denied


def test_only_refusals_from_the_jobs_own_subnet_count() -> None:
    lines = [
        "1764680000.100 0 172.18.0.2 TCP_DENIED/403 3900 CONNECT evil.example:443 - HIER_NONE/-",
        "1764680000.200 3 172.18.0.2 TCP_MISS/200 512 GET http://172.17.0.1:8080/ - HIER_DIRECT/x",
        "1764680000.300 0 172.19.0.2 TCP_DENIED/403 3900 GET http://other.example/ - HIER_NONE/-",
        "2026/12/02 14:00:00| Accepting HTTP Socket connections at conn3 local=[::]:3128",
        "garbage",
    ]
    assert count_denied(lines, ["172.18.0.0/16"]) == 1
    assert count_denied(lines, ["172.18.0.0/16", "172.19.0.0/16"]) == 2
    assert count_denied(lines, ["not a subnet"]) == 0
