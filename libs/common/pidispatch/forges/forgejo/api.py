"""Forgejo (and Gitea) for the worker: a job's token (the configured one), tip, protection and comment."""

from __future__ import annotations

import aiohttp

from pidispatch.common.models import Job
from pidispatch.forges.api import WorkerForge
from pidispatch.forges.check import check_branch, owner_name, seg, target_of
from pidispatch.forges.client import ForgeClient, PlainForge
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.forgejo import FORGE
from pidispatch.forges.forgejo.config import block_of


class ForgejoApi(ForgeClient):
    forge = FORGE.name
    variables = FORGE.credentials_hint

    def __init__(self, job: Job, config: ForgeConfig, http: aiohttp.ClientSession) -> None:
        super().__init__(job, http, block_of(config).url)
        self.token = block_of(config).token
        self.owner, self.name = owner_name(job)

    @property
    def repo_url(self) -> str:
        return f"{self.api_base}/api/v1/repos/{seg(self.owner)}/{seg(self.name)}"

    def headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"token {token}", "Accept": "application/json"}

    async def mint(self) -> str:
        self.api_base  # noqa: B018 -- refuses a token without the instance it belongs to
        return self.pat(self.token, "FORGEJO_TOKEN")

    async def head(self, token: str) -> tuple[str, str]:
        return await self.branch_of(self.repo_url, token, "clone_url")

    async def sha(self, token: str, branch: str) -> str:
        return await self.commit_of(f"{self.repo_url}/branches/{seg(branch)}", token, "id")

    async def protected(self, token: str, branch: str) -> bool:
        url = f"{self.repo_url}/branch_protections/{seg(check_branch(branch, self.forge))}"
        return await self.exists(url, token, "the branch protection lookup")

    async def comment(self, token: str, text: str) -> None:
        _, number = target_of(self.job)  # pull requests are issues here too
        await self.request("POST", f"{self.repo_url}/issues/{number}/comments", token, "the comment",
                           body={"body": text})


API: WorkerForge = PlainForge(ForgejoApi)
