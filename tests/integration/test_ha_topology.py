"""Through sentinels (REDIS_SENTINELS): doctor reports the topology and warns where a failover could lose
acknowledged work, and an operator's verb finds the primary the sentinels name. A real primary, replica
and three sentinels (``tests.support.sentinel``)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.doctor import doctor
from tests.support.sentinel import RedisHA, require_sentinel


@pytest.fixture
async def ha(tmp_path: Path) -> AsyncIterator[RedisHA]:
    cluster = RedisHA(tmp_path / "ha", require_sentinel())
    await asyncio.to_thread(cluster.start)
    yield cluster
    await asyncio.to_thread(cluster.stop)


async def test_doctor_reports_the_topology_and_warns_when_acks_are_off(
    ha: RedisHA, base_env: dict[str, str]
) -> None:
    env = {k: v for k, v in base_env.items() if k != "REDIS_URL"} | ha.env
    held = (await doctor(env)).checks["topology"]
    assert (held["status"], held["finding"]) == (
        "ok", "primary with 1 replica(s), 3 sentinel(s); acknowledged once 1 replica(s) hold it"
    )
    unheld = (await doctor({**env, "PD_REPLICA_ACKS": "0"})).checks["topology"]
    assert unheld["status"] == "warn" and "can lose acknowledged deliveries" in unheld["finding"]
    wrong = await doctor({**env, "REDIS_SENTINEL_MASTER": "elsewhere"})
    assert wrong.status("redis") == "fail" and "MasterNotFoundError" in wrong.checks["redis"]["finding"]


async def test_a_verb_finds_the_primary_through_the_sentinels(ha: RedisHA, base_env: dict[str, str]) -> None:
    env = {k: v for k, v in base_env.items() if k != "REDIS_URL"} | ha.env
    env |= {"PATH": os.environ.get("PATH", ""), "REDIS_URL": "redis://127.0.0.1:1/0"}  # its host is unused
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pidispatch.common.cli", "status", "--json", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 0, err
    assert out.startswith(b"{")
