"""Deliveries as each forge signs and sends them (headers, secrets, the receiver's environment for them),
and what a receiver test reads back: metrics, debug logs, the answer to a truncated request.

Independent of the receiver's code on purpose: these are written from the forges' documentation, so a
test that signs here and verifies there checks the receiver against the forge, not against itself.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
from collections.abc import Iterator
from typing import Any

import structlog
from prometheus_client.parser import text_string_to_metric_families

from pidispatch.common.keys import Keys
from pidispatch.common.log import configure_logging
from pidispatch.common.redis import Redis

TEST_SECRET = "test-webhook-secret"  # the base_env's WEBHOOK_SECRET
GITHUB_SECRET = TEST_SECRET
FORGEJO_SECRET = "forgejo-webhook-secret"
# A GitLab signing token: whsec_ + base64 of the key bytes.
GITLAB_KEY = b"gitlab signing key: 32 bytes ok!"
GITLAB_SIGNING_TOKEN = "whsec_" + base64.b64encode(GITLAB_KEY).decode()
GITLAB_TOKEN_SECRET = "gitlab-secret-token"
AZURE_BASIC_SECRET = base64.b64encode(b"hooks:azure-password").decode()
AZURE_HEADER_NAME = "X-Pi-Secret"
AZURE_HEADER_SECRET = "s3cret-azure-header"

JSON = {"Content-Type": "application/json"}


def hmac_hex(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def github_signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac_hex(secret, body)


def github_headers(body: bytes, event: str, delivery: str, secret: str = GITHUB_SECRET) -> dict[str, str]:
    """As GitHub sends them (docs: "Webhook events and payloads", "Validating webhook deliveries")."""
    return {
        **JSON,
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": "sha256=" + hmac_hex(secret, body),
    }


def forgejo_headers(
    body: bytes, event: str, delivery: str, secret: str = FORGEJO_SECRET, sender: str = "forgejo"
) -> dict[str, str]:
    """As Forgejo (``sender="forgejo"``) or Gitea (``"gitea"``) send them: their own names, plus the
    GitHub-compatible ones (Forgejo docs, "Webhooks")."""
    signature = hmac_hex(secret, body)
    headers = {
        **JSON,
        "X-Gitea-Event": event,
        "X-Gitea-Event-Type": event,
        "X-Gitea-Delivery": delivery,
        "X-Gitea-Signature": signature,
        "X-Gogs-Event": event,
        "X-Gogs-Delivery": delivery,
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": "sha256=" + signature,
    }
    if sender == "forgejo":
        headers.update(
            {"X-Forgejo-Event": event, "X-Forgejo-Delivery": delivery, "X-Forgejo-Signature": signature}
        )
    return headers


def standard_webhooks_signature(key: bytes, msg_id: str, timestamp: int | str, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`` (Standard Webhooks spec, "Signature")."""
    message = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode()


def gitlab_signature_headers(
    body: bytes,
    msg_id: str,
    timestamp_s: int,
    key: bytes = GITLAB_KEY,
    event: str = "Issue Hook",
) -> dict[str, str]:
    """GitLab 19's signed webhooks: Standard Webhooks headers plus ``X-Gitlab-Event``."""
    return {
        **JSON,
        "X-Gitlab-Event": event,
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": standard_webhooks_signature(key, msg_id, timestamp_s, body),
    }


def gitlab_token_headers(
    delivery: str, token: str = GITLAB_TOKEN_SECRET, event: str = "Issue Hook", legacy_id: bool = False
) -> dict[str, str]:
    """Token mode: ``X-Gitlab-Token``; the delivery id as ``webhook-id`` or, before 19.0,
    ``Idempotency-Key``."""
    return {
        **JSON,
        "X-Gitlab-Event": event,
        "Idempotency-Key" if legacy_id else "webhook-id": delivery,
        "X-Gitlab-Token": token,
    }


def azure_basic_headers(secret: str = AZURE_BASIC_SECRET) -> dict[str, str]:
    return {**JSON, "Authorization": f"Basic {secret}"}


def azure_header_headers(secret: str = AZURE_HEADER_SECRET, name: str = AZURE_HEADER_NAME) -> dict[str, str]:
    return {**JSON, name: secret}


def gitlab_signature_env() -> dict[str, str]:
    return {"GITLAB_WEBHOOK_MODE": "signature", "GITLAB_WEBHOOK_SECRET": GITLAB_SIGNING_TOKEN}


def gitlab_token_env() -> dict[str, str]:
    return {"GITLAB_WEBHOOK_MODE": "token", "GITLAB_WEBHOOK_SECRET": GITLAB_TOKEN_SECRET}


def forgejo_env() -> dict[str, str]:
    return {"FORGEJO_WEBHOOK_SECRET": FORGEJO_SECRET}


def azure_basic_env() -> dict[str, str]:
    return {"AZURE_WEBHOOK_MODE": "basic", "AZURE_WEBHOOK_SECRET": AZURE_BASIC_SECRET}


def azure_header_env() -> dict[str, str]:
    return {
        "AZURE_WEBHOOK_MODE": "header",
        "AZURE_WEBHOOK_HEADER": AZURE_HEADER_NAME,
        "AZURE_WEBHOOK_SECRET": AZURE_HEADER_SECRET,
    }


def metric(text: str, sample: str, **labels: str) -> float:
    """The value of one sample in a Prometheus text exposition (0 when the series does not exist)."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == sample and s.labels == labels:
                return s.value
    return 0.0


async def post_declaring(port: int, path: str, headers: dict[str, str], declared: int, body: bytes) -> bytes:
    """POST ``body`` while declaring ``declared`` bytes, and return the response head and body.

    Sends far less than declared: an answer that arrives proves the receiver did not wait for the rest.
    """
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k.lower() != "content-length")
    request = f"POST {path} HTTP/1.1\r\nHost: x\r\n{head}Content-Length: {declared}\r\n\r\n".encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request + body)
        await writer.drain()
        response = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        length = next(
            int(line.split(b":", 1)[1])
            for line in response.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        return response + await asyncio.wait_for(reader.readexactly(length), 5)
    finally:
        writer.close()


@contextlib.contextmanager
def debug_logs() -> Iterator[list[dict[str, Any]]]:
    """Capture every log line, debug included (the hot path logs stored deliveries at debug)."""
    configure_logging("receiver", "debug")
    try:
        with structlog.testing.capture_logs() as logs:
            yield logs
    finally:
        configure_logging("receiver", "info")


async def stored_keys(redis: Redis, keys: Keys) -> list[bytes]:
    """Every key a test's deployment has written but the count of ignored deliveries (an empty list
    proves no delivery was stored)."""
    return sorted(k for k in await redis.keys(f"{keys.prefix}:*") if k != keys.ignored.encode())
