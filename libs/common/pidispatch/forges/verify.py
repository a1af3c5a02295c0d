"""Is a delivery authentic and well-formed? Pure decisions over headers and raw bytes; no I/O.

The checks a forge's preamble is made of (each forge's ``receive`` runs them in its own fixed order
before the body), the credential checks over the raw bytes, and the minimal reads of a verified body.
Credential checks return the index of the secret that matched (0 current, 1 previous) so rotation is
visible to the caller; every compare is constant-time over equal-length values.

Header values arrive as aiohttp decodes them (UTF-8 with ``surrogateescape``); they are re-encoded the
same way so a MAC covers exactly the bytes that were sent and odd bytes can never raise.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Sequence
from typing import Any

import msgspec

from pidispatch.forges.refusals import (
    INVALID_SIGNATURE,
    INVALID_TIMESTAMP,
    INVALID_TOKEN,
    MISSING_SIGNATURE,
    MISSING_TOKEN,
    ReceiverRefusal,
)

MAX_BODY_BYTES = 2 * 1024 * 1024
MAX_DELIVERY_ID_CHARS = 128
JSON_MEDIA_TYPE = "application/json"
GITHUB_SIGNATURE_PREFIX = "sha256="
# Standard Webhooks' replay window, both directions.
GITLAB_TOLERANCE_MS = 5 * 60 * 1000
GITLAB_SECRET_PREFIX = "whsec_"
_MAX_TIMESTAMP_DIGITS = 12  # seconds until the year 33658: anything longer is not a clock
_SHA256_BYTES = 32
NO_MATCH = -1


def _raw(value: str) -> bytes:
    return value.encode("utf-8", "surrogateescape")


def is_json_media_type(content_type: str | None) -> bool:
    """The media type before any ``;`` parameter, trimmed and lower-cased, is ``application/json``."""
    if content_type is None:
        return False
    if content_type == JSON_MEDIA_TYPE:  # the common case costs one compare
        return True
    return content_type.partition(";")[0].strip().lower() == JSON_MEDIA_TYPE


def valid_delivery_id(delivery: str) -> bool:
    """A delivery id becomes a Redis key suffix: 1-128 characters, no whitespace or control characters.

    ``isprintable`` is false for every control, separator and surrogate character except the ASCII
    space, which is refused separately.
    """
    return 0 < len(delivery) <= MAX_DELIVERY_ID_CHARS and delivery.isprintable() and " " not in delivery


def too_large(content_length: int | None) -> bool:
    """The declared length alone is past the limit (a chunked body is counted as it streams)."""
    return content_length is not None and content_length > MAX_BODY_BYTES


# --- credentials over the raw bytes ------------------------------------------------------------------


def hmac_hex_match(secrets: Sequence[bytes], body: bytes, presented: str, prefix: str = "") -> int:
    """Index of the secret whose HMAC-SHA256 of ``body`` is ``presented`` (``prefix`` + lowercase hex).

    GitHub sends ``sha256=<hex>`` (``X-Hub-Signature-256``); Forgejo and Gitea also send the bare hex
    (``X-Forgejo-Signature``, ``X-Gitea-Signature``). A non-ASCII value cannot match and
    ``compare_digest`` would raise on it, so it is refused up front (its being non-ASCII is no secret).
    """
    if not presented.isascii():
        return NO_MATCH
    for index, secret in enumerate(secrets):
        if hmac.compare_digest(prefix + hmac.digest(secret, body, "sha256").hex(), presented):
            return index
    return NO_MATCH


def github_signature_ok(secret: bytes, body: bytes, signature: str) -> bool:
    """``X-Hub-Signature-256`` is ``sha256=`` + lowercase hex HMAC-SHA256 of the raw body."""
    return hmac_hex_match((secret,), body, signature, GITHUB_SIGNATURE_PREFIX) == 0


def decode_gitlab_signing_key(secret: str) -> bytes | None:
    """A GitLab signing token (``whsec_`` + base64, padding optional) as key bytes; None if it is not one.

    The prefix is optional as in the Standard Webhooks libraries; zero key bytes is not a key.
    """
    encoded = secret.removeprefix(GITLAB_SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    return key or None


def _unix_seconds(timestamp: str) -> int | None:
    if timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= _MAX_TIMESTAMP_DIGITS:
        return int(timestamp)
    return None


def _v1_signatures(header: str) -> list[bytes]:
    """The 32-byte values of every ``v1,<base64>`` entry of a space-separated list; others are skipped."""
    found = []
    for entry in header.split(" "):
        version, _, value = entry.partition(",")
        if version != "v1" or not value:
            continue
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            continue
        if len(raw) == _SHA256_BYTES:
            found.append(raw)
    return found


def gitlab_signature_match(
    keys: Sequence[bytes],
    signature: str | None,
    msg_id: str | None,
    timestamp: str | None,
    body: bytes,
    now_ms: int,
) -> int | ReceiverRefusal:
    """GitLab ``signature`` mode (Standard Webhooks): the matching key's index, or a refusal.

    The MAC covers ``<webhook-id>.<webhook-timestamp>.<body>``, so the timestamp is authenticated and
    the 5-minute window is a real replay bound; it is checked before the HMAC.
    """
    if not signature or not msg_id or not timestamp:
        return MISSING_SIGNATURE
    seconds = _unix_seconds(timestamp)
    if seconds is None or abs(now_ms - seconds * 1000) > GITLAB_TOLERANCE_MS:
        return INVALID_TIMESTAMP
    presented = _v1_signatures(signature)
    if presented:
        message = b"%s.%s.%s" % (_raw(msg_id), _raw(timestamp), body)
        for index, key in enumerate(keys):
            expected = hmac.digest(key, message, "sha256")
            if any(hmac.compare_digest(expected, candidate) for candidate in presented):
                return index
    return INVALID_SIGNATURE


def token_digest(token: bytes) -> bytes:
    """Secrets are compared as SHA-256 digests: equal lengths, so the compare leaks no length."""
    return hashlib.sha256(token).digest()


def gitlab_token_match(digests: Sequence[bytes], presented: str | None) -> int | ReceiverRefusal:
    """GitLab ``token`` mode: ``X-Gitlab-Token`` against the configured digests."""
    if not presented:
        return MISSING_TOKEN
    index = digest_match(digests, presented)
    return index if index != NO_MATCH else INVALID_TOKEN


def digest_match(digests: Sequence[bytes], presented: str) -> int:
    """Index of the digest of the header value ``presented`` (as sent, byte for byte), else NO_MATCH."""
    digest = token_digest(_raw(presented))
    for index, expected in enumerate(digests):
        if hmac.compare_digest(expected, digest):
            return index
    return NO_MATCH


# --- the minimal reads of a verified body ------------------------------------------------------------


class _AnyObject(msgspec.Struct):
    """No fields: decoding checks the body is one JSON object and skips its contents unbuilt."""


class _GitLabKind(msgspec.Struct):
    object_kind: Any = None


class _AzureHead(msgspec.Struct):
    id: Any = None
    eventType: Any = None  # Azure's spelling


_object_decoder = msgspec.json.Decoder(_AnyObject)
_gitlab_decoder = msgspec.json.Decoder(_GitLabKind)
_azure_decoder = msgspec.json.Decoder(_AzureHead)


def _decode(decoder: msgspec.json.Decoder[Any], body: bytes) -> Any:
    """The decoded head of a UTF-8 JSON object, or None.

    msgspec's skip of unbuilt values checks JSON syntax but not UTF-8 inside strings, and the router
    decodes the stored body as UTF-8, so non-ASCII bodies are also decoded once.
    """
    try:
        head = decoder.decode(body)
        if not body.isascii():
            body.decode()
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        return None  # RecursionError: nested deeper than the decoder goes, not a body a forge sends
    return head


def is_json_object(body: bytes) -> bool:
    """The verified body is valid UTF-8 JSON whose top level is an object."""
    return _decode(_object_decoder, body) is not None


class GitLabBody(msgspec.Struct, frozen=True):
    object_kind: str | None  # None when absent or not a string (system hooks carry event_name instead)


class AzureBody(msgspec.Struct, frozen=True):
    id: str | None  # None when absent, empty or not a string
    event_type: str | None


def read_gitlab_body(body: bytes) -> GitLabBody | None:
    """``object_kind`` of a verified GitLab body (``X-Gitlab-Event``'s value is not used); None if
    the body is not a JSON object."""
    head = _decode(_gitlab_decoder, body)
    if head is None:
        return None
    kind = head.object_kind
    return GitLabBody(kind if isinstance(kind, str) else None)


def read_azure_body(body: bytes) -> AzureBody | None:
    """Top-level ``id`` (the delivery id, not ``notificationId``) and ``eventType``; None if the body is
    not a JSON object."""
    head = _decode(_azure_decoder, body)
    if head is None:
        return None
    delivery, event_type = head.id, head.eventType
    return AzureBody(
        delivery if isinstance(delivery, str) and delivery else None,
        event_type if isinstance(event_type, str) else None,
    )
