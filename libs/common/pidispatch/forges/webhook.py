"""The GitHub-style webhook GitHub and Forgejo/Gitea both send: an HMAC of the raw body, the event and
delivery id in headers, and the same answers. Written once here for both forges' ``receive``.
"""

from __future__ import annotations

from multidict import istr

from pidispatch.receiver.arms import Classification, RequestHead
from pidispatch.receiver.refusals import DEFAULT_TABLE, INVALID_SIGNATURE, ReceiverRefusal
from pidispatch.receiver.verify import NO_MATCH, is_json_object

# GitHub's names; Forgejo/Gitea send them too, beside their own.
HUB_SIGNATURE = istr("X-Hub-Signature-256")
GITHUB_EVENT = istr("X-GitHub-Event")
GITHUB_DELIVERY = istr("X-GitHub-Delivery")


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
