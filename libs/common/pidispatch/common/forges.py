"""Forge configuration: API base URLs, credentials and explicit self ids, read once from the environment.

The router asks forges whether an actor may trigger work and resolves the harness's own identity with what
this module loads; the worker will mint job tokens from the same values. Validation is early and whole:
a bad or half-configured block raises ``ConfigError`` naming the variable and what is accepted (exit 2).
Secrets are wrapped in ``Secret`` so no ``repr``, log line or traceback ever prints them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

import aiohttp
import msgspec
import yarl

from pidispatch.common.errors import ConfigError
from pidispatch.common.forgeinfo import FORGES
from pidispatch.common.secret import Secret

GITHUB_API_DEFAULT = "https://api.github.com"
GITLAB_URL_DEFAULT = "https://gitlab.com"
AUTH_SOURCES = ("gh", "pat", "app")
IDENTITY_RETRY_DEFAULT_S = 600
IDENTITY_RETRY_FLOOR_S = 60
IDENTITY_RETRY_MAX_S = 24 * 3600
# Forge API answers are small; a bigger one is refused rather than buffered.
MAX_BODY = 8 * 1024 * 1024
MAX_ID = 2**53  # ids travel through JSON; past this a float would round them

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# A numeric App id, or the App's client id (GitHub accepts either as the JWT issuer).
APP_ID_RE = re.compile(r"^(?:[1-9][0-9]{0,15}|Iv[0-9A-Za-z.]{4,64})$")
GUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
EMAIL_RE = re.compile(r"^[^\s@<>]+@[^\s@<>]+$")


class GithubForge(msgspec.Struct, frozen=True, kw_only=True):
    api_url: str = GITHUB_API_DEFAULT
    auth_source: str | None = None  # gh | pat | app; None = no GitHub credentials
    pat_var: str = "GITHUB_PAT"
    pat: Secret[str] | None = None
    app_id: str | None = None
    installation_id: int | None = None
    app_private_key: Secret[str] | None = None  # PEM text, from GITHUB_APP_PRIVATE_KEY
    app_private_key_path: str | None = None  # read when first needed (github_auth), never logged
    self_id: int | None = None

    @property
    def configured(self) -> bool:
        return self.auth_source is not None


class GitlabForge(msgspec.Struct, frozen=True, kw_only=True):
    url: str = GITLAB_URL_DEFAULT
    token: Secret[str] | None = None
    self_id: int | None = None

    @property
    def configured(self) -> bool:
        return self.token is not None


class ForgejoForge(msgspec.Struct, frozen=True, kw_only=True):
    url: str | None = None
    token: Secret[str] | None = None
    bot_id: int | None = None

    @property
    def configured(self) -> bool:
        return self.token is not None


class AzureForge(msgspec.Struct, frozen=True, kw_only=True):
    org_url: str | None = None
    graph_url: str | None = None  # derived from org_url unless AZURE_GRAPH_URL overrides it
    token: Secret[str] | None = None
    self_id: str | None = None
    self_email: str | None = None  # lower-cased

    @property
    def configured(self) -> bool:
        return self.token is not None


# What an operator sets to give each forge credentials (named in refusals).
FORGE_VARIABLES = {f.name: f.credentials_hint for f in FORGES}


class ForgeConfig(msgspec.Struct, frozen=True, kw_only=True):
    github: GithubForge = msgspec.field(default_factory=GithubForge)
    gitlab: GitlabForge = msgspec.field(default_factory=GitlabForge)
    forgejo: ForgejoForge = msgspec.field(default_factory=ForgejoForge)
    azure: AzureForge = msgspec.field(default_factory=AzureForge)
    identity_retry_s: int = IDENTITY_RETRY_DEFAULT_S

    def configured_forges(self) -> tuple[str, ...]:
        # Each forge's block is the field named after it.
        return tuple(f.name for f in FORGES if getattr(self, f.name).configured)

    def require(self, forge: str) -> None:
        """Refuse to start when rules need ``forge`` but it has no credentials to ask it with."""
        if forge not in self.configured_forges():
            raise ConfigError(
                f"triggers.json has {forge} rules but {forge} has no credentials; set "
                f"{FORGE_VARIABLES[forge]}"
            )


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _url(name: str, raw: str) -> str:
    """An http(s) base URL without credentials, query or fragment; trailing slashes removed."""
    url = raw.strip().rstrip("/")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError:
        host = None
    if (
        not host
        or parts.scheme not in ("http", "https")
        or parts.username is not None
        or parts.password is not None
        or parts.query
        or parts.fragment
        or any(c.isspace() for c in url)
    ):
        raise ConfigError(
            f"{name} is not a usable URL; accepted: http(s)://host[:port][/path] without credentials, "
            "query or fragment"
        )
    return url


def _positive_id(env: Mapping[str, str], name: str) -> int | None:
    raw = _get(env, name)
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_ID:
        raise ConfigError(f"{name}={raw!r} is refused; accepted: a positive integer id")
    return int(raw)


def _secret(env: Mapping[str, str], name: str) -> Secret[str] | None:
    raw = _get(env, name)
    return None if raw is None else Secret(raw)


def _pem(raw: str) -> Secret[str]:
    # .env files often carry a PEM on one line with literal \n; a real PEM has real newlines.
    text = raw.replace("\\n", "\n") if "\n" not in raw else raw
    if "-----BEGIN" not in text or "PRIVATE KEY-----" not in text:
        raise ConfigError(
            "GITHUB_APP_PRIVATE_KEY is not a PEM private key; accepted: the App's private key "
            "(-----BEGIN RSA PRIVATE KEY----- ...), newlines as real line breaks or \\n"
        )
    return Secret(text.strip() + "\n")


def _github(env: Mapping[str, str]) -> GithubForge:
    api_url = _url("GITHUB_API_URL", _get(env, "GITHUB_API_URL") or GITHUB_API_DEFAULT)
    source = _get(env, "GITHUB_AUTH_SOURCE")
    if source is not None and source not in AUTH_SOURCES:
        raise ConfigError(f"GITHUB_AUTH_SOURCE={source!r} is refused; accepted: gh, pat, app")
    self_id = _positive_id(env, "GITHUB_SELF_ID")

    pat_var_raw = _get(env, "GITHUB_PAT_VAR")
    if pat_var_raw is not None and source != "pat":
        raise ConfigError("GITHUB_PAT_VAR is set but GITHUB_AUTH_SOURCE is not pat; accepted: "
                          "GITHUB_AUTH_SOURCE=pat, or unset GITHUB_PAT_VAR")
    pat_var = pat_var_raw or "GITHUB_PAT"
    if not ENV_NAME_RE.match(pat_var):
        raise ConfigError(f"GITHUB_PAT_VAR={pat_var!r} is refused; accepted: an environment variable name")
    pat = None
    if source == "pat":
        pat = _secret(env, pat_var)
        if pat is None:
            raise ConfigError(
                f"GITHUB_AUTH_SOURCE=pat needs the token in {pat_var} (the variable GITHUB_PAT_VAR names); "
                "it is unset or blank"
            )

    app_names = ("GITHUB_APP_ID", "GITHUB_APP_INSTALLATION_ID", "GITHUB_APP_PRIVATE_KEY",
                 "GITHUB_APP_PRIVATE_KEY_PATH")
    present = [n for n in app_names if _get(env, n) is not None]
    if source != "app":
        if present:
            raise ConfigError(f"{present[0]} is set but GITHUB_AUTH_SOURCE is not app; accepted: "
                              "GITHUB_AUTH_SOURCE=app, or unset the GITHUB_APP_* variables")
        return GithubForge(api_url=api_url, auth_source=source, pat_var=pat_var, pat=pat, self_id=self_id)

    app_id = _get(env, "GITHUB_APP_ID")
    if app_id is None or not APP_ID_RE.match(app_id):
        raise ConfigError("GITHUB_AUTH_SOURCE=app needs GITHUB_APP_ID; accepted: the App's numeric id "
                          "(or its client id, Iv...)")
    installation_id = _positive_id(env, "GITHUB_APP_INSTALLATION_ID")
    if installation_id is None:
        raise ConfigError("GITHUB_AUTH_SOURCE=app needs GITHUB_APP_INSTALLATION_ID; accepted: the "
                          "installation's numeric id")
    key_raw, key_path = _get(env, "GITHUB_APP_PRIVATE_KEY"), _get(env, "GITHUB_APP_PRIVATE_KEY_PATH")
    if (key_raw is None) == (key_path is None):
        raise ConfigError("GITHUB_AUTH_SOURCE=app needs exactly one of GITHUB_APP_PRIVATE_KEY (the PEM) "
                          "or GITHUB_APP_PRIVATE_KEY_PATH (a file holding it)")
    return GithubForge(
        api_url=api_url, auth_source=source, pat_var=pat_var, app_id=app_id,
        installation_id=installation_id,
        app_private_key=_pem(key_raw) if key_raw is not None else None,
        app_private_key_path=os.path.expanduser(key_path) if key_path is not None else None,
        self_id=self_id,
    )


def _gitlab(env: Mapping[str, str]) -> GitlabForge:
    url = _url("GITLAB_URL", _get(env, "GITLAB_URL") or GITLAB_URL_DEFAULT)
    token, self_id = _secret(env, "GITLAB_TOKEN"), _positive_id(env, "GITLAB_SELF_ID")
    # GITLAB_URL has a default, so it alone does not open the block.
    if self_id is not None and token is None:
        raise ConfigError("GITLAB_SELF_ID is set without GITLAB_TOKEN; accepted: both (the router asks "
                          "GitLab for every delivery's access level), or neither")
    return GitlabForge(url=url, token=token, self_id=self_id)


def _forgejo(env: Mapping[str, str]) -> ForgejoForge:
    raw_url, token = _get(env, "FORGEJO_URL"), _secret(env, "FORGEJO_TOKEN")
    bot_id = _positive_id(env, "FORGEJO_BOT_ID")
    if raw_url is None and token is None and bot_id is None:
        return ForgejoForge()
    if raw_url is None or token is None:
        missing = "FORGEJO_URL" if raw_url is None else "FORGEJO_TOKEN"
        raise ConfigError(f"{missing} is required once any FORGEJO_* variable is set; accepted: "
                          "FORGEJO_URL (the instance root, e.g. https://codeberg.org) and FORGEJO_TOKEN")
    return ForgejoForge(url=_url("FORGEJO_URL", raw_url), token=token, bot_id=bot_id)


def derive_graph_url(org_url: str) -> str:
    """Azure's Graph API lives on a sibling host of the organisation URL."""
    parts = urlsplit(org_url)
    host = parts.hostname or ""
    if host == "dev.azure.com":
        return org_url.replace("://dev.azure.com", "://vssps.dev.azure.com", 1)
    if host.endswith(".visualstudio.com") and not host.endswith(".vssps.visualstudio.com"):
        org = host.removesuffix(".visualstudio.com")
        return org_url.replace(f"://{host}", f"://{org}.vssps.visualstudio.com", 1)
    return org_url  # Azure DevOps Server serves Graph on the collection URL itself


