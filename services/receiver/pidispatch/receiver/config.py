"""The receiver's own configuration: which forges it serves and with which credentials.

Read once at startup from the environment, validated whole; a bad or half-configured arm raises
``ConfigError`` naming the variable and what is accepted (exit 2). Messages never carry a secret's value.

Each forge's block is read by its own ``receive`` module (``ReceiverForge.load``) with the helpers
below. On purpose (least privilege): the receiver never calls a forge API, so an arm requires only the
variables the receiver uses (mode, secret, header name), never a forge token or URL.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

from pidispatch import forges
from pidispatch.common.errors import ConfigError
from pidispatch.common.keys import SPOOL_MAX_BYTES_DEFAULT
from pidispatch.common.settings import Settings
from pidispatch.forges.receive import ArmConfig


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
    f"{name}{suffix}"
    for name in ("WEBHOOK_SECRET", "GITLAB_WEBHOOK_SECRET", "FORGEJO_WEBHOOK_SECRET", "AZURE_WEBHOOK_SECRET")
    for suffix in ("", "_PREVIOUS")
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


def load_receiver_config(settings: Settings, env: Mapping[str, str]) -> ReceiverConfig:
    """Every arm this receiver serves; refuses a half-configured arm, a short secret, or no arm at all
    (exit 2).

    Each forge's ``load`` reads its own variables, in ``FORGES`` order (the first bad one is reported);
    secret lengths are checked once every arm is otherwise complete.
    """
    blocks = {forge.name: forge.receiver().load(settings, env) for forge in forges.FORGES}
    check_secret_lengths(env)
    config = ReceiverConfig(arms={name: block for name, block in blocks.items() if block is not None})
    if not config.arms:
        *first, last = arm_hints()
        raise ConfigError(f"no webhook arm is configured; set {', '.join(first)}, or {last}")
    return config


def arm_hints() -> list[str]:
    """What an operator sets to serve each forge, in ``FORGES`` order: ``VARIABLES (Forge)``."""
    return [f"{forge.receiver().setup_hint} ({forge.display})" for forge in forges.FORGES]


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
    raw = read_var(env, "PD_SPOOL_DIR")
    directory = Path(os.path.expanduser(raw) if raw else default_spool_dir(settings.receiver_port))
    accepted = "a directory this user can create and write, one per receiver"
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ConfigError(f"PD_SPOOL_DIR cannot be created ({exc.strerror}); accepted: {accepted}") from None
    if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"PD_SPOOL_DIR is not a writable directory; accepted: {accepted}")
    size = read_var(env, "PD_SPOOL_MAX_BYTES")
    accepted_size = f"a byte count from {SPOOL_MIN_BYTES} to {SPOOL_MAX_BYTES_LIMIT}"
    max_bytes = SPOOL_MAX_BYTES_DEFAULT
    if size is not None:
        if not size.isdigit() or not SPOOL_MIN_BYTES <= int(size) <= SPOOL_MAX_BYTES_LIMIT:
            raise ConfigError(f"PD_SPOOL_MAX_BYTES={size!r} is refused; accepted: {accepted_size}")
        max_bytes = int(size)
    return SpoolConfig(directory=str(directory.resolve()), max_bytes=max_bytes)
