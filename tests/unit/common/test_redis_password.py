"""The Redis password from VALKEY_PASSWORD / REDIS_PASSWORD: which one wins, when it is refused, and that
it never prints; every connection the services make carries it."""

from __future__ import annotations

import ast
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pidispatch.common.configsyntax import url_carries_password
from pidispatch.common.connect import redis_settings
from pidispatch.common.envnames import parse_forward_env
from pidispatch.common.errors import ConfigError, InfraError
from pidispatch.common.redis import check_redis_auth, create_redis, redis_for, redis_location
from pidispatch.common.secret import Secret
from pidispatch.common.settings import load_settings
from tests.support.processes import RedisProcess
from tests.support.sources import SOURCES

PW = "pw-" + uuid.uuid4().hex


def test_valkey_password_wins_then_redis_password_and_blank_is_unset() -> None:
    assert load_settings({}).redis_password is None
    assert load_settings({"REDIS_PASSWORD": PW}).redis_password == Secret(PW)
    both = load_settings({"VALKEY_PASSWORD": PW, "REDIS_PASSWORD": "other"})
    assert both.redis_password == Secret(PW)
    assert load_settings({"VALKEY_PASSWORD": "  ", "REDIS_PASSWORD": PW}).redis_password == Secret(PW)
    # Taken as written: a password may begin or end with a space.
    assert load_settings({"REDIS_PASSWORD": f" {PW} "}).redis_password == Secret(f" {PW} ")


def test_the_password_never_prints_with_the_settings() -> None:
    s = load_settings({"VALKEY_PASSWORD": PW})
    assert PW not in repr(s) and PW not in str(s) and "Secret(***)" in repr(s)


@pytest.mark.parametrize(
    "url",
    [f"redis://:{PW}@h:6379/0", f"redis://user:{PW}@h/0", f"redis://h/0?password={PW}",
     f"rediss://:{PW}@h/0", f"unix://:{PW}@/run/redis.sock"],
    # Ids without the per-run password: each pytest-xdist worker collects the suite and all must agree.
    ids=["redis", "redis-user", "query", "rediss", "unix"],
)
@pytest.mark.parametrize(
    ("url_var", "pw_var"), [("REDIS_URL", "VALKEY_PASSWORD"), ("VALKEY_URL", "REDIS_PASSWORD")]
)
def test_a_password_in_the_url_and_in_a_variable_is_refused_naming_both(
    url: str, url_var: str, pw_var: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({url_var: url, pw_var: PW})
    message = str(info.value)
    assert message.startswith(f"{url_var} carries a password and {pw_var} is set too; accepted:")
    assert PW not in message


def test_a_url_without_a_password_takes_the_variable() -> None:
    for url in ("redis://h:6379/0", "redis://user@h/0", "redis://:@h/0", "unix:///run/redis.sock?db=1"):
        assert not url_carries_password(url)
        assert load_settings({"REDIS_URL": url, "VALKEY_PASSWORD": PW}).redis_password == Secret(PW)


def test_neither_password_variable_may_be_forwarded_into_a_job() -> None:
    for name in ("VALKEY_PASSWORD", "REDIS_PASSWORD"):
        with pytest.raises(ConfigError, match=f"PI_FORWARD_ENV may not forward {name}"):
            parse_forward_env(name)


def test_a_location_in_a_message_holds_neither_user_information_nor_query() -> None:
    assert redis_location(f"redis://user:{PW}@h:6379/0?password={PW}") == "redis://h:6379/0"
    assert redis_location("unix:///run/redis.sock") == "unix:///run/redis.sock"


def test_the_cli_verbs_that_read_only_the_redis_variables_read_the_password_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PI_CONCURRENCY", "bad")  # an unrelated bad variable must not stop them
    monkeypatch.setenv("VALKEY_PASSWORD", PW)
    assert redis_settings().redis_password == Secret(PW)


def _calls(name: str) -> list[tuple[str, int]]:
    return [
        (f"{p.name}:{node.lineno}", len(node.args) + len(node.keywords))
        for p in SOURCES for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == name
    ]


def test_every_connection_the_services_make_passes_the_password() -> None:
    # Services and verbs connect through redis_for(settings), which hands the password on; a direct
    # create_redis passes URL and password both.
    assert len(_calls("redis_for")) >= 8
    assert [where for where, n in _calls("create_redis") if n != 2] == []


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path / "locked", requirepass=PW)
    server.start()
    yield server
    server.stop()


async def test_a_client_with_the_password_is_let_in_and_one_without_is_refused_at_start(
    locked: RedisProcess,
) -> None:
    good = create_redis(locked.url, Secret(PW))
    try:
        await check_redis_auth(good, locked.url)
        assert await good.set("k", "v") is True
    finally:
        await good.aclose()
    for password in (None, Secret("wrong-" + PW)):
        bad = create_redis(locked.url, password)
        try:
            with pytest.raises(InfraError) as info:
                await check_redis_auth(bad, locked.url)
        finally:
            await bad.aclose()
        assert "VALKEY_PASSWORD or REDIS_PASSWORD" in str(info.value) and PW not in str(info.value)


async def test_a_redis_that_is_down_is_left_to_the_outage_handling() -> None:
    down = create_redis("redis://127.0.0.1:1/0", Secret(PW))
    try:
        await check_redis_auth(down, "redis://127.0.0.1:1/0")  # returns: the service waits for it
    finally:
        await down.aclose()


async def test_behind_sentinels_the_url_gives_all_but_the_server() -> None:
    settings = load_settings({
        "REDIS_SENTINELS": "s1:26379", "REDIS_URL": "redis://u@ignored:1/3?socket_keepalive=true",
        "REDIS_PASSWORD": PW,
    })
    client = redis_for(settings)
    try:
        got = client.connection_pool.connection_kwargs
        assert (got["db"], got["username"], got["password"], got["socket_keepalive"]) == (3, "u", PW, True)
        assert "host" not in got and "port" not in got  # where the primary is, the sentinels say
    finally:
        await client.aclose()
