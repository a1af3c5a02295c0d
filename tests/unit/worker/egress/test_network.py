"""The proxy's refusals of one job: squid's native log lines from clients inside the job's network."""

from __future__ import annotations

import ipaddress

from pidispatch.worker.egress.network import candidate_subnets, count_denied


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


def test_a_network_tries_its_own_29s_in_order_from_a_spot_its_name_picks() -> None:
    within = ipaddress.IPv4Network("198.18.0.0/15")
    first = candidate_subnets(within, "pd-net-i-w-0")
    assert first == candidate_subnets(within, "pd-net-i-w-0") and len(first) == 64
    assert all(ipaddress.IPv4Network(s).subnet_of(within) and s.endswith("/29") for s in first)
    assert len(set(first)) == 64
    assert candidate_subnets(within, "pd-net-i-w-1")[0] != first[0]
    small = candidate_subnets(ipaddress.IPv4Network("10.0.0.0/28"), "x")  # two /29s: each once
    assert sorted(small) == ["10.0.0.0/29", "10.0.0.8/29"]
