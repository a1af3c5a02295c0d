"""GitHub tokens for API calls, from the configured source: ``pat``, ``gh`` or ``app``.

Failures come in two classes, because they need different answers: a determinate one
(401, 404, any other 4xx, a missing ``gh``, an empty token) is ``GithubAuthRefused`` -- a ``ConfigError``
the operator must fix; a transient one (429, 403 with Retry-After or an exhausted rate limit, 5xx, a
network fault, a timeout) is ``GithubAuthUnavailable`` -- an ``InfraError`` worth retrying. No token, key
or key path ever reaches a message or a log line.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import msgspec
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from pidispatch.common.errors import ConfigError, InfraError
from pidispatch.common.runtime import EpochMsClock, now_ms
from pidispatch.common.secret import Secret
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.github.config import GITHUB_API_DEFAULT, GithubForge, block_of
from pidispatch.forges.http import BadBody, Unreachable, call, is_transient_status

API_VERSION = "2022-11-28"
GH_TIMEOUT_S = 10.0
MINT_TIMEOUT_S = 10.0
# GitHub refuses a JWT whose exp is more than 10 minutes out; iat is back-dated for clock drift.
JWT_BACKDATE_S = 60
JWT_LIFETIME_S = 540
JWT_REUSE_MARGIN_S = 60
# An installation token lives an hour; stop handing it out five minutes before it dies.
TOKEN_REUSE_MARGIN_MS = 5 * 60 * 1000
TOKEN_CACHE_MAX = 256


class GithubAuthRefused(ConfigError):
    """A determinate refusal: the same request will be refused until the operator changes something."""


class GithubAuthUnavailable(InfraError):
    """GitHub (or ``gh``) could not answer now; ``reason`` is a short token such as ``status-502``."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"GitHub token unavailable ({reason})")
        self.reason = reason


def classify_failure(
    status: int | None, headers: Mapping[str, str] | None, what: str
) -> GithubAuthRefused | GithubAuthUnavailable:
    """The exception for a failed call; ``what`` names the call and the variables to check."""
    if is_transient_status(status, headers):
        return GithubAuthUnavailable("network" if status is None else f"status-{status}")
    return GithubAuthRefused(f"{what} was refused by GitHub (HTTP {status})")


