"""The receiver's own configuration beside its arms (``forges.armconfig``): the spool."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

from pidispatch.common.errors import ConfigError
from pidispatch.common.keys import SPOOL_MAX_BYTES_DEFAULT
from pidispatch.common.settings import Settings
from pidispatch.forges.armconfig import read_var


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
