from __future__ import annotations

import base64
import json
import stat
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from pidispatch.common.errors import ConfigError, InfraError
from pidispatch.forges.config import load_forge_config
from pidispatch.forges.github import auth as github_auth
from pidispatch.forges.github.auth import (
    GithubAuth,
    GithubAuthRefused,
    GithubAuthUnavailable,
    app_jwt,
    classify_failure,
    is_transient_status,
    load_private_key,
    repo_name,
    require_token,
)
from pidispatch.forges.http import create_http
from tests.support.forges import FakeForge, disconnect, github_forge, raw, reply


@pytest.fixture(scope="module")
def app_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem_of(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    session = create_http()
    yield session
    await session.close()


@pytest.fixture
async def fake_github(app_key: rsa.RSAPrivateKey) -> AsyncIterator[FakeForge]:
    async with github_forge() as forge:
        forge.state["app_public_key"] = app_key.public_key()
        yield forge


def app_env(forge: FakeForge, key: rsa.RSAPrivateKey) -> dict[str, str]:
    return {
        "GITHUB_API_URL": forge.url, "GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_ID": "12345",
        "GITHUB_APP_INSTALLATION_ID": "777", "GITHUB_APP_PRIVATE_KEY": pem_of(key),
    }


# --- the JWT ---------------------------------------------------------------------------------------------


def test_app_jwt_is_rs256_over_header_and_payload_and_verifies_with_the_public_key(
    app_key: rsa.RSAPrivateKey,
) -> None:
    token = app_jwt("12345", app_key, 1_700_000_000)
    head, payload, signature = token.split(".")
    assert "=" not in token
    assert json.loads(_b64(head)) == {"alg": "RS256", "typ": "JWT"}
    assert json.loads(_b64(payload)) == {"iat": 1_700_000_000 - 60, "exp": 1_700_000_000 + 540, "iss": 12345}
    # Raises InvalidSignature if the signature is not PKCS#1 v1.5 / SHA-256 over "header.payload".
    app_key.public_key().verify(_b64(signature), f"{head}.{payload}".encode(), padding.PKCS1v15(),
                                hashes.SHA256())


def test_app_jwt_issuer_may_be_a_client_id(app_key: rsa.RSAPrivateKey) -> None:
    payload = app_jwt("Iv23liABCDEF", app_key, 1_700_000_000).split(".")[1]
    assert json.loads(_b64(payload))["iss"] == "Iv23liABCDEF"


def test_a_bad_key_is_refused_naming_the_variable_not_the_key() -> None:
    with pytest.raises(GithubAuthRefused) as refused:
        load_private_key(b"-----BEGIN RSA PRIVATE KEY-----\nhunter2\n-----END RSA PRIVATE KEY-----\n",
                         "GITHUB_APP_PRIVATE_KEY")
    assert "GITHUB_APP_PRIVATE_KEY" in str(refused.value) and "hunter2" not in str(refused.value)
    assert isinstance(refused.value, ConfigError)


def test_a_non_rsa_key_is_refused() -> None:
    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(GithubAuthRefused, match="non-RSA"):
        load_private_key(pem, "GITHUB_APP_PRIVATE_KEY_PATH")


# --- classification: which answers of the token endpoint are transient ---------------------------------


@pytest.mark.parametrize(
    ("status", "headers", "transient"),
    [
        (None, {}, True),
        (500, {}, True),
        (502, {}, True),
        (503, {}, True),
        (429, {}, True),
        (408, {}, True),
        (403, {"Retry-After": "30"}, True),
        (403, {"X-RateLimit-Remaining": "0"}, True),
        (403, {"X-RateLimit-Remaining": "12"}, False),
        (403, {}, False),
        (401, {}, False),
        (404, {}, False),
        (422, {}, False),
        (301, {"Location": "https://elsewhere"}, False),
    ],
)
def test_failure_classification(status: int | None, headers: dict[str, str], transient: bool) -> None:
    assert is_transient_status(status, headers) is transient
    failure = classify_failure(status, headers, "minting")
    if transient:
        assert isinstance(failure, GithubAuthUnavailable) and isinstance(failure, InfraError)
        assert failure.reason == ("network" if status is None else f"status-{status}")
    else:
        assert isinstance(failure, GithubAuthRefused) and isinstance(failure, ConfigError)


@pytest.mark.parametrize("value", ["", "   \n", None, 42])
def test_an_empty_token_is_refused(value: object) -> None:
    with pytest.raises(GithubAuthRefused, match="empty token"):
        require_token(value, "GITHUB_PAT")


def test_tokens_are_trimmed() -> None:
    assert require_token(" ghp_x\n", "GITHUB_PAT") == "ghp_x"


@pytest.mark.parametrize("repo", ["name", "owner/", "/name", "o/r/x", ""])
def test_repo_name_needs_owner_and_name(repo: str) -> None:
    with pytest.raises(ValueError):
        repo_name(repo)


# --- sources ---------------------------------------------------------------------------------------------


async def test_pat_source_returns_the_configured_token(http: aiohttp.ClientSession) -> None:
    config = load_forge_config({"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": "ghp_abc"})
    assert await GithubAuth(config, http).token("octo/repo") == "ghp_abc"


async def test_no_source_refuses(http: aiohttp.ClientSession) -> None:
    with pytest.raises(GithubAuthRefused, match="GITHUB_AUTH_SOURCE"):
        await GithubAuth(load_forge_config({}), http).token("octo/repo")


def fake_gh(tmp_path: Path, body: str) -> str:
    path = tmp_path / "gh"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


async def test_gh_source_runs_gh_auth_token(http: aiohttp.ClientSession, tmp_path: Path) -> None:
    auth = GithubAuth(load_forge_config({"GITHUB_AUTH_SOURCE": "gh"}), http,
                      gh_path=fake_gh(tmp_path, 'echo "gho_$1_$2"'))
    assert await auth.token("octo/repo") == "gho_auth_token"


async def test_gh_source_names_the_enterprise_host(http: aiohttp.ClientSession, tmp_path: Path) -> None:
    config = load_forge_config({"GITHUB_AUTH_SOURCE": "gh", "GITHUB_API_URL": "https://ghe.example.com/api/v3"})
    auth = GithubAuth(config, http, gh_path=fake_gh(tmp_path, 'echo "gho_$3_$4"'))
    assert await auth.token() == "gho_--hostname_ghe.example.com"


@pytest.mark.parametrize(
    ("script", "match"),
    [("exit 1", "exited 1"), ("echo '  '", "empty token")],
)
async def test_gh_failures_are_determinate(
    http: aiohttp.ClientSession, tmp_path: Path, script: str, match: str
) -> None:
    config = load_forge_config({"GITHUB_AUTH_SOURCE": "gh"})
    auth = GithubAuth(config, http, gh_path=fake_gh(tmp_path, script))
    with pytest.raises(GithubAuthRefused, match=match):
        await auth.token()


async def test_a_missing_gh_is_determinate(http: aiohttp.ClientSession, tmp_path: Path) -> None:
    auth = GithubAuth(load_forge_config({"GITHUB_AUTH_SOURCE": "gh"}), http, gh_path=str(tmp_path / "nope"))
    with pytest.raises(GithubAuthRefused, match="gh CLI cannot be run"):
        await auth.token()


async def test_a_hanging_gh_is_killed_and_transient(
    http: aiohttp.ClientSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(github_auth, "GH_TIMEOUT_S", 0.2)
    auth = GithubAuth(load_forge_config({"GITHUB_AUTH_SOURCE": "gh"}), http,
                      gh_path=fake_gh(tmp_path, "exec sleep 30"))
    with pytest.raises(GithubAuthUnavailable) as unavailable:
        await auth.token()
    assert unavailable.value.reason == "gh-timeout"


# --- App installation tokens against the stand-in GitHub -------------------------------------------------


async def test_app_token_names_only_the_repository_and_the_asked_permissions(
    http: aiohttp.ClientSession, fake_github: FakeForge, app_key: rsa.RSAPrivateKey
) -> None:
    auth = GithubAuth(load_forge_config(app_env(fake_github, app_key)), http)
    token = await auth.token("octo/hello-world", permissions={"metadata": "read"})
    assert token in fake_github.state["installation_tokens"]
    [mint] = fake_github.calls("access_tokens")
    assert mint.path == "/app/installations/777/access_tokens"
    assert mint.body == {"repositories": ["hello-world"], "permissions": {"metadata": "read"}}
    assert mint.headers["x-github-api-version"] == "2022-11-28"


async def test_app_tokens_are_cached_per_repo_and_permissions_until_near_expiry(
    http: aiohttp.ClientSession, fake_github: FakeForge, app_key: rsa.RSAPrivateKey
) -> None:
    start = int(time.time() * 1000)
    now = [start]
    expires = datetime.fromtimestamp(start / 1000 + 600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    fake_github.script("access_tokens", reply(201, {"token": "ghs_ten_minutes", "expires_at": expires}))
    auth = GithubAuth(load_forge_config(app_env(fake_github, app_key)), http, lambda: now[0])
    assert await auth.token("octo/a") == "ghs_ten_minutes"
    assert await auth.token("octo/a") == "ghs_ten_minutes"
    other_perms = await auth.token("octo/a", permissions={"metadata": "read"})
    other_repo = await auth.token("octo/b")
    assert len({"ghs_ten_minutes", other_perms, other_repo}) == 3
    assert len(fake_github.calls("access_tokens")) == 3
    now[0] = start + 4 * 60_000  # six minutes left: still handed out
    assert await auth.token("octo/a") == "ghs_ten_minutes"
    now[0] = start + 6 * 60_000  # four minutes left: too close to expiry, mint a fresh one
    assert await auth.token("octo/a") != "ghs_ten_minutes"
    assert len(fake_github.calls("access_tokens")) == 4


async def test_app_key_from_a_file_is_read_once(
    http: aiohttp.ClientSession, fake_github: FakeForge, app_key: rsa.RSAPrivateKey, tmp_path: Path
) -> None:
    key_file = tmp_path / "app.pem"
    key_file.write_text(pem_of(app_key))
    env = {k: v for k, v in app_env(fake_github, app_key).items() if k != "GITHUB_APP_PRIVATE_KEY"}
    auth = GithubAuth(load_forge_config({**env, "GITHUB_APP_PRIVATE_KEY_PATH": str(key_file)}), http)
    assert await auth.token("octo/a")
    key_file.unlink()
    assert await auth.token("octo/b")  # the key stayed in memory


async def test_an_unreadable_key_file_is_refused_without_its_path(
    http: aiohttp.ClientSession, fake_github: FakeForge, app_key: rsa.RSAPrivateKey, tmp_path: Path
) -> None:
    env = {k: v for k, v in app_env(fake_github, app_key).items() if k != "GITHUB_APP_PRIVATE_KEY"}
    missing = str(tmp_path / "secret-dir" / "app.pem")
    auth = GithubAuth(load_forge_config({**env, "GITHUB_APP_PRIVATE_KEY_PATH": missing}), http)
    with pytest.raises(GithubAuthRefused) as refused:
        await auth.token("octo/a")
    assert "GITHUB_APP_PRIVATE_KEY_PATH" in str(refused.value) and "secret-dir" not in str(refused.value)
    assert fake_github.calls() == []


@pytest.mark.parametrize(
    ("answer", "kind", "reason"),
    [
        (reply(502), GithubAuthUnavailable, "status-502"),
        (reply(429), GithubAuthUnavailable, "status-429"),
        (reply(403, {"message": "slow down"}, headers={"Retry-After": "60"}), GithubAuthUnavailable,
         "status-403"),
        (disconnect(times=1), GithubAuthUnavailable, "network"),  # a POST is never re-sent
        (raw("<html>proxy</html>", 201), GithubAuthUnavailable, "bad-json"),
        (reply(201, {"token": "  "}), GithubAuthRefused, None),
        (reply(401, {"message": "Bad credentials"}), GithubAuthRefused, None),
        (reply(404), GithubAuthRefused, None),
        (reply(403, {"message": "forbidden"}), GithubAuthRefused, None),
        (reply(422), GithubAuthRefused, None),
    ],
)
async def test_mint_failures_are_classified(
    http: aiohttp.ClientSession, fake_github: FakeForge, app_key: rsa.RSAPrivateKey,
    answer: object, kind: type[Exception], reason: str | None,
) -> None:
    fake_github.script("access_tokens", answer)  # type: ignore[arg-type]
    auth = GithubAuth(load_forge_config(app_env(fake_github, app_key)), http)
    with pytest.raises(kind) as failed:
        await auth.token("octo/a")
    if reason is not None:
        assert failed.value.reason == reason  # type: ignore[attr-defined]
    # A failure is not cached: the next call mints again (and the fake answers normally).
    assert await auth.token("octo/a") in fake_github.state["installation_tokens"]


async def test_a_wrong_installation_is_a_determinate_refusal(
    http: aiohttp.ClientSession, fake_github: FakeForge, app_key: rsa.RSAPrivateKey
) -> None:
    env = {**app_env(fake_github, app_key), "GITHUB_APP_INSTALLATION_ID": "778"}
    with pytest.raises(GithubAuthRefused, match="HTTP 404"):
        await GithubAuth(load_forge_config(env), http).token("octo/a")


async def test_a_key_github_does_not_know_is_refused(
    http: aiohttp.ClientSession, fake_github: FakeForge, app_key: rsa.RSAPrivateKey
) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    env = {**app_env(fake_github, app_key), "GITHUB_APP_PRIVATE_KEY": pem_of(stranger)}
    with pytest.raises(GithubAuthRefused, match="HTTP 401"):
        await GithubAuth(load_forge_config(env), http).token("octo/a")
