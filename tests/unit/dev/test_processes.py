from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pidispatch.common.errors import InfraError
from pidispatch.dev.processes import PidFile, Recorded, kill_line, parse_pids, start_time, still_running


def test_a_pid_counts_as_running_only_with_its_recorded_start_time() -> None:
    recorded = [Recorded("redis-server", 10, 500), Recorded("worker", 11, 600), Recorded("router", 12, 700)]
    # 11 was reused by a later process (another start time); 12 is gone.
    found = still_running(recorded, {10: 500, 11: 601, 12: None})
    assert found == [Recorded("redis-server", 10, 500)]


def test_orphans_are_stopped_services_first_redis_last() -> None:
    recorded = [Recorded("redis-server", 1, 1), Recorded("receiver", 2, 1), Recorded("worker", 3, 1),
                Recorded("router", 4, 1)]
    order = [r.name for r in still_running(recorded, {1: 1, 2: 1, 3: 1, 4: 1})]
    assert order == ["worker", "router", "receiver", "redis-server"]
    assert kill_line(still_running(recorded, {1: 1, 2: 1, 3: 1, 4: 1})) == "kill 3 4 2 1"


def test_parse_pids_reads_dev_and_children_and_nothing_from_garbage() -> None:
    children = [{"name": "worker", "pid": 6, "start": 10}]
    text = json.dumps({"dev": {"pid": 5, "start": 9}, "children": children})
    assert parse_pids(text) == (Recorded("dev", 5, 9), [Recorded("worker", 6, 10)])
    assert parse_pids("") == (None, [])
    assert parse_pids("{not json") == (None, [])
    assert parse_pids('{"dev": {"pid": "x"}}') == (None, [])


def test_start_time_of_this_process_and_of_none() -> None:
    assert start_time(os.getpid()) is not None
    assert start_time(2**22 + 12345) is None


def test_a_second_dev_in_the_folder_is_refused_naming_the_first(tmp_path: Path) -> None:
    first = PidFile(tmp_path)
    assert first.acquire() == (None, [])
    first.add("worker", os.getpid())
    with pytest.raises(InfraError, match=f"dev pid {os.getpid()} already runs here"):
        PidFile(tmp_path).acquire()
    first.release()
    dev, children = PidFile(tmp_path).acquire()  # released: the next one takes it, and finds no child
    assert dev is not None and dev.pid == os.getpid() and children == []
    assert oct((tmp_path / "dev.pids").stat().st_mode & 0o777) == "0o600"
