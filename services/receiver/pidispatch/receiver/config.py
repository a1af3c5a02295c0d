"""The receiver's own configuration: which forges it serves and with which credentials.

Read once at startup from the environment, validated whole; a bad or half-configured arm raises
``ConfigError`` naming the variable and what is accepted (exit 2). Messages never carry a secret's value.

On purpose (least privilege): the receiver never calls a forge API, so an arm requires only the
variables the receiver uses (mode, secret, header name), never a forge token or URL.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import msgspec

from pidispatch import forges
from pidispatch.common.errors import ConfigError
from pidispatch.common.keys import SPOOL_MAX_BYTES_DEFAULT
from pidispatch.common.secret import Secret
from pidispatch.common.settings import Settings
from pidispatch.receiver.verify import decode_gitlab_signing_key, token_digest

# RFC 9110 token characters: the only header names a request can carry.
_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$")


class GitHubConfig(msgspec.Struct, frozen=True, kw_only=True):
    secrets: tuple[Secret[bytes], ...]  # HMAC keys: current first, then the previous one while rotating


class ForgejoConfig(msgspec.Struct, frozen=True, kw_only=True):
    secrets: tuple[Secret[bytes], ...]


class GitLabConfig(msgspec.Struct, frozen=True, kw_only=True):
    mode: Literal["signature", "token"]
    # signature mode: the decoded signing keys; token mode: SHA-256 digests of the tokens.
    secrets: tuple[Secret[bytes], ...]


class AzureConfig(msgspec.Struct, frozen=True, kw_only=True):
    mode: Literal["basic", "header"]
    header: str | None  # the custom header's name (header mode)
    secrets: tuple[Secret[bytes], ...]  # SHA-256 digests of the credential


class ReceiverConfig(msgspec.Struct, frozen=True, kw_only=True):
    github: GitHubConfig | None = None
    gitlab: GitLabConfig | None = None
    forgejo: ForgejoConfig | None = None
    azure: AzureConfig | None = None

    def forges(self) -> list[str]:
        # Each forge's block is the field named after it.
        return [name for name in forges.names() if getattr(self, name) is not None]


def _get(env: Mapping[str, str], name: str) -> str | None:
    """As common.settings reads variables: blank is unset, surrounding whitespace is not part of a value."""
    value = env.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def _present(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    """The first of ``names`` that is set: an arm exists when any of its variables is present."""
    return next((name for name in names if _get(env, name) is not None), None)


def _required(env: Mapping[str, str], name: str, because: str, accepted: str) -> str:
    value = _get(env, name)
    if value is None:
        raise ConfigError(f"{name} is required when {because}; accepted: {accepted}")
    return value


def _with_previous(env: Mapping[str, str], name: str, current: str) -> tuple[str, ...]:
    previous = _get(env, f"{name}_PREVIOUS")
    return (current,) if previous is None or previous == current else (current, previous)


def _github(settings: Settings, env: Mapping[str, str]) -> GitHubConfig | None:
    """GitHub is served when ``WEBHOOK_SECRET`` or ``GITHUB_AUTH_SOURCE`` is set; the receiver never reads
    triggers.json, so the operator's secret, not "a github rule exists", is what arms it."""
    accepted = "a non-blank secret shared with the GitHub webhook"
    secret = settings.webhook_secret
    if secret is None or not secret.strip():
        if settings.github_auth_source:
            raise ConfigError(
                f"WEBHOOK_SECRET is required when GITHUB_AUTH_SOURCE is set; accepted: {accepted}"
            )
        if _get(env, "WEBHOOK_SECRET_PREVIOUS") is not None:
            raise ConfigError(
                f"WEBHOOK_SECRET is required when WEBHOOK_SECRET_PREVIOUS is set; accepted: {accepted}"
            )
        return None
    secrets = _with_previous(env, "WEBHOOK_SECRET", secret.strip())
    return GitHubConfig(secrets=tuple(Secret(s.encode()) for s in secrets))


FORGEJO_VARIABLES = (
    "FORGEJO_WEBHOOK_SECRET",
    "FORGEJO_TOKEN",
    "FORGEJO_URL",
    "FORGEJO_WEBHOOK_SECRET_PREVIOUS",
)


def _forgejo(env: Mapping[str, str]) -> ForgejoConfig | None:
    trigger = _present(env, FORGEJO_VARIABLES)
    if trigger is None:
        return None
    secret = _required(
        env,
        "FORGEJO_WEBHOOK_SECRET",
        f"the Forgejo arm is configured ({trigger} is set)",
        "a non-blank secret shared with the Forgejo/Gitea webhook",
    )
    secrets = _with_previous(env, "FORGEJO_WEBHOOK_SECRET", secret)
    return ForgejoConfig(secrets=tuple(Secret(s.encode()) for s in secrets))


GITLAB_VARIABLES = (
    "GITLAB_WEBHOOK_MODE",
    "GITLAB_WEBHOOK_SECRET",
    "GITLAB_TOKEN",
    "GITLAB_WEBHOOK_SECRET_PREVIOUS",
)
GITLAB_MODES = ("signature", "token")


