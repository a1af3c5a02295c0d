from __future__ import annotations

import asyncio
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from pidispatch.common.errors import ConfigError
from pidispatch.common.models import Job, Target
from pidispatch.forges.config import ForgeConfig, load_forge_config
from pidispatch.forges.github.auth import GithubAuth
from pidispatch.forges.http import create_http
from pidispatch.worker.forgeapi import (
    RATE_LIMITED,
    UNAVAILABLE,
    ForgeApi,
    Tip,
    check_branch,
    check_clone_url,
    failure,
    forge_api,
    strip_username,
)
from pidispatch.worker.outcome import InfraFault, JobConfigRefused
from tests.support.forges import (
    TIP_SHA,
    FakeForge,
    azure_forge,
    disconnect,
    forgejo_forge,
    github_forge,
    gitlab_forge,
    posted,
    raw,
    redirect,
    reply,
    set_repo,
)

FORGES = ("github", "gitlab", "forgejo", "azure")
NEW_SHA = "a" * 40
AZURE_PROJECT = "Fabrikam-Fiber-Git"


@pytest.fixture(scope="module")
def app_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem_of(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    session = create_http()
    yield session
    await session.close()


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
        auth = GithubAuth(self.config, self.http) if self.kind == "github" else None
        return forge_api(job or self.job(), self.config, self.http, auth)

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


def forge_env(kind: str, url: str) -> dict[str, str]:
    return {
        "github": {"GITHUB_API_URL": url, "GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": "ghp_test"},
        "gitlab": {"GITLAB_URL": url, "GITLAB_TOKEN": "glpat-test"},
        "forgejo": {"FORGEJO_URL": url, "FORGEJO_TOKEN": "fj-test"},
        "azure": {"AZURE_ORG_URL": f"{url}/fabrikam", "AZURE_TOKEN": "az-pat"},
    }[kind]


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


@pytest.fixture(params=FORGES)
async def case(request: pytest.FixtureRequest, http: aiohttp.ClientSession) -> AsyncIterator[Case]:
    kind = request.param
    async with FAKES[kind]() as fake:
        c = Case(kind, fake, load_forge_config(forge_env(kind, fake.url)), http, KEYS[kind], TOKENS[kind],
                 ROUTES[kind])
        c.repo()
        yield c


# --- tip: fresh API answers ------------------------------------------------------------------------------


async def test_tip_reads_the_default_branch_its_commit_and_the_clone_url(case: Case) -> None:
    case.repo(default_branch="trunk", sha=NEW_SHA)
    api = case.api()
    token = await api.mint()
    assert token == case.token
    assert await api.tip(token) == Tip("trunk", NEW_SHA, case.default_clone_url())
    assert len(case.fake.calls(case.routes["repo"])) == 1
    assert len(case.fake.calls(case.routes["branch"])) == 1


async def test_tip_is_never_cached_a_moved_branch_is_seen(case: Case) -> None:
    api = case.api()
    assert (await api.tip(case.token)).sha == TIP_SHA
    case.repo(sha=NEW_SHA)
    assert (await api.tip(case.token)).sha == NEW_SHA


async def test_a_default_branch_with_a_slash_is_asked_about_as_one_segment(case: Case) -> None:
    case.repo(default_branch="release/2.x", sha=NEW_SHA, protected=True)
    api = case.api()
    tip = await api.tip(case.token)
    assert (tip.default_branch, tip.sha) == ("release/2.x", NEW_SHA)
    assert await api.protected(case.token, "release/2.x") is True


async def test_the_clone_url_handed_out_by_the_forge_is_used(case: Case) -> None:
    case.repo(clone_url="http://127.0.0.1:9/git/hello.git")
    assert (await case.api().tip(case.token)).clone_url == "http://127.0.0.1:9/git/hello.git"


@pytest.mark.parametrize("bad", [
    "http://user:pw@127.0.0.1:9/r.git", "http://ghp_leak@127.0.0.1:9/r.git", "http://127.0.0.1:9/r.git?x=1",
    "http://127.0.0.1:9/r.git#frag", "ftp://127.0.0.1/r.git", "file:///srv/r.git", "ext::sh -c id",
])
async def test_an_unusable_clone_url_is_a_config_error_that_does_not_quote_it(case: Case, bad: str) -> None:
    case.repo(clone_url=bad)
    with pytest.raises(JobConfigRefused) as refused:
        await case.api().tip(case.token)
    assert "127.0.0.1" not in str(refused.value) and "leak" not in str(refused.value)


@pytest.mark.parametrize("branch", ["-upload-pack=evil", "a..b", "has space", "ends.lock", "x\ny", "@"])
async def test_an_unsafe_default_branch_name_is_refused(case: Case, branch: str) -> None:
    case.repo(default_branch=branch)
    with pytest.raises(JobConfigRefused, match="default branch"):
        await case.api().tip(case.token)


async def test_a_repository_without_a_default_branch_is_refused(case: Case) -> None:
    case.repo(default_branch=None)
    with pytest.raises(JobConfigRefused, match="no default branch"):
        await case.api().tip(case.token)


async def test_an_unknown_repository_is_a_config_error(case: Case) -> None:
    case.fake.state["repos"].clear()
    with pytest.raises(JobConfigRefused, match="HTTP 404"):
        await case.api().tip(case.token)


# Factories: a scripted answer counts down as it serves, so each test needs its own.
@pytest.mark.parametrize(("answer", "reason"), [
    (lambda: reply(500), UNAVAILABLE), (lambda: reply(502), UNAVAILABLE), (lambda: reply(429), RATE_LIMITED),
    (lambda: reply(403, {"message": "secondary rate limit"}, headers={"Retry-After": "30"}), RATE_LIMITED),
    (lambda: raw("<html>proxy error</html>"), UNAVAILABLE),
    (lambda: reply(200, ["not", "an", "object"]), UNAVAILABLE), (disconnect, UNAVAILABLE),
])
async def test_transient_repository_answers_are_retried_infra_faults(
    case: Case, answer: Any, reason: str
) -> None:
    case.fake.script(case.routes["repo"], answer())
    with pytest.raises(InfraFault) as fault:
        await case.api().tip(case.token)
    assert fault.value.reason == reason


async def test_a_garbled_commit_id_is_a_retried_fault(case: Case) -> None:
    case.repo(sha="not-a-sha")
    with pytest.raises(InfraFault) as fault:
        await case.api().tip(case.token)
    assert fault.value.reason == UNAVAILABLE


async def test_a_redirect_is_refused_and_never_followed(case: Case) -> None:
    case.fake.script(case.routes["repo"], redirect(f"{case.fake.url}/elsewhere", status=301))
    with pytest.raises(JobConfigRefused, match="HTTP 301"):
        await case.api().tip(case.token)
    assert [r.path for r in case.fake.requests if r.path == "/elsewhere"] == []


@pytest.mark.parametrize("status", [401, 403])
async def test_refused_credentials_are_a_config_error_without_the_token(case: Case, status: int) -> None:
    case.fake.answer(case.routes["repo"], status)
    with pytest.raises(JobConfigRefused) as refused:
        await case.api().tip(case.token)
    assert f"HTTP {status}" in str(refused.value) and case.token not in str(refused.value)


async def test_a_wrong_token_is_refused_by_the_forge_itself(case: Case) -> None:
    with pytest.raises(JobConfigRefused, match="HTTP 401"):
        await case.api().tip("wrong-token")


# --- the tip of a protected branch, the two lookups together -----------------------------------------


async def test_protected_tip_is_the_tip_of_a_protected_branch_and_none_for_an_unprotected_one(
    case: Case,
) -> None:
    case.repo(default_branch="trunk", sha=NEW_SHA)
    assert await case.api().protected_tip(case.token) == Tip("trunk", NEW_SHA, case.default_clone_url())
    case.repo(protected=False)
    assert await case.api().protected_tip(case.token) is None


async def test_the_branch_and_protection_lookups_run_together(case: Case) -> None:
    """The commit is not read until the protection lookup is under way: one round trip, not two."""
    api: Any = case.api()
    protection_asked = asyncio.Event()
    read_sha, read_protected = api.sha, api.protected

    async def sha(token: str, branch: str) -> str:
        await asyncio.wait_for(protection_asked.wait(), 5)
        return str(await read_sha(token, branch))

    async def protected(token: str, branch: str) -> bool:
        protection_asked.set()
        return bool(await read_protected(token, branch))

    api.sha, api.protected = sha, protected
    assert await api.protected_tip(case.token) == Tip("main", TIP_SHA, case.default_clone_url())


async def test_protected_tip_reports_the_branch_lookup_failure_first(case: Case) -> None:
    case.fake.answer(case.routes["branch"], 503)
    case.fake.answer(case.routes["protection"], 401)
    with pytest.raises(InfraFault) as fault:
        await case.api().protected_tip(case.token)
    assert fault.value.reason == UNAVAILABLE


async def test_protected_tip_reports_a_protection_lookup_failure(case: Case) -> None:
    case.fake.answer(case.routes["protection"], 429)
    with pytest.raises(InfraFault) as fault:
        await case.api().protected_tip(case.token)
    assert fault.value.reason == RATE_LIMITED


# --- protection: is the default branch protected ----------------------------------------------------


async def test_a_protected_default_branch_is_protected(case: Case) -> None:
    assert await case.api().protected(case.token, "main") is True


async def test_an_unprotected_default_branch_is_not(case: Case) -> None:
    case.repo(protected=False)
    assert await case.api().protected(case.token, "main") is False


@pytest.mark.parametrize(("status", "headers", "expected"), [
    (500, None, UNAVAILABLE), (503, None, UNAVAILABLE), (429, None, RATE_LIMITED),
    (403, {"Retry-After": "5"}, RATE_LIMITED), (401, None, JobConfigRefused), (403, None, JobConfigRefused),
    (422, None, JobConfigRefused),
])
async def test_only_a_404_means_unprotected(
    case: Case, status: int, headers: dict[str, str] | None, expected: Any
) -> None:
    api = case.api()
    await api.tip(case.token)  # Azure learns the repository id here, as the worker's ladder does
    case.fake.answer(case.routes["protection"], status, headers=headers)
    if expected is JobConfigRefused:
        with pytest.raises(JobConfigRefused, match=f"HTTP {status}"):
            await api.protected(case.token, "main")
    else:
        with pytest.raises(InfraFault) as fault:
            await api.protected(case.token, "main")
        assert fault.value.reason == expected


@pytest.mark.parametrize("kind", ["github", "gitlab", "forgejo"])
async def test_a_404_on_the_protection_object_means_unprotected(
    http: aiohttp.ClientSession, kind: str
) -> None:
    async with FAKES[kind]() as fake:
        c = Case(kind, fake, load_forge_config(forge_env(kind, fake.url)), http, KEYS[kind], TOKENS[kind],
                 ROUTES[kind])
        c.repo(protected=True)
        fake.answer(ROUTES[kind]["protection"], 404)
        assert await c.api().protected(c.token, "main") is False


async def test_azure_counts_only_enabled_blocking_policies(http: aiohttp.ClientSession) -> None:
    async with azure_forge() as fake:
        c = Case("azure", fake, load_forge_config(forge_env("azure", fake.url)), http, KEYS["azure"],
                 TOKENS["azure"], ROUTES["azure"])
        api = c.api()
        for policies, expected in [
            ([], False),
            ([{"isEnabled": False, "isBlocking": True}], False),
            ([{"isEnabled": True, "isBlocking": False}], False),
            ([{"isEnabled": True, "isBlocking": False}, {"isEnabled": True, "isBlocking": True}], True),
        ]:
            c.repo(policies=policies)
            assert await api.protected(c.token, "main") is expected
        [first, *_] = fake.calls("policies")
        assert first.query == {"repositoryId": "3411ebc1-d5aa-464f-9615-0b527bc66719",
                               "refName": "refs/heads/main", "api-version": "7.1"}
        assert len(fake.calls("repository")) == 1  # the repository id is looked up once


# --- comments: one sentence on the job's item ---------------------------------------------------------


@pytest.mark.parametrize("target_type", ["issue", "pull_request"])
async def test_one_comment_lands_on_the_item_through_its_endpoint(case: Case, target_type: str) -> None:
    await case.api(case.job(target_type, 7)).comment(case.token, "Refused: a test. Not run.")
    [call] = case.fake.calls(case.routes[target_type])
    assert [c["number"] for c in posted(case.fake)] == [7]
    assert posted(case.fake)[0]["body"] == "Refused: a test. Not run."
    expected_path = {
        "github": "/repos/Codertocat/Hello-World/issues/7/comments",
        "gitlab": "/api/v4/projects/42/" + ("issues" if target_type == "issue" else "merge_requests")
                  + "/7/notes",
        "forgejo": "/api/v1/repos/Codertocat/Hello-World/issues/7/comments",
        "azure": (f"/fabrikam/{AZURE_PROJECT}/_apis/wit/workItems/7/comments" if target_type == "issue" else
                  f"/fabrikam/{AZURE_PROJECT}/_apis/git/repositories/{AZURE_PROJECT}/pullRequests/7/threads"),
    }[case.kind]
    assert call.method == "POST" and call.path == expected_path
    if case.kind != "azure":
        assert call.body == {"body": "Refused: a test. Not run."}
    elif target_type == "issue":
        assert call.body == {"text": "Refused: a test. Not run."}
        assert call.query == {"api-version": "7.1-preview.4"}
    else:
        assert call.body == {"comments": [{"content": "Refused: a test. Not run.", "commentType": 1}],
                             "status": 1}
        assert call.query == {"api-version": "7.1"}


async def test_a_comment_failure_is_classified(case: Case) -> None:
    api = case.api()
    case.fake.answer(case.routes["issue"], 502)
    with pytest.raises(InfraFault):
        await api.comment(case.token, "text")
    case.fake.answer(case.routes["issue"], 404)
    with pytest.raises(JobConfigRefused):
        await api.comment(case.token, "text")
    assert posted(case.fake) == []


@pytest.mark.parametrize("target", [None, Target(type="commit", number=1), Target(type="issue", number=0)])
async def test_a_job_without_an_item_has_nowhere_to_comment(case: Case, target: Target | None) -> None:
    job = Job(**{**_fields(case.job()), "target": target})
    with pytest.raises(JobConfigRefused, match="no issue or pull request"):
        await case.api(job).comment(case.token, "text")
    assert case.fake.calls(case.routes["issue"]) == []


def _fields(job: Job) -> dict[str, Any]:
    return {f: getattr(job, f) for f in job.__struct_fields__}


# --- minting per job -------------------------------------------------------------------------------------


def app_env(fake: FakeForge, key: rsa.RSAPrivateKey) -> dict[str, str]:
    return {
        "GITHUB_API_URL": fake.url, "GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_ID": "12345",
        "GITHUB_APP_INSTALLATION_ID": "777", "GITHUB_APP_PRIVATE_KEY": pem_of(key),
    }


@pytest.fixture
async def app_github(app_key: rsa.RSAPrivateKey) -> AsyncIterator[FakeForge]:
    async with github_forge() as fake:
        fake.state["app_public_key"] = app_key.public_key()
        set_repo(fake, "Codertocat/Hello-World")
        set_repo(fake, "Codertocat/Other")
        yield fake


def github_job(job_id: str, repo: str = "Codertocat/Hello-World") -> Job:
    return Job(id=job_id, kind="github", repo=repo, target=Target(type="issue", number=1))


async def test_an_app_job_token_names_only_its_repository_and_every_job_mints_its_own(
    http: aiohttp.ClientSession, app_github: FakeForge, app_key: rsa.RSAPrivateKey
) -> None:
    config = load_forge_config(app_env(app_github, app_key))
    auth = GithubAuth(config, http)
    first = await forge_api(github_job("gh-1"), config, http, auth).mint()
    second = await forge_api(github_job("gh-2"), config, http, auth).mint()
    again = await forge_api(github_job("gh-1"), config, http, auth).mint()  # a retry mints afresh too
    mints = app_github.calls("access_tokens")
    assert len(mints) == 3 and len({first, second, again}) == 3
    assert all(m.body == {"repositories": ["Hello-World"]} for m in mints)
    assert all(m.path == "/app/installations/777/access_tokens" for m in mints)


async def test_an_app_job_token_reaches_its_repository_and_no_other(
    http: aiohttp.ClientSession, app_github: FakeForge, app_key: rsa.RSAPrivateKey
) -> None:
    config = load_forge_config(app_env(app_github, app_key))
    auth = GithubAuth(config, http)
    api = forge_api(github_job("gh-1"), config, http, auth)
    token = await api.mint()
    assert (await api.tip(token)).sha == TIP_SHA
    other = forge_api(github_job("gh-2", "Codertocat/Other"), config, http, auth)
    with pytest.raises(JobConfigRefused, match="HTTP 404"):
        await other.tip(token)


async def test_the_routers_cached_token_is_untouched_by_job_mints(
    http: aiohttp.ClientSession, app_github: FakeForge, app_key: rsa.RSAPrivateKey
) -> None:
    auth = GithubAuth(load_forge_config(app_env(app_github, app_key)), http)
    cached = await auth.token("Codertocat/Hello-World")
    minted = await auth.mint_job_token("Codertocat/Hello-World")
    assert minted != cached and await auth.token("Codertocat/Hello-World") == cached
    assert len(app_github.calls("access_tokens")) == 2


@pytest.mark.parametrize(("answer", "expected"), [
    (lambda: reply(500), UNAVAILABLE), (lambda: reply(429), RATE_LIMITED),
    (lambda: reply(403, {"message": "slow"}, headers={"Retry-After": "9"}), RATE_LIMITED),
    (lambda: disconnect(times=1), UNAVAILABLE), (lambda: raw("<html/>", 201), UNAVAILABLE),
    (lambda: reply(401, {"message": "Bad credentials"}), JobConfigRefused),
    (lambda: reply(404), JobConfigRefused),
    (lambda: reply(403, {"message": "forbidden"}), JobConfigRefused),
    (lambda: reply(201, {"token": " \t"}), JobConfigRefused),
])
async def test_job_mint_failures_are_classified(
    http: aiohttp.ClientSession, app_github: FakeForge, app_key: rsa.RSAPrivateKey, answer: Any, expected: Any
) -> None:
    config = load_forge_config(app_env(app_github, app_key))
    app_github.script("access_tokens", answer())
    api = forge_api(github_job("gh-1"), config, http, GithubAuth(config, http))
    if expected is JobConfigRefused:
        with pytest.raises(JobConfigRefused):
            await api.mint()
    else:
        with pytest.raises(InfraFault) as fault:
            await api.mint()
        assert fault.value.reason == expected


@pytest.mark.parametrize("repo", ["no-slash", "/name", "owner/", "a/b/c"])
async def test_an_app_job_token_needs_one_repository_to_scope_to(
    http: aiohttp.ClientSession, app_github: FakeForge, app_key: rsa.RSAPrivateKey, repo: str
) -> None:
    auth = GithubAuth(load_forge_config(app_env(app_github, app_key)), http)
    with pytest.raises(ConfigError, match="owner/name"):
        await auth.mint_job_token(repo)
    assert app_github.calls("access_tokens") == []


def fake_gh(tmp_path: Path, body: str) -> str:
    path = tmp_path / "gh"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


async def test_gh_and_pat_sources_hand_the_job_their_token(
    http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    gh = GithubAuth(load_forge_config({"GITHUB_AUTH_SOURCE": "gh"}), http,
                    gh_path=fake_gh(tmp_path, 'echo "gho_$1_$2"'))
    assert await gh.mint_job_token("o/r") == "gho_auth_token"
    pat = GithubAuth(load_forge_config({"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": "ghp_x"}), http)
    assert await pat.mint_job_token("o/r") == "ghp_x"
    with pytest.raises(ConfigError, match="empty token"):
        await GithubAuth(load_forge_config({"GITHUB_AUTH_SOURCE": "gh"}), http,
                         gh_path=fake_gh(tmp_path, "echo '   '")).mint_job_token("o/r")


@pytest.mark.parametrize(("kind", "variable"), [
    ("github", "GITHUB_AUTH_SOURCE"), ("gitlab", "GITLAB_TOKEN"), ("forgejo", "FORGEJO_URL"),
    ("azure", "AZURE_ORG_URL"),
])
async def test_a_forge_without_credentials_refuses_naming_the_variable(
    http: aiohttp.ClientSession, kind: str, variable: str
) -> None:
    config = load_forge_config({})
    job = Case(kind, FakeForge(kind), config, http, None, "", ROUTES[kind]).job()
    with pytest.raises(JobConfigRefused, match=variable):
        await forge_api(job, config, http, GithubAuth(config, http) if kind == "github" else None).mint()
    with pytest.raises(JobConfigRefused, match=variable):
        await forge_api(job, config, http, None).mint()


# --- per-forge addressing --------------------------------------------------------------------------------


async def test_github_enterprise_server_answers_under_its_api_prefix(http: aiohttp.ClientSession) -> None:
    async with github_forge("/api/v3") as fake:
        set_repo(fake, "Codertocat/Hello-World")
        config = load_forge_config({**forge_env("github", fake.url + "/api/v3")})
        api = forge_api(github_job("gh-1"), config, http, GithubAuth(config, http))
        assert (await api.tip("ghp_test")).sha == TIP_SHA
        assert fake.calls("repo")[0].path == "/api/v3/repos/Codertocat/Hello-World"


async def test_gitlab_without_a_project_id_asks_by_the_encoded_path(http: aiohttp.ClientSession) -> None:
    async with gitlab_forge() as fake:
        set_repo(fake, 42, path="group/sub/proj")
        config = load_forge_config(forge_env("gitlab", fake.url))
        job = Job(id="gl-1", kind="gitlab", repo="group/sub/proj", target=Target(type="issue", number=3))
        tip = await forge_api(job, config, http, None).tip("glpat-test")
        assert tip.clone_url == f"{fake.url}/group/sub/proj.git"
        assert fake.calls("project")[0].path == "/api/v4/projects/group%2Fsub%2Fproj"


async def test_azure_uses_basic_auth_and_the_exact_ref(http: aiohttp.ClientSession) -> None:
    async with azure_forge() as fake:
        set_repo(fake, KEYS["azure"], default_branch="main", sha=NEW_SHA, branches={"main-old": TIP_SHA})
        config = load_forge_config(forge_env("azure", fake.url))
        job = Case("azure", fake, config, http, None, "", ROUTES["azure"]).job()
        tip = await forge_api(job, config, http, None).tip("az-pat")
        assert tip.sha == NEW_SHA  # heads/main also lists main-old: only the exact name counts
        [refs] = fake.calls("refs")
        assert refs.query == {"filter": "heads/main", "api-version": "7.1"}
        assert refs.headers["x-tfs-fedauthredirect"] == "Suppress"


def test_azure_203_sign_in_page_is_a_refusal() -> None:
    assert isinstance(failure("azure", 203, {}, "x", "AZURE_TOKEN"), JobConfigRefused)


@pytest.mark.parametrize("kind", ["local", "bitbucket", ""])
def test_a_kind_without_a_forge_api_is_a_config_error(kind: str) -> None:
    job = Job(id="x", kind=kind, repo="o/r")
    with pytest.raises(JobConfigRefused, match="accepted: github, gitlab, forgejo, azure"):
        forge_api(job, load_forge_config({}), None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kind", "fields"), [
    ("github", {"repo": "no-slash"}), ("github", {"repo": "o/r/x"}), ("forgejo", {"repo": "o/ r"}),
    ("gitlab", {"repo": "a//b", "project_id": None}), ("azure", {"azure": None}),
    ("azure", {"azure": {"project": "p", "repository": "../r"}}),
])
def test_an_unusable_job_address_is_a_config_error(kind: str, fields: dict[str, Any]) -> None:
    job = Job(**{"id": "x", "kind": kind, "repo": "o/r", **fields})
    with pytest.raises(JobConfigRefused):
        forge_api(job, load_forge_config({}), None, None)  # type: ignore[arg-type]


# --- pure checks -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "api", "ok"), [
    ("https://github.com/o/r.git", "https://api.github.com", True),
    ("https://gitlab.example.com:8443/g/s/p.git", "https://gitlab.example.com:8443", True),
    ("http://127.0.0.1:8080/o/r.git", "http://127.0.0.1:8080", True),
    ("http://github.com/o/r.git", "https://api.github.com", False),  # no downgrade from an https API
    ("https://x-access-token:t@github.com/o/r.git", "https://api.github.com", False),
    ("https://org@dev.azure.com/org/p/_git/r", "https://dev.azure.com/org", False),
    ("https://github.com/o/r.git?", "https://api.github.com", False),
    ("https://github.com/o/r.git#", "https://api.github.com", False),
    ("https:///o/r.git", "https://api.github.com", False),
    ("https://github.com:99999/o/r.git", "https://api.github.com", False),
    ("https://github.com/o/r .git", "https://api.github.com", False),
    ("git@github.com:o/r.git", "https://api.github.com", False),
    ("", "https://api.github.com", False),
    (None, "https://api.github.com", False),
])
def test_clone_url_check(url: object, api: str, ok: bool) -> None:
    if ok:
        assert check_clone_url(url, api, "github") == url
    else:
        with pytest.raises(JobConfigRefused):
            check_clone_url(url, api, "github")


