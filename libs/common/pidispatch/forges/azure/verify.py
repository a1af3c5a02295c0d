"""Azure DevOps' read of a verified body: the delivery id and event type at its top level. Pure."""

from __future__ import annotations

from typing import Any

import msgspec

from pidispatch.forges.verify import decode_head


class _AzureHead(msgspec.Struct):
    id: Any = None
    eventType: Any = None  # Azure's spelling


_azure_decoder = msgspec.json.Decoder(_AzureHead)


class AzureBody(msgspec.Struct, frozen=True):
    id: str | None  # None when absent, empty or not a string
    event_type: str | None


def read_azure_body(body: bytes) -> AzureBody | None:
    """Top-level ``id`` (the delivery id, not ``notificationId``) and ``eventType``; None if the body is
    not a JSON object."""
    head = decode_head(_azure_decoder, body)
    if head is None:
        return None
    delivery, event_type = head.id, head.eventType
    return AzureBody(
        delivery if isinstance(delivery, str) and delivery else None,
        event_type if isinstance(event_type, str) else None,
    )
