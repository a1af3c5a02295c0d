"""Every answer the receiver gives other than 202/204: status, exact JSON body, and a log token.

All are listed in docs/receiver.md; the edge never asks a forge, so none is a failed lookup. GitHub,
Forgejo and GitLab spell errors with spaces; Azure with hyphens. The ``reason`` token goes to the log line
and the ``reason`` label of ``pd_receiver_deliveries_total``, so the set of tokens is fixed here.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from pidispatch import forges


class ReceiverRefusal(NamedTuple):
    status: int
    reason: str  # log token, e.g. "invalid-signature"
    body: bytes  # the exact JSON answer


def _refusal(status: int, error: str, reason: str) -> ReceiverRefusal:
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
METHOD_NOT_ALLOWED = _refusal(405, "method not allowed", "method-not-allowed")
UNSUPPORTED_MEDIA_TYPE = _refusal(415, "unsupported media type", "unsupported-media-type")
PAYLOAD_TOO_LARGE = _refusal(413, "payload too large", "payload-too-large")
# The client stopped sending mid-body; aiohttp usually cancels the handler first, so this is rarely seen.
BODY_INCOMPLETE = _refusal(400, "incomplete body", "body-incomplete")
# A delivery id becomes a Redis key suffix; one that cannot be is refused on every forge.
INVALID_DELIVERY_ID = _refusal(400, "invalid delivery id", "invalid-delivery-id")
INVALID_JSON = _refusal(400, "invalid-json", "invalid-json")
ENQUEUE_FAILED = _refusal(503, "enqueue-failed", "enqueue-failed")
INTERNAL_ERROR = _refusal(500, "internal error", "internal-error")

# GitHub and Forgejo/Gitea (identical transport, so identical answers).
MISSING_SIGNATURE = _refusal(401, "missing signature", "missing-signature")
MISSING_EVENT_HEADERS = _refusal(400, "missing github event headers", "missing-event-headers")
INVALID_SIGNATURE = _refusal(401, "invalid signature", "invalid-signature")

# GitLab; the transport rows it shares with GitHub use the same bodies.
MISSING_GITLAB_EVENT = _refusal(400, "missing gitlab event header", "missing-event-header")
MISSING_GITLAB_DELIVERY = ReceiverRefusal(
    400,
    "missing-delivery-id",
    msgspec.json.encode(
        {
            "error": "missing delivery id",
            "detail": "no webhook-id or Idempotency-Key header; pi-dispatch needs GitLab 17.4 or later "
            "to dedup redeliveries",
        }
    ),
)
INVALID_TIMESTAMP = _refusal(401, "stale or invalid timestamp", "invalid-timestamp")
MISSING_TOKEN = _refusal(401, "missing token", "missing-token")
INVALID_TOKEN = _refusal(401, "invalid token", "invalid-token")

# Azure DevOps: one 401 body, two log tokens so the operator can tell "sent nothing" from "wrong".
AZURE_MISSING_CREDENTIAL = _refusal(401, "unauthorized", "missing-credential")
AZURE_INVALID_CREDENTIAL = _refusal(401, "unauthorized", "invalid-credential")
AZURE_MISSING_DELIVERY_ID = _refusal(400, "missing-delivery-id", "missing-delivery-id")

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

AZURE_TABLE = Table(
    method_not_allowed=_refusal(405, "method-not-allowed", "method-not-allowed"),
    unsupported_media_type=_refusal(415, "unsupported-media-type", "unsupported-media-type"),
    payload_too_large=_refusal(413, "payload-too-large", "payload-too-large"),
    body_incomplete=_refusal(400, "incomplete-body", "body-incomplete"),
    invalid_delivery_id=_refusal(400, "invalid-delivery-id", "invalid-delivery-id"),
    invalid_json=INVALID_JSON,
    enqueue_failed=ENQUEUE_FAILED,
    internal_error=_refusal(500, "internal", "internal-error"),
)


def not_configured(forge: str) -> ReceiverRefusal:
    """A forge without configuration has no handler, whatever the method or headers."""
    return _refusal(404, f"{forge} webhooks are not configured", "not-configured")


# Every reason token above, for the metric's documentation and the tests that pin the set.
REASONS = frozenset(
    r.reason
    for r in (
        *DEFAULT_TABLE,
        *AZURE_TABLE,
        MISSING_SIGNATURE,
        MISSING_EVENT_HEADERS,
        INVALID_SIGNATURE,
        MISSING_GITLAB_EVENT,
        MISSING_GITLAB_DELIVERY,
        INVALID_TIMESTAMP,
        MISSING_TOKEN,
        INVALID_TOKEN,
        AZURE_MISSING_CREDENTIAL,
        AZURE_INVALID_CREDENTIAL,
        AZURE_MISSING_DELIVERY_ID,
        *(not_configured(forge) for forge in forges.names()),
    )
)