def test_azure_remote_url_loses_only_a_bare_user_name() -> None:
    assert strip_username("https://org@dev.azure.com/org/p/_git/r") == "https://dev.azure.com/org/p/_git/r"
    assert strip_username("https://u:pw@dev.azure.com/x") == "https://u:pw@dev.azure.com/x"  # refused later
    # A user name that is not the organisation is not Azure's shape: kept, so the check refuses it.
    assert strip_username("https://pat@dev.azure.com/org/p") == "https://pat@dev.azure.com/org/p"
    assert strip_username("https://dev.azure.com/x") == "https://dev.azure.com/x"


@pytest.mark.parametrize("name", ["main", "release/2.x", "feature/a-b_c", "v1.0"])
def test_ordinary_branch_names_pass(name: str) -> None:
    assert check_branch(name, "github") == name


@pytest.mark.parametrize("name", [
    "", "-x", "/x", "x/", ".x", "x/.y", "x..y", "x//y", "x y", "x~1", "x^", "x:y", "x?", "x*", "x[",
    "x\\y", "x.lock", "x.", "a@{b", "@", "x\x00", "x\x7f", None, 5, "a" * 256,
])
def test_unsafe_branch_names_are_refused(name: object) -> None:
    with pytest.raises(JobConfigRefused):
        check_branch(name, "github")


@pytest.mark.parametrize(("status", "headers", "expected"), [
    (429, {}, RATE_LIMITED), (403, {"retry-after": "1"}, RATE_LIMITED),
    (403, {"X-RateLimit-Remaining": "0"}, RATE_LIMITED), (500, {}, UNAVAILABLE), (504, {}, UNAVAILABLE),
    (408, {}, UNAVAILABLE), (401, {}, JobConfigRefused), (403, {}, JobConfigRefused),
    (404, {}, JobConfigRefused), (410, {}, JobConfigRefused), (422, {}, JobConfigRefused),
    (301, {}, JobConfigRefused),
])
def test_failure_classification(status: int, headers: dict[str, str], expected: Any) -> None:
    exc = failure("github", status, headers, "the lookup", "GITHUB_AUTH_SOURCE")
    if expected is JobConfigRefused:
        assert isinstance(exc, JobConfigRefused) and "GITHUB_AUTH_SOURCE" in str(exc)
    else:
        assert isinstance(exc, InfraFault) and exc.reason == expected
