"""The request path every forge's worker API client shares (``pidispatch.forges.<name>.api`` subclass it).

Every answer comes from a fresh, bounded, no-redirect request (never from webhook fields). Failures are
two-armed: a determinate refusal (401, 403 without a rate limit, 404, other 4xx, a redirect, an unusable
answer) is a ``JobConfigRefused`` the worker records as ``config-refused``; a transient one (429, a
rate-limited 403, 5xx, no answer, a body that is not the documented JSON) is an ``InfraFault`` carrying
only a reason token. No message here ever holds a token, a URL path, a repository name or a body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

import aiohttp
import yarl

from pidispatch.common.models import Job
from pidispatch.common.outcome import InfraFault, JobConfigRefused
from pidispatch.common.runtime import EpochMsClock
from pidispatch.common.secret import Secret
from pidispatch.forges.api import ForgeApi, MakeClient, Tip
from pidispatch.forges.check import (
    UNAVAILABLE,
    check_clone_url,
    check_sha,
    default_branch_of,
    dig,
    failure,
)
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.http import BadBody, Reply, Unreachable, call

FORGE_API_TIMEOUT_S = 10.0


class ForgeClient:
    """One job's calls to one forge. A subclass names its forge and the variables that configure it,
    and supplies ``headers``, ``head``, ``sha``, ``protected``, ``mint`` and ``comment``."""

    forge: ClassVar[str]
    variables: ClassVar[str]

    def __init__(self, job: Job, http: aiohttp.ClientSession, api_base: str | None) -> None:
        self.job, self.http, self._api_base = job, http, api_base

    @property
    def api_base(self) -> str:
        if self._api_base is None:
            raise JobConfigRefused(f"a {self.forge} job needs {self.variables}")
        return self._api_base

    def headers(self, token: str) -> dict[str, str]:
        raise NotImplementedError

    async def request(
        self, method: str, url: str | yarl.URL, token: str, what: str, *, body: object = None,
        absent_ok: bool = False,
    ) -> Reply | None:
        """One bounded call; ``None`` only for a 404 when ``absent_ok`` (the protection object)."""
        target = yarl.URL(url, encoded=True) if isinstance(url, str) else url
        try:
            reply = await call(self.http, method, target, headers=self.headers(token), json=body,
                               timeout_s=FORGE_API_TIMEOUT_S)
        except (Unreachable, BadBody):
            raise InfraFault(UNAVAILABLE) from None
        if reply.status == 404 and absent_ok:
            return None
        # 203 is Azure's sign-in page for a refused credential; any other 2xx is an answer.
        if reply.ok and reply.status != 203:
            return reply
        raise failure(self.forge, reply.status, reply.headers, what, self.variables)

    async def get_object(self, url: str | yarl.URL, token: str, what: str) -> dict[str, Any]:
        reply = await self.request("GET", url, token, what)  # never None: no 404 is let through here
        try:
            data = reply.json() if reply is not None else None
        except BadBody:
            raise InfraFault(UNAVAILABLE) from None
        if not isinstance(data, dict):
            raise InfraFault(UNAVAILABLE)
        return data

    async def exists(self, url: str | yarl.URL, token: str, what: str) -> bool:
        return await self.request("GET", url, token, what, absent_ok=True) is not None

    async def head(self, token: str) -> tuple[str, str]:
        """The default branch's name and the clone URL, from the repository lookup."""
        raise NotImplementedError

    async def sha(self, token: str, branch: str) -> str:
        """The commit the branch names now, from the branch lookup."""
        raise NotImplementedError

    async def protected(self, token: str, branch: str) -> bool:
        raise NotImplementedError

    async def tip(self, token: str) -> Tip:
        branch, clone_url = await self.head(token)
        return Tip(branch, await self.sha(token, branch), clone_url)

    async def protected_tip(self, token: str) -> Tip | None:
        """The tip when the default branch is protected, else None. The branch and the protection
        lookups need only the branch's name, so they go out together: one round trip less per job."""
        branch, clone_url = await self.head(token)
        sha_task = asyncio.ensure_future(self.sha(token, branch))
        protected_task = asyncio.ensure_future(self.protected(token, branch))
        try:
            sha = await sha_task  # its failure wins, as when the lookups ran one after the other
            if not await protected_task:
                return None
        finally:
            for task in (sha_task, protected_task):
                if not task.done():
                    task.cancel()
                elif not task.cancelled():
                    task.exception()  # only the first failure is reported; the other is retrieved
        return Tip(branch, sha, clone_url)

    async def branch_of(self, repo_url: str | yarl.URL, token: str, clone_key: str) -> tuple[str, str]:
        """For forges whose repository lookup names its default branch and clone URL."""
        repo = await self.get_object(repo_url, token, "the repository lookup")
        branch = default_branch_of(repo.get("default_branch"), self.forge)
        return branch, check_clone_url(repo.get(clone_key), self.api_base, self.forge)

    async def commit_of(self, branch_url: str, token: str, sha_key: str) -> str:
        found = await self.get_object(branch_url, token, "the branch lookup")
        return check_sha(dig(found, "commit", sha_key))

    def pat(self, secret: Secret[str] | None, variable: str) -> str:
        value = secret.reveal().strip() if secret is not None else ""
        if not value:
            raise JobConfigRefused(f"a {self.forge} job needs {variable}; it is unset or blank")
        return value


class PlainForge:
    """The ``WorkerForge`` of a forge whose job token is its configured one: nothing outlives a job, so
    ``start`` only binds the configuration and the HTTP client."""

    def __init__(self, client: Callable[[Job, ForgeConfig, aiohttp.ClientSession], ForgeApi]) -> None:
        self.client = client

    def start(self, config: ForgeConfig, http: aiohttp.ClientSession, clock: EpochMsClock) -> MakeClient:
        def make(job: Job) -> ForgeApi:
            return self.client(job, config, http)

        return make
