"""GitHub (and GitHub Enterprise Server) for the worker: a job's token, tip, protection and comment.

The token comes from the worker's one ``GithubAuth`` (built at worker start when GitHub is configured):
an App mints a token scoped to the job's one repository; ``pat`` and ``gh`` hand out their standing one.
"""

from __future__ import annotations

import aiohttp

from pidispatch.common.models import Job
from pidispatch.common.outcome import InfraFault, JobConfigRefused
from pidispatch.common.runtime import EpochMsClock
from pidispatch.forges.api import MakeClient, WorkerForge
from pidispatch.forges.check import RATE_LIMITED, UNAVAILABLE, check_branch, owner_name, seg, target_of
from pidispatch.forges.client import ForgeClient
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.github import FORGE
from pidispatch.forges.github.auth import GithubAuth, GithubAuthRefused, GithubAuthUnavailable, api_headers
from pidispatch.forges.github.config import block_of


class GithubApi(ForgeClient):
    forge = FORGE.name
    variables = "GITHUB_AUTH_SOURCE and its credentials (GITHUB_API_URL for Enterprise Server)"

    def __init__(self, job: Job, config: ForgeConfig, http: aiohttp.ClientSession,
                 auth: GithubAuth | None) -> None:
        super().__init__(job, http, block_of(config).api_url)
        owner, name = owner_name(job)
        self.auth, self.repo_url = auth, f"{self.api_base}/repos/{seg(owner)}/{seg(name)}"

    def headers(self, token: str) -> dict[str, str]:
        return api_headers(token)

    async def mint(self) -> str:
        if self.auth is None:
            raise JobConfigRefused(f"a {self.forge} job needs {FORGE.credentials_hint}")
        try:
            return await self.auth.mint_job_token(self.job.repo)
        except GithubAuthRefused as exc:
            # The same refusal as at boot, but here it refuses one job; the worker keeps running.
            raise JobConfigRefused(str(exc)) from None
        except GithubAuthUnavailable as exc:
            limited = exc.reason in ("status-429", "status-403")
            raise InfraFault(RATE_LIMITED if limited else UNAVAILABLE) from None

    async def head(self, token: str) -> tuple[str, str]:
        return await self.branch_of(self.repo_url, token, "clone_url")

    async def sha(self, token: str, branch: str) -> str:
        return await self.commit_of(f"{self.repo_url}/branches/{seg(branch)}", token, "sha")

    async def protected(self, token: str, branch: str) -> bool:
        url = f"{self.repo_url}/branches/{seg(check_branch(branch, self.forge))}/protection"
        return await self.exists(url, token, "the branch protection lookup")

    async def comment(self, token: str, text: str) -> None:
        _, number = target_of(self.job)  # issues and pull requests share the issue comments endpoint
        await self.request("POST", f"{self.repo_url}/issues/{number}/comments", token, "the comment",
                           body={"body": text})


class GithubWorker:
    """One ``GithubAuth`` per worker, shared by every job: an App's key and JWT are loaded once."""

    def start(self, config: ForgeConfig, http: aiohttp.ClientSession, clock: EpochMsClock) -> MakeClient:
        auth = GithubAuth(config, http, clock) if block_of(config).configured else None

        def make(job: Job) -> GithubApi:
            return GithubApi(job, config, http, auth)

        return make


API: WorkerForge = GithubWorker()
