"""``pi-dispatch hosts`` against a real Redis, run in-process (the verb calls asyncio.run, so it runs in a
thread while the test writes registry rows on its own loop)."""

from __future__ import annotations

import asyncio
import json

import pytest

from pidispatch.common.embedded import free_port
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.console import hosts as commands
from tests.support.cli import Cli


@pytest.fixture
def run(base_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    for name in ("REDIS_URL", "PD_KEY_PREFIX"):
        monkeypatch.setenv(name, base_env[name])
    return Cli(capsys, commands.register)


async def beat(redis: Redis, keys: Keys, name: str, *, age_ms: int, **fields: str) -> None:
    row = {"name": name, "beatAt": str(now_ms() - age_ms), "startedAt": str(now_ms() - 600_000), **fields}
    await redis.hset(keys.host(name), mapping=row)
    await redis.pexpire(keys.host(name), 90_000)
    await redis.sadd(keys.hosts, name)


async def test_no_hosts_says_how_hosts_appear(run: Cli) -> None:
    assert await run("hosts") == 0
    assert run.out.strip() == "no live hosts (workers write pd:host:<name> every 15 s)"
    assert await run("hosts", "--json") == 0
    assert json.loads(run.out) == {"hosts": []}


async def test_hosts_lists_every_row_marks_stale_ones_and_prunes_expired_members(
    run: Cli, redis: Redis, keys: Keys
) -> None:
    await beat(redis, keys, "mini1", age_ms=3_000, routes="true", caps="s:prod,w:jira,x:evil",
               running="1", concurrency="3", version="0.1.0", tz="Europe/Amsterdam", image="pd-agent:1")
    await beat(redis, keys, "mini2", age_ms=60_000, routes="false", caps="", running="0", concurrency="2",
               version="0.1.0", image="/home/op/image")
    await redis.sadd(keys.hosts, "gone")  # its row expired

    assert await run("hosts", "--json") == 0
    hosts = json.loads(run.out)["hosts"]
    assert [h["name"] for h in hosts] == ["mini1", "mini2"]
    mini1, mini2 = hosts
    assert (mini1["routes"], mini1["caps"], mini1["running"], mini1["concurrency"]) == (
        True, ["s:prod", "w:jira"], 1, 3
    )
    assert mini1["stale"] is False and 3_000 <= mini1["staleMs"] < 45_000
    assert mini1["version"] == "0.1.0" and mini1["tz"] == "Europe/Amsterdam"
    assert mini2["stale"] is True and mini2["routes"] is False and mini2["image"] == ""  # a path: not shown
    assert not await redis.sismember(keys.hosts, "gone")

    assert await run("hosts") == 0
    header, line1, line2, _, shared = run.out.strip().splitlines()
    assert header.split() == ["NAME", "BEAT", "ROUTES", "RUNNING", "VERSION", "CAPS"]
    assert line1.split()[0] == "mini1" and line1.split()[2:] == ["yes", "1/3", "0.1.0", "s:prod,w:jira"]
    assert line2.split()[0] == "mini2" and line2.split()[2:] == ["shared", "0/2", "0.1.0", "-", "stale"]
    assert line2.split()[1].endswith("s") and 60 <= int(line2.split()[1][:-1]) < 90
    assert shared.startswith("shared: no declared PI_WORKER_NAME")
    assert "/home/op" not in run.out


async def test_redis_down_exits_1_naming_redis_url(run: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    assert await asyncio.wait_for(run("hosts"), 15) == 1
    assert "REDIS_URL" in run.err and run.out == ""
