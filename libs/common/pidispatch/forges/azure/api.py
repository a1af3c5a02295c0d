"""Azure DevOps for the worker: a job's token (the configured PAT), tip, protection and comment.

Azure differs from the other forges in shape: the job names a project and a repository, the default
branch is a full ref, and protection is a set of branch policies rather than one object.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import yarl

from pidispatch.common.models import Job
from pidispatch.common.outcome import InfraFault, JobConfigRefused
from pidispatch.forges.api import WorkerForge
from pidispatch.forges.azure import FORGE
from pidispatch.forges.azure.config import block_of
from pidispatch.forges.check import (
    UNAVAILABLE,
    check_branch,
    check_clone_url,
    check_sha,
    default_branch_of,
    seg,
    segment_ok,
    target_of,
)
from pidispatch.forges.client import ForgeClient, PlainForge
from pidispatch.forges.config import ForgeConfig

AZURE_API_VERSION = "7.1"
AZURE_COMMENTS_API_VERSION = "7.1-preview.4"


def strip_username(raw: object) -> object:
    """Azure's ``remoteUrl`` names the organisation as a user (``https://org@dev.azure.com/org/...``): not
    a secret, so that exact user is dropped; any other userinfo is kept for the check to refuse."""
    if not isinstance(raw, str):
        return raw
    try:
        parts = urlsplit(raw)
        user, password = parts.username, parts.password
    except ValueError:
        return raw
    if user is None or password is not None or parts.path.split("/")[1:2] != [user]:
        return raw
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


class AzureApi(ForgeClient):
    forge = FORGE.name
    variables = FORGE.credentials_hint

    def __init__(self, job: Job, config: ForgeConfig, http: aiohttp.ClientSession) -> None:
        super().__init__(job, http, block_of(config).org_url)
        self.token = block_of(config).token
        scope = job.azure or {}
        project, repository = scope.get("project"), scope.get("repository")
        if not segment_ok(project) or not segment_ok(repository):
            raise JobConfigRefused("an azure job needs its project and repository; this job's are unusable")
        self.project, self.repository = str(project), str(repository)
        self._repository_id: str | None = None

    @property
    def apis(self) -> str:
        return f"{self.api_base}/{seg(self.project)}/_apis"

    @property
    def repo_url(self) -> str:
        return f"{self.apis}/git/repositories/{seg(self.repository)}"

    def headers(self, token: str) -> dict[str, str]:
        basic = base64.b64encode(f":{token}".encode()).decode()  # a PAT is Basic with an empty user
        # Without this header a refused PAT gets a 203 sign-in page instead of a 401.
        return {"Authorization": f"Basic {basic}", "Accept": "application/json",
                "X-TFS-FedAuthRedirect": "Suppress"}

    def url(self, path: str, api_version: str = AZURE_API_VERSION, **query: str) -> yarl.URL:
        return yarl.URL(path, encoded=True).update_query({**query, "api-version": api_version})

    async def mint(self) -> str:
        self.api_base  # noqa: B018 -- refuses a token without the organisation it belongs to
        return self.pat(self.token, "AZURE_TOKEN")

    async def _repo(self, token: str) -> dict[str, Any]:
        repo = await self.get_object(self.url(self.repo_url), token, "the repository lookup")
        rid = repo.get("id")
        if not isinstance(rid, str) or not segment_ok(rid):
            raise InfraFault(UNAVAILABLE)
        self._repository_id = rid
        return repo

    async def head(self, token: str) -> tuple[str, str]:
        repo = await self._repo(token)
        ref = repo.get("defaultBranch")
        if isinstance(ref, str) and not ref.startswith("refs/heads/"):
            raise JobConfigRefused("the azure repository's default branch is not a branch (refs/heads/...)")
        name = ref.removeprefix("refs/heads/") if isinstance(ref, str) else ref
        branch = default_branch_of(name, self.forge)
        return branch, check_clone_url(strip_username(repo.get("remoteUrl")), self.api_base, self.forge)

    async def sha(self, token: str, branch: str) -> str:
        refs = await self.get_object(self.url(f"{self.repo_url}/refs", filter=f"heads/{branch}"), token,
                                     "the branch lookup")
        values = refs.get("value")
        if not isinstance(values, list):
            raise InfraFault(UNAVAILABLE)
        # The filter is a prefix match: heads/main also lists heads/main-old.
        exact = [v for v in values if isinstance(v, dict) and v.get("name") == f"refs/heads/{branch}"]
        if not exact:
            raise JobConfigRefused("the azure repository's default branch does not exist; nothing to run on")
        return check_sha(exact[0].get("objectId"))

    async def protected(self, token: str, branch: str) -> bool:
        """Azure has no protection object: a branch is protected when an enabled blocking policy applies."""
        ref = f"refs/heads/{check_branch(branch, self.forge)}"
        rid = self._repository_id or (await self._repo(token))["id"]
        url = self.url(f"{self.apis}/policy/configurations", repositoryId=rid, refName=ref)
        found = await self.get_object(url, token, "the branch policy lookup")
        values = found.get("value")
        if not isinstance(values, list):
            raise InfraFault(UNAVAILABLE)
        return any(isinstance(p, dict) and p.get("isEnabled") is True and p.get("isBlocking") is True
                   for p in values)

    async def comment(self, token: str, text: str) -> None:
        kind, number = target_of(self.job)
        if kind == "issue":
            url = self.url(f"{self.apis}/wit/workItems/{number}/comments", AZURE_COMMENTS_API_VERSION)
            await self.request("POST", url, token, "the work item comment", body={"text": text})
            return
        url = self.url(f"{self.repo_url}/pullRequests/{number}/threads")
        body = {"comments": [{"content": text, "commentType": 1}], "status": 1}
        await self.request("POST", url, token, "the pull request comment", body=body)


API: WorkerForge = PlainForge(AzureApi)
