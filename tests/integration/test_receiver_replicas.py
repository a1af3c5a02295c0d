"""Guarantee: with PD_REPLICA_ACKS, a delivery no replica holds in time is kept twice (Redis and the spool)
and the spool lets it go only once a replica holds it; the forge gets 202 either way, each delivery is in
the events stream once.

A real redis-server with no replica, then a real replica started beside it (``--replicaof``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestClient, TestServer

from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis, create_redis
from pidispatch.common.settings import load_settings
from pidispatch.forges.receive import load_receiver_config
from pidispatch.receiver.app import create_app
from pidispatch.receiver.spool import Spool
from tests.support.payloads import FIXTURES
from tests.support.polling import wait_for
from tests.support.processes import RedisProcess
from tests.support.receiver import TEST_SECRET, github_signature, metric
from tests.support.sentinel import Node

BODY = (FIXTURES / "github" / "issues.labeled.json").read_bytes()
Client = TestClient[aiohttp.web.Request, aiohttp.web.Application]


async def _post(client: Client) -> tuple[str, int, object]:
    delivery = str(uuid.uuid4())
    headers = {
        "Content-Type": "application/json", "X-GitHub-Event": "issues", "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": github_signature(TEST_SECRET, BODY),
    }  # fmt: skip
    resp = await client.post("/", data=BODY, headers=headers)
    return delivery, resp.status, await resp.json()


async def _equal(found: Awaitable[list[str]], expected: list[str]) -> bool:
    return await found == expected


async def test_a_delivery_no_replica_holds_is_spooled_too_and_kept_there_until_one_does(
    own_redis: RedisProcess, base_env: dict[str, str], keys: Keys, tmp_path: Path
) -> None:
    env = {**base_env, "REDIS_URL": own_redis.url, "PD_REPLICA_ACKS": "1", "PD_REPLICA_ACK_TIMEOUT_MS": "20"}
    settings = load_settings(env)
    redis: Redis = create_redis(own_redis.url)
    spool = Spool.open(tmp_path / "spool", 1 << 30)
    config = load_receiver_config(settings, env)
    app = create_app(settings, redis, keys, lambda: int(time.time() * 1000), config, spool)
    client: Client = TestClient(TestServer(app))
    await client.start_server()
    replica = Node(tmp_path, "replica", replica_of=own_redis.port)
    try:
        posted = [await _post(client) for _ in range(3)]
        assert [(s, b) for _, s, b in posted] == [(202, {"status": "spooled"})] * 3

        async def stored() -> list[str]:
            return [f[b"delivery"].decode() for _, f in await redis.xrange(keys.events)]

        # The first went to Redis, the next two behind it through the spool (arrival order): all reach
        # Redis, where the router acts on them, while the spool keeps every copy no replica holds yet.
        await wait_for(lambda: _equal(stored(), [d for d, _, _ in posted]), timeout=10, what="all in Redis")
        await asyncio.sleep(0.3)  # several confirmations: none may let a copy go while no replica holds it
        assert spool.depth == 3
        await asyncio.to_thread(replica.start)
        await wait_for(lambda: spool.depth == 0, timeout=20, what="the spool to let its copies go")
        later = await _post(client)
        text = await (await client.get("/metrics")).text()
        after = await stored()
    finally:
        await client.close()
        spool.close()
        replica.kill()
        await redis.aclose()
    assert later[1:] == (202, {"status": "accepted"})
    assert after == [d for d, _, _ in posted] + [later[0]]
    assert metric(text, "pd_receiver_replica_shortfall_total", forge="github") == 1  # the others: spool first
