"""What a forge package gives the worker: ``pidispatch.forges.<name>.api.API``."""

from __future__ import annotations

from typing import Protocol


class WorkerForge(Protocol):
    name: str
