"""The spool of the real receiver process: SIGKILL mid-drain, one receiver per spool directory.

Redis is a real redis-server this test owns (append-only, restarted on the same port); the receiver is
``python -m pidispatch.receiver`` as operators run it.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import uuid
from pathlib import Path

import aiohttp
import pytest
import redis as sync_redis

from pidispatch.common.embedded import find_redis_server, free_port, redis_server_argv
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis, create_redis
from pidispatch.receiver.spoolfile import QUARANTINE_FILE, SPOOL_FILE, parse
from tests.support.payloads import FIXTURES
from tests.support.polling import wait_for
from tests.support.processes import RedisProcess, ServiceProcess
from tests.support.receiver import TEST_SECRET, github_signature, metric

ISSUES_LABELED = (FIXTURES / "github" / "issues.labeled.json").read_bytes()
DELIVERIES = 200


def _receiver(
    base_env: dict[str, str], tmp_path: Path, redis_url: str, spool: Path
) -> tuple[ServiceProcess, str]:
    port = free_port()
    env = {
        **base_env,
        "REDIS_URL": redis_url,
        "RECEIVER_PORT": str(port),
        "RECEIVER_BIND": "127.0.0.1",
        "PD_SPOOL_DIR": str(spool),
    }
    name = f"receiver-{uuid.uuid4().hex[:6]}.log"
    return ServiceProcess("receiver", env, tmp_path / name), f"http://127.0.0.1:{port}"


async def _started(service: ServiceProcess) -> None:
    service.start()
    await wait_for(lambda: service.logged("receiver_started"), timeout=15, what="receiver_started")


async def _deliver(session: aiohttp.ClientSession, url: str, delivery: str) -> tuple[int, object]:
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": github_signature(TEST_SECRET, ISSUES_LABELED),
    }
    async with session.post(f"{url}/github", data=ISSUES_LABELED, headers=headers) as resp:
        return resp.status, await resp.json()


def _start_with_maxmemory(server: RedisProcess, maxmemory: int) -> None:
    """Restart ``server`` append-only on its port with a memory cap: writes past it fail (OOM)."""
    argv = redis_server_argv(find_redis_server(), server.port, server.data_dir, persist=True)
    server.proc = subprocess.Popen([*argv, "--maxmemory", str(maxmemory)])
    client = sync_redis.Redis(port=server.port, socket_connect_timeout=0.2)

    def up() -> bool:
        try:
            return bool(client.ping())
        except (sync_redis.ConnectionError, sync_redis.BusyLoadingError):
            return False

    asyncio.run(wait_for(up, timeout=10, what="redis-server to start"))


async def test_receiver_killed_mid_drain_loses_and_doubles_nothing(
    own_redis: RedisProcess, base_env: dict[str, str], keys: Keys, tmp_path: Path
) -> None:
    spool_dir = tmp_path / "spool"
    first, url = _receiver(base_env, tmp_path, own_redis.url, spool_dir)
    redis = create_redis(own_redis.url)
    try:
        await _started(first)
        baseline = int((await redis.info("memory"))["used_memory"])
        own_redis.stop(signal.SIGKILL)
        deliveries = [str(uuid.uuid4()) for _ in range(DELIVERIES)]
        async with aiohttp.ClientSession() as session:
            answers = [await _deliver(session, url, d) for d in deliveries]
        assert answers == [(202, {"status": "spooled"})] * DELIVERIES

        # Redis returns with room for part of the spool only: the drain stalls half-way (OOM), so the
        # kill below lands mid-drain, not before or after it.
        await asyncio.to_thread(_start_with_maxmemory, own_redis, baseline + 150 * len(ISSUES_LABELED) // 2)
        await wait_for(
            lambda: [x for x in first.logged("spool_drain_failing") if x.get("error") != "ConnectionError"],
            timeout=15,
            what="the drain to stall on a full Redis",
        )
        stored_before_kill = await redis.xlen(keys.events)
        assert 0 < stored_before_kill < DELIVERIES
        first.kill()  # SIGKILL mid-drain
        await redis.config_set("maxmemory", 0)

        second, url = _receiver(base_env, tmp_path, own_redis.url, spool_dir)
        try:
            await _started(second)
            recovered = second.logged("spool_recovered")
            assert recovered and recovered[0]["depth"] == DELIVERIES  # nothing was truncated from the file

            async def drained() -> bool:
                async with aiohttp.ClientSession() as session, session.get(f"{url}/readyz") as resp:
                    return (await resp.json())["spool_depth"] == 0

            await wait_for(drained, timeout=20, what="the restarted receiver to drain its spool")
            async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as resp:
                text = await resp.text()
        finally:
            second.stop()
        entries = await redis.xrange(keys.events)
    finally:
        first.stop()
        await redis.aclose()
    assert [fields[b"delivery"].decode() for _, fields in entries] == deliveries  # all, once, in order
    assert (spool_dir / SPOOL_FILE).stat().st_size == 0
    assert metric(text, "pd_receiver_spool_drained_total", forge="github", outcome="duplicate") == (
        stored_before_kill
    )
    assert "Codertocat" not in first.log_path.read_text() + second.log_path.read_text()


async def test_second_receiver_on_one_spool_dir_exits_2_naming_the_variable(
    base_env: dict[str, str], tmp_path: Path, redis: Redis
) -> None:
    spool_dir = tmp_path / "shared-spool"
    first, _ = _receiver(base_env, tmp_path, base_env["REDIS_URL"], spool_dir)
    second, _ = _receiver(base_env, tmp_path, base_env["REDIS_URL"], spool_dir)
    try:
        await _started(first)
        second.start()
        assert second.proc is not None
        code = await asyncio.to_thread(second.proc.wait, 15)
    finally:
        second.stop()
        first.stop()
    assert code == 2
    text = second.log_path.read_text()
    assert "PD_SPOOL_DIR" in text and str(spool_dir) not in text  # the variable, never the host path


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"PD_SPOOL_DIR": "{file}/spool"}, "PD_SPOOL_DIR"),
        ({"PD_SPOOL_MAX_BYTES": "1000"}, "PD_SPOOL_MAX_BYTES"),
        ({"PD_SPOOL_MAX_BYTES": "1g"}, "PD_SPOOL_MAX_BYTES"),
    ],
    ids=["dir-under-a-file", "max-below-one-delivery", "max-not-a-number"],
)
async def test_bad_spool_configuration_exits_2_naming_the_variable(
    base_env: dict[str, str], tmp_path: Path, env: dict[str, str], variable: str
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    service, _ = _receiver(base_env, tmp_path, base_env["REDIS_URL"], tmp_path / "spool")
    service.env.update({k: v.format(file=a_file) for k, v in env.items()})
    service.start()
    assert service.proc is not None
    code = await asyncio.to_thread(service.proc.wait, 15)
    service.stop()
    assert code == 2
    assert variable in service.log_path.read_text()


def _flip_in_record(path: Path, index: int) -> int:
    """Flip one payload byte of record ``index`` (0-based) of the spool file; its offset."""
    data = path.read_bytes()
    records, _ = parse(data)
    start = records[index - 1][0] if index else 0
    at = (start + records[index][0]) // 2
    path.write_bytes(data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1:])
    return start


@pytest.mark.parametrize("when", ["at-restart", "while-running"])
async def test_a_damaged_spool_record_costs_that_record_only_and_new_deliveries_flow(
    own_redis: RedisProcess, base_env: dict[str, str], keys: Keys, tmp_path: Path, when: str
) -> None:
    """20 deliveries spooled while Redis is away; one byte of one record flipped (record 7 before a restart,
    record 1 while the receiver runs): Redis back, the other 19 arrive in order, the damaged one is
    quarantined, logged with its offset and counted, and a new delivery is accepted."""
    spool_dir = tmp_path / "spool"
    receiver, url = _receiver(base_env, tmp_path, own_redis.url, spool_dir)
    redis = create_redis(own_redis.url)
    deliveries = [str(uuid.uuid4()) for _ in range(20)]
    damaged = 6 if when == "at-restart" else 0
    try:
        await _started(receiver)
        own_redis.stop(signal.SIGKILL)
        async with aiohttp.ClientSession() as session:
            answers = [await _deliver(session, url, d) for d in deliveries]
        assert answers == [(202, {"status": "spooled"})] * 20
        if when == "at-restart":
            assert receiver.stop() == 0
            offset = _flip_in_record(spool_dir / SPOOL_FILE, damaged)
            receiver, url = _receiver(base_env, tmp_path, own_redis.url, spool_dir)
            own_redis.start()
            await _started(receiver)
        else:
            offset = _flip_in_record(spool_dir / SPOOL_FILE, damaged)
            own_redis.start()
        kept = [d for n, d in enumerate(deliveries) if n != damaged]
        await wait_for(lambda: _stored(redis, keys, len(kept)), timeout=20, what="the 19 intact deliveries")
        async with aiohttp.ClientSession() as session:
            assert await _deliver(session, url, "after-the-damage") == (202, {"status": "accepted"})
            async with session.get(f"{url}/metrics") as resp:
                text = await resp.text()
        lines = await wait_for(lambda: receiver.logged("spool_record_quarantined"), what="the error line")
        entries = [fields[b"delivery"].decode() for _, fields in await redis.xrange(keys.events)]
    finally:
        receiver.stop()
        await redis.aclose()
    assert entries == [*kept, "after-the-damage"]
    assert [(line["offset"], line["level"]) for line in lines] == [(offset, "error")]
    assert metric(text, "pd_receiver_spool_quarantined_total") == 1
    assert (spool_dir / QUARANTINE_FILE).stat().st_size > 0


async def _stored(redis: Redis, keys: Keys, n: int) -> bool:
    return bool(await redis.xlen(keys.events) >= n)
