"""Every answer the receiver gives other than 202/204: status, exact JSON body, and a log token.

All are listed in docs/receiver.md; the edge never asks a forge, so none is a failed lookup. The rows
here are shared; a forge's own answers (its spelling of the shared faults, rows that name it) are in its
``receive`` module and listed in its ``RECEIVE.refusals``. The ``reason`` token goes to the log line and
the ``reason`` label of ``pd_receiver_deliveries_total``, so the set of tokens is fixed (``reasons``).
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec


class ReceiverRefusal(NamedTuple):
    status: int
    reason: str  # log token, e.g. "invalid-signature"
    body: bytes  # the exact JSON answer


def json_refusal(status: int, error: str, reason: str) -> ReceiverRefusal:
    return ReceiverRefusal(status, reason, msgspec.json.encode({"error": error}))


class Table(NamedTuple):
    """One forge's answers to the faults every arm shares."""

    method_not_allowed: ReceiverRefusal
    unsupported_media_type: ReceiverRefusal
    payload_too_large: ReceiverRefusal
    body_incomplete: ReceiverRefusal
    invalid_delivery_id: ReceiverRefusal
    invalid_json: ReceiverRefusal
    enqueue_failed: ReceiverRefusal
    internal_error: ReceiverRefusal


# Built once: the request path allocates none of these.
METHOD_NOT_ALLOWED = json_refusal(405, "method not allowed", "method-not-allowed")
UNSUPPORTED_MEDIA_TYPE = json_refusal(415, "unsupported media type", "unsupported-media-type")
PAYLOAD_TOO_LARGE = json_refusal(413, "payload too large", "payload-too-large")
# The client stopped sending mid-body; aiohttp usually cancels the handler first, so this is rarely seen.
BODY_INCOMPLETE = json_refusal(400, "incomplete body", "body-incomplete")
# A delivery id becomes a Redis key suffix; one that cannot be is refused on every forge.
INVALID_DELIVERY_ID = json_refusal(400, "invalid delivery id", "invalid-delivery-id")
INVALID_JSON = json_refusal(400, "invalid-json", "invalid-json")
ENQUEUE_FAILED = json_refusal(503, "enqueue-failed", "enqueue-failed")
INTERNAL_ERROR = json_refusal(500, "internal error", "internal-error")

# The credential rows of the HMAC and token checks in ``verify``.
MISSING_SIGNATURE = json_refusal(401, "missing signature", "missing-signature")
INVALID_SIGNATURE = json_refusal(401, "invalid signature", "invalid-signature")
INVALID_TIMESTAMP = json_refusal(401, "stale or invalid timestamp", "invalid-timestamp")
MISSING_TOKEN = json_refusal(401, "missing token", "missing-token")
INVALID_TOKEN = json_refusal(401, "invalid token", "invalid-token")

# Spaces in the error words; a forge that spells its answers otherwise builds its own Table.
DEFAULT_TABLE = Table(
    method_not_allowed=METHOD_NOT_ALLOWED,
    unsupported_media_type=UNSUPPORTED_MEDIA_TYPE,
    payload_too_large=PAYLOAD_TOO_LARGE,
    body_incomplete=BODY_INCOMPLETE,
    invalid_delivery_id=INVALID_DELIVERY_ID,
    invalid_json=INVALID_JSON,
    enqueue_failed=ENQUEUE_FAILED,
    internal_error=INTERNAL_ERROR,
)


def not_configured(forge: str) -> ReceiverRefusal:
    """A forge without configuration has no handler, whatever the method or headers."""
    return json_refusal(404, f"{forge} webhooks are not configured", "not-configured")