def require_token(raw: object, what: str) -> str:
    """A non-blank token, or a refusal: an empty token would make an anonymous (yet paid) run."""
    token = raw.strip() if isinstance(raw, str) else ""
    if not token:
        raise GithubAuthRefused(f"{what} gave an empty token; refusing to use it")
    return token


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def load_private_key(pem: bytes, variable: str) -> rsa.RSAPrivateKey:
    """Parse the App's PEM key; a refusal names ``variable``, never the key or its path."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise GithubAuthRefused(f"{variable} does not hold a readable, unencrypted PEM private key") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise GithubAuthRefused(f"{variable} holds a non-RSA key; GitHub Apps sign with RSA (RS256)")
    return key


def app_jwt(app_id: str, key: rsa.RSAPrivateKey, now_s: int) -> str:
    """An RS256 JWT authenticating as the App: header.payload.signature, each base64url without padding."""
    header = {"alg": "RS256", "typ": "JWT"}
    issuer: int | str = int(app_id) if app_id.isdigit() else app_id
    payload = {"iat": now_s - JWT_BACKDATE_S, "exp": now_s + JWT_LIFETIME_S, "iss": issuer}
    signing_input = f"{b64url(msgspec.json.encode(header))}.{b64url(msgspec.json.encode(payload))}"
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{b64url(signature)}"


def repo_name(repo: str) -> str:
    """``owner/name`` -> ``name``: installation tokens are scoped by repository name."""
    owner, _, name = repo.partition("/")
    if not owner or not name or "/" in name or name != name.strip():
        raise ValueError("repository must be owner/name")
    return name


def api_headers(token: str) -> dict[str, str]:
    return {
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": API_VERSION,
        "Authorization": f"Bearer {token}",
    }


def time_ms(raw: object) -> int | None:
    """A GitHub API time (``2026-12-03T07:57:31Z``) as epoch ms; None for anything else."""
    if not isinstance(raw, str):
        return None
    try:
        return int(datetime.fromisoformat(raw).timestamp() * 1000)
    except ValueError:
        return None


class GithubAuth:
    """Hands out GitHub tokens for one configured source. Create once at startup; share it."""

    def __init__(
        self,
        config: ForgeConfig | GithubForge,
        http: aiohttp.ClientSession,
        clock: EpochMsClock = now_ms,
        *,
        gh_path: str = "gh",
    ) -> None:
        self.config = block_of(config) if isinstance(config, ForgeConfig) else config
        self.http, self.clock, self.gh_path = http, clock, gh_path
        self._key: rsa.RSAPrivateKey | None = None
        self._jwt: tuple[str, int] | None = None  # (jwt, exp seconds)
        self._tokens: dict[tuple[str | None, tuple[tuple[str, str], ...]], tuple[Secret[str], int]] = {}
        self._lock = asyncio.Lock()

    @property
    def source(self) -> str | None:
        return self.config.auth_source

    async def token(self, repo: str | None = None, *, permissions: Mapping[str, str] | None = None) -> str:
        """A token for API calls about ``repo`` (``owner/name``).

        ``pat``/``gh`` return the operator's standing credential (``permissions`` cannot narrow it). ``app``
        mints an installation token scoped to that one repository and narrowed to ``permissions`` when
        given; with ``repo=None`` it is installation-wide -- callers running jobs must refuse that first.
        """
        source = self.config.auth_source
        if source == "pat":
            pat = self.config.pat
            return require_token(pat.reveal() if pat is not None else None, self.config.pat_var)
        if source == "gh":
            return await self._gh_token()
        if source == "app":
            return await self._installation_token(repo, permissions)
        raise GithubAuthRefused("GITHUB_AUTH_SOURCE is not set; accepted: gh, pat or app")

    async def mint_job_token(self, repo: str) -> str:
        """A fresh token for one job on ``repo`` (``owner/name``), never cached or shared between jobs.

        ``app`` mints a new installation token scoped to that one repository name (owner stripped),
        never installation-wide; ``pat`` returns the PAT; ``gh`` asks ``gh auth token`` again.
        """
        if self.config.auth_source != "app":
            return await self.token(repo)  # a standing credential: nothing per job to mint
        try:
            name = repo_name(repo)
        except (ValueError, AttributeError):
            raise GithubAuthRefused("a GitHub App job token needs an owner/name repository to be "
                                    "scoped to; this job names none") from None
        token, _ = await self._mint(name, {})
        return token

    async def jwt(self) -> str:
        """The App's own JWT (for ``/app`` endpoints), reused until a minute before it expires."""
        if self.config.auth_source != "app" or self.config.app_id is None:
            raise GithubAuthRefused("a GitHub App JWT needs GITHUB_AUTH_SOURCE=app and GITHUB_APP_ID")
        now_s = self.clock() // 1000
        if self._jwt is not None and now_s < self._jwt[1] - JWT_REUSE_MARGIN_S:
            return self._jwt[0]
        key = await self.private_key()
        token = app_jwt(self.config.app_id, key, now_s)
        self._jwt = (token, now_s + JWT_LIFETIME_S)
        return token

    async def private_key(self) -> rsa.RSAPrivateKey:
        """Load the App key once (off the loop when it is a file); call at startup to refuse early."""
        if self._key is not None:
            return self._key
        if self.config.app_private_key is not None:
            pem, variable = self.config.app_private_key.reveal().encode(), "GITHUB_APP_PRIVATE_KEY"
        elif self.config.app_private_key_path is not None:
            variable = "GITHUB_APP_PRIVATE_KEY_PATH"
            try:
                pem = await asyncio.to_thread(_read_key_file, self.config.app_private_key_path)
            except OSError as exc:
                raise GithubAuthRefused(f"{variable} names a file that cannot be read "
                                        f"({type(exc).__name__})") from None
        else:
            raise GithubAuthRefused("GITHUB_AUTH_SOURCE=app needs GITHUB_APP_PRIVATE_KEY or "
                                    "GITHUB_APP_PRIVATE_KEY_PATH")
        self._key = load_private_key(pem, variable)
        return self._key

    async def _gh_token(self) -> str:
        argv = [self.gh_path, "auth", "token"]
        host = urlsplit(self.config.api_url).hostname
        if self.config.api_url != GITHUB_API_DEFAULT and host:
            argv += ["--hostname", host]  # GitHub Enterprise Server: gh keys its logins by host
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError:
            raise GithubAuthRefused("GITHUB_AUTH_SOURCE=gh but the gh CLI cannot be run; install gh "
                                    "and run `gh auth login`, or use pat/app") from None
        try:
            stdout, _ = await asyncio.wait_for(proc.communicate(), GH_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise GithubAuthUnavailable("gh-timeout") from None
        if proc.returncode != 0:
            raise GithubAuthRefused(f"GITHUB_AUTH_SOURCE=gh but `gh auth token` exited {proc.returncode}; "
                                    "is gh logged in (`gh auth login`)?")
        return require_token(stdout.decode(errors="replace"), "`gh auth token`")

    async def _installation_token(self, repo: str | None, permissions: Mapping[str, str] | None) -> str:
        name = repo_name(repo) if repo is not None else None
        perms = tuple(sorted((permissions or {}).items()))
        key = (name, perms)
        async with self._lock:  # one mint per key at a time: concurrent askers share the result
            cached = self._tokens.get(key)
            if cached is not None and self.clock() < cached[1] - TOKEN_REUSE_MARGIN_MS:
                return cached[0].reveal()
            token, expires = await self._mint(name, dict(perms))
            if expires is not None:
                self._remember(key, Secret(token), expires)
            return token

    async def _mint(self, name: str | None, permissions: dict[str, str]) -> tuple[str, int | None]:
        body: dict[str, Any] = {}
        if name is not None:
            body["repositories"] = [name]
        if permissions:
            body["permissions"] = permissions
        url = f"{self.config.api_url}/app/installations/{self.config.installation_id}/access_tokens"
        headers = api_headers(await self.jwt())
        what = "minting an installation token (check GITHUB_APP_ID, GITHUB_APP_INSTALLATION_ID and the key)"
        try:
            reply = await call(self.http, "POST", url, headers=headers, json=body, timeout_s=MINT_TIMEOUT_S)
            if not reply.ok:
                raise classify_failure(reply.status, reply.headers, what)
            data = reply.json()
        except Unreachable as exc:
            raise GithubAuthUnavailable(exc.reason) from None
        except BadBody:
            raise GithubAuthUnavailable("bad-json") from None
        if not isinstance(data, dict):
            raise GithubAuthUnavailable("bad-json")
        token = require_token(data.get("token"), "the installation token mint")
        return token, time_ms(data.get("expires_at"))

    def _remember(self, key: tuple[str | None, tuple[tuple[str, str], ...]], token: Secret[str],
                  expires: int) -> None:
        now = self.clock()
        if len(self._tokens) >= TOKEN_CACHE_MAX:
            for stale in [k for k, (_, exp) in self._tokens.items() if exp - TOKEN_REUSE_MARGIN_MS <= now]:
                del self._tokens[stale]
        while len(self._tokens) >= TOKEN_CACHE_MAX:
            del self._tokens[next(iter(self._tokens))]
        self._tokens[key] = (token, expires)


def _read_key_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(64 * 1024)
