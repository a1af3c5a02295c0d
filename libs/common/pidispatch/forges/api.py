"""What a forge package gives the worker, and how the worker finds the API client for a forge job.

Each forge's ``pidispatch.forges.<name>.api`` exports ``API: WorkerForge``. When the worker starts it calls
``start`` on every forge once (``start_forges``): what outlives one job, such as GitHub's token source, is
built there. A job's client is then one lookup by the job's kind (``forge_api``); no module outside the
forge packages names a forge.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, cast

import aiohttp

from pidispatch import forges
from pidispatch.common.models import Job
from pidispatch.common.outcome import JobConfigRefused
from pidispatch.common.runtime import EpochMsClock
from pidispatch.forges.base import Forge
from pidispatch.forges.config import ForgeConfig


@dataclass(frozen=True)
class Tip:
    """The repository's default branch, its commit now, and where to fetch it from (no credentials)."""

    default_branch: str
    sha: str
    clone_url: str


class ForgeApi(Protocol):
    """One forge job's API calls: a token for the job, the tip, protection, one comment on its item."""

    async def mint(self) -> str: ...

    async def tip(self, token: str) -> Tip: ...

    async def protected_tip(self, token: str) -> Tip | None: ...

    async def protected(self, token: str, branch: str) -> bool: ...

    async def comment(self, token: str, text: str) -> None: ...


# One forge's client for one job; raises ``JobConfigRefused`` for a job address it cannot use.
MakeClient = Callable[[Job], ForgeApi]


class WorkerForge(Protocol):
    """What a forge package gives the worker: ``pidispatch.forges.<name>.api.API``."""

    def start(self, config: ForgeConfig, http: aiohttp.ClientSession, clock: EpochMsClock) -> MakeClient:
        """Called once per worker, after its HTTP client exists: the forge's state that outlives a job
        (a token source, its caches) is built here and shared by every client it makes."""
        ...


def start_forges(
    config: ForgeConfig, http: aiohttp.ClientSession, clock: EpochMsClock
) -> dict[str, MakeClient]:
    """Every forge's client maker for this worker, by forge name."""
    return {f.name: api_of(f).start(config, http, clock) for f in forges.FORGES}


def forge_api(job: Job, clients: Mapping[str, MakeClient]) -> ForgeApi:
    """The client for this job's forge; a kind without one (local, unknown) is a configuration error."""
    make = clients.get(job.kind)
    if make is None:
        raise JobConfigRefused(f"this job's kind has no forge API; accepted: {', '.join(forges.names())}")
    return make(job)


def api_of(forge: Forge) -> WorkerForge:
    """The forge's ``api`` part, typed."""
    return cast(WorkerForge, forge.part("api", "API"))
