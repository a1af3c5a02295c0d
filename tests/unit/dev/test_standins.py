"""``pi-dispatch standin``: the demo delivery is signed as GitHub signs, retried until the receiver takes
it, and refused at once when the receiver says the secret is wrong; the stand-ins need their variables."""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from pidispatch.common.errors import ConfigError
from pidispatch.dev import standins
from pidispatch.dev.forgestandin import signed_headers
from pidispatch.dev.standins import deliver_command

SECRET = "a-demo-secret-of-some-length"


def test_the_headers_carry_githubs_event_delivery_and_signature_over_the_raw_body() -> None:
    body = b'{"action":"labeled"}'
    headers = signed_headers(SECRET, body, "d-1")
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert headers == {"Content-Type": "application/json", "X-GitHub-Event": "issues",
                       "X-GitHub-Delivery": "d-1", "X-Hub-Signature-256": expected}


@pytest.fixture
async def receiver(unused_tcp_port: int) -> AsyncIterator[tuple[str, list[int], list[bytes]]]:
    """A receiver that answers the statuses queued in ``answers`` (then 202) and keeps each body."""
    answers: list[int] = []
    bodies: list[bytes] = []

    async def handle(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        status = answers.pop(0) if answers else 202
        return web.json_response({"status": "accepted" if status == 202 else "no"}, status=status)

    app = web.Application()
    app.router.add_post("/github", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    try:
        yield f"http://127.0.0.1:{unused_tcp_port}/github", answers, bodies
    finally:
        await runner.cleanup()


async def test_deliver_retries_a_busy_receiver_then_posts_a_fresh_pi_demo_delivery(
    receiver: tuple[str, list[int], list[bytes]], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, answers, bodies = receiver
    answers.append(503)
    monkeypatch.setenv("WEBHOOK_SECRET", SECRET)
    monkeypatch.setattr(standins, "_RETRY_S", 0.01)
    assert await deliver_command(argparse.Namespace(url=url)) == 0
    assert len(bodies) == 2 and bodies[0] == bodies[1]
    payload = json.loads(bodies[1])
    assert payload["label"]["name"] == "pi:demo" and payload["issue"]["number"] >= 2
    assert ": 202 " in capsys.readouterr().out


async def test_deliver_refused_by_the_receiver_is_a_configuration_error(
    receiver: tuple[str, list[int], list[bytes]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, answers, _ = receiver
    answers.append(401)
    monkeypatch.setenv("WEBHOOK_SECRET", SECRET)
    with pytest.raises(ConfigError, match="refused the demo delivery: HTTP 401"):
        await deliver_command(argparse.Namespace(url=url))


def test_the_forge_wants_a_token_nobody_guesses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_PAT", "short")
    with pytest.raises(ConfigError, match="GITHUB_PAT is too short; accepted: at least 16"):
        standins._required("GITHUB_PAT", standins.TOKEN_MIN)
    monkeypatch.delenv("GITHUB_PAT")
    with pytest.raises(ConfigError, match="GITHUB_PAT is unset"):
        standins._required("GITHUB_PAT", standins.TOKEN_MIN)
