"""Reading forge variables from the environment: the shared validators each forge's ``config`` uses.

Every refusal raises ``ConfigError`` naming the variable and what is accepted (exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from pidispatch.common.errors import ConfigError
from pidispatch.common.secret import Secret

MAX_ID = 2**53  # ids travel through JSON; past this a float would round them
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def http_url(name: str, raw: str) -> str:
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


def positive_id(env: Mapping[str, str], name: str) -> int | None:
    raw = get(env, name)
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_ID:
        raise ConfigError(f"{name}={raw!r} is refused; accepted: a positive integer id")
    return int(raw)


def secret(env: Mapping[str, str], name: str) -> Secret[str] | None:
    raw = get(env, name)
    return None if raw is None else Secret(raw)

