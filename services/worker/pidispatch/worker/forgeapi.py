"""What the worker asks a forge for a forge job, before any spend: a token for the
job, the default branch and its tip, whether that branch is protected, and one comment on the item.

One small client per forge behind ``ForgeApi``; ``forge_api`` picks it from the job's kind. Every answer
comes from a fresh, bounded, no-redirect request (never from webhook fields). Failures are two-armed:
a determinate refusal (401, 403 without a rate limit, 404, other 4xx, a redirect, an unusable answer) is
a ``JobConfigRefused`` the worker records as ``config-refused``; a transient one (429, a rate-limited 403,
5xx, no answer, a body that is not the documented JSON) is an ``InfraFault`` carrying only a reason token.
No message here ever holds a token, a URL path, a repository name or a body.
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol
from urllib.parse import urlsplit

import aiohttp
import yarl

from pidispatch import forges
from pidispatch.common.models import Job
from pidispatch.common.secret import Secret
from pidispatch.forges.azure import FORGE as AZURE
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.forgejo import FORGE as FORGEJO
from pidispatch.forges.github import FORGE as GITHUB
from pidispatch.forges.github.auth import GithubAuth, GithubAuthRefused, GithubAuthUnavailable, api_headers
from pidispatch.forges.gitlab import FORGE as GITLAB
from pidispatch.forges.http import BadBody, Reply, Unreachable, call
from pidispatch.worker.forgecheck import (
    RATE_LIMITED,
    UNAVAILABLE,
    check_branch,
    check_clone_url,
    check_sha,
    default_branch_of,
    dig,
    failure,
    owner_name,
    seg,
    segment_ok,
    target_of,
)
from pidispatch.worker.outcome import InfraFault, JobConfigRefused

FORGE_API_TIMEOUT_S = 10.0
AZURE_API_VERSION = "7.1"
AZURE_COMMENTS_API_VERSION = "7.1-preview.4"


@dataclass(frozen=True)
class Tip:
    """The repository's default branch, its commit now, and where to fetch it from (no credentials)."""

    default_branch: str
    sha: str
    clone_url: str


class ForgeApi(Protocol):
    async def mint(self) -> str: ...

    async def tip(self, token: str) -> Tip: ...

    async def protected_tip(self, token: str) -> Tip | None: ...

    async def protected(self, token: str, branch: str) -> bool: ...

    async def comment(self, token: str, text: str) -> None: ...


# --- the shared request path -----------------------------------------------------------------------------


class _Client:
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
        """GitHub, GitLab and Forgejo alike: the repository names its default branch."""
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


# --- GitHub (and GitHub Enterprise Server) ---------------------------------------------------------------


class GithubApi(_Client):
    forge = GITHUB.name
    variables = "GITHUB_AUTH_SOURCE and its credentials (GITHUB_API_URL for Enterprise Server)"

    def __init__(self, job: Job, config: ForgeConfig, http: aiohttp.ClientSession,
                 auth: GithubAuth | None) -> None:
        super().__init__(job, http, config.github.api_url)
        owner, name = owner_name(job)
        self.auth, self.repo_url = auth, f"{self.api_base}/repos/{seg(owner)}/{seg(name)}"

    def headers(self, token: str) -> dict[str, str]:
        return api_headers(token)

    async def mint(self) -> str:
        if self.auth is None:
            raise JobConfigRefused(
                "a github job needs GITHUB_AUTH_SOURCE (gh, pat or app) and its credentials"
            )
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


# --- GitLab ----------------------------------------------------------------------------------------------


class GitlabApi(_Client):
    forge = GITLAB.name
    variables = GITLAB.credentials_hint

    def __init__(self, job: Job, config: ForgeConfig, http: aiohttp.ClientSession) -> None:
        super().__init__(job, http, config.gitlab.url)
        self.token = config.gitlab.token
        pid = job.project_id
        if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0:
            project = str(pid)
        elif isinstance(job.repo, str) and all(segment_ok(p) for p in job.repo.split("/")):
            project = seg(job.repo)  # GitLab takes the URL-encoded full path in place of the id
        else:
            raise JobConfigRefused("a gitlab job needs its project id or path; this job's is unusable")
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


# --- Forgejo / Gitea -------------------------------------------------------------------------------------


class ForgejoApi(_Client):
    forge = FORGEJO.name
    variables = FORGEJO.credentials_hint

    def __init__(self, job: Job, config: ForgeConfig, http: aiohttp.ClientSession) -> None:
        super().__init__(job, http, config.forgejo.url)
        self.token = config.forgejo.token
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


# --- Azure DevOps ----------------------------------------------------------------------------------------


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


class AzureApi(_Client):
    forge = AZURE.name
    variables = AZURE.credentials_hint

    def __init__(self, job: Job, config: ForgeConfig, http: aiohttp.ClientSession) -> None:
        super().__init__(job, http, config.azure.org_url)
        self.token = config.azure.token
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


def forge_api(job: Job, config: ForgeConfig, http: aiohttp.ClientSession,
              github_auth: GithubAuth | None) -> ForgeApi:
    """The client for this job's forge; a kind without one (local, unknown) is a configuration error."""
    if job.kind == GithubApi.forge:
        return GithubApi(job, config, http, github_auth)
    if job.kind == GitlabApi.forge:
        return GitlabApi(job, config, http)
    if job.kind == ForgejoApi.forge:
        return ForgejoApi(job, config, http)
    if job.kind == AzureApi.forge:
        return AzureApi(job, config, http)
    raise JobConfigRefused(f"this job's kind has no forge API; accepted: {', '.join(forges.names())}")
