"""GitHub's API configuration: base URL, how tokens are obtained (gh, pat or app) and its own id.

Read once from the environment and validated whole: a bad or half-configured block raises
``ConfigError`` naming the variable and what is accepted (exit 2). Secrets stay wrapped in ``Secret``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import msgspec

from pidispatch.common.errors import ConfigError
from pidispatch.common.secret import Secret
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.envread import ENV_NAME_RE, get, http_url, positive_id, secret
from pidispatch.forges.github import FORGE

GITHUB_API_DEFAULT = "https://api.github.com"
AUTH_SOURCES = ("gh", "pat", "app")
# A numeric App id, or the App's client id (GitHub accepts either as the JWT issuer).
APP_ID_RE = re.compile(r"^(?:[1-9][0-9]{0,15}|Iv[0-9A-Za-z.]{4,64})$")


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
    # GITHUB_HEAL_HOOKS: the repository webhooks whose delivery logs the healer reads, (owner/repo, hook id).
    heal_hooks: tuple[tuple[str, int], ...] = ()

    @property
    def configured(self) -> bool:
        return self.auth_source is not None

    def job_urls(self) -> tuple[str, ...]:
        """Where a job reaches GitHub (the egress allowlist): its API, and github.com's git beside the
        public API (an Enterprise server serves both on one host)."""
        return (self.api_url, "https://github.com") if self.api_url == GITHUB_API_DEFAULT else (self.api_url,)



def _pem(raw: str) -> Secret[str]:
    # .env files often carry a PEM on one line with literal \n; a real PEM has real newlines.
    text = raw.replace("\\n", "\n") if "\n" not in raw else raw
    if "-----BEGIN" not in text or "PRIVATE KEY-----" not in text:
        raise ConfigError(
            "GITHUB_APP_PRIVATE_KEY is not a PEM private key; accepted: the App's private key "
            "(-----BEGIN RSA PRIVATE KEY----- ...), newlines as real line breaks or \\n"
        )
    return Secret(text.strip() + "\n")


# ``owner/repo:hook_id``: GitHub's owner and repository name characters, a positive hook id.
HEAL_HOOK_RE = re.compile(r"^([A-Za-z0-9-]{1,39}/[A-Za-z0-9._-]{1,100}):([1-9][0-9]{0,15})$")


def heal_hooks(env: Mapping[str, str], source: str | None) -> tuple[tuple[str, int], ...]:
    """``GITHUB_HEAL_HOOKS=owner/repo:hook_id[,...]``: each hook once, read with GitHub's credentials."""
    raw = get(env, "GITHUB_HEAL_HOOKS")
    if raw is None:
        return ()
    if source is None:
        raise ConfigError("GITHUB_HEAL_HOOKS is set but GITHUB_AUTH_SOURCE is not; accepted: gh, pat or app "
                          "credentials that may read the hooks' deliveries")
    hooks: list[tuple[str, int]] = []
    for item in (part.strip() for part in raw.split(",")):
        m = HEAL_HOOK_RE.match(item)
        if m is None:
            raise ConfigError(f"GITHUB_HEAL_HOOKS entry {item!r} is refused; accepted: "
                              "owner/repo:hook_id[,owner/repo:hook_id...]")
        if (hook := (m.group(1), int(m.group(2)))) not in hooks:
            hooks.append(hook)
    return tuple(hooks)


def load(env: Mapping[str, str]) -> GithubForge:
    api_url = http_url("GITHUB_API_URL", get(env, "GITHUB_API_URL") or GITHUB_API_DEFAULT)
    source = get(env, "GITHUB_AUTH_SOURCE")
    if source is not None and source not in AUTH_SOURCES:
        raise ConfigError(f"GITHUB_AUTH_SOURCE={source!r} is refused; accepted: gh, pat, app")
    self_id = positive_id(env, "GITHUB_SELF_ID")
    hooks = heal_hooks(env, source)

    pat_var_raw = get(env, "GITHUB_PAT_VAR")
    if pat_var_raw is not None and source != "pat":
        raise ConfigError("GITHUB_PAT_VAR is set but GITHUB_AUTH_SOURCE is not pat; accepted: "
                          "GITHUB_AUTH_SOURCE=pat, or unset GITHUB_PAT_VAR")
    pat_var = pat_var_raw or "GITHUB_PAT"
    if not ENV_NAME_RE.match(pat_var):
        raise ConfigError(f"GITHUB_PAT_VAR={pat_var!r} is refused; accepted: an environment variable name")
    pat = None
    if source == "pat":
        pat = secret(env, pat_var)
        if pat is None:
            raise ConfigError(
                f"GITHUB_AUTH_SOURCE=pat needs the token in {pat_var} (the variable GITHUB_PAT_VAR names); "
                "it is unset or blank"
            )

    app_names = ("GITHUB_APP_ID", "GITHUB_APP_INSTALLATION_ID", "GITHUB_APP_PRIVATE_KEY",
                 "GITHUB_APP_PRIVATE_KEY_PATH")
    present = [n for n in app_names if get(env, n) is not None]
    if source != "app":
        if present:
            raise ConfigError(f"{present[0]} is set but GITHUB_AUTH_SOURCE is not app; accepted: "
                              "GITHUB_AUTH_SOURCE=app, or unset the GITHUB_APP_* variables")
        return GithubForge(api_url=api_url, auth_source=source, pat_var=pat_var, pat=pat, self_id=self_id,
                           heal_hooks=hooks)

    app_id = get(env, "GITHUB_APP_ID")
    if app_id is None or not APP_ID_RE.match(app_id):
        raise ConfigError("GITHUB_AUTH_SOURCE=app needs GITHUB_APP_ID; accepted: the App's numeric id "
                          "(or its client id, Iv...)")
    installation_id = positive_id(env, "GITHUB_APP_INSTALLATION_ID")
    if installation_id is None:
        raise ConfigError("GITHUB_AUTH_SOURCE=app needs GITHUB_APP_INSTALLATION_ID; accepted: the "
                          "installation's numeric id")
    key_raw, key_path = get(env, "GITHUB_APP_PRIVATE_KEY"), get(env, "GITHUB_APP_PRIVATE_KEY_PATH")
    if (key_raw is None) == (key_path is None):
        raise ConfigError("GITHUB_AUTH_SOURCE=app needs exactly one of GITHUB_APP_PRIVATE_KEY (the PEM) "
                          "or GITHUB_APP_PRIVATE_KEY_PATH (a file holding it)")
    return GithubForge(
        api_url=api_url, auth_source=source, pat_var=pat_var, app_id=app_id,
        installation_id=installation_id,
        app_private_key=_pem(key_raw) if key_raw is not None else None,
        app_private_key_path=os.path.expanduser(key_path) if key_path is not None else None,
        self_id=self_id, heal_hooks=hooks,
    )


def block_of(config: ForgeConfig) -> GithubForge:
    """This forge's block of ``config``, typed."""
    block = config.block(FORGE.name)
    assert isinstance(block, GithubForge)
    return block
