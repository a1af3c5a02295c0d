"""The syntax of the compound values in settings: secret-profile lists, sizes, CPU counts, uid:gid, dollar
amounts and whether a Redis URL carries a password.

Kept apart from the loader in ``settings``, which reads the environment: these turn text into a value, or
raise ``ConfigError`` naming the variable and what is accepted (``read_int`` reads one variable itself).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import parse_qs, urlsplit

from pidispatch.common.dollars import USD_ACCEPTED, usd_micros
from pidispatch.common.errors import ConfigError

JOB_USER_RE = re.compile(r"^([0-9]+):([0-9]+)$")
PROFILE_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
MEMORY_RE = re.compile(r"^([0-9]+)([kmg]?)$", re.IGNORECASE)
_MEMORY_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def read_int(env: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    """An integer variable in ``lo..hi``; unset or blank is ``default``."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw, 10)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer; accepted: {lo}..{hi}") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name}={value} is out of range; accepted: {lo}..{hi}")
    return value


def read_optional_int(env: Mapping[str, str], name: str, lo: int, hi: int) -> int | None:
    """An integer variable in ``lo..hi``; None when unset or blank (the feature it sets is off)."""
    return None if not (env.get(name) or "").strip() else read_int(env, name, 0, lo, hi)


def parse_profiles(name: str, raw: str | None, *, what: str = "resolver") -> tuple[tuple[str, str], ...]:
    """``name:/abs/path,name2:/abs/path2``: each entry split on its first colon."""
    raw = raw.strip() if raw is not None else None
    if not raw:
        return ()
    seen: dict[str, str] = {}
    for entry in raw.split(","):
        label, sep, path = entry.strip().partition(":")
        if not sep or not PROFILE_NAME_RE.match(label):
            raise ConfigError(
                f"{name} entry {label or entry!r} is refused; accepted: name:/absolute/path entries, "
                "names of [A-Za-z0-9._-], separated by commas"
            )
        if label in seen:
            raise ConfigError(f"{name} declares profile {label!r} twice; accepted: each name once")
        if not path or not os.path.isabs(path):
            raise ConfigError(f"{name} profile {label!r} needs an absolute {what} path")
        seen[label] = path
    return tuple(seen.items())


def parse_memory(name: str, raw: str) -> int:
    m = MEMORY_RE.match(raw)
    if not m:
        raise ConfigError(f"{name}={raw!r} is not a size; accepted: bytes or a number with k, m or g (4g)")
    value = int(m.group(1)) * _MEMORY_UNITS[m.group(2).lower()]
    if value < 64 * 1024**2:
        raise ConfigError(f"{name}={raw!r} is below the 64m floor a job container needs")
    return value


def parse_cpus(name: str, raw: str) -> int:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.1 <= value <= 256:
        raise ConfigError(f"{name}={raw!r} is not a CPU count; accepted: a number from 0.1 to 256 (2, 1.5)")
    return int(value * 1e9)


def parse_job_user(raw: str) -> str:
    m = JOB_USER_RE.match(raw)
    if not m or int(m.group(1)) == 0 or int(m.group(2)) == 0:
        raise ConfigError(
            f"PI_JOB_USER={raw!r} is refused; accepted: <uid>:<gid>, both non-zero numbers (1000:1000)"
        )
    return raw


def parse_usd(name: str, raw: str) -> int:
    """A dollar amount in exact micro-dollars (``0.1`` is 100000, never a float's neighbour)."""
    micros = usd_micros(raw)
    if micros is None:
        raise ConfigError(f"{name}={raw!r} is refused; accepted: {USD_ACCEPTED} such as 2.50")
    return micros


def url_carries_password(url: str) -> bool:
    """Whether the Redis client would take a password from ``url``: in its user information or as a
    ``password=`` query parameter (the client reads both; empty counts as none, as it does there)."""
    try:
        parts = urlsplit(url)
        return bool(parts.password) or bool(parse_qs(parts.query).get("password"))
    except ValueError:  # a malformed address: the client refuses it when it connects
        return False


def parse_program_path(name: str, raw: str | None) -> str | None:
    """An operator's program: only the path's shape here; it is looked up (realpath, executable) when run."""
    if raw is not None and not os.path.isabs(raw):
        raise ConfigError(f"{name} is not an absolute path; accepted: the absolute path of a program")
    return raw


def parse_base_url(name: str, raw: str | None) -> str | None:
    """An http(s) endpoint with a host and no credentials in it (the URL reaches every job's environment,
    where a key belongs in the provider's own variable)."""
    if raw is None:
        return None
    parts = urlsplit(raw)
    ok = (parts.scheme in ("http", "https") and parts.hostname and not parts.username and not parts.password
          and not parts.query and not parts.fragment and not any(c.isspace() or ord(c) < 0x20 for c in raw))
    if not ok:
        raise ConfigError(f"{name} is refused; accepted: an http:// or https:// URL with a host, without "
                          "credentials, query or fragment, like http://10.0.0.5:8080/v1")
    return raw.rstrip("/")


WORKER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# In PI_WORKER_NAME: the compose replica number, filled in by the worker at start (worker.replica).
REPLICA = "{replica}"


def image_ref_ok(ref: str) -> bool:
    """The one image-reference rule (``PI_JOB_IMAGE`` and a trigger's image alike): nothing that could read
    as a flag or smuggle control characters."""
    return bool(ref) and not (
        ref != ref.strip()
        or ref.startswith("-")
        or " " in ref
        or any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in ref)
    )


def checked_image(ref: str) -> str:
    if not image_ref_ok(ref):
        raise ConfigError(
            f"PI_JOB_IMAGE={ref!r} is refused; accepted: an image reference without spaces, "
            "control characters or a leading dash"
        )
    return ref


def check_worker_name(name: str) -> None:
    """Refuse a declared PI_WORKER_NAME. ``{replica}`` (once) stands for the compose replica number, which
    the worker fills in at start (worker.replica); the template is checked as replica 1 would read."""
    probe = name.replace(REPLICA, "1", 1)
    if "{" in probe or "}" in probe:
        raise ConfigError(
            f"PI_WORKER_NAME={name!r} is refused; accepted: the placeholder {REPLICA} at most once, "
            "and no other {...}"
        )
    if not WORKER_NAME_RE.match(probe) or probe.endswith((".json", ".log")):
        raise ConfigError(
            f"PI_WORKER_NAME={name!r} is refused; accepted: 1-64 of [A-Za-z0-9._-], "
            f"starting with a letter or digit, not ending in .json or .log, with {REPLICA} at most once"
        )
