"""Forge configuration: every forge's API block, read once from the environment, plus the identity window.

The router asks forges whether an actor may trigger work and resolves the harness's own identity with what
this module loads; the worker mints job tokens from the same values. Validation is early and whole: each
forge's ``config.load`` raises ``ConfigError`` naming the variable and what is accepted (exit 2).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Protocol

import msgspec

from pidispatch.common.errors import ConfigError
from pidispatch.forges import FORGES, Forge
from pidispatch.forges.envread import get

IDENTITY_RETRY_DEFAULT_S = 600
IDENTITY_RETRY_FLOOR_S = 60
IDENTITY_RETRY_MAX_S = 24 * 3600

# What an operator sets to give each forge credentials (named in refusals).
FORGE_VARIABLES = {f.name: f.credentials_hint for f in FORGES}


class ForgeBlock(Protocol):
    """One forge's API block as its ``config.load`` read it; its own package reads the rest, typed
    (``block_of`` in ``pidispatch.forges.<name>.config``)."""

    @property
    def configured(self) -> bool: ...

    def job_urls(self) -> tuple[str, ...]:
        """The URLs a job of this forge reaches (its API and git), for the egress allowlist."""
        ...


def _load_block(forge: Forge, env: Mapping[str, str]) -> ForgeBlock:
    load: Callable[[Mapping[str, str]], ForgeBlock] = forge.part("config", "load")
    return load(env)


def _unconfigured() -> dict[str, ForgeBlock]:
    return {f.name: _load_block(f, {}) for f in FORGES}


class ForgeConfig(msgspec.Struct, frozen=True, kw_only=True):
    # Each forge's block by forge name, in FORGES order: a fifth forge adds no field here.
    blocks: Mapping[str, ForgeBlock] = msgspec.field(default_factory=_unconfigured)
    identity_retry_s: int = IDENTITY_RETRY_DEFAULT_S

    def block(self, forge: str) -> ForgeBlock:
        return self.blocks[forge]

    def job_urls(self) -> tuple[str, ...]:
        """What jobs of every configured forge reach, in FORGES order."""
        return tuple(url for name in self.configured_forges() for url in self.blocks[name].job_urls())

    def configured_forges(self) -> tuple[str, ...]:
        return tuple(f.name for f in FORGES if self.blocks[f.name].configured)

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
    return ForgeConfig(blocks={f.name: _load_block(f, env) for f in FORGES},
                       identity_retry_s=_identity_window(env))



def load_forge_config_by_forge(env: Mapping[str, str]) -> tuple[ForgeConfig, dict[str, str]]:
    """``load_forge_config`` for ``pi-dispatch doctor``: each forge's block on its own; a refused block
    is left unconfigured and its ConfigError text returned under the forge's name (``identity`` for the
    retry window)."""
    blocks = _unconfigured()
    errors: dict[str, str] = {}
    for forge in FORGES:
        try:
            blocks[forge.name] = _load_block(forge, env)
        except ConfigError as exc:
            errors[forge.name] = str(exc)
    window = IDENTITY_RETRY_DEFAULT_S
    try:
        window = _identity_window(env)
    except ConfigError as exc:
        errors["identity"] = str(exc)
    return ForgeConfig(blocks=blocks, identity_retry_s=window), errors
