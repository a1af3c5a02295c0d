"""The receiver through Redis crashes, with and without its spool, and against hostile bodies.

Real redis-servers killed with SIGKILL and restarted append-only on the same port; the spool in a test
folder. The process-level spool guarantees (kill -9 mid-drain, one receiver per spool directory) are in
``test_receiver_spool``.
"""

from __future__ import annotations

import asyncio
import errno
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis, create_redis
from pidispatch.common.settings import load_settings
from pidispatch.forges.receive import load_receiver_config
from pidispatch.receiver import spoolfile
from pidispatch.receiver.app import create_app
from pidispatch.receiver.spool import Spool
from pidispatch.receiver.spoolfile import SPOOL_FILE
from tests.support.payloads import FIXTURES
from tests.support.polling import wait_for
from tests.support.processes import RedisProcess
from tests.support.receiver import (
    TEST_SECRET,
    azure_basic_env,
    azure_basic_headers,
    forgejo_env,
    forgejo_headers,
    github_signature,
    gitlab_token_env,
    gitlab_token_headers,
    metric,
)

ISSUES_LABELED = (FIXTURES / "github" / "issues.labeled.json").read_bytes()
Client = TestClient[aiohttp.web.Request, aiohttp.web.Application]


def _headers(delivery: str, body: bytes = ISSUES_LABELED) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": github_signature(TEST_SECRET, body),
    }


async def _post(client: Client, delivery: str | None = None) -> tuple[str, int, Any]:
    delivery = delivery or str(uuid.uuid4())
    resp = await client.post("/", data=ISSUES_LABELED, headers=_headers(delivery))
    return delivery, resp.status, await resp.json()


async def _app_client(redis: Redis, env: dict[str, str], spool: Spool | None = None) -> Client:
    settings = load_settings(env)
    config = load_receiver_config(settings, env)
    keys = Keys(settings.key_prefix)
    app = create_app(settings, redis, keys, lambda: int(time.time() * 1000), config, spool)
    client: Client = TestClient(TestServer(app))
    await client.start_server()
    return client


def _kill_and_restart(server: RedisProcess, down_s: float = 0.0) -> None:
    """SIGKILL, ``down_s`` of outage, then the same port and data folder, append-only: entries survive,
    connections do not. Blocking: returns once the new server answers PING."""
    server.stop(signal.SIGKILL)
    time.sleep(down_s)
    server.start()


@pytest.fixture
async def own(own_redis: RedisProcess) -> AsyncIterator[Redis]:
    redis = create_redis(own_redis.url)
    yield redis
    await redis.aclose()


@pytest.fixture
async def spool(tmp_path: Path) -> AsyncIterator[Spool]:
    spool = Spool.open(tmp_path / "spool", 1 << 30)
    yield spool
    spool.close()


async def _entries_by_delivery(redis: Redis, keys: Keys) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, fields in await redis.xrange(keys.events):
        delivery = fields[b"delivery"].decode()
        counts[delivery] = counts.get(delivery, 0) + 1
    return counts


# --- the client recovers at once ---------------------------------------------------------------------


async def test_first_deliveries_after_a_redis_restart_are_stored_not_refused(
    own_redis: RedisProcess, own: Redis, base_env: dict[str, str], keys: Keys
) -> None:
    """No spool here: the Redis client alone must not fail on the connections the dead server closed."""
    client = await _app_client(own, {**base_env, "REDIS_URL": own_redis.url})
    try:
        warm = await asyncio.gather(*(_post(client) for _ in range(20)))  # 20 pooled connections
        assert {status for _, status, _ in warm} == {202}
        await asyncio.to_thread(_kill_and_restart, own_redis)  # returns once PING answers again
        first = await _post(client)  # an idle receiver's first delivery
        after = await asyncio.gather(*(_post(client) for _ in range(20)))
    finally:
        await client.close()
    assert [(status, body) for _, status, body in [first, *after]] == [(202, {"status": "accepted"})] * 21
    stored = await _entries_by_delivery(own, keys)
    assert all(stored[d] == 1 for d, _, _ in [*warm, first, *after])


async def test_deliveries_streaming_through_a_redis_kill_are_each_stored_once(
    own_redis: RedisProcess, own: Redis, spool: Spool, base_env: dict[str, str], keys: Keys
) -> None:
    """50 deliveries/s for 4 s; Redis SIGKILLed at 1 s and restarted: every 2xx is in pd:events once,
    and no delivery is refused (none at all with the spool, so none once Redis answers again)."""
    client = await _app_client(own, {**base_env, "REDIS_URL": own_redis.url}, spool)
    answers: list[tuple[str, int, Any, float]] = []

    async def deliver() -> None:
        delivery, status, body = await _post(client)
        answers.append((delivery, status, body, time.monotonic()))

    try:
        loop = asyncio.get_running_loop()
        start = loop.time()
        sends = []
        restart: asyncio.Future[None] | None = None
        for n in range(200):
            await asyncio.sleep(max(0.0, start + n / 50 - loop.time()))
            if n == 50:
                restart = asyncio.ensure_future(asyncio.to_thread(_kill_and_restart, own_redis, 0.5))
            sends.append(asyncio.create_task(deliver()))
        assert restart is not None
        await restart
        pinged_at = time.monotonic()  # _kill_and_restart returned: Redis answers PING from here on
        await asyncio.gather(*sends)
        await wait_for(lambda: spool.depth == 0, timeout=15, what="the spool to drain")
        text = await (await client.get("/metrics")).text()
    finally:
        await client.close()
    refused = [(status, body) for _, status, body, _ in answers if status >= 300]
    assert refused == []
    assert not [a for a in answers if a[3] > pinged_at and a[1] == 503]
    assert {body["status"] for _, _, body, _ in answers} <= {"accepted", "spooled"}
    stored = await _entries_by_delivery(own, keys)
    assert sorted(stored) == sorted(d for d, _, _, _ in answers)
    assert set(stored.values()) == {1}
    spooled = sum(1 for _, _, body, _ in answers if body["status"] == "spooled")
    assert spooled >= 20  # the half-second outage went to the spool
    drained = metric(text, "pd_receiver_spool_drained_total", forge="github", outcome="accepted")
    counted = metric(text, "pd_receiver_deliveries_total", forge="github", outcome="spooled", reason="")
    assert counted == drained == spooled


