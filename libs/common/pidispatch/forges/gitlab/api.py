"""GitLab for the worker: a job's token (the configured one), tip, protection and comment."""

from __future__ import annotations

import aiohttp

from pidispatch.common.models import Job
from pidispatch.common.outcome import JobConfigRefused
from pidispatch.forges.api import WorkerForge
from pidispatch.forges.check import check_branch, seg, segment_ok, target_of
from pidispatch.forges.client import ForgeClient, PlainForge
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.gitlab import FORGE
from pidispatch.forges.gitlab.config import block_of


class GitlabApi(ForgeClient):
    forge = FORGE.name
    variables = FORGE.credentials_hint

    def __init__(self, job: Job, config: ForgeConfig, http: aiohttp.ClientSession) -> None:
        super().__init__(job, http, block_of(config).url)
        self.token = block_of(config).token
        pid = job.project_id
        if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0:
            project = str(pid)
        elif isinstance(job.repo, str) and all(segment_ok(p) for p in job.repo.split("/")):
            project = seg(job.repo)  # GitLab takes the URL-encoded full path in place of the id
        else:
            raise JobConfigRefused(f"a {self.forge} job needs its project id or path; this job's is unusable")
        self.project_url = f"{self.api_base}/api/v4/projects/{project}"

    def headers(self, token: str) -> dict[str, str]:
        return {"PRIVATE-TOKEN": token, "Accept": "application/json"}

    async def mint(self) -> str:
        return self.pat(self.token, "GITLAB_TOKEN")

    async def head(self, token: str) -> tuple[str, str]:
        return await self.branch_of(self.project_url, token, "http_url_to_repo")

    async def sha(self, token: str, branch: str) -> str:
        return await self.commit_of(f"{self.project_url}/repository/branches/{seg(branch)}", token, "id")

    async def protected(self, token: str, branch: str) -> bool:
        url = f"{self.project_url}/protected_branches/{seg(check_branch(branch, self.forge))}"
        return await self.exists(url, token, "the protected branch lookup")

    async def comment(self, token: str, text: str) -> None:
        kind, number = target_of(self.job)
        items = "issues" if kind == "issue" else "merge_requests"
        await self.request("POST", f"{self.project_url}/{items}/{number}/notes", token, "the comment",
                           body={"body": text})


API: WorkerForge = PlainForge(GitlabApi)
