"""Is a delivery authentic and well-formed? Pure decisions over headers and raw bytes; no I/O.

Each refusal is one row of spec ingest §1.3: its HTTP status, its exact JSON body and a short reason
token for the log. The HTTP layer only sends what these functions decide.
"""

from __future__ import annotations

import hmac
from typing import NamedTuple

import msgspec

MAX_BODY_BYTES = 2 * 1024 * 1024
MAX_DELIVERY_ID_CHARS = 128
JSON_MEDIA_TYPE = "application/json"
GITHUB_SIGNATURE_PREFIX = "sha256="


class Refusal(NamedTuple):
    status: int
    reason: str  # log token, e.g. "invalid-signature"
    body: bytes  # the exact JSON answer


def _refusal(status: int, error: str, reason: str) -> Refusal:
    return Refusal(status, reason, msgspec.json.encode({"error": error}))


# Built once: the request path allocates none of these.
METHOD_NOT_ALLOWED = _refusal(405, "method not allowed", "method-not-allowed")
UNSUPPORTED_MEDIA_TYPE = _refusal(415, "unsupported media type", "unsupported-media-type")
MISSING_SIGNATURE = _refusal(401, "missing signature", "missing-signature")
MISSING_EVENT_HEADERS = _refusal(400, "missing github event headers", "missing-event-headers")
INVALID_DELIVERY_ID = _refusal(400, "invalid delivery id", "invalid-delivery-id")
PAYLOAD_TOO_LARGE = _refusal(413, "payload too large", "payload-too-large")
INVALID_SIGNATURE = _refusal(401, "invalid signature", "invalid-signature")
INVALID_JSON = _refusal(400, "invalid-json", "invalid-json")


def not_configured(forge: str) -> Refusal:
    """Spec §1.1: a forge without configuration has no handler, whatever the method or headers."""
    return _refusal(404, f"{forge} webhooks are not configured", "not-configured")


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


def github_preamble(
    method: str,
    content_type: str | None,
    signature: str | None,
    event: str | None,
    delivery: str | None,
    content_length: int | None,
) -> Refusal | None:
    """Spec §1.3 rows 1-5, in that order: everything decidable before reading the body.

    The delivery id check sits with row 4 because a bad id is a header fault, not a body fault.
    """
    if method != "POST":
        return METHOD_NOT_ALLOWED
    if not is_json_media_type(content_type):
        return UNSUPPORTED_MEDIA_TYPE
    if not signature:
        return MISSING_SIGNATURE
    if not event or not delivery:
        return MISSING_EVENT_HEADERS
    if not valid_delivery_id(delivery):
        return INVALID_DELIVERY_ID
    if content_length is not None and content_length > MAX_BODY_BYTES:
        return PAYLOAD_TOO_LARGE
    return None


def github_signature_ok(secret: bytes, body: bytes, signature: str) -> bool:
    """``X-Hub-Signature-256`` is ``sha256=`` + lowercase hex HMAC-SHA256 of the raw body.

    Constant-time compare; a non-ASCII header cannot match and ``compare_digest`` would reject it with
    ``TypeError``, so it is refused up front (its being non-ASCII is no secret).
    """
    if not signature.isascii():
        return False
    expected = GITHUB_SIGNATURE_PREFIX + hmac.digest(secret, body, "sha256").hex()
    return hmac.compare_digest(expected, signature)


class _AnyObject(msgspec.Struct):
    """No fields: decoding checks the body is one JSON object and skips its contents unbuilt."""


_object_decoder = msgspec.json.Decoder(_AnyObject)


def is_json_object(body: bytes) -> bool:
    """The verified body is valid UTF-8 JSON whose top level is an object.

    msgspec's skip of unbuilt values checks JSON syntax but not UTF-8 inside strings, and the router
    decodes the stored body as UTF-8, so non-ASCII bodies are also decoded once.
    """
    try:
        _object_decoder.decode(body)
        if not body.isascii():
            body.decode()
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        return False
    return True
