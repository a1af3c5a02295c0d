from __future__ import annotations

from pidispatch.dev.modelpath import (
    Candidate,
    bridge_interface,
    candidates,
    interface_address,
    unreachable_line,
)

NO_GATEWAY = {"IPAM": {"Config": [{"Subnet": "172.17.0.0/16"}]},
              "Options": {"com.docker.network.bridge.name": "docker0"}}


def test_without_a_daemon_gateway_the_interface_address_comes_first() -> None:
    found = candidates(NO_GATEWAY, "172.17.0.1")
    assert found == [Candidate("172.17.0.1", "docker0's address")]  # the subnet's guess is the same: once


def test_the_daemon_gateway_is_tried_first_then_the_interface_then_the_subnet_guess() -> None:
    info = {"IPAM": {"Config": [{"Subnet": "10.9.0.0/24", "Gateway": "10.9.0.254"}]},
            "Options": {"com.docker.network.bridge.name": "br-dev"}}
    found = candidates(info, "10.9.0.7")
    assert [c.address for c in found] == ["10.9.0.254", "10.9.0.7", "10.9.0.1"]
    assert found[1].source == "br-dev's address"
    assert candidates({}, None) == []


def test_the_bridge_interface_defaults_to_docker0() -> None:
    assert bridge_interface({}) == "docker0"
    assert bridge_interface({"Options": {"com.docker.network.bridge.name": "br0"}}) == "br0"


def test_an_unknown_interface_has_no_address() -> None:
    assert interface_address("pd-no-such0") is None
    assert interface_address("lo") == "127.0.0.1"


def test_the_unreachable_line_names_each_attempt_and_the_fix() -> None:
    line = unreachable_line([(Candidate("172.17.0.1", "docker0's address"), "ETIMEDOUT")])
    assert "172.17.0.1 (docker0's address): ETIMEDOUT" in line
    assert "firewall" in line and "PI_MODEL_BASE_URL" in line
