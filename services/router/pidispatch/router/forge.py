"""What a forge package gives the router: ``pidispatch.forges.<name>.route.ROUTE``."""

from __future__ import annotations

from typing import Protocol


class RouterForge(Protocol):
    name: str
