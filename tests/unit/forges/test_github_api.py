"""GitHub's worker API (``pidispatch.forges.github.api``): per-job tokens from the worker's one token
source, and Enterprise Server's API prefix. What every forge shares is in ``test_apis``."""

from __future__ import annotations

import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from pidispatch.common.errors import ConfigError
from pidispatch.common.models import Job, Target
from pidispatch.common.outcome import InfraFault, JobConfigRefused
from pidispatch.common.runtime import now_ms
from pidispatch.forges.check import RATE_LIMITED, UNAVAILABLE
from pidispatch.forges.config import load_forge_config
from pidispatch.forges.github.api import API, GithubApi
from pidispatch.forges.github.auth import GithubAuth
from pidispatch.forges.http import create_http
from tests.support.forgecases import forge_env
from tests.support.forges import TIP_SHA, FakeForge, disconnect, github_forge, raw, reply, set_repo


@pytest.fixture(scope="module")
def app_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem_of(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    session = create_http()
    yield session
    await session.close()


# --- minting per job -------------------------------------------------------------------------------------


def app_env(fake: FakeForge, key: rsa.RSAPrivateKey) -> dict[str, str]:
    return {
        "GITHUB_API_URL": fake.url, "GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_ID": "12345",
        "GITHUB_APP_INSTALLATION_ID": "777", "GITHUB_APP_PRIVATE_KEY": pem_of(key),
    }


@pytest.fixture
async def app_github(app_key: rsa.RSAPrivateKey) -> AsyncIterator[FakeForge]:
    async with github_forge() as fake:
        fake.state["app_public_key"] = app_key.public_key()
        set_repo(fake, "Codertocat/Hello-World")
        set_repo(fake, "Codertocat/Other")
        yield fake


def github_job(job_id: str, repo: str = "Codertocat/Hello-World") -> Job:
    return Job(id=job_id, kind="github", repo=repo, target=Target(type="issue", number=1))


async def test_an_app_job_token_names_only_its_repository_and_every_job_mints_its_own(
    http: aiohttp.ClientSession, app_github: FakeForge, app_key: rsa.RSAPrivateKey
) -> None:
    make = API.start(load_forge_config(app_env(app_github, app_key)), http, now_ms)  # one worker
    first = await make(github_job("gh-1")).mint()
    second = await make(github_job("gh-2")).mint()
    again = await make(github_job("gh-1")).mint()  # a retry mints afresh too
    mints = app_github.calls("access_tokens")
    assert len(mints) == 3 and len({first, second, again}) == 3
    assert all(m.body == {"repositories": ["Hello-World"]} for m in mints)
    assert all(m.path == "/app/installations/777/access_tokens" for m in mints)


async def test_an_app_job_token_reaches_its_repository_and_no_other(
    http: aiohttp.ClientSession, app_github: FakeForge, app_key: rsa.RSAPrivateKey
) -> None:
    make = API.start(load_forge_config(app_env(app_github, app_key)), http, now_ms)
    api = make(github_job("gh-1"))
    token = await api.mint()
    assert (await api.tip(token)).sha == TIP_SHA
    other = make(github_job("gh-2", "Codertocat/Other"))
    with pytest.raises(JobConfigRefused, match="HTTP 404"):
        await other.tip(token)


async def test_the_routers_cached_token_is_untouched_by_job_mints(
    http: aiohttp.ClientSession, app_github: FakeForge, app_key: rsa.RSAPrivateKey
) -> None:
    auth = GithubAuth(load_forge_config(app_env(app_github, app_key)), http)
    cached = await auth.token("Codertocat/Hello-World")
    minted = await auth.mint_job_token("Codertocat/Hello-World")
    assert minted != cached and await auth.token("Codertocat/Hello-World") == cached
    assert len(app_github.calls("access_tokens")) == 2


@pytest.mark.parametrize(("answer", "expected"), [
    (lambda: reply(500), UNAVAILABLE), (lambda: reply(429), RATE_LIMITED),
    (lambda: reply(403, {"message": "slow"}, headers={"Retry-After": "9"}), RATE_LIMITED),
    (lambda: disconnect(times=1), UNAVAILABLE), (lambda: raw("<html/>", 201), UNAVAILABLE),
    (lambda: reply(401, {"message": "Bad credentials"}), JobConfigRefused),
    (lambda: reply(404), JobConfigRefused),
    (lambda: reply(403, {"message": "forbidden"}), JobConfigRefused),
    (lambda: reply(201, {"token": " \t"}), JobConfigRefused),
])
async def test_job_mint_failures_are_classified(
    http: aiohttp.ClientSession, app_github: FakeForge, app_key: rsa.RSAPrivateKey, answer: Any, expected: Any
) -> None:
    config = load_forge_config(app_env(app_github, app_key))
    app_github.script("access_tokens", answer())
    api = GithubApi(github_job("gh-1"), config, http, GithubAuth(config, http))
    if expected is JobConfigRefused:
        with pytest.raises(JobConfigRefused):
            await api.mint()
    else:
        with pytest.raises(InfraFault) as fault:
            await api.mint()
        assert fault.value.reason == expected


@pytest.mark.parametrize("repo", ["no-slash", "/name", "owner/", "a/b/c"])
async def test_an_app_job_token_needs_one_repository_to_scope_to(
    http: aiohttp.ClientSession, app_github: FakeForge, app_key: rsa.RSAPrivateKey, repo: str
) -> None:
    auth = GithubAuth(load_forge_config(app_env(app_github, app_key)), http)
    with pytest.raises(ConfigError, match="owner/name"):
        await auth.mint_job_token(repo)
    assert app_github.calls("access_tokens") == []


def fake_gh(tmp_path: Path, body: str) -> str:
    path = tmp_path / "gh"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


async def test_gh_and_pat_sources_hand_the_job_their_token(
    http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    gh = GithubAuth(load_forge_config({"GITHUB_AUTH_SOURCE": "gh"}), http,
                    gh_path=fake_gh(tmp_path, 'echo "gho_$1_$2"'))
    assert await gh.mint_job_token("o/r") == "gho_auth_token"
    pat = GithubAuth(load_forge_config({"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": "ghp_x"}), http)
    assert await pat.mint_job_token("o/r") == "ghp_x"
    with pytest.raises(ConfigError, match="empty token"):
        await GithubAuth(load_forge_config({"GITHUB_AUTH_SOURCE": "gh"}), http,
                         gh_path=fake_gh(tmp_path, "echo '   '")).mint_job_token("o/r")


async def test_without_credentials_a_job_is_refused_naming_the_variable(http: aiohttp.ClientSession) -> None:
    """Whether the worker built a token source or not (GitHub unconfigured: it builds none)."""
    config = load_forge_config({})
    job = github_job("gh-1")
    with pytest.raises(JobConfigRefused, match="GITHUB_AUTH_SOURCE"):
        await GithubApi(job, config, http, GithubAuth(config, http)).mint()
    with pytest.raises(JobConfigRefused, match="GITHUB_AUTH_SOURCE"):
        await GithubApi(job, config, http, None).mint()


async def test_github_enterprise_server_answers_under_its_api_prefix(http: aiohttp.ClientSession) -> None:
    async with github_forge("/api/v3") as fake:
        set_repo(fake, "Codertocat/Hello-World")
        config = load_forge_config({**forge_env("github", fake.url + "/api/v3")})
        api = GithubApi(github_job("gh-1"), config, http, GithubAuth(config, http))
        assert (await api.tip("ghp_test")).sha == TIP_SHA
        assert fake.calls("repo")[0].path == "/api/v3/repos/Codertocat/Hello-World"
