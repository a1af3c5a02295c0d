"""The harness's own identity on each forge, resolved once at start (the bot-loop guard).

An explicit id (``GITHUB_SELF_ID``, ``GITLAB_SELF_ID``, ``FORGEJO_BOT_ID``, ``AZURE_SELF_ID`` /
``AZURE_SELF_EMAIL``) is used as given and skips the lookup. A forge without credentials cannot author
events, so it needs no identity (None). Otherwise the forge is asked:

- GitHub ``pat``/``gh``: ``GET {api}/user`` with the token -> ``id``. ``app``: ``GET {api}/app`` with the
  App JWT -> ``slug``, then ``GET {api}/users/<slug>[bot]`` with an installation token narrowed to
  metadata:read -> the bot user's ``id`` (the App id is a different number and never a ``sender.id``).
- GitLab: ``GET {url}/api/v4/user`` -> ``id``. Forgejo: ``GET {url}/api/v1/user`` -> ``id`` (a 401/403
  names ``FORGEJO_BOT_ID``: repository-scoped tokens cannot read their own user).
- Azure: ``GET {org}/_apis/connectionData`` -> ``authenticatedUser.id`` (GUID) and the account address
  from ``authenticatedUser.properties.Account`` (lower-cased); one of the two is enough, neither refuses.
  When either explicit variable is set, only the explicit values are used (no call).

A transient failure (network, timeout, 5xx, 429, rate-limited 403, bad JSON) is retried inside the
window, 5 s between attempts doubling to 30 s; exhausting it raises ``InfraError`` (exit 1, a restart
opens a fresh window). A determinate one (401, 404, other 4xx, no integer id) raises ``ConfigError`` at
once (exit 2). A router never routes with an unresolved identity.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
import yarl

from pidispatch.common.errors import ConfigError, InfraError
from pidispatch.common.log import get_logger
from pidispatch.common.runtime import EpochMsClock, now_ms
from pidispatch.forges import FORGES
from pidispatch.forges.azure import FORGE as AZURE
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.forgejo import FORGE as FORGEJO
from pidispatch.forges.github import FORGE as GITHUB
from pidispatch.forges.github.auth import GithubAuth, GithubAuthUnavailable, api_headers, is_transient_status
from pidispatch.forges.gitlab import FORGE as GITLAB
from pidispatch.forges.http import BadBody, Unreachable, call
from pidispatch.router.lookup import SelfIds

Sleep = Callable[[float], Awaitable[Any]]

FIRST_DELAY_S = 5.0
DELAY_CAP_S = 30.0
ATTEMPT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 10.0
AZURE_API_VERSION = "7.1-preview.1"
# Named in refusals: what the operator can check, or set to skip the lookup.
VARIABLES = {f.name: f.identity_hint for f in FORGES}


class _Transient(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Lookup:
    """The per-forge calls, sharing one HTTP session; each raises ``_Transient`` or ``ConfigError``."""

    def __init__(self, config: ForgeConfig, github_auth: GithubAuth | None,
                 http: aiohttp.ClientSession) -> None:
        self.config, self.github_auth, self.http = config, github_auth, http

    async def _json(self, forge: str, what: str, url: str | yarl.URL, headers: Mapping[str, str]) -> Any:
        try:
            reply = await call(self.http, "GET", url, headers=headers, timeout_s=REQUEST_TIMEOUT_S)
        except Unreachable as exc:
            raise _Transient(exc.reason) from None
        except BadBody:
            raise _Transient("bad-json") from None
        if not reply.ok:
            if is_transient_status(reply.status, reply.headers):
                raise _Transient(f"status-{reply.status}")
            if forge == "forgejo" and reply.status in (401, 403):
                raise ConfigError(
                    f"could not resolve the forgejo identity: {what} answered {reply.status}; a "
                    "repository-scoped token cannot read its own user: set FORGEJO_BOT_ID to the harness "
                    "account's numeric id, or give the token read:user"
                )
            raise ConfigError(f"could not resolve the {forge} identity: {what} answered {reply.status}; "
                              f"check {VARIABLES[forge]}")
        try:
            return reply.json()
        except BadBody:
            raise _Transient("bad-json") from None

    @staticmethod
    def _id(forge: str, what: str, body: Any) -> int:
        value = body.get("id") if isinstance(body, dict) else None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"could not resolve the {forge} identity: {what} returned no integer id; "
                              f"check {VARIABLES[forge]}")
        return value

    async def _github_token(self, **kwargs: Any) -> str:
        assert self.github_auth is not None
        try:
            return await self.github_auth.token(**kwargs)
        except GithubAuthUnavailable as exc:
            raise _Transient(f"token-{exc.reason}") from None

    async def github(self) -> int:
        cfg = self.config.github
        if self.github_auth is None:
            raise ConfigError(f"could not resolve the github identity without GitHub auth; check "
                              f"{VARIABLES['github']}")
        if cfg.auth_source != "app":
            body = await self._json("github", "GET /user", f"{cfg.api_url}/user",
                                    api_headers(await self._github_token()))
            return self._id("github", "GET /user", body)
        app = await self._json("github", "GET /app", f"{cfg.api_url}/app",
                               api_headers(await self.github_auth.jwt()))
        slug = app.get("slug") if isinstance(app, dict) else None
        if not isinstance(slug, str) or not slug:
            raise ConfigError(f"could not resolve the github identity: GET /app returned no slug; "
                              f"check {VARIABLES['github']}")
        token = await self._github_token(permissions={"metadata": "read"})
        url = yarl.URL(f"{cfg.api_url}/users/{quote(slug + '[bot]', safe='')}", encoded=True)
        return self._id("github", "GET /users/<app>[bot]",
                        await self._json("github", "GET /users/<app>[bot]", url, api_headers(token)))

    async def gitlab(self) -> int:
        cfg = self.config.gitlab
        assert cfg.token is not None
        body = await self._json("gitlab", "GET /api/v4/user", f"{cfg.url}/api/v4/user",
                                {"PRIVATE-TOKEN": cfg.token.reveal()})
        return self._id("gitlab", "GET /api/v4/user", body)

    async def forgejo(self) -> int:
        cfg = self.config.forgejo
        assert cfg.token is not None
        body = await self._json("forgejo", "GET /api/v1/user", f"{cfg.url}/api/v1/user",
                                {"Authorization": f"token {cfg.token.reveal()}"})
        return self._id("forgejo", "GET /api/v1/user", body)

    async def azure(self) -> tuple[str | None, str | None]:
        cfg = self.config.azure
        assert cfg.token is not None
        basic = base64.b64encode(f":{cfg.token.reveal()}".encode()).decode()
        url = yarl.URL(f"{cfg.org_url}/_apis/connectionData", encoded=True).update_query(
            {"api-version": AZURE_API_VERSION}
        )
        body = await self._json("azure", "GET _apis/connectionData", url,
                                {"Authorization": f"Basic {basic}", "Accept": "application/json"})
        user = body.get("authenticatedUser") if isinstance(body, dict) else None
        user = user if isinstance(user, dict) else {}
        raw_id = user.get("id")
        guid = raw_id if isinstance(raw_id, str) and raw_id else None
        # The account name, never the display name: a display name is anyone's to choose.
        props = user.get("properties")
        account = props.get("Account") if isinstance(props, dict) else None
        if isinstance(account, dict):
            account = account.get("$value")
        email = account.strip().lower() if isinstance(account, str) and "@" in account else None
        if guid is None and email is None:
            raise ConfigError("could not resolve the azure identity: connectionData named neither an id "
                              "nor an account address; set AZURE_SELF_ID or AZURE_SELF_EMAIL")
        return guid, email


async def _retrying(
    forge: str, attempt: Callable[[], Awaitable[Any]], *, window_s: float, clock: EpochMsClock, sleep: Sleep,
    attempt_timeout_s: float,
) -> Any:
    """Retry transient failures until ``window_s`` has passed; the last gap is clamped to the window's
    edge so a forge that returns just before it closes is still picked up."""
    log = get_logger()
    deadline = clock() + int(window_s * 1000)
    delay, tries = FIRST_DELAY_S, 0
    while True:
        tries += 1
        try:
            return await asyncio.wait_for(attempt(), attempt_timeout_s)
        except TimeoutError:
            reason = "timeout"
        except _Transient as exc:
            reason = exc.reason
        remaining_s = (deadline - clock()) / 1000
        if remaining_s <= 0:
            log.error("identity_retry_exhausted", forge=forge, attempts=tries, reason=reason)
            raise InfraError(f"could not resolve the {forge} identity within {int(window_s)} s ({reason}); "
                             f"check {VARIABLES[forge]}")
        gap = min(delay, remaining_s)
        log.warning("identity_retry", forge=forge, attempt=tries, reason=reason, delay_s=gap)
        await sleep(gap)
        delay = min(delay * 2, DELAY_CAP_S)


async def resolve_self_ids(
    config: ForgeConfig,
    github_auth: GithubAuth | None,
    http: aiohttp.ClientSession,
    clock: EpochMsClock = now_ms,
    *,
    window_s: float | None = None,
    sleep: Sleep = asyncio.sleep,
    attempt_timeout_s: float = ATTEMPT_TIMEOUT_S,
) -> SelfIds:
    """Every forge's self id, concurrently, each with its own retry window (default
    ``PD_IDENTITY_RETRY_SECONDS``). Raises ``ConfigError`` (determinate) or ``InfraError`` (window spent)."""
    log = get_logger()
    lookup = _Lookup(config, github_auth, http)
    window = float(config.identity_retry_s if window_s is None else window_s)

    def retrying(forge: str, attempt: Callable[[], Awaitable[Any]]) -> Awaitable[Any]:
        return _retrying(forge, attempt, window_s=window, clock=clock, sleep=sleep,
                         attempt_timeout_s=attempt_timeout_s)

    async def one(forge: str, explicit: Any, var: str, configured: bool,
                  attempt: Callable[[], Awaitable[Any]]) -> Any:
        if explicit is not None:
            log.info("self_identity", forge=forge, resolved=True, source=var)
            return explicit
        if not configured:
            log.info("self_identity", forge=forge, resolved=False, reason="no-credentials")
            return None
        value = await retrying(forge, attempt)
        log.info("self_identity", forge=forge, resolved=True, source="api")
        return value

    az = config.azure
    az_explicit = (az.self_id, az.self_email) if az.self_id or az.self_email else None
    specs = [
        (GITHUB.name, config.github.self_id, GITHUB.self_id_var, config.github.configured, lookup.github),
        (GITLAB.name, config.gitlab.self_id, GITLAB.self_id_var, config.gitlab.configured, lookup.gitlab),
        (FORGEJO.name, config.forgejo.bot_id, FORGEJO.self_id_var, config.forgejo.configured, lookup.forgejo),
        (AZURE.name, az_explicit, AZURE.self_id_var, az.configured, lookup.azure),
    ]
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(*spec)) for spec in specs]
    except BaseExceptionGroup as failed:
        # One forge's refusal cancels the others; surface the determinate one first (exit 2 over 1).
        errors = failed.exceptions
        raise next((e for e in errors if isinstance(e, ConfigError)), errors[0]) from None
    github, gitlab, forgejo, azure = (t.result() for t in tasks)
    azure_id, azure_email = azure if azure is not None else (None, None)
    return SelfIds(github=github, gitlab=gitlab, forgejo=forgejo, azure_id=azure_id, azure_email=azure_email)
