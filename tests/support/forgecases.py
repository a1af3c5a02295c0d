"""One forge's stand-in, configuration and route names, for the worker API tests run per forge.

``Case`` bundles what a test of ``pidispatch.forges.<name>.api`` needs: a job addressed to the stand-in's
repository, the configuration pointing at it, and the client the worker would build for that job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp

from pidispatch.common.models import Job, Target
from pidispatch.common.runtime import now_ms
from pidispatch.forges.api import ForgeApi, forge_api, start_forges
from pidispatch.forges.config import ForgeConfig
from tests.support.forges import FakeForge, azure_forge, forgejo_forge, github_forge, gitlab_forge, set_repo

FORGES = ("github", "gitlab", "forgejo", "azure")
NEW_SHA = "a" * 40
AZURE_PROJECT = "Fabrikam-Fiber-Git"

ROUTES = {
    "github": {"repo": "repo", "branch": "branch", "protection": "protection", "issue": "comment",
               "pull_request": "comment"},
    "gitlab": {"repo": "project", "branch": "branch", "protection": "protected_branch", "issue": "issue_note",
               "pull_request": "mr_note"},
    "forgejo": {"repo": "repo", "branch": "branch", "protection": "branch_protection", "issue": "comment",
                "pull_request": "comment"},
    "azure": {"repo": "repository", "branch": "refs", "protection": "policies", "issue": "workitem_comment",
              "pull_request": "pr_thread"},
}
KEYS = {"github": "Codertocat/Hello-World", "gitlab": 42, "forgejo": "Codertocat/Hello-World",
        "azure": f"{AZURE_PROJECT}/{AZURE_PROJECT}"}
TOKENS = {"github": "ghp_test", "gitlab": "glpat-test", "forgejo": "fj-test", "azure": "az-pat"}
FAKES = {"github": github_forge, "gitlab": gitlab_forge, "forgejo": forgejo_forge, "azure": azure_forge}


def forge_env(kind: str, url: str) -> dict[str, str]:
    return {
        "github": {"GITHUB_API_URL": url, "GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": "ghp_test"},
        "gitlab": {"GITLAB_URL": url, "GITLAB_TOKEN": "glpat-test"},
        "forgejo": {"FORGEJO_URL": url, "FORGEJO_TOKEN": "fj-test"},
        "azure": {"AZURE_ORG_URL": f"{url}/fabrikam", "AZURE_TOKEN": "az-pat"},
    }[kind]


def client(job: Job, config: ForgeConfig, http: aiohttp.ClientSession | None) -> ForgeApi:
    """The client a worker started with ``config`` builds for ``job`` (registry lookup included)."""
    return forge_api(job, start_forges(config, http, now_ms))  # type: ignore[arg-type]


@dataclass
class Case:
    """One forge's stand-in, its configuration and the names of its routes, for tests run per forge."""

    kind: str
    fake: FakeForge
    config: ForgeConfig
    http: aiohttp.ClientSession
    key: Any
    token: str
    routes: dict[str, str]  # repo, branch, protection, issue, pull_request

    def job(self, target_type: str = "issue", number: int = 1, **fields: Any) -> Job:
        base: dict[str, Any] = {
            "github": {"repo": "Codertocat/Hello-World"},
            "gitlab": {"repo": "codertocat/hello-world", "project_id": 42},
            "forgejo": {"repo": "Codertocat/Hello-World"},
            "azure": {"repo": f"{AZURE_PROJECT}/{AZURE_PROJECT}",
                      "azure": {"project": AZURE_PROJECT, "repository": AZURE_PROJECT}},
        }[self.kind]
        target = Target(type=target_type, number=number)
        return Job(id=f"{self.kind}-job-{number}", kind=self.kind, target=target, **{**base, **fields})

    def api(self, job: Job | None = None) -> ForgeApi:
        return client(job or self.job(), self.config, self.http)

    def default_clone_url(self) -> str:
        return {
            "github": f"{self.fake.url}/Codertocat/Hello-World.git",
            "gitlab": f"{self.fake.url}/codertocat/hello-world.git",
            "forgejo": f"{self.fake.url}/Codertocat/Hello-World.git",
            "azure": f"{self.fake.url}/fabrikam/{AZURE_PROJECT}/_git/{AZURE_PROJECT}",
        }[self.kind]

    def repo(self, **fields: Any) -> None:
        if self.kind == "gitlab":
            fields.setdefault("path", "codertocat/hello-world")
        set_repo(self.fake, self.key, **fields)


def case_for(kind: str, fake: FakeForge, config: ForgeConfig, http: aiohttp.ClientSession) -> Case:
    return Case(kind, fake, config, http, KEYS[kind], TOKENS[kind], ROUTES[kind])
