"""The status page's door: credentials of some strength, a constant-time check, and a throttle on guessing."""

from __future__ import annotations

import base64

import pytest
from structlog.testing import capture_logs

from pidispatch.common.errors import ConfigError
from pidispatch.common.secret import Secret
from pidispatch.console.webauth import (
    FREE_FAILURES,
    FailureThrottle,
    authorized,
    check_exposure,
    web_credentials,
)


@pytest.mark.parametrize("password", [" ", "short-pw", "eleven-char", " " * 12])
def test_a_password_under_twelve_characters_or_blank_is_refused(password: str) -> None:
    with pytest.raises(ConfigError) as err:
        web_credentials({"PD_WEB_USER": "ops", "PD_WEB_PASSWORD": password})
    assert str(err.value) == ("PD_WEB_PASSWORD is shorter than 12 characters or blank; accepted: at least 12 "
                              "characters")


def test_twelve_characters_are_accepted() -> None:
    assert web_credentials({"PD_WEB_USER": "ops", "PD_WEB_PASSWORD": "twelve-chars"}) == (
        "ops", Secret("twelve-chars"))


def header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_only_the_exact_pair_is_authorized_whatever_the_lengths() -> None:
    creds = ("ops", Secret("twelve-chars"))
    assert authorized(header("ops", "twelve-chars"), creds)
    for user, password in (("ops", "twelve-chars!"), ("ops", ""), ("op", "twelve-chars"), ("ops", "x" * 500)):
        assert not authorized(header(user, password), creds)
    assert not authorized(None, creds) and not authorized("Bearer x", creds)


async def test_repeated_failures_are_logged_and_slowed_per_client_and_a_success_resets() -> None:
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    throttle = FailureThrottle(clock=lambda: 0.0, sleep=sleep)
    with capture_logs() as logs:
        for _ in range(FREE_FAILURES + 3):
            await throttle.failed("10.0.0.7")
        await throttle.failed("10.0.0.8")
    assert slept == [0.5, 1.0, 2.0]
    assert [e["failures"] for e in logs if e["client"] == "10.0.0.7"] == [1, 2, 3, 4, 5, 6]
    assert all(e["event"] == "web_auth_failed" and e["log_level"] == "warning" for e in logs)
    throttle.passed("10.0.0.7")
    await throttle.failed("10.0.0.7")
    assert slept == [0.5, 1.0, 2.0]


def test_credentials_go_together() -> None:
    assert web_credentials({}) is None
    user, secret = web_credentials({"PD_WEB_USER": "ops", "PD_WEB_PASSWORD": "pw-of-twelve"}) or ("", None)
    assert user == "ops" and secret is not None and secret.reveal() == "pw-of-twelve"
    assert "pw-of" not in repr(secret)
    for env in ({"PD_WEB_USER": "ops"}, {"PD_WEB_PASSWORD": "pw-of-twelve"}):
        with pytest.raises(ConfigError, match="PD_WEB_USER and PD_WEB_PASSWORD go together"):
            web_credentials(env)


def test_beyond_loopback_needs_credentials() -> None:
    for bind in ("127.0.0.1", "127.1.2.3", "::1", "localhost"):
        check_exposure(bind, None)
    for bind in ("0.0.0.0", "::", "192.168.1.5", "example.org"):
        with pytest.raises(ConfigError, match=r"PD_WEB_USER/PD_WEB_PASSWORD are unset"):
            check_exposure(bind, None)
        check_exposure(bind, object())


def test_authorized_needs_both_exactly() -> None:
    creds = web_credentials({"PD_WEB_USER": "ops", "PD_WEB_PASSWORD": "p:w-long-enough"})
    assert creds is not None

    def basic(pair: str) -> str:
        return "Basic " + base64.b64encode(pair.encode()).decode()

    assert authorized(basic("ops:p:w-long-enough"), creds)
    assert authorized(basic("ops:p:w-long-enough").replace("Basic", "basic"), creds)
    for header in (None, "", basic("ops:p"), basic("ops:p:w-long-enough2"), basic("opsp:w"),
                   basic("op:p:w-long-enough"), "Bearer x", "Basic %%%"):
        assert not authorized(header, creds), header
