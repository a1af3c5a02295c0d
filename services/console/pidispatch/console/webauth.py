"""The status page's door: basic-auth credentials (both or neither, a password of 12 characters or more),
their constant-time check, the refusal to serve beyond loopback without them, and a throttle that slows and
logs a client's repeated wrong guesses."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import ipaddress
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping

from pidispatch.common.envnames import WEB_PASSWORD_VAR
from pidispatch.common.errors import ConfigError
from pidispatch.common.log import get_logger
from pidispatch.common.secret import Secret

USER_VAR, PASSWORD_VAR = "PD_WEB_USER", WEB_PASSWORD_VAR
REALM = 'Basic realm="pi-dispatch", charset="UTF-8"'
PASSWORD_MIN_CHARS = 12
# Failures a client may make before each answer is delayed, doubling up to the cap; forgotten after a
# quiet spell. The table is bounded: the oldest client is dropped first.
FREE_FAILURES = 3
DELAY_FIRST_S = 0.5
DELAY_CAP_S = 8.0
FORGET_AFTER_S = 600.0
CLIENTS_MAX = 4096


def web_credentials(env: Mapping[str, str]) -> tuple[str, Secret[str]] | None:
    """Pure: basic-auth credentials from ``PD_WEB_USER`` and ``PD_WEB_PASSWORD``: both or neither."""
    user, password = (env.get(USER_VAR) or "").strip(), env.get(PASSWORD_VAR) or ""
    if bool(user) != bool(password):
        raise ConfigError(f"{USER_VAR} and {PASSWORD_VAR} go together; accepted: both set (basic auth) or "
                          "neither (no auth, loopback only)")
    if ":" in user:
        raise ConfigError(f"{USER_VAR} contains ':'; accepted: a user name without ':' (basic auth)")
    if user and (len(password) < PASSWORD_MIN_CHARS or not password.strip()):
        raise ConfigError(f"{PASSWORD_VAR} is shorter than {PASSWORD_MIN_CHARS} characters or blank; "
                          f"accepted: at least {PASSWORD_MIN_CHARS} characters")
    return (user, Secret(password)) if user else None


def is_loopback(bind: str) -> bool:
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


def check_exposure(bind: str, credentials: object | None) -> None:
    """Pure: refuse to serve beyond this machine without basic auth."""
    if credentials is None and not is_loopback(bind):
        raise ConfigError(
            f"--bind {bind} is not a loopback address and {USER_VAR}/{PASSWORD_VAR} are unset; accepted: "
            f"a loopback --bind (127.0.0.1, ::1), or set both {USER_VAR} and {PASSWORD_VAR}"
        )


def authorized(header: str | None, credentials: tuple[str, Secret[str]]) -> bool:
    """Pure: does an ``Authorization`` header carry exactly these credentials (compared in constant time)."""
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        user, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    want_user, want_password = credentials
    # Digests of fixed length: the compare takes the same time whatever the presented lengths.
    same_user = hmac.compare_digest(_digest(user), _digest(want_user))
    same_password = hmac.compare_digest(_digest(password), _digest(want_password.reveal()))
    return bool(sep) and same_user and same_password


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


class FailureThrottle:
    """Wrong guesses per client address: each one logged (``web_auth_failed``, the address and the count,
    never what was presented), and past ``FREE_FAILURES`` each answer waits longer before it goes out."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._clock, self._sleep = clock, sleep
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def delay_s(self, count: int) -> float:
        """Pure: the wait before answering a client's ``count``-th consecutive failure."""
        if count <= FREE_FAILURES:
            return 0.0
        return float(min(DELAY_FIRST_S * 2 ** (count - FREE_FAILURES - 1), DELAY_CAP_S))

    async def failed(self, client: str) -> None:
        now = self._clock()
        count, last = self._failures.pop(client, (0, now))
        count = 1 if now - last > FORGET_AFTER_S else count + 1
        self._failures[client] = (count, now)
        while len(self._failures) > CLIENTS_MAX:
            self._failures.popitem(last=False)
        delay = self.delay_s(count)
        get_logger().warning("web_auth_failed", client=client, failures=count, delay_s=delay)
        if delay:
            await self._sleep(delay)

    def passed(self, client: str) -> None:
        self._failures.pop(client, None)
