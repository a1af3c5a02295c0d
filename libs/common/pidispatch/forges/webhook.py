"""The GitHub-style webhook GitHub and Forgejo/Gitea both send: an HMAC of the raw body, the event and
delivery id in headers, and the same answers. Written once here for both forges' ``receive``.
"""

from __future__ import annotations

from multidict import istr

from pidispatch.forges.arms import Classification, RequestHead
from pidispatch.forges.refusals import (
    DEFAULT_TABLE,
    INVALID_DELIVERY_ID,
    INVALID_SIGNATURE,
    METHOD_NOT_ALLOWED,
    MISSING_SIGNATURE,
    PAYLOAD_TOO_LARGE,
    UNSUPPORTED_MEDIA_TYPE,
    ReceiverRefusal,
    json_refusal,
)
from pidispatch.forges.verify import (
    NO_MATCH,
    is_json_media_type,
    is_json_object,
    too_large,
    valid_delivery_id,
)

# GitHub's names; Forgejo/Gitea send them too, beside their own.
HUB_SIGNATURE = istr("X-Hub-Signature-256")
GITHUB_EVENT = istr("X-GitHub-Event")
GITHUB_DELIVERY = istr("X-GitHub-Delivery")

# Identical transport, so identical answers: Forgejo answers GitHub's words too.
MISSING_EVENT_HEADERS = json_refusal(400, "missing github event headers", "missing-event-headers")


def github_preamble(
    method: str,
    content_type: str | None,
    signature: str | None,
    event: str | None,
    delivery: str | None,
    content_length: int | None,
) -> ReceiverRefusal | None:
    """GitHub and Forgejo/Gitea, in order: method, media type, signature, event headers, declared length.

    The delivery id check sits with the event headers because a bad id is a header fault, not a body fault.
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
    if too_large(content_length):
        return PAYLOAD_TOO_LARGE
    return None


def hmac_verdict(index: int) -> int | ReceiverRefusal:
    return INVALID_SIGNATURE if index == NO_MATCH else index


def classify_by_header(
    head: RequestHead, body: bytes, events: frozenset[str],
) -> Classification | ReceiverRefusal:
    """The event header names what is stored: ``events`` are, every other event answers 204 unstored."""
    if not is_json_object(body):
        return DEFAULT_TABLE.invalid_json
    assert head.delivery is not None  # the preamble refused a delivery without one
    return Classification(head.event, head.delivery, head.event in events)
