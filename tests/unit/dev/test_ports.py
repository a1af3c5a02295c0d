from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.dev.ports import listening_inodes, metrics_ports, redis_port, require_free_port

TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0
   1: 0100007F:0BB8 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0
   2: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0
"""


def test_listening_inodes_are_those_in_listen_state_on_the_port() -> None:
    assert listening_inodes(TCP, 3000) == {"4242"}  # the established connection on 3000 is not one
    assert listening_inodes(TCP, 8080) == {"4444"}
    assert listening_inodes(TCP, 9) == set()


def test_a_taken_receiver_port_names_its_holder_and_a_free_port() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        with pytest.raises(ConfigError) as caught:
            require_free_port("127.0.0.1", port)
    line = str(caught.value)
    assert f"RECEIVER_PORT={port} is in use on 127.0.0.1 by pid {os.getpid()} (" in line
    assert "start dev with RECEIVER_PORT=" in line and "PD_SPOOL_DIR" not in line


def test_router_and_worker_get_a_metrics_port_each() -> None:
    assert metrics_ports({}) == {}
    assert metrics_ports({"PD_METRICS_PORT": "19100"}) == {
        "router": {"PD_METRICS_PORT": "19100"}, "worker": {"PD_METRICS_PORT": "19101"}}
    for bad in ("65535", "0", "x"):
        with pytest.raises(ConfigError, match="PD_METRICS_PORT"):
            metrics_ports({"PD_METRICS_PORT": bad})


def test_redis_keeps_its_port_across_restarts_while_it_is_free(tmp_path: Path) -> None:
    first = redis_port(tmp_path)
    assert redis_port(tmp_path) == first
    with socket.socket() as held:
        held.bind(("127.0.0.1", first))
        held.listen(1)
        moved = redis_port(tmp_path)  # taken meanwhile: a new one, remembered
    assert moved != first and redis_port(tmp_path) == moved