def _azure(env: Mapping[str, str]) -> AzureForge:
    names = ("AZURE_ORG_URL", "AZURE_TOKEN", "AZURE_SELF_ID", "AZURE_SELF_EMAIL", "AZURE_GRAPH_URL")
    if all(_get(env, n) is None for n in names):
        return AzureForge()
    raw_org, token = _get(env, "AZURE_ORG_URL"), _secret(env, "AZURE_TOKEN")
    if raw_org is None or token is None:
        missing = "AZURE_ORG_URL" if raw_org is None else "AZURE_TOKEN"
        raise ConfigError(f"{missing} is required once any AZURE_* identity or API variable is set; "
                          "accepted: AZURE_ORG_URL (https://dev.azure.com/<org>) and AZURE_TOKEN (a PAT)")
    org_url = _url("AZURE_ORG_URL", raw_org)
    graph_raw = _get(env, "AZURE_GRAPH_URL")
    graph_url = _url("AZURE_GRAPH_URL", graph_raw) if graph_raw else derive_graph_url(org_url)
    self_id = _get(env, "AZURE_SELF_ID")
    if self_id is not None and not GUID_RE.match(self_id):
        raise ConfigError("AZURE_SELF_ID is refused; accepted: the harness identity's GUID "
                          "(xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)")
    email = _get(env, "AZURE_SELF_EMAIL")
    if email is not None and not EMAIL_RE.match(email):
        raise ConfigError(
            "AZURE_SELF_EMAIL is refused; accepted: the harness account's address (name@domain)"
        )
    return AzureForge(
        org_url=org_url, graph_url=graph_url, token=token, self_id=self_id,
        self_email=email.lower() if email else None,
    )


