"""Is a delivery authentic and well-formed? Pure decisions over headers and raw bytes; no I/O.

The checks a forge's preamble is made of (each forge's ``receive`` runs them in its own fixed order
before the body), the credential checks over the raw bytes, and the minimal reads of a verified body.
Credential checks return the index of the secret that matched (0 current, 1 previous) so rotation is
visible to the caller; every compare is constant-time over equal-length values.

Header values arrive as aiohttp decodes them (UTF-8 with ``surrogateescape``); they are re-encoded the
same way so a MAC covers exactly the bytes that were sent and odd bytes can never raise.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Any

import msgspec

MAX_BODY_BYTES = 2 * 1024 * 1024
MAX_DELIVERY_ID_CHARS = 128
JSON_MEDIA_TYPE = "application/json"
GITHUB_SIGNATURE_PREFIX = "sha256="
SHA256_BYTES = 32
NO_MATCH = -1


def raw(value: str) -> bytes:
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


def token_digest(token: bytes) -> bytes:
    """Secrets are compared as SHA-256 digests: equal lengths, so the compare leaks no length."""
    return hashlib.sha256(token).digest()


def digest_match(digests: Sequence[bytes], presented: str) -> int:
    """Index of the digest of the header value ``presented`` (as sent, byte for byte), else NO_MATCH."""
    digest = token_digest(raw(presented))
    for index, expected in enumerate(digests):
        if hmac.compare_digest(expected, digest):
            return index
    return NO_MATCH


# --- the minimal reads of a verified body ------------------------------------------------------------


class _AnyObject(msgspec.Struct):
    """No fields: decoding checks the body is one JSON object and skips its contents unbuilt."""


_object_decoder = msgspec.json.Decoder(_AnyObject)


def decode_head(decoder: msgspec.json.Decoder[Any], body: bytes) -> Any:
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
    return decode_head(_object_decoder, body) is not None


