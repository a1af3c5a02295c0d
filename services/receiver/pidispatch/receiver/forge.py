"""What a forge package gives the receiver: ``pidispatch.forges.<name>.receive.RECEIVE``."""

from __future__ import annotations

from typing import Protocol


class ReceiverForge(Protocol):
    name: str
