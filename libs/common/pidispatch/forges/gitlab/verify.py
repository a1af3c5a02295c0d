"""GitLab's delivery checks: the signature mode (Standard Webhooks over id, timestamp and body, in a
5-minute window), the token mode, and the one field read from a verified body. Pure; no I/O."""

from __future__ import annotations

import base64
import binascii
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
from pidispatch.forges.verify import NO_MATCH, SHA256_BYTES, decode_head, digest_match, raw

# Standard Webhooks' replay window, both directions.
GITLAB_TOLERANCE_MS = 5 * 60 * 1000


GITLAB_SECRET_PREFIX = "whsec_"


_MAX_TIMESTAMP_DIGITS = 12  # seconds until the year 33658: anything longer is not a clock


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
        if len(raw) == SHA256_BYTES:
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
        message = b"%s.%s.%s" % (raw(msg_id), raw(timestamp), body)
        for index, key in enumerate(keys):
            expected = hmac.digest(key, message, "sha256")
            if any(hmac.compare_digest(expected, candidate) for candidate in presented):
                return index
    return INVALID_SIGNATURE


def gitlab_token_match(digests: Sequence[bytes], presented: str | None) -> int | ReceiverRefusal:
    """GitLab ``token`` mode: ``X-Gitlab-Token`` against the configured digests."""
    if not presented:
        return MISSING_TOKEN
    index = digest_match(digests, presented)
    return index if index != NO_MATCH else INVALID_TOKEN


class _GitLabKind(msgspec.Struct):
    object_kind: Any = None


_gitlab_decoder = msgspec.json.Decoder(_GitLabKind)


class GitLabBody(msgspec.Struct, frozen=True):
    object_kind: str | None  # None when absent or not a string (system hooks carry event_name instead)


def read_gitlab_body(body: bytes) -> GitLabBody | None:
    """``object_kind`` of a verified GitLab body (``X-Gitlab-Event``'s value is not used); None if
    the body is not a JSON object."""
    head = decode_head(_gitlab_decoder, body)
    if head is None:
        return None
    kind = head.object_kind
    return GitLabBody(kind if isinstance(kind, str) else None)
