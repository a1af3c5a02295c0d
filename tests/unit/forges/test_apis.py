"""Every forge's worker API (``pidispatch.forges.<name>.api``) against its stand-in, one case per forge:
the shared request path (``pidispatch.forges.client``) and the registry lookup the worker uses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from pidispatch.common.models import Job, Target
from pidispatch.common.outcome import InfraFault, JobConfigRefused
from pidispatch.common.runtime import now_ms
from pidispatch.forges import FORGES as REGISTRY
from pidispatch.forges import names
from pidispatch.forges.api import Tip, api_of, start_forges
from pidispatch.forges.check import RATE_LIMITED, UNAVAILABLE
from pidispatch.forges.config import load_forge_config
from pidispatch.forges.http import create_http
from tests.support.forgecases import (
    AZURE_PROJECT,
    FAKES,
    FORGES,
    KEYS,
    NEW_SHA,
    ROUTES,
    TOKENS,
    Case,
    client,
    forge_env,
)
from tests.support.forges import TIP_SHA, FakeForge, disconnect, posted, raw, redirect, reply


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    session = create_http()
    yield session
    await session.close()


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


# --- credentials and the registry lookup ---------------------------------------------------------------


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
        await client(job, config, http).mint()


def test_every_forge_in_the_registry_gives_the_worker_a_client() -> None:
    clients = start_forges(load_forge_config({}), None, now_ms)  # type: ignore[arg-type]
    assert set(clients) == set(names())
    for f in REGISTRY:
        assert callable(api_of(f).start(load_forge_config({}), None, now_ms))  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["local", "bitbucket", ""])
def test_a_kind_without_a_forge_api_is_a_config_error(kind: str) -> None:
    job = Job(id="x", kind=kind, repo="o/r")
    with pytest.raises(JobConfigRefused, match="accepted: github, gitlab, forgejo, azure"):
        client(job, load_forge_config({}), None)


@pytest.mark.parametrize(("kind", "fields"), [
    ("github", {"repo": "no-slash"}), ("github", {"repo": "o/r/x"}), ("forgejo", {"repo": "o/ r"}),
    ("gitlab", {"repo": "a//b", "project_id": None}), ("azure", {"azure": None}),
    ("azure", {"azure": {"project": "p", "repository": "../r"}}),
])
def test_an_unusable_job_address_is_a_config_error(kind: str, fields: dict[str, Any]) -> None:
    job = Job(**{"id": "x", "kind": kind, "repo": "o/r", **fields})
    with pytest.raises(JobConfigRefused):
        client(job, load_forge_config({}), None)
