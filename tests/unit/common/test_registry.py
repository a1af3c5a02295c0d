"""pidispatch.common.registry: capability tokens, row parsing, the routing rule and the registry reader
against a real Redis."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import msgspec
import pytest

from pidispatch.common.keys import Keys
from pidispatch.common.models import Job
from pidispatch.common.redis import Redis, create_redis
from pidispatch.common.registry import (
    ROUTE_FRESH_MS,
    HostRow,
    RegistryUnreachable,
    capability_tokens,
    fnv1a32,
    job_needs,
    parse_caps,
    parse_row,
    path_shaped,
    read_live_hosts,
    route_job,
)
from tests.support.processes import RedisProcess

NOW = 1_800_000_000_000


def host(name: str, caps: str = "", *, routes: bool = True, stale_ms: int | None = 0) -> HostRow:
    return HostRow(name=name, caps=parse_caps(caps), routes=routes, stale_ms=stale_ms)


def job(**kw: object) -> Job:
    return msgspec.structs.replace(Job(id="gh-1", kind="github", repo="o/r"), **kw)


# ---- capability tokens ---------------------------------------------------------------------------


def test_capability_tokens_are_sorted_names_never_paths() -> None:
    tokens = capability_tokens(["b", "a"], ["c"])
    assert tokens == ["s:a", "s:b", "w:c"]
    assert not any("/" in t for t in tokens)
    assert capability_tokens(["ok", "/etc/resolver", "bad name", "x,y", "nl\n"], ["a:b", ""]) == ["s:ok"]


def test_parse_caps_revalidates_a_peers_tokens() -> None:
    assert parse_caps("s:prod,x:evil,s:../../etc,w:ci,,:bad,s:,w") == {"s:prod", "w:ci"}
    assert parse_caps(None) == frozenset() and parse_caps("") == frozenset()
    assert parse_caps("s:a:b,s:ok\n,w:fine") == {"w:fine"}


def test_job_needs_reads_secrets_profile_and_wait_profiles() -> None:
    assert job_needs(job()) == []
    assert job_needs(job(secrets_profile="prod", wait_for=[{"profile": "jira"}, {"after": "x"},
                                                         {"profile": "jira"}, {"profile": "../x"}])) == [
        "s:prod", "w:jira"
    ]
    assert job_needs(job(secrets_profile="bad name")) == []
    # Secrets without a profile resolve through `default` on the worker, but routing reads
    # secretsProfile only, so such a job stays on the shared stream.
    assert job_needs(job(secrets={"API_KEY": "ref"})) == []


@pytest.mark.parametrize(
    ("value", "shaped"),
    [("/var/logs", True), ("C:\\x", True), ("C:/x", True), ("a\\b", True), ("\\\\share", True),
     ("Europe/Amsterdam", False), ("pd-test-agent:latest", False), ("sha256:abc", False), ("", False)],
)
def test_path_shaped(value: str, shaped: bool) -> None:
    assert path_shaped(value) is shaped


# ---- rows ----------------------------------------------------------------------------------------


def test_parse_row_revalidates_every_field() -> None:
    row = parse_row({
        "name": "mini1", "beatAt": str(NOW - 3000), "startedAt": str(NOW - 60_000), "version": "0.1.0",
        "routes": "true", "caps": "s:prod,x:evil", "concurrency": "3", "running": "1",
        "tz": "Europe/Amsterdam", "image": "/host/path",
    }, NOW)
    assert row == HostRow(
        name="mini1", beat_at=NOW - 3000, started_at=NOW - 60_000, version="0.1.0", routes=True,
        caps=frozenset({"s:prod"}), concurrency=3, running=1, tz="Europe/Amsterdam", image="",
        stale_ms=3000,
    )
    undatable = parse_row({"name": "mini2", "beatAt": "soon", "routes": "yes", "running": "-1"}, NOW)
    assert undatable is not None
    assert (undatable.stale_ms, undatable.routes, undatable.running) == (None, False, None)
    future = parse_row({"name": "mini3", "beatAt": str(NOW + 5000)}, NOW)
    assert future is not None and future.stale_ms == 0  # a peer's clock ahead of ours is not negative age
    for bad in ("", "-lead", "a/b", "x" * 65, "rec.json", "mini1\n"):
        assert parse_row({"name": bad, "beatAt": str(NOW)}, NOW) is None


# ---- routing -------------------------------------------------------------------------------------


def test_route_abstains_in_the_four_cases() -> None:
    mini1, mini2 = host("mini1", "s:prod"), host("mini2", "")
    assert route_job([], [mini1, mini2], "gh-1") is None  # needs nothing
    assert route_job(["s:prod"], [mini1, host("mini2", "s:prod,w:ci")], "gh-1") is None  # all capable
    assert route_job(["s:prod"], [host("mini1", "s:dev"), mini2], "gh-1") is None  # none capable
    assert route_job(["s:prod"], [host("mini1", "s:prod", routes=False), mini2], "gh-1") is None
    assert route_job(["s:prod"], [], "gh-1") is None  # registry empty or unreadable
    assert route_job(["s:prod"], [mini1, mini2], "gh-1") == "mini1"


def test_route_needs_every_token() -> None:
    hosts = [host("a", "s:prod"), host("b", "s:prod,w:jira"), host("c", "")]
    assert {route_job(["s:prod", "w:jira"], hosts, f"gh-{i}") for i in range(50)} == {"b"}


def test_route_freshness_is_45_seconds_and_an_undatable_row_is_not_alive() -> None:
    plain = host("plain", "")
    assert ROUTE_FRESH_MS == 45_000
    assert route_job(["s:prod"], [host("m", "s:prod", stale_ms=45_001), plain], "gh-1") is None
    assert route_job(["s:prod"], [host("m", "s:prod", stale_ms=44_999), plain], "gh-1") == "m"
    assert route_job(["s:prod"], [host("m", "s:prod", stale_ms=None), plain], "gh-1") is None
    # A stale incapable host does not count as live either: the only live host is capable -> shared.
    assert route_job(["s:prod"], [host("m", "s:prod"), host("plain", "", stale_ms=45_001)], "gh-1") is None


def test_route_is_deterministic_spread_and_order_free() -> None:
    capable = [host(n, "s:prod") for n in ("c", "a", "b")]
    hosts = [*capable, host("z-plain", "w:ci")]
    ids = [f"gh-{i:05d}-delivery" for i in range(3000)]
    chosen = [route_job(["s:prod"], hosts, i) for i in ids]
    counts = Counter(chosen)
    assert set(counts) == {"a", "b", "c"}  # never the incapable one, never shared
    assert all(850 <= n <= 1150 for n in counts.values()), counts
    shuffled = hosts[:]
    for seed in range(3):
        random.Random(seed).shuffle(shuffled)
        assert [route_job(["s:prod"], shuffled, i) for i in ids[:200]] == chosen[:200]
    assert route_job(["s:prod"], hosts, ids[7]) == chosen[7]


def test_route_excludes_a_named_host() -> None:
    hosts = [host("a", "s:prod"), host("b", "s:prod"), host("c", "")]
    assert {route_job(["s:prod"], hosts, f"gh-{i}", exclude="a") for i in range(40)} == {"b"}
    # Excluding the only capable host leaves nobody capable: shared.
    assert route_job(["s:prod"], hosts[1:], "gh-1", exclude="b") is None


def test_fnv1a32_known_vectors_over_utf16_code_units() -> None:
    assert fnv1a32("") == 0x811C9DC5
    assert fnv1a32("a") == 0xE40C292C
    assert fnv1a32("foobar") == 0xBF9CF968
    # A non-BMP character is two code units, as JavaScript's charCodeAt sees it.
    assert fnv1a32("\U0001F600") == fnv1a32("\ud83d\ude00")
    assert fnv1a32("é") != fnv1a32("e")


# ---- the reader against a real Redis ----------------------------------------------------------------


async def write_row(redis: Redis, keys: Keys, member: str, **fields: str) -> None:
    await redis.hset(keys.host(member), mapping={"name": member, "beatAt": str(NOW - 1000), **fields})
    await redis.pexpire(keys.host(member), 90_000)
    await redis.sadd(keys.hosts, member)


async def test_read_live_hosts_sorts_prunes_and_skips_bad_rows(redis: Redis, keys: Keys) -> None:
    assert await read_live_hosts(redis, keys, NOW) == []
    await write_row(redis, keys, "mini2", caps="", routes="false")
    await write_row(redis, keys, "mini1", caps="s:prod,w:../x", routes="true", concurrency="3")
    await write_row(redis, keys, "liar", name="mini1")  # a row naming another host
    await redis.sadd(keys.hosts, "gone")  # its row expired
    await redis.sadd(keys.hosts, "bad/name")
    await redis.hset(keys.host("bad/name"), "beatAt", str(NOW))

    rows = await read_live_hosts(redis, keys, NOW)
    assert [r.name for r in rows] == ["mini1", "mini2"]
    assert rows[0].caps == {"s:prod"} and rows[0].routes and rows[0].concurrency == 3
    assert rows[0].stale_ms == 1000 and not rows[1].routes
    members = {m.decode() for m in await redis.smembers(keys.hosts)}  # type: ignore[misc]
    assert members == {"mini1", "mini2", "liar", "bad/name"}  # only the expired member is pruned


async def test_a_read_with_the_last_members_gives_the_same_rows(redis: Redis, keys: Keys) -> None:
    await write_row(redis, keys, "mini1", caps="s:prod")
    await write_row(redis, keys, "mini3")
    await redis.sadd(keys.hosts, "gone")  # known last time, its row expired since
    # "left" was known but is no longer a member; "mini3" joined since the last read.
    rows = await read_live_hosts(redis, keys, NOW, known=["gone", "left", "mini1"])
    assert [r.name for r in rows] == ["mini1", "mini3"]
    assert rows == await read_live_hosts(redis, keys, NOW)
    assert not await redis.sismember(keys.hosts, "gone")


async def test_read_live_hosts_raises_unreachable_rather_than_answering_empty(
    tmp_path_factory: pytest.TempPathFactory, keys: Keys
) -> None:
    server = RedisProcess(tmp_path_factory.mktemp("reg"))
    server.start()
    client = create_redis(server.url)
    try:
        await write_row(client, keys, "mini1")
        assert [r.name for r in await read_live_hosts(client, keys, NOW)] == ["mini1"]
        server.stop()
        with pytest.raises(RegistryUnreachable):
            await asyncio.wait_for(read_live_hosts(client, keys, NOW, timeout_s=1.0), 5)
    finally:
        await client.aclose()
        server.stop()