def _identity_window(env: Mapping[str, str]) -> int:
    raw = _get(env, "PD_IDENTITY_RETRY_SECONDS")
    if raw is None:
        return IDENTITY_RETRY_DEFAULT_S
    if not raw.isascii() or not raw.isdigit() or int(raw) > IDENTITY_RETRY_MAX_S:
        raise ConfigError(f"PD_IDENTITY_RETRY_SECONDS={raw!r} is refused; accepted: seconds, "
                          f"{IDENTITY_RETRY_FLOOR_S}..{IDENTITY_RETRY_MAX_S}")
    # Shorter windows are raised to the floor: a forge restart takes minutes.
    return max(int(raw), IDENTITY_RETRY_FLOOR_S)


def load_forge_config(env: Mapping[str, str] | None = None) -> ForgeConfig:
    """Read and validate every forge block; pure (no file or network access)."""
    env = os.environ if env is None else env
    return ForgeConfig(
        github=_github(env), gitlab=_gitlab(env), forgejo=_forgejo(env), azure=_azure(env),
        identity_retry_s=_identity_window(env),
    )


def create_http() -> aiohttp.ClientSession:
    """The one HTTP client for forge APIs: no cookies carried between forges, a named User-Agent
    (GitHub refuses requests without one). Callers bound each request and refuse redirects."""
    return aiohttp.ClientSession(
        cookie_jar=aiohttp.DummyCookieJar(),
        headers={"User-Agent": "pi-dispatch"},
        raise_for_status=False,
    )



