"""Forge configuration: every forge's API block, read once from the environment, plus the identity window.

The router asks forges whether an actor may trigger work and resolves the harness's own identity with what
this module loads; the worker mints job tokens from the same values. Validation is early and whole: each
forge's ``config.load`` raises ``ConfigError`` naming the variable and what is accepted (exit 2).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import msgspec

from pidispatch.common.errors import ConfigError
from pidispatch.forges import FORGES
from pidispatch.forges.azure.config import AzureForge
from pidispatch.forges.azure.config import load as load_azure
from pidispatch.forges.envread import get
from pidispatch.forges.forgejo.config import ForgejoForge
from pidispatch.forges.forgejo.config import load as load_forgejo
from pidispatch.forges.github.config import GithubForge
from pidispatch.forges.github.config import load as load_github
from pidispatch.forges.gitlab.config import GitlabForge
from pidispatch.forges.gitlab.config import load as load_gitlab

IDENTITY_RETRY_DEFAULT_S = 600
IDENTITY_RETRY_FLOOR_S = 60
IDENTITY_RETRY_MAX_S = 24 * 3600

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


def _identity_window(env: Mapping[str, str]) -> int:
    raw = get(env, "PD_IDENTITY_RETRY_SECONDS")
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
        github=load_github(env), gitlab=load_gitlab(env), forgejo=load_forgejo(env), azure=load_azure(env),
        identity_retry_s=_identity_window(env),
    )



def load_forge_config_by_forge(env: Mapping[str, str]) -> tuple[ForgeConfig, dict[str, str]]:
    """``load_forge_config`` for ``pi-dispatch doctor``: each forge's block on its own; a refused block
    is left unconfigured and its ConfigError text returned under the forge's name (``identity`` for the
    retry window)."""
    loaders = {"github": load_github, "gitlab": load_gitlab, "forgejo": load_forgejo, "azure": load_azure}
    blocks: dict[str, object] = {}
    errors: dict[str, str] = {}
    for name, load in loaders.items():
        try:
            blocks[name] = load(env)
        except ConfigError as exc:
            errors[name] = str(exc)
    try:
        blocks["identity_retry_s"] = _identity_window(env)
    except ConfigError as exc:
        errors["identity"] = str(exc)
    return ForgeConfig(**blocks), errors  # type: ignore[arg-type]
