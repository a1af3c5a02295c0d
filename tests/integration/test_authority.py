"""The router's authority lookups, answer by answer: each forge's permission or membership API read as
allowed, refused or indeterminate (and what is cached and logged), against stand-in forges speaking the
documented API shapes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from prometheus_client.exposition import generate_latest
from structlog.testing import capture_logs

from pidispatch.forges.authority import Authority
from pidispatch.forges.azure.authority import AzureMembership
from pidispatch.forges.config import load_forge_config
from pidispatch.forges.forgejo.authority import ForgejoPermission
from pidispatch.forges.github.auth import GithubAuth
from pidispatch.forges.github.authority import GithubCloser
from pidispatch.forges.gitlab.authority import GitlabMember
from pidispatch.forges.http import create_http
from pidispatch.router.metrics import RouterMetrics
from pidispatch.triggers.lookup import Authorized, Indeterminate
from tests.support.forges import (
    FakeForge,
    Scripted,
    azure_forge,
    disconnect,
    forgejo_forge,
    github_forge,
    gitlab_forge,
    raw,
    redirect,
    reply,
    user_descriptor,
)
from tests.support.scrape import labelled, parse, sample

LOGIN = "mona-secret-login"
EMAIL = "dev.person@example.com"
ACTOR_GUID = "0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6"
PROJECT_GUID = "a1b2c3d4-0000-4000-8000-00000000cafe"
PROJECT_DESCRIPTOR = "scp.ZmFicmlrYW0tcHJvamVjdA"


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture(scope="module")
def app_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    session = create_http()
    yield session
    await session.close()


@pytest.fixture
async def gh() -> AsyncIterator[FakeForge]:
    async with github_forge() as forge:
        forge.state["permissions"].update({
            ("octo/hello", "admin-user"): "admin", ("octo/hello", "writer"): "write",
            ("octo/hello", "reader"): "read", ("octo/hello", "stranger"): "none",
            ("octo/hello", "triager"): "triage", ("octo/hello", LOGIN): "write",
        })
        yield forge


@pytest.fixture
async def gl() -> AsyncIterator[FakeForge]:
    async with gitlab_forge() as forge:
        forge.state["members"].update({(42, 7): 30, (42, 8): 40, (42, 9): 50, (42, 10): 20, (42, 11): 10})
        yield forge


@pytest.fixture
async def fj() -> AsyncIterator[FakeForge]:
    async with forgejo_forge() as forge:
        forge.state["permissions"].update({
            ("org/app", "owner"): "admin", ("org/app", "dev"): "write", ("org/app", "viewer"): "read",
            ("org/app", "nobody"): "none",
        })
        yield forge


@pytest.fixture
async def az() -> AsyncIterator[FakeForge]:
    async with azure_forge() as forge:
        member = user_descriptor(EMAIL)
        forge.state["descriptors"].update({PROJECT_GUID: PROJECT_DESCRIPTOR, ACTOR_GUID: member})
        forge.state["users"] = [
            {"principalName": f"user{i}@example.com", "mailAddress": f"user{i}@example.com",
             "descriptor": user_descriptor(f"user{i}@example.com")} for i in range(6)
        ]
        forge.state["users"].insert(4, {"principalName": "Dev.Person@Example.com", "mailAddress": None,
                                        "descriptor": member})
        forge.state["memberships"][member] = ["vssgp.team", PROJECT_DESCRIPTOR]
        yield forge


def authority(env: dict[str, str], http: aiohttp.ClientSession, clock: Clock | None = None) -> Authority:
    config = load_forge_config(env)
    sources = {"github": GithubAuth(config, http)} if config.block("github").configured else {}
    return Authority(config, sources, http, clock or Clock())


def gh_env(forge: FakeForge) -> dict[str, str]:
    return {"GITHUB_API_URL": forge.url, "GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": forge.state["pat"]}


def app_env(forge: FakeForge, key: rsa.RSAPrivateKey) -> dict[str, str]:
    forge.state["app_public_key"] = key.public_key()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return {"GITHUB_API_URL": forge.url, "GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_ID": "12345",
            "GITHUB_APP_INSTALLATION_ID": "777", "GITHUB_APP_PRIVATE_KEY": pem}


def gl_env(forge: FakeForge) -> dict[str, str]:
    return {"GITLAB_URL": forge.url, "GITLAB_TOKEN": forge.state["token"]}


def fj_env(forge: FakeForge) -> dict[str, str]:
    return {"FORGEJO_URL": forge.url, "FORGEJO_TOKEN": forge.state["token"]}


def az_env(forge: FakeForge) -> dict[str, str]:
    return {"AZURE_ORG_URL": f"{forge.url}/fabrikam", "AZURE_GRAPH_URL": f"{forge.url}/fabrikam",
            "AZURE_TOKEN": forge.state["token"]}


# --- GitHub ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("login", "verdict"),
    [("admin-user", True), ("writer", True), ("reader", False), ("stranger", False), ("triager", False),
     ("unknown-user", False)],
)
async def test_github_closer_permission(
    http: aiohttp.ClientSession, gh: FakeForge, login: str, verdict: bool
) -> None:
    answer = await authority(gh_env(gh), http).ask(GithubCloser(repo="octo/hello", login=login))
    assert answer == Authorized(verdict)
    [call] = gh.calls("permission")
    assert call.path == f"/repos/octo/hello/collaborators/{login}/permission"
    assert call.headers["accept"] == "application/vnd.github+json"
    assert call.headers["x-github-api-version"] == "2022-11-28"
    assert call.headers["authorization"] == f"Bearer {gh.state['pat']}"


@pytest.mark.parametrize(
    ("repo", "login"),
    [
        ("octo", "writer"), ("octo/", "writer"), ("/hello", "writer"), ("octo/hello/x", "writer"),
        ("octo/..", "writer"), ("./hello", "writer"), ("octo/hel lo", "writer"), ("octo/h?x", "writer"),
        ("octo/h#x", "writer"), (None, "writer"), ("octo/hello", ""), ("octo/hello", "a/b"),
        ("octo/hello", "a?b"), ("octo/hello", "a#b"), ("octo/hello", "a b"), ("octo/hello", ".."),
        ("octo/hello", None),
    ],
)
async def test_github_malformed_repo_or_login_is_refused_without_any_request(
    http: aiohttp.ClientSession, gh: FakeForge, app_key: rsa.RSAPrivateKey, repo: object, login: object
) -> None:
    answer = await authority(app_env(gh, app_key), http).ask(GithubCloser(repo=repo, login=login))  # type: ignore[arg-type]
    assert answer == Authorized(False)
    assert gh.requests == []  # not even a token mint


async def test_github_app_mints_a_token_for_only_that_repository_narrowed_to_metadata(
    http: aiohttp.ClientSession, gh: FakeForge, app_key: rsa.RSAPrivateKey
) -> None:
    answer = await authority(app_env(gh, app_key), http).ask(GithubCloser(repo="octo/hello", login="writer"))
    assert answer == Authorized(True)
    [mint] = gh.calls("access_tokens")
    assert mint.body == {"repositories": ["hello"], "permissions": {"metadata": "read"}}
    [lookup] = gh.calls("permission")
    assert lookup.headers["authorization"].removeprefix("Bearer ") in gh.state["installation_tokens"]


async def test_github_enterprise_api_root_is_used(http: aiohttp.ClientSession) -> None:
    async with github_forge(prefix="/api/v3") as ghe:
        ghe.state["permissions"][("octo/hello", "writer")] = "write"
        env = {**gh_env(ghe), "GITHUB_API_URL": f"{ghe.url}/api/v3"}
        answer = await authority(env, http).ask(GithubCloser(repo="octo/hello", login="writer"))
    assert answer == Authorized(True)
    assert ghe.calls("permission")[0].path == "/api/v3/repos/octo/hello/collaborators/writer/permission"


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (reply(502), "status-502"),
        (reply(500), "status-500"),
        (reply(403, {"message": "Resource not accessible"}), "status-403"),
        (reply(401), "status-401"),
        (disconnect(), "network"),
        (raw("<html>gateway</html>"), "bad-json"),
        (reply(200, {"user": {}}), "no-permission"),
        (reply(200, {"permission": ""}), "no-permission"),
        (reply(200, {"permission": 1}), "no-permission"),
        (reply(200, ["write"]), "no-permission"),
        (redirect(), "status-302"),
    ],
)
async def test_github_indeterminate_answers(
    http: aiohttp.ClientSession, gh: FakeForge, answer: Scripted, reason: str
) -> None:
    gh.script("permission", answer)
    assert await authority(gh_env(gh), http).ask(GithubCloser(repo="octo/hello", login="writer")) == (
        Indeterminate(reason)
    )


async def test_github_redirect_is_not_followed(http: aiohttp.ClientSession, gh: FakeForge) -> None:
    async with github_forge() as elsewhere:
        gh.script("permission", redirect(f"{elsewhere.url}/repos/octo/hello/collaborators/writer/permission"))
        answer = await authority(gh_env(gh), http).ask(GithubCloser(repo="octo/hello", login="writer"))
        assert answer == Indeterminate("status-302")
        assert elsewhere.requests == []  # the token never left for the redirect target


async def test_github_token_mint_failure_is_indeterminate(
    http: aiohttp.ClientSession, gh: FakeForge, app_key: rsa.RSAPrivateKey
) -> None:
    gh.script("access_tokens", reply(502))
    answer = await authority(app_env(gh, app_key), http).ask(GithubCloser(repo="octo/hello", login="writer"))
    assert answer == Indeterminate("token-mint-failed")
    assert gh.calls("permission") == []


async def test_github_without_credentials_is_indeterminate(http: aiohttp.ClientSession) -> None:
    answer = await authority({}, http).ask(GithubCloser(repo="octo/hello", login="writer"))
    assert answer == Indeterminate("not-configured")


async def test_a_forge_that_is_down_is_indeterminate(http: aiohttp.ClientSession) -> None:
    forge = github_forge()
    await forge.start()
    env = gh_env(forge)
    await forge.close()
    assert await authority(env, http).ask(GithubCloser(repo="octo/hello", login="writer")) == (
        Indeterminate("network")
    )


async def test_lookup_failure_logs_a_reason_and_never_the_login(
    http: aiohttp.ClientSession, gh: FakeForge
) -> None:
    gh.script("permission", reply(503))
    with capture_logs() as logs:
        await authority(gh_env(gh), http).ask(GithubCloser(repo="octo/hello", login=LOGIN), delivery="d-1")
    [line] = [entry for entry in logs if entry["event"] == "github_permission_lookup_failed"]
    assert line["reason"] == "status-503" and line["delivery"] == "d-1"
    assert LOGIN not in repr(logs)


# --- caching ---------------------------------------------------------------------------------------------


async def test_a_determinate_verdict_is_cached_briefly(http: aiohttp.ClientSession, gh: FakeForge) -> None:
    clock = Clock()
    auth = authority(gh_env(gh), http, clock)
    for login in ("writer", "unknown-user"):  # an authorised and a 404 refusal
        first = await auth.ask(GithubCloser(repo="octo/hello", login=login))
        assert await auth.ask(GithubCloser(repo="octo/hello", login=login)) == first
    assert len(gh.calls("permission")) == 2
    clock.ms += 61_000
    assert await auth.ask(GithubCloser(repo="octo/hello", login="writer")) == Authorized(True)
    assert len(gh.calls("permission")) == 3


async def test_an_indeterminate_verdict_is_not_cached(http: aiohttp.ClientSession, gh: FakeForge) -> None:
    gh.script("permission", reply(502))
    auth = authority(gh_env(gh), http)
    question = GithubCloser(repo="octo/hello", login="writer")
    assert await auth.ask(question) == Indeterminate("status-502")
    assert await auth.ask(question) == Authorized(True)
    assert len(gh.calls("permission")) == 2


async def test_each_lookup_is_counted_by_forge_and_result_and_never_by_login(
    http: aiohttp.ClientSession, gh: FakeForge
) -> None:
    metrics = RouterMetrics()
    config = load_forge_config(gh_env(gh))
    auth = Authority(config, {"github": GithubAuth(config, http)}, http, Clock(), metrics=metrics)
    gh.script("permission", reply(502))
    for login in ("writer", "writer", "writer", "stranger"):  # failed, allowed, cached, denied
        await auth.ask(GithubCloser(repo="octo/hello", login=login))
    got = parse(generate_latest(metrics.registry).decode())
    counts = {r: sample(got, "pd_router_forge_lookups_total", forge="github", result=r) for r in
              ("failed", "allowed", "cached", "denied")}
    assert counts == {"failed": 1, "allowed": 1, "cached": 1, "denied": 1}
    series = labelled(got, "pd_router_forge_lookups_total")
    assert all(set(labels) == {"forge", "result"} for labels in series)  # no login, no repository


async def test_the_cache_holds_no_login(http: aiohttp.ClientSession, gh: FakeForge) -> None:
    auth = authority(gh_env(gh), http)
    await auth.ask(GithubCloser(repo="octo/hello", login=LOGIN))
    assert LOGIN.encode() not in b"".join(auth.cache._entries)


# --- GitLab ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "verdict"), [(7, True), (8, True), (9, True), (10, False), (11, False), (12, False)]
)
async def test_gitlab_access_level(
    http: aiohttp.ClientSession, gl: FakeForge, user: int, verdict: bool
) -> None:
    answer = await authority(gl_env(gl), http).ask(GitlabMember(project_id=42, user_id=user))
    assert answer == Authorized(verdict)
    [call] = gl.calls("member")
    assert call.path == f"/api/v4/projects/42/members/all/{user}"
    assert call.headers["private-token"] == gl.state["token"]


@pytest.mark.parametrize(("project", "user"), [("42", 7), (42, "7"), (None, 7), (42, None), (True, 7),
                                                (42, 7.5), (0, 7), (42, -1)])
async def test_gitlab_non_integer_ids_are_refused_without_a_call(
    http: aiohttp.ClientSession, gl: FakeForge, project: object, user: object
) -> None:
    answer = await authority(gl_env(gl), http).ask(GitlabMember(project_id=project, user_id=user))  # type: ignore[arg-type]
    assert answer == Authorized(False)
    assert gl.requests == []


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (reply(500), "status-500"),
        (reply(401), "status-401"),
        (reply(403), "status-403"),
        (disconnect(), "network"),
        (raw("not json"), "bad-json"),
        (reply(200, {"access_level": "30"}), "no-access-level"),
        (reply(200, {"access_level": 30.5}), "no-access-level"),
        (reply(200, {"access_level": True}), "no-access-level"),
        (reply(200, {"id": 7}), "no-access-level"),
        (reply(200, [30]), "no-access-level"),
        (redirect(), "status-302"),
    ],
)
async def test_gitlab_indeterminate_answers(
    http: aiohttp.ClientSession, gl: FakeForge, answer: Scripted, reason: str
) -> None:
    gl.script("member", answer)
    assert await authority(gl_env(gl), http).ask(GitlabMember(project_id=42, user_id=7)) == (
        Indeterminate(reason)
    )


async def test_gitlab_integral_float_level_reads_as_json_integer(
    http: aiohttp.ClientSession, gl: FakeForge
) -> None:
    gl.script("member", reply(200, {"access_level": 30.0}))
    assert await authority(gl_env(gl), http).ask(GitlabMember(project_id=42, user_id=7)) == Authorized(True)


# --- Forgejo ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("login", "verdict"),
    [("owner", True), ("dev", True), ("viewer", False), ("nobody", False), ("ghost", False)],
)
async def test_forgejo_permission(
    http: aiohttp.ClientSession, fj: FakeForge, login: str, verdict: bool
) -> None:
    answer = await authority(fj_env(fj), http).ask(ForgejoPermission(repo="org/app", login=login))
    assert answer == Authorized(verdict)
    [call] = fj.calls("permission")
    assert call.path == f"/api/v1/repos/org/app/collaborators/{login}/permission"
    assert call.headers["authorization"] == f"token {fj.state['token']}"


@pytest.mark.parametrize(("repo", "login"), [("org/app", "a/b"), ("org/app", "a?b"), ("org/app", "a#b"),
                                              ("org/app", ""), ("org", "dev"), ("org/app/x", "dev")])
async def test_forgejo_malformed_repo_or_login_is_refused_without_a_call(
    http: aiohttp.ClientSession, fj: FakeForge, repo: str, login: str
) -> None:
    answer = await authority(fj_env(fj), http).ask(ForgejoPermission(repo=repo, login=login))
    assert answer == Authorized(False)
    assert fj.requests == []


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (reply(403), "status-403"),
        (reply(500), "status-500"),
        (disconnect(), "network"),
        (raw("{"), "bad-json"),
        (reply(200, {"permission": ""}), "no-permission"),
        (reply(200, {"permission": None}), "no-permission"),
        (redirect(), "status-302"),
    ],
)
async def test_forgejo_indeterminate_answers(
    http: aiohttp.ClientSession, fj: FakeForge, answer: Scripted, reason: str
) -> None:
    fj.script("permission", answer)
    assert await authority(fj_env(fj), http).ask(ForgejoPermission(repo="org/app", login="dev")) == (
        Indeterminate(reason)
    )


# --- Azure DevOps ----------------------------------------------------------------------------------------


async def test_azure_member_by_guid(http: aiohttp.ClientSession, az: FakeForge) -> None:
    question = AzureMembership(project_id=PROJECT_GUID, actor_id=ACTOR_GUID)
    assert await authority(az_env(az), http).ask(question) == Authorized(True)
    assert [c.route for c in az.requests] == ["descriptor", "descriptor", "memberships"]
    assert az.calls("memberships")[0].query["direction"] == "up"
    assert az.calls("users") == []


async def test_azure_member_by_email_follows_continuation_tokens(
    http: aiohttp.ClientSession, az: FakeForge
) -> None:
    az.state["page_size"] = 2  # the actor is the fifth user: page 3
    question = AzureMembership(project_id=PROJECT_GUID, actor_email="DEV.PERSON@example.com")
    assert await authority(az_env(az), http).ask(question) == Authorized(True)
    pages = az.calls("users")
    assert len(pages) == 3
    assert "continuationToken" not in pages[0].query
    assert all(p.query["subjectTypes"] == "aad,msa" for p in pages)


async def test_azure_email_not_in_the_directory_is_refused(
    http: aiohttp.ClientSession, az: FakeForge
) -> None:
    az.state["page_size"] = 3
    question = AzureMembership(project_id=PROJECT_GUID, actor_email="mallory@evil.test")
    assert await authority(az_env(az), http).ask(question) == Authorized(False)
    assert len(az.calls("users")) == 3  # the whole directory was read
    assert az.calls("memberships") == []


async def test_azure_non_member_is_refused(http: aiohttp.ClientSession, az: FakeForge) -> None:
    question = AzureMembership(project_id=PROJECT_GUID, actor_email="user0@example.com")
    assert await authority(az_env(az), http).ask(question) == Authorized(False)
    assert len(az.calls("memberships")) == 1


async def test_azure_user_walk_stops_at_twenty_pages(http: aiohttp.ClientSession, az: FakeForge) -> None:
    az.state["page_size"] = 1
    az.state["users"] = [{"principalName": f"u{i}@example.com", "descriptor": user_descriptor(str(i))}
                         for i in range(25)]
    auth = authority(az_env(az), http)
    on_page_20 = AzureMembership(project_id=PROJECT_GUID, actor_email="u19@example.com")
    assert await auth.ask(on_page_20) == Authorized(False)  # found, but not a member
    assert len(az.calls("users")) == 20
    az.requests.clear()
    on_page_21 = AzureMembership(project_id=PROJECT_GUID, actor_email="u20@example.com")
    assert await auth.ask(on_page_21) == Indeterminate("page-cap")
    assert len(az.calls("users")) == 20


@pytest.mark.parametrize(
    "question",
    [
        AzureMembership(project_id=None, actor_id=ACTOR_GUID),
        AzureMembership(project_id="", actor_id=ACTOR_GUID),
        AzureMembership(project_id=PROJECT_GUID),
        AzureMembership(project_id=PROJECT_GUID, actor_id="", actor_email=""),
    ],
)
async def test_azure_nothing_to_ask_about_is_refused_without_a_call(
    http: aiohttp.ClientSession, az: FakeForge, question: AzureMembership
) -> None:
    assert await authority(az_env(az), http).ask(question) == Authorized(False)
    assert az.requests == []


async def test_azure_descriptor_without_value_is_refused(http: aiohttp.ClientSession, az: FakeForge) -> None:
    az.script("descriptor", reply(200, {"value": None}))
    question = AzureMembership(project_id=PROJECT_GUID, actor_id=ACTOR_GUID)
    assert await authority(az_env(az), http).ask(question) == Authorized(False)


@pytest.mark.parametrize(
    ("route", "answers", "reason"),
    [
        ("descriptor", [reply(404)], "status-404"),
        ("descriptor", [reply(503)], "status-503"),
        ("descriptor", [disconnect()], "network"),
        ("descriptor", [raw("<html>")], "bad-json"),
        ("descriptor", [reply(200, {"value": "aad.x"}), reply(200, {})], "no-project-descriptor"),
        ("memberships", [reply(200, {"value": {"containerDescriptor": PROJECT_DESCRIPTOR}})], "no-array"),
        ("memberships", [reply(500)], "status-500"),
        ("memberships", [redirect()], "status-302"),
    ],
)
async def test_azure_indeterminate_answers(
    http: aiohttp.ClientSession, az: FakeForge, route: str, answers: list[Scripted], reason: str
) -> None:
    az.script(route, *answers)
    question = AzureMembership(project_id=PROJECT_GUID, actor_id=ACTOR_GUID)
    assert await authority(az_env(az), http).ask(question) == Indeterminate(reason)


async def test_azure_user_list_that_is_not_an_array_is_indeterminate(
    http: aiohttp.ClientSession, az: FakeForge
) -> None:
    az.script("users", reply(200, {"value": "nope"}))
    question = AzureMembership(project_id=PROJECT_GUID, actor_email=EMAIL)
    assert await authority(az_env(az), http).ask(question) == Indeterminate("no-array")


async def test_azure_lookup_failure_never_logs_the_email(http: aiohttp.ClientSession, az: FakeForge) -> None:
    az.script("users", reply(502))
    with capture_logs() as logs:
        await authority(az_env(az), http).ask(AzureMembership(project_id=PROJECT_GUID, actor_email=EMAIL))
    assert [entry["reason"] for entry in logs if entry["event"] == "azure_membership_lookup_failed"] == [
        "status-502"
    ]
    assert EMAIL not in repr(logs)