def _gitlab(env: Mapping[str, str]) -> GitLabConfig | None:
    trigger = _present(env, GITLAB_VARIABLES)
    if trigger is None:
        return None
    because = f"the GitLab arm is configured ({trigger} is set)"
    mode = _required(env, "GITLAB_WEBHOOK_MODE", because, "signature, token")
    if mode not in GITLAB_MODES:
        raise ConfigError(f"GITLAB_WEBHOOK_MODE={mode!r} is refused; accepted: signature, token")
    if mode == "token":
        secret = _required(env, "GITLAB_WEBHOOK_SECRET", because, "the webhook's secret token")
        tokens = _with_previous(env, "GITLAB_WEBHOOK_SECRET", secret)
        return GitLabConfig(mode="token", secrets=tuple(Secret(token_digest(t.encode())) for t in tokens))
    secret = _required(env, "GITLAB_WEBHOOK_SECRET", because, "the webhook's signing token (whsec_<base64>)")
    keys = []
    for name, value in zip(
        ("GITLAB_WEBHOOK_SECRET", "GITLAB_WEBHOOK_SECRET_PREVIOUS"),
        _with_previous(env, "GITLAB_WEBHOOK_SECRET", secret),
        strict=False,
    ):
        key = decode_gitlab_signing_key(value)
        if key is None:
            # A token that decodes to nothing can never verify anything: refuse to come up believing
            # there is a gate.
            raise ConfigError(
                f"{name} is not a signing token in signature mode; accepted: whsec_ followed by "
                "non-empty base64 (the token GitLab shows for the webhook)"
            )
        keys.append(Secret(key))
    return GitLabConfig(mode="signature", secrets=tuple(keys))


AZURE_VARIABLES = (
    "AZURE_WEBHOOK_MODE",
    "AZURE_WEBHOOK_SECRET",
    "AZURE_WEBHOOK_HEADER",
    "AZURE_TOKEN",
    "AZURE_ORG_URL",
    "AZURE_WEBHOOK_SECRET_PREVIOUS",
)
AZURE_MODES = ("basic", "header")


def _azure(env: Mapping[str, str]) -> AzureConfig | None:
    trigger = _present(env, AZURE_VARIABLES)
    if trigger is None:
        return None
    because = f"the Azure DevOps arm is configured ({trigger} is set)"
    raw_mode = _required(env, "AZURE_WEBHOOK_MODE", because, "basic, header")
    if raw_mode not in AZURE_MODES:
        raise ConfigError(f"AZURE_WEBHOOK_MODE={raw_mode!r} is refused; accepted: basic, header")
    mode: Literal["basic", "header"] = "basic" if raw_mode == "basic" else "header"
    header = None
    if mode == "header":
        header = _required(
            env, "AZURE_WEBHOOK_HEADER", "AZURE_WEBHOOK_MODE=header", "an HTTP header name (X-Pi-Secret)"
        )
        if not _HEADER_NAME_RE.match(header):
            raise ConfigError(
                f"AZURE_WEBHOOK_HEADER={header!r} is refused; accepted: an HTTP header name, up to 64 "
                "characters without spaces or separators (X-Pi-Secret)"
            )
    accepted = (
        "the base64 of user:password set on the service hook" if mode == "basic" else "the header's value"
    )
    secret = _required(env, "AZURE_WEBHOOK_SECRET", because, accepted)
    credentials = _with_previous(env, "AZURE_WEBHOOK_SECRET", secret)
    return AzureConfig(
        mode=mode, header=header, secrets=tuple(Secret(token_digest(c.encode())) for c in credentials)
    )


def load_receiver_config(settings: Settings, env: Mapping[str, str]) -> ReceiverConfig:
    """Every arm this receiver serves; refuses a half-configured arm, or none at all (exit 2).

    GitHub's secret comes from ``settings`` (``WEBHOOK_SECRET``); everything else from ``env``.
    """
    config = ReceiverConfig(
        github=_github(settings, env), gitlab=_gitlab(env), forgejo=_forgejo(env), azure=_azure(env)
    )
    if not config.forges():
        raise ConfigError(
            "no webhook arm is configured; set WEBHOOK_SECRET (GitHub), FORGEJO_WEBHOOK_SECRET, "
            "GITLAB_WEBHOOK_MODE and GITLAB_WEBHOOK_SECRET, or AZURE_WEBHOOK_MODE and AZURE_WEBHOOK_SECRET"
        )
    return config


class SpoolConfig(msgspec.Struct, frozen=True, kw_only=True):
    directory: str  # absolute; this receiver's alone (held with flock while it runs)
    max_bytes: int


SPOOL_MIN_BYTES = 4 * 1024**2  # room for at least one delivery at the 2 MiB body limit
SPOOL_MAX_BYTES_LIMIT = 1024**4


def default_spool_dir(port: int) -> str:
    """Under the receiver's state folder, one per port: receivers on one host never share it."""
    return os.path.expanduser(f"~/.pi-dispatch/spool/receiver-{port}")


def load_spool_config(settings: Settings, env: Mapping[str, str]) -> SpoolConfig:
    """``PD_SPOOL_DIR`` (created if missing; refused when not a writable directory) and
    ``PD_SPOOL_MAX_BYTES``. Messages name the variable, never the path (host paths stay out of logs)."""
    raw = _get(env, "PD_SPOOL_DIR")
    directory = Path(os.path.expanduser(raw) if raw else default_spool_dir(settings.receiver_port))
    accepted = "a directory this user can create and write, one per receiver"
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ConfigError(f"PD_SPOOL_DIR cannot be created ({exc.strerror}); accepted: {accepted}") from None
    if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"PD_SPOOL_DIR is not a writable directory; accepted: {accepted}")
    size = _get(env, "PD_SPOOL_MAX_BYTES")
    accepted_size = f"a byte count from {SPOOL_MIN_BYTES} to {SPOOL_MAX_BYTES_LIMIT}"
    max_bytes = SPOOL_MAX_BYTES_DEFAULT
    if size is not None:
        if not size.isdigit() or not SPOOL_MIN_BYTES <= int(size) <= SPOOL_MAX_BYTES_LIMIT:
            raise ConfigError(f"PD_SPOOL_MAX_BYTES={size!r} is refused; accepted: {accepted_size}")
        max_bytes = int(size)
    return SpoolConfig(directory=str(directory.resolve()), max_bytes=max_bytes)
