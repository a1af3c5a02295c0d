"""The harness's own identity per forge: explicit ids, lookups, the retry window, determinate refusals."""

from __future__ import annotations

import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from structlog.testing import capture_logs

from pidispatch.common.errors import ConfigError, InfraError
from pidispatch.forges.config import load_forge_config
from pidispatch.forges.github.auth import GithubAuth
from pidispatch.forges.http import create_http
from pidispatch.forges.identity import resolve_self_ids
from pidispatch.triggers.lookup import SelfIds
from tests.support.forges import (
    FakeForge,
    azure_forge,
    disconnect,
    forgejo_forge,
    github_forge,
    gitlab_forge,
    raw,
    reply,
)

GUID = "6c3a1b9e-1234-4abc-8def-0123456789ab"


class FakeTime:
    """An injected clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.ms = int(time.time() * 1000)  # real epoch: App JWTs are checked against it
        self.sleeps: list[float] = []

    def clock(self) -> int:
        return self.ms

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.ms += int(seconds * 1000)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    session = create_http()
    yield session
    await session.close()


@pytest.fixture
async def forges() -> AsyncIterator[dict[str, FakeForge]]:
    gh, gl, fj, az = github_forge(), gitlab_forge(), forgejo_forge(), azure_forge()
    for forge in (gh, gl, fj, az):
        await forge.start()
    yield {"github": gh, "gitlab": gl, "forgejo": fj, "azure": az}
    for forge in (gh, gl, fj, az):
        await forge.close()


def env_for(forges: dict[str, FakeForge], *names: str) -> dict[str, str]:
    gh, gl, fj, az = forges["github"], forges["gitlab"], forges["forgejo"], forges["azure"]
    blocks = {
        "github": {"GITHUB_API_URL": gh.url, "GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": gh.state["pat"]},
        "gitlab": {"GITLAB_URL": gl.url, "GITLAB_TOKEN": gl.state["token"]},
        "forgejo": {"FORGEJO_URL": fj.url, "FORGEJO_TOKEN": fj.state["token"]},
        "azure": {"AZURE_ORG_URL": f"{az.url}/fabrikam", "AZURE_TOKEN": az.state["token"]},
    }
    env: dict[str, str] = {}
    for name in names:
        env.update(blocks[name])
    return env


async def resolve(env: dict[str, str], http: aiohttp.ClientSession, t: FakeTime | None = None,
                  **kwargs: object) -> SelfIds:
    t = t or FakeTime()
    config = load_forge_config(env)
    auth = GithubAuth(config, http, t.clock, **kwargs) if config.block("github").configured else None  # type: ignore[arg-type]
    sources = {"github": auth} if auth is not None else {}
    return await resolve_self_ids(config, sources, http, t.clock, sleep=t.sleep)


async def test_each_forge_is_asked_who_the_harness_is(
    http: aiohttp.ClientSession, forges: dict[str, FakeForge]
) -> None:
    with capture_logs() as logs:
        ids = await resolve(env_for(forges, "github", "gitlab", "forgejo", "azure"), http)
    assert ids == SelfIds(
        ids={
            "github": 4242,
            "gitlab": 31,
            "forgejo": 17,
            "azure": (forges["azure"].state["self_id"], "pi-bot@example.com"),
        },
    )
    assert forges["github"].calls("user")[0].headers["authorization"] == "Bearer ghp_test"
    assert forges["gitlab"].calls("user")[0].headers["private-token"] == "glpat-test"
    assert forges["forgejo"].calls("user")[0].headers["authorization"] == "token fj-test"
    lines = [e for e in logs if e["event"] == "self_identity"]
    assert sorted((e["forge"], e["resolved"], e["source"]) for e in lines) == [
        ("azure", True, "api"), ("forgejo", True, "api"), ("github", True, "api"), ("gitlab", True, "api"),
    ]
    assert "pi-bot" not in repr(logs).lower()


async def test_explicit_ids_skip_every_lookup(
    http: aiohttp.ClientSession, forges: dict[str, FakeForge]
) -> None:
    env = {
        **env_for(forges, "github", "gitlab", "forgejo", "azure"),
        "GITHUB_SELF_ID": "101", "GITLAB_SELF_ID": "102", "FORGEJO_BOT_ID": "103",
        "AZURE_SELF_EMAIL": "Bot@Example.com",
    }
    with capture_logs() as logs:
        ids = await resolve(env, http)
    assert ids == SelfIds(
        ids={
            "github": 101,
            "gitlab": 102,
            "forgejo": 103,
            "azure": (None, "bot@example.com"),
        },
    )
    assert all(forge.requests == [] for forge in forges.values())
    assert {e["source"] for e in logs if e["event"] == "self_identity"} == {
        "GITHUB_SELF_ID", "GITLAB_SELF_ID", "FORGEJO_BOT_ID", "AZURE_SELF_ID/AZURE_SELF_EMAIL"
    }


async def test_a_forge_without_credentials_needs_no_identity(http: aiohttp.ClientSession) -> None:
    with capture_logs() as logs:
        assert await resolve({}, http) == SelfIds()
    assert sorted(e["forge"] for e in logs if e["event"] == "self_identity" and not e["resolved"]) == [
        "azure", "forgejo", "github", "gitlab"
    ]


async def test_an_explicit_github_id_works_without_credentials(http: aiohttp.ClientSession) -> None:
    assert await resolve({"GITHUB_SELF_ID": "7"}, http) == SelfIds(
        ids={
            "github": 7,
        },
    )


async def test_gh_source_asks_with_the_gh_token(
    http: aiohttp.ClientSession, forges: dict[str, FakeForge], tmp_path: Path
) -> None:
    gh = tmp_path / "gh"
    gh.write_text("#!/bin/sh\necho ghp_test\n")
    gh.chmod(gh.stat().st_mode | stat.S_IXUSR)
    env = {"GITHUB_API_URL": forges["github"].url, "GITHUB_AUTH_SOURCE": "gh"}
    assert (await resolve(env, http, gh_path=str(gh))).number("github") == 4242


async def test_app_source_resolves_the_bot_user_not_the_app(
    http: aiohttp.ClientSession, forges: dict[str, FakeForge]
) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    github = forges["github"]
    github.state["app_public_key"] = key.public_key()
    env = {
        "GITHUB_API_URL": github.url, "GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_ID": "12345",
        "GITHUB_APP_INSTALLATION_ID": "777",
        "GITHUB_APP_PRIVATE_KEY": key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption()).decode(),
    }
    assert (await resolve(env, http)).number("github") == 9001  # the [bot] user's id, not the App id 12345
    assert [c.route for c in github.requests] == ["app", "access_tokens", "users"]
    assert github.calls("users")[0].path == "/users/pi-harness%5Bbot%5D"
    assert github.calls("access_tokens")[0].body == {"permissions": {"metadata": "read"}}


async def test_azure_explicit_values_skip_the_connection_data_call(
    http: aiohttp.ClientSession, forges: dict[str, FakeForge]
) -> None:
    ids = await resolve({**env_for(forges, "azure"), "AZURE_SELF_ID": GUID}, http)
    assert ids.of("azure") == (GUID, None)
    assert forges["azure"].requests == []


async def test_azure_with_neither_id_nor_address_is_refused(
    http: aiohttp.ClientSession, forges: dict[str, FakeForge]
) -> None:
    forges["azure"].script("connection", reply(200, {"authenticatedUser": {"providerDisplayName": "Pi"}}))
    with pytest.raises(ConfigError, match="AZURE_SELF_ID or AZURE_SELF_EMAIL"):
        await resolve(env_for(forges, "azure"), http)


async def test_azure_account_without_an_address_still_gives_the_guid(
    http: aiohttp.ClientSession, forges: dict[str, FakeForge]
) -> None:
    forges["azure"].script("connection", reply(200, {"authenticatedUser": {
        "id": GUID, "properties": {"Account": {"$value": "not-an-address"}}}}))
    ids = await resolve(env_for(forges, "azure"), http)
    assert ids.of("azure") == (GUID, None)


# --- the retry window ------------------------------------------------------------------------------------


async def test_transient_failures_retry_inside_the_window_then_succeed(
    http: aiohttp.ClientSession, forges: dict[str, FakeForge]
) -> None:
    forges["gitlab"].script("user", reply(502), disconnect(), raw("<html>"), reply(429))
    t = FakeTime()
    with capture_logs() as logs:
        ids = await resolve(env_for(forges, "gitlab"), http, t)
    assert ids.number("gitlab") == 31
    assert t.sleeps == [5.0, 10.0, 20.0, 30.0]
    assert [e["reason"] for e in logs if e["event"] == "identity_retry"] == [
        "status-502", "network", "bad-json", "status-429"
    ]


async def test_a_spent_window_raises_an_infrastructure_error(
    http: aiohttp.ClientSession, forges: dict[str, FakeForge]
) -> None:
    forges["forgejo"].script("user", reply(503, times=100))
    t = FakeTime()
    with pytest.raises(InfraError, match="forgejo") as failed:
        await resolve({**env_for(forges, "forgejo"), "PD_IDENTITY_RETRY_SECONDS": "60"}, http, t)
    assert not isinstance(failed.value, ConfigError)
    # The last gap is clamped so the final attempt lands on the window's edge.
    assert t.sleeps == [5.0, 10.0, 20.0, 25.0]
    assert len(forges["forgejo"].calls("user")) == 5


@pytest.mark.parametrize(
    ("forge", "answer", "match"),
    [
        ("github", reply(401), "GITHUB_SELF_ID"),
        ("github", reply(404), "GITHUB_AUTH_SOURCE"),
        ("gitlab", reply(401), "GITLAB_TOKEN"),
        ("gitlab", reply(200, {"id": "31"}), "no integer id"),
        ("gitlab", reply(200, {"username": "pi-bot"}), "no integer id"),
        ("forgejo", reply(403), "FORGEJO_BOT_ID"),
        ("forgejo", reply(401), "FORGEJO_BOT_ID"),
        ("forgejo", reply(200, {"id": True}), "no integer id"),
        ("azure", reply(401), "AZURE_TOKEN"),
        ("azure", reply(404), "AZURE_ORG_URL"),
    ],
)
async def test_a_determinate_failure_refuses_at_once(
    http: aiohttp.ClientSession, forges: dict[str, FakeForge], forge: str, answer: object, match: str
) -> None:
    route = "connection" if forge == "azure" else "user"
    forges[forge].script(route, answer)  # type: ignore[arg-type]
    t = FakeTime()
    with pytest.raises(ConfigError, match=match):
        await resolve(env_for(forges, forge), http, t)
    assert t.sleeps == []
    assert len(forges[forge].requests) == 1


async def test_one_forge_refusing_stops_the_others_retrying(
    http: aiohttp.ClientSession, forges: dict[str, FakeForge]
) -> None:
    forges["gitlab"].script("user", reply(503, times=100))
    forges["forgejo"].script("user", reply(403))
    with pytest.raises(ConfigError, match="FORGEJO_BOT_ID"):
        await resolve(env_for(forges, "gitlab", "forgejo"), http)


async def test_an_app_mint_outage_is_retried(
    http: aiohttp.ClientSession, forges: dict[str, FakeForge]
) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    github = forges["github"]
    github.state["app_public_key"] = key.public_key()
    github.script("access_tokens", reply(502))
    env = {
        "GITHUB_API_URL": github.url, "GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_ID": "12345",
        "GITHUB_APP_INSTALLATION_ID": "777",
        "GITHUB_APP_PRIVATE_KEY": key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()).decode(),
    }
    t = FakeTime()
    assert (await resolve(env, http, t)).number("github") == 9001
    assert t.sleeps == [5.0]
