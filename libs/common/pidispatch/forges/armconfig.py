"""A receiver's arms: which forges it serves and with which credentials.

Read once at startup from the environment, validated whole; a bad or half-configured arm raises
``ConfigError`` naming the variable and what is accepted (exit 2). Messages never carry a secret's value.

Each forge's block is read by its own ``receive`` module (``ReceiverForge.load``) with the helpers
below. On purpose (least privilege): the receiver never calls a forge API, so an arm requires only the
variables the receiver uses (mode, secret, header name), never a forge token or URL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import msgspec

from pidispatch.common.errors import ConfigError
from pidispatch.common.secret import Secret
from pidispatch.forges import FORGES


class ArmConfig(Protocol):
    """One forge's webhook block as its ``load`` read it; the rest of the receiver reads only its secrets."""

    @property
    def secrets(self) -> tuple[Secret[bytes], ...]:
        """Current first, then the previous one while rotating."""
        ...


class ReceiverConfig(msgspec.Struct, frozen=True, kw_only=True):
    # Each served forge's block by forge name, in FORGES order; a forge absent here has no arm.
    arms: Mapping[str, ArmConfig]

    def forges(self) -> list[str]:
        return list(self.arms)


def read_var(env: Mapping[str, str], name: str) -> str | None:
    """As common.settings reads variables: blank is unset, surrounding whitespace is not part of a value."""
    value = env.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def first_present(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    """The first of ``names`` that is set: an arm exists when any of its variables is present."""
    return next((name for name in names if read_var(env, name) is not None), None)


def required(env: Mapping[str, str], name: str, because: str, accepted: str) -> str:
    value = read_var(env, name)
    if value is None:
        raise ConfigError(f"{name} is required when {because}; accepted: {accepted}")
    return value


def with_previous(env: Mapping[str, str], name: str, current: str) -> tuple[str, ...]:
    previous = read_var(env, f"{name}_PREVIOUS")
    return (current,) if previous is None or previous == current else (current, previous)


# Every variable that holds a webhook secret (each forge's, and each one's rotation partner).
WEBHOOK_SECRET_VARS = tuple(
    f"{forge.webhook_secret_var}{suffix}" for forge in FORGES for suffix in ("", "_PREVIOUS")
)
SECRET_MIN_CHARS = 16


def check_secret_lengths(env: Mapping[str, str]) -> None:
    """Refuse a webhook secret short enough to guess: it is the only gate on what may start a job."""
    for name in WEBHOOK_SECRET_VARS:
        value = read_var(env, name)
        if value is not None and len(value) < SECRET_MIN_CHARS:
            raise ConfigError(
                f"{name} is {len(value)} characters; accepted: a secret of at least {SECRET_MIN_CHARS} "
                "characters (openssl rand -hex 32 makes one)"
            )