async def test_spooled_deliveries_are_drained_in_order_and_a_redelivery_is_stored_once(
    own_redis: RedisProcess, own: Redis, spool: Spool, base_env: dict[str, str], keys: Keys, tmp_path: Path
) -> None:
    client = await _app_client(own, {**base_env, "REDIS_URL": own_redis.url}, spool)
    try:
        own_redis.stop(signal.SIGKILL)
        first = [await _post(client) for _ in range(5)]
        again = await _post(client, first[2][0])  # the forge redelivers one while Redis is down
        ready = await client.get("/readyz")
        assert (ready.status, await ready.json()) == (
            200, {"status": "spooling", "spool_depth": 6, "spool_bytes": spool.size}
        )  # fmt: skip
        await asyncio.to_thread(own_redis.start)
        later = await _post(client)  # arrives after Redis is back, behind the spooled ones
        await wait_for(lambda: spool.depth == 0, timeout=10, what="the spool to drain")

        async def ready_and_empty() -> bool:
            # The file is cut back after its last record is stored: a moment after the depth says 0.
            ready = await client.get("/readyz")
            return (ready.status, await ready.json()) == (
                200, {"status": "ready", "spool_depth": 0, "spool_bytes": 0})

        await wait_for(ready_and_empty, timeout=10, what="ready, with the spool file emptied")
        text = await (await client.get("/metrics")).text()
    finally:
        await client.close()
    assert [(s, b) for _, s, b in [*first, again]] == [(202, {"status": "spooled"})] * 6
    assert later[1] == 202
    order = [fields[b"delivery"].decode() for _, fields in await own.xrange(keys.events)]
    assert order == [d for d, _, _ in first] + [later[0]]
    assert (tmp_path / "spool" / SPOOL_FILE).stat().st_size == 0
    assert metric(text, "pd_receiver_spool_drained_total", forge="github", outcome="duplicate") == 1
    assert metric(text, "pd_receiver_spool_depth") == 0


async def test_full_spool_answers_503_while_redis_is_down_and_never_once_it_is_back(
    own_redis: RedisProcess, own: Redis, base_env: dict[str, str], keys: Keys, tmp_path: Path
) -> None:
    small = Spool.open(tmp_path / "small", 3 * len(ISSUES_LABELED))
    client = await _app_client(own, {**base_env, "REDIS_URL": own_redis.url}, small)
    try:
        own_redis.stop(signal.SIGKILL)
        answers = [(await _post(client))[1:] for _ in range(3)]
        ready = await client.get("/readyz")
        await asyncio.to_thread(own_redis.start)
        # Straight after the restart, before the drain has emptied the full spool: Redis takes it.
        back = (await _post(client))[1:]
        await wait_for(lambda: small.depth == 0, timeout=10, what="the spool to drain")
    finally:
        await client.close()
        small.close()
    assert answers == [(202, {"status": "spooled"})] * 2 + [(503, {"error": "enqueue-failed"})]
    assert ready.status == 503  # no room for another delivery and no Redis: not ready
    assert back == (202, {"status": "accepted"})
    assert await own.xlen(keys.events) == 3


# --- hostile bodies ----------------------------------------------------------------------------------

DEEP = b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"


async def test_json_nested_deeper_than_the_parser_goes_is_400_on_every_arm(
    redis: Redis, base_env: dict[str, str], keys: Keys
) -> None:
    env = {**base_env, **forgejo_env(), **gitlab_token_env(), **azure_basic_env()}
    client = await _app_client(redis, env)
    requests = {
        "/github": _headers("deep-github", DEEP),
        "/forgejo": forgejo_headers(DEEP, "issues", "deep-forgejo"),
        "/gitlab": gitlab_token_headers("deep-gitlab"),
        "/azure": azure_basic_headers(),
    }
    try:
        answers = {}
        for path, headers in requests.items():
            resp = await client.post(path, data=DEEP, headers=headers)
            answers[path] = (resp.status, await resp.json())
    finally:
        await client.close()
    assert answers == {path: (400, {"error": "invalid-json"}) for path in requests}
    assert await redis.keys(f"{keys.prefix}:*") == []


async def test_with_redis_down_a_spool_whose_disk_refuses_writes_makes_readyz_503_until_it_takes_one(
    own_redis: RedisProcess, own: Redis, spool: Spool, base_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = await _app_client(own, {**base_env, "REDIS_URL": own_redis.url}, spool)
    real_write = spoolfile.write

    def disk_full(fd: int, data: bytes, end: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    try:
        own_redis.stop(signal.SIGKILL)
        monkeypatch.setattr(spoolfile, "write", disk_full)
        _, status, _ = await _post(client)
        assert status == 503  # not kept anywhere: never a 202
        ready = await client.get("/readyz")
        assert (ready.status, (await ready.json())["status"]) == (503, "redis-unreachable")
        monkeypatch.setattr(spoolfile, "write", real_write)
        assert (await _post(client))[1:] == (202, {"status": "spooled"})
        ready = await client.get("/readyz")
        assert (ready.status, (await ready.json())["status"]) == (200, "spooling")
    finally:
        await client.close()