# --- HTTP plumbing shared by every forge call (authority lookups, identity, token mints) ---------------


class BadBody(Exception):
    """A forge answered 2xx with a body that is not the JSON it documents (or is too large)."""


class Unreachable(Exception):
    """No HTTP answer at all; ``reason`` is ``network`` or ``timeout``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Reply(msgspec.Struct, frozen=True):
    """One forge answer. Only 2xx bodies are read: an error body can echo the request (and its token)."""

    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes = b""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> object:
        """Parsed JSON, or ``BadBody`` (the parser's message is dropped: it quotes the body)."""
        try:
            return msgspec.json.decode(self.body)
        except msgspec.DecodeError:
            raise BadBody("unparseable JSON") from None


async def call(
    http: aiohttp.ClientSession,
    method: str,
    url: str | yarl.URL,
    *,
    headers: Mapping[str, str],
    json: object = None,
    timeout_s: float,
    limit: int = MAX_BODY,
) -> Reply:
    """One bounded request that never follows a redirect (a 30x must not carry the token elsewhere).

    Raises ``Unreachable`` without an answer and ``BadBody`` for a 2xx body past ``limit``.
    """
    try:
        async with http.request(
            method, url, headers=dict(headers), json=json, allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            lowered = {k.lower(): v for k, v in resp.headers.items()}
            if not 200 <= resp.status < 300:
                return Reply(resp.status, lowered)
            chunks: list[bytes] = []
            total = 0
            async for chunk in resp.content.iter_chunked(64 * 1024):
                total += len(chunk)
                if total > limit:
                    raise BadBody("response too large")
                chunks.append(chunk)
            return Reply(resp.status, lowered, b"".join(chunks))
    except TimeoutError:
        raise Unreachable("timeout") from None
    except (aiohttp.ClientError, OSError):
        raise Unreachable("network") from None
