"""Healing: deliveries GitHub failed to bring while the receiver was down are asked for again from
GitHub's delivery log, once each, and stored once each.

Real redis-server, the receiver as operators run it (``python -m pidispatch.receiver``), the router and its
healer in-process, ``pi-dispatch heal`` in a fresh process; only GitHub is a stand-in (its delivery log and
redeliveries: ``tests.support.deliverylog``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from pidispatch.common.embedded import free_port
from pidispatch.common.healsettings import HealSettings
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.scripts import LEASE_HOLD
from pidispatch.common.settings import load_settings
from pidispatch.forges.config import load_forge_config
from pidispatch.forges.github.auth import GithubAuth
from pidispatch.forges.github.config import block_of
from pidispatch.forges.github.deliveries import DeliveryLog, sources_of
from pidispatch.forges.http import create_http
from pidispatch.router.heal import LEASE_ROLE, Healer, run_healer
from pidispatch.router.metrics import RouterMetrics
from pidispatch.router.service import run_router
from pidispatch.triggers import decisionlog
from pidispatch.triggers.loader import RulesRef, parse_triggers
from tests.support.cli import run_cli
from tests.support.deliverylog import APP_LOG, deliver, hook_log, redelivered, register_delivery_log
from tests.support.forges import ISSUE_REPO, PAT, FakeForge, github_forge
from tests.support.payloads import FIXTURES
from tests.support.polling import wait_for
from tests.support.processes import ServiceProcess
from tests.support.receiver import TEST_SECRET
from tests.support.scrape import parse, sample

LABELED = (FIXTURES / "github" / "issues.labeled.json").read_bytes()
PUSH = b'{"ref":"refs/heads/main","repository":{"full_name":"Codertocat/Hello-World"}}'
HOOK = 4711
RULES = parse_triggers(json.dumps({"triggers": [
    {"on": {"type": "label", "any": ["bug"]}, "run": {"kind": "github", "flow": "fix"}},
]}))


@pytest.fixture
async def stand_in() -> AsyncIterator[FakeForge]:
    forge = github_forge()
    register_delivery_log(forge)
    async with forge:
        forge.state["webhook_secret"] = TEST_SECRET
        yield forge


def _env(base_env: dict[str, str], forge: FakeForge, port: int) -> dict[str, str]:
    return {**base_env, "RECEIVER_PORT": str(port), "RECEIVER_BIND": "127.0.0.1",
            "GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": PAT, "GITHUB_API_URL": forge.url,
            "GITHUB_HEAL_HOOKS": f"{ISSUE_REPO}:{HOOK}"}


async def _started(receiver: ServiceProcess, starts: int) -> None:
    """Start it and wait for its ``starts``-th start line (one log file across restarts)."""
    receiver.start()
    await wait_for(lambda: len(receiver.logged("receiver_started")) >= starts, timeout=15,
                   what="receiver_started")


def _healed_total(metrics: RouterMetrics) -> float | None:
    return sample(parse(generate_latest(metrics.registry).decode()), "pd_router_healed_total")


async def _stored(redis: Redis, keys: Keys) -> list[str]:
    """The delivery id of every entry of pd:events, in order."""
    return [f[b"delivery"].decode() for _, f in await redis.xrange(keys.events)]


async def _lines(redis: Redis, keys: Keys) -> dict[str, decisionlog.Logged]:
    return {d.delivery: d for d in await decisionlog.newest(redis, keys, 1000)}


async def test_ten_deliveries_lost_while_the_receiver_was_down_are_asked_for_once_and_stored_once(
    base_env: dict[str, str], redis: Redis, keys: Keys, stand_in: FakeForge, tmp_path: Path
) -> None:
    port = free_port()
    env = _env(base_env, stand_in, port)
    stand_in.state["hook_url"] = f"http://127.0.0.1:{port}/github"
    log = hook_log(ISSUE_REPO, HOOK)
    receiver = ServiceProcess("receiver", env, tmp_path / "receiver.log")
    await _started(receiver, 1)
    stop = asyncio.Event()
    router = asyncio.create_task(run_router(load_settings(env), redis, keys, RulesRef(RULES), stop, now_ms))
    try:
        # Up: three deliveries stored, a push answered 204 and not stored.
        up = [await deliver(stand_in, "issues", LABELED, log=log) for _ in range(3)]
        pushed = await deliver(stand_in, "push", PUSH, log=log, action=None)
        assert [a.status_code for a in up] == [202] * 3 and pushed.status_code == 204
        receiver.stop()

        # Down: ten deliveries GitHub logs as failed (nothing answered), and two pushes that failed too.
        lost = [await deliver(stand_in, "issues", LABELED, log=log) for _ in range(10)]
        lost_pushes = [await deliver(stand_in, "push", PUSH, log=log, action=None) for _ in range(2)]
        assert {a.status_code for a in lost + lost_pushes} == {0}

        await _started(receiver, 2)
        await wait_for(lambda: _stored(redis, keys), what="the first deliveries stored")
        assert await _stored(redis, keys) == [a.guid for a in up]

        # A dry run by hand lists the ten, asks nothing and writes nothing.
        dry = await asyncio.to_thread(run_cli, env, "heal", "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        report = json.loads(dry.stdout)
        assert sorted(d["guid"] for d in report["deliveries"]) == sorted(a.guid for a in lost)
        assert report["sources"][0]["missing"] == 10 and report["asked"] == 10 and report["dryRun"]
        assert stand_in.calls("hook_redeliver") == [] and not await redis.exists(keys.heal_asked)

        # One pass of the router's healer; GitHub holds the redeliveries until the second pass is done.
        stand_in.state["hold_redeliveries"].clear()
        metrics = RouterMetrics(CollectorRegistry())
        settings = load_settings({**env, "PD_HEAL_INTERVAL_S": "3600"})
        http = create_http()
        try:
            auth = GithubAuth(load_forge_config(env), http)
            heal_stop = asyncio.Event()
            healer = asyncio.create_task(run_healer(
                settings, redis, keys, DeliveryLog(http, auth), "router-a", heal_stop, now_ms, metrics.healed,
                pace_s=0.01,
            ))
            await wait_for(lambda: len(stand_in.calls("hook_redeliver")) == 10, what="ten redelivery asks")
            await wait_for(lambda: _healed_total(metrics) == 10, what="pd_router_healed_total 10")
            heal_stop.set()
            await asyncio.wait_for(healer, 10)
        finally:
            await http.close()
        asked = {c.path.rsplit("/", 2)[-2] for c in stand_in.calls("hook_redeliver")}
        assert asked == {str(a.id) for a in lost}

        # A second pass, before any redelivery arrived, asks for nothing.
        again = await asyncio.to_thread(run_cli, env, "heal", "--json")
        assert again.returncode == 0, again.stderr
        second = json.loads(again.stdout)
        assert second["asked"] == 0 and second["sources"][0]["before"] == 10, second
        assert len(stand_in.calls("hook_redeliver")) == 10

        stand_in.state["hold_redeliveries"].set()
        await redelivered(stand_in)
        want = [a.guid for a in up + lost]
        await wait_for(lambda: _stored_count(redis, keys, len(want)), what="the ten stored")
        stored = await _stored(redis, keys)
        assert sorted(stored) == sorted(want) and len(stored) == len(set(stored))  # each once

        # The router marks the decisions of the ten (and only those) healed.
        lines = await wait_for(lambda: _decided(redis, keys, want), what="every decision line")
        assert {g for g, d in lines.items() if d.healed} == {a.guid for a in lost}
        assert all("healed=yes" not in decisionlog.line(lines[a.guid]) for a in up)
    finally:
        stop.set()
        await asyncio.wait_for(router, 10)
        receiver.stop()


async def _stored_count(redis: Redis, keys: Keys, n: int) -> bool:
    return len(await _stored(redis, keys)) >= n


async def _decided(redis: Redis, keys: Keys, deliveries: list[str]) -> dict[str, decisionlog.Logged] | None:
    lines = await _lines(redis, keys)
    return lines if all(d in lines for d in deliveries) else None


def _app_env(forge: FakeForge, key: rsa.RSAPrivateKey) -> dict[str, str]:
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                            serialization.NoEncryption()).decode()
    return {"GITHUB_API_URL": forge.url, "GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_ID": "12345",
            "GITHUB_APP_INSTALLATION_ID": "777", "GITHUB_APP_PRIVATE_KEY": pem}


async def test_the_app_log_is_read_with_the_apps_jwt_and_a_held_lease_reads_nothing(
    base_env: dict[str, str], redis: Redis, keys: Keys, stand_in: FakeForge
) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    stand_in.state["app_public_key"] = key.public_key()
    stand_in.state["hook_url"] = f"http://127.0.0.1:{free_port()}/github"  # nothing listens: all fail
    lost = [await deliver(stand_in, "issue_comment", LABELED) for _ in range(3)]
    config = load_forge_config(_app_env(stand_in, key))
    http = create_http()
    try:
        log = DeliveryLog(http, GithubAuth(config, http))
        sources = sources_of(block_of(config))
        healer = Healer(redis, keys, log, sources, HealSettings().window_ms, now_ms, pace_s=0.0)

        await LEASE_HOLD(redis, [keys.leader(LEASE_ROLE)], ["router-b", 60_000])
        held = await healer.run_pass("router-a", asyncio.Event())
        assert held.lease == "router-b" and held.sources == [] and stand_in.calls("app_deliveries") == []
        await redis.delete(keys.leader(LEASE_ROLE))

        report = await healer.run_pass("router-a", asyncio.Event())
        assert [p.source for p in report.sources] == [APP_LOG] and report.asked == 3
        assert {c.path.split("/")[-2] for c in stand_in.calls("app_redeliver")} == {str(a.id) for a in lost}
        assert not await redis.exists(keys.leader(LEASE_ROLE))  # given up after the pass
        await redelivered(stand_in)
    finally:
        await http.close()


async def test_a_router_started_with_an_interval_heals_at_once_and_counts_it(
    base_env: dict[str, str], stand_in: FakeForge, tmp_path: Path
) -> None:
    port, metrics_port = free_port(), free_port()
    stand_in.state["hook_url"] = f"http://127.0.0.1:{port}/github"  # no receiver: both deliveries fail
    log = hook_log(ISSUE_REPO, HOOK)
    lost = [await deliver(stand_in, "issues", LABELED, log=log) for _ in range(2)]
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": []}))
    env = {**_env(base_env, stand_in, port), "PD_HEAL_INTERVAL_S": "60", "PD_METRICS_PORT": str(metrics_port)}
    router = ServiceProcess("router", env, tmp_path / "router.log")
    router.start()
    try:
        await wait_for(lambda: len(stand_in.calls("hook_redeliver")) == 2, timeout=20, what="two asks")
        asked = {c.path.rsplit("/", 2)[-2] for c in stand_in.calls("hook_redeliver")}
        assert asked == {str(a.id) for a in lost}

        async def healed_total() -> bool:
            async with aiohttp.ClientSession() as session, session.get(
                f"http://127.0.0.1:{metrics_port}/metrics") as resp:
                return sample(parse(await resp.text()), "pd_router_healed_total") == 2

        await wait_for(healed_total, timeout=10, what="pd_router_healed_total 2")
    finally:
        assert router.stop() == 0
        await redelivered(stand_in)
