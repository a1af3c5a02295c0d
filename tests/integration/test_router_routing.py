"""The router chooses each job's stream from the host registry: a job bound to a secret profile lands on a
capable host's stream; everything else, and everything when the registry cannot help, lands on the shared
stream ``pd:jobs``."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import structlog

from pidispatch.common.keys import Keys
from pidispatch.common.models import Event, job_from_fields
from pidispatch.common.redis import Redis
from pidispatch.common.registry import HostCache
from pidispatch.common.runtime import now_ms
from pidispatch.common.settings import load_settings
from pidispatch.router.service import run_router
from pidispatch.triggers.loader import Rules, RulesRef, parse_triggers
from tests.support.decisions import decision_fields
from tests.support.payloads import FIXTURES
from tests.support.polling import wait_for

LABELED = (FIXTURES / "github" / "issues.labeled.json").read_text()  # issue #1, label "bug"
PLAIN_RULE = {"on": {"type": "label", "any": ["bug"]}, "run": {"kind": "github", "flow": "fix"}}
PROD_RULE = {
    "on": {"type": "label", "any": ["bug"]},
    "run": {"kind": "github", "flow": "fix", "secrets": {"API_KEY": "op://vault/api"},
            "secretsProfile": "prod"},
}


def rules_of(*entries: dict[str, Any]) -> Rules:
    return parse_triggers(json.dumps({"triggers": list(entries)}))


@asynccontextmanager
async def running_router(env: dict[str, str], redis: Redis, keys: Keys, rules: Rules) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_router(load_settings(env), redis, keys, RulesRef(rules), stop, now_ms, consumer="router-a")
    )
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def register(redis: Redis, keys: Keys, name: str, caps: str, *, age_ms: int = 0) -> None:
    """A registry row as a worker's heartbeat writes it."""
    await redis.hset(keys.host(name), mapping={
        "name": name, "beatAt": str(now_ms() - age_ms), "routes": "true", "caps": caps, "concurrency": "3",
        "running": "0", "version": "0.1.0",
    })
    await redis.pexpire(keys.host(name), 90_000)
    await redis.sadd(keys.hosts, name)


async def deliver(redis: Redis, keys: Keys) -> str:
    delivery = str(uuid.uuid4())
    fields = Event(forge="github", event="issues", delivery=delivery, received_at=now_ms(), body=LABELED)
    await redis.xadd(keys.events, fields.to_fields())  # type: ignore[arg-type]
    return delivery


async def decided(redis: Redis, keys: Keys, delivery: str) -> str | None:
    return (await decision_fields(redis, keys, "github", delivery)).get("outcome")


async def job_ids(redis: Redis, stream: str) -> list[str]:
    return [job_from_fields(fields)[0].id for _, fields in await redis.xrange(stream)]


async def test_a_profile_bound_job_lands_on_the_stream_of_the_host_that_declares_the_profile(
    base_env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    await register(redis, keys, "mini1", "s:prod")
    await register(redis, keys, "mini2", "")
    fanned = {**PROD_RULE, "run": {**PROD_RULE["run"], "replicas": 3}}
    with structlog.testing.capture_logs() as logs:
        async with running_router(base_env, redis, keys, rules_of(fanned)):
            delivery = await deliver(redis, keys)
            assert await wait_for(lambda: decided(redis, keys, delivery), what="the decision") == "queued"
    # Routed per replica; mini1 is the only capable host, so every replica is its.
    assert await job_ids(redis, keys.host_jobs("mini1")) == [f"gh-{delivery}-r{i}" for i in (1, 2, 3)]
    assert await redis.xlen(keys.jobs) == 0
    assert not await redis.exists(keys.host_jobs("mini2"))
    routed = [e for e in logs if e["event"] == "forge_job_routed"]
    assert [(e["kind"], e["host"], e["needs"]) for e in routed] == [("github", "mini1", "s:prod")] * 3
    [(_, fields), *_] = await redis.xrange(keys.host_jobs("mini1"))
    assert job_from_fields(fields)[0].secrets_profile == "prod"


async def test_a_job_without_a_profile_goes_to_the_shared_stream_without_a_registry_read(
    base_env: dict[str, str], redis: Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    await register(redis, keys, "mini1", "s:prod")
    await register(redis, keys, "mini2", "")
    lookups = 0
    real = HostCache.fleet

    async def counted(self: HostCache) -> Any:
        nonlocal lookups
        lookups += 1
        return await real(self)

    monkeypatch.setattr(HostCache, "fleet", counted)
    with structlog.testing.capture_logs() as logs:
        async with running_router(base_env, redis, keys, rules_of(PLAIN_RULE)):
            delivery = await deliver(redis, keys)
            assert await wait_for(lambda: decided(redis, keys, delivery), what="the decision") == "queued"
    assert await job_ids(redis, keys.jobs) == [f"gh-{delivery}"]
    assert lookups == 0
    assert not any(e["event"] == "forge_job_routed" for e in logs)


@pytest.mark.parametrize(
    "registry",
    [
        pytest.param([], id="no-registry"),
        pytest.param([("mini1", "s:prod", 46_000), ("mini2", "", 0)], id="capable-host-stale"),
        pytest.param([("mini1", "s:prod", 0), ("mini2", "s:prod,w:ci", 0)], id="every-host-capable"),
    ],
)
async def test_a_profile_bound_job_goes_to_the_shared_stream_when_no_host_stands_out(
    base_env: dict[str, str], redis: Redis, keys: Keys, registry: list[tuple[str, str, int]]
) -> None:
    for name, caps, age in registry:
        await register(redis, keys, name, caps, age_ms=age)
    async with running_router(base_env, redis, keys, rules_of(PROD_RULE)):
        delivery = await deliver(redis, keys)
        assert await wait_for(lambda: decided(redis, keys, delivery), what="the decision") == "queued"
    assert await job_ids(redis, keys.jobs) == [f"gh-{delivery}"]
    for name, _, _ in registry:
        assert not await redis.exists(keys.host_jobs(name))
