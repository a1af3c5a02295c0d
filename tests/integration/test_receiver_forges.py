"""GitLab, Forgejo/Gitea and Azure DevOps through their arms, against a real redis-server.

Every status each arm answers (202 stored, 204 for an event the router cannot act on, each refusal), the
forges' real payloads, wrong forge secrets and modes, rotation, Redis stopped mid-test, and the process's
boot refusals.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from aiohttp.test_utils import TestClient, TestServer

from pidispatch.common.embedded import free_port
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis, create_redis
from pidispatch.common.settings import load_settings
from pidispatch.forges.receive import load_receiver_config
from pidispatch.receiver.app import create_app
from tests.support.dedup import is_remembered, remembered_count
from tests.support.payloads import fixture_bytes, fixture_paths
from tests.support.polling import wait_for
from tests.support.processes import RedisProcess, ServiceProcess
from tests.support.receiver import (
    AZURE_BASIC_SECRET,
    FORGEJO_SECRET,
    GITLAB_SIGNING_TOKEN,
    GITLAB_TOKEN_SECRET,
    TEST_SECRET,
    azure_basic_env,
    azure_basic_headers,
    azure_header_env,
    azure_header_headers,
    debug_logs,
    forgejo_env,
    forgejo_headers,
    github_headers,
    gitlab_signature_env,
    gitlab_signature_headers,
    gitlab_token_env,
    gitlab_token_headers,
    metric,
    post_declaring,
    stored_keys,
)

# Today (a delivery's dedup bucket lives from its day on), at .123 s past a second.
RECEIVED_AT = int(time.time()) * 1000 + 123  # the app's clock: GitLab's 5-minute window is measured from it
NOW_S = RECEIVED_AT // 1000
ALL_ARMS = {**forgejo_env(), **gitlab_signature_env(), **azure_basic_env()}

GITLAB_ISSUE = fixture_bytes("gitlab/issue-event.json")
GITEA_ISSUES = fixture_bytes("gitea/issues-event.json")
AZURE_PR = fixture_bytes("azuredevops/git.pullrequest.created.json")
AZURE_PR_ID = json.loads(AZURE_PR)["id"]

# What a Gitea/Forgejo instance sends as the event header for each go-playground payload (Gitea's
# HookEventType.Event(): label, assign and milestone changes are "issues" / "pull_request").
GITEA_EVENT_HEADER = {
    "create-event.json": "create",
    "delete-event.json": "delete",
    "fork-event.json": "fork",
    "issue-assign-event.json": "issues",
    "issue-comment-event.json": "issue_comment",
    "issue-label-event.json": "issues",
    "issue-milestone-event.json": "issues",
    "issues-event.json": "issues",
    "pull-request-assign-event.json": "pull_request",
    "pull-request-comment-event.json": "issue_comment",
    "pull-request-event.json": "pull_request",
    "pull-request-label-event.json": "pull_request",
    "pull-request-milestone-event.json": "pull_request",
    "pull-request-review-event.json": "pull_request_approved",
    "push-event.json": "push",
    "release-event.json": "release",
    "repository-event.json": "repository",
}
STORED_FORGEJO = {"issues", "issue_comment", "pull_request", "pull_request_approved"}
STORED_GITLAB = {"issue", "merge_request", "note"}
STORED_AZURE = {"git.pullrequest.created", "git.pullrequest.updated"}  # of the fixtures' event types

Client = TestClient[aiohttp.web.Request, aiohttp.web.Application]
MakeClient = Callable[..., Awaitable[Client]]


async def _app_client(redis: Redis, env: dict[str, str]) -> Client:
    settings = load_settings(env)
    config = load_receiver_config(settings, env)
    app = create_app(settings, redis, Keys(settings.key_prefix), lambda: RECEIVED_AT, config)
    client: Client = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
async def make_client(redis: Redis, base_env: dict[str, str]) -> AsyncIterator[MakeClient]:
    made: list[Client] = []

    async def make(**env: str) -> Client:
        client = await _app_client(redis, {**base_env, **env})
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


@pytest.fixture
async def client(make_client: MakeClient) -> Client:
    """GitHub, GitLab (signature mode), Forgejo and Azure (basic mode) in one receiver."""
    return await make_client(**ALL_ARMS)


async def _post(
    client: Client, path: str, body: bytes, headers: dict[str, str], method: str = "POST"
) -> tuple[int, Any]:
    resp = await client.request(method, path, data=body, headers=headers)
    if resp.status == 204:
        assert await resp.read() == b""
        assert "Content-Type" not in resp.headers
        return 204, None
    assert resp.headers["Content-Type"] == "application/json"
    return resp.status, await resp.json()


async def _entries(redis: Redis, keys: Keys) -> list[dict[str, bytes]]:
    return [{k.decode(): v for k, v in fields.items()} for _, fields in await redis.xrange(keys.events)]


def _gl(body: bytes, msg_id: str | None = None, ts: int = NOW_S, **kw: Any) -> dict[str, str]:
    return gitlab_signature_headers(body, msg_id or str(uuid.uuid4()), ts, **kw)


def _fj(body: bytes, event: str = "issues", delivery: str | None = None, **kw: Any) -> dict[str, str]:
    return forgejo_headers(body, event, delivery or str(uuid.uuid4()), **kw)


def _without(headers: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k not in names}


# --- real payloads ------------------------------------------------------------------------------------


async def test_gitlab_payloads_are_stored_by_object_kind(client: Client, redis: Redis, keys: Keys) -> None:
    expected: list[tuple[str, str, bytes]] = []
    for path in fixture_paths("gitlab"):
        body = path.read_bytes()
        kind = json.loads(body).get("object_kind")
        msg_id = f"gl-{path.stem}"
        status, answer = await _post(client, "/gitlab", body, _gl(body, msg_id, event="Some Hook"))
        if kind in STORED_GITLAB:
            assert (status, answer) == (202, {"status": "accepted"}), path.name
            expected.append((kind, msg_id, body))
        else:
            assert status == 204, path.name
    assert len(expected) == 9  # 2 issues, 2 merge requests and 5 notes among 39 payloads
    entries = await _entries(redis, keys)
    assert [(e["event"].decode(), e["delivery"].decode(), e["body"]) for e in entries] == expected
    assert {e["forge"] for e in entries} == {b"gitlab"}


@pytest.mark.parametrize("sender", ["forgejo", "gitea"])
async def test_gitea_payloads_are_stored_by_event_header(
    client: Client, redis: Redis, keys: Keys, sender: str
) -> None:
    stored = []
    for path in fixture_paths("gitea"):
        body = path.read_bytes()
        event = GITEA_EVENT_HEADER[path.name]
        status, _ = await _post(client, "/forgejo", body, _fj(body, event, sender=sender))
        assert status == (202 if event in STORED_FORGEJO else 204), path.name
        if status == 202:
            stored.append((event, body))
    assert len(stored) == 11
    entries = await _entries(redis, keys)
    assert [(e["event"].decode(), e["body"]) for e in entries] == stored
    assert {e["forge"] for e in entries} == {b"forgejo"}


async def test_azure_payloads_are_stored_by_event_type_with_the_body_id(
    client: Client, redis: Redis, keys: Keys
) -> None:
    stored = []
    for path in fixture_paths("azuredevops"):
        body = path.read_bytes()
        payload = json.loads(body)
        status, _ = await _post(client, "/azure", body, azure_basic_headers())
        assert status == (202 if payload["eventType"] in STORED_AZURE else 204), path.name
        if status == 202:
            stored.append((payload["eventType"], payload["id"], body))
    assert len(stored) == 2
    entries = await _entries(redis, keys)
    assert [(e["event"].decode(), e["delivery"].decode(), e["body"]) for e in entries] == stored
    assert await is_remembered(redis, keys.deliveries, f"azure:{AZURE_PR_ID}", RECEIVED_AT)


async def test_redelivery_is_a_duplicate_on_every_forge(client: Client, redis: Redis, keys: Keys) -> None:
    deliveries = [
        ("/gitlab", GITLAB_ISSUE, _gl(GITLAB_ISSUE, "gl-dup")),
        ("/forgejo", GITEA_ISSUES, _fj(GITEA_ISSUES, delivery="fj-dup")),
        ("/azure", AZURE_PR, azure_basic_headers()),
    ]
    for path, body, headers in deliveries:
        assert await _post(client, path, body, headers) == (202, {"status": "accepted"})
        assert await _post(client, path, body, headers) == (202, {"status": "duplicate"})
    assert await redis.xlen(keys.events) == 3


async def test_same_delivery_id_on_two_forges_is_two_deliveries(
    client: Client, redis: Redis, keys: Keys
) -> None:
    assert (await _post(client, "/gitlab", GITLAB_ISSUE, _gl(GITLAB_ISSUE, "same-id")))[0] == 202
    assert (await _post(client, "/forgejo", GITEA_ISSUES, _fj(GITEA_ISSUES, delivery="same-id")))[0] == 202
    github = github_headers(GITEA_ISSUES, "issues", "same-id")
    assert (await _post(client, "/", GITEA_ISSUES, github))[0] == 202
    assert await redis.xlen(keys.events) == 3


async def test_gitlab_path_variants_reach_the_gitlab_arm(client: Client, redis: Redis, keys: Keys) -> None:
    for path in ("/gitlab?x=1", "/gitlab/"):
        assert await _post(client, path, GITLAB_ISSUE, _gl(GITLAB_ISSUE)) == (202, {"status": "accepted"})
    assert [e["forge"] for e in await _entries(redis, keys)] == [b"gitlab", b"gitlab"]


# --- GitLab's rows ------------------------------------------------------------------------------------

MISSING_DELIVERY_ID = {
    "error": "missing delivery id",
    "detail": "no webhook-id or Idempotency-Key header; pi-dispatch needs GitLab 17.4 or later to dedup "
    "redeliveries",
}
GITLAB_SIGNATURE_ROWS: list[tuple[str, Callable[[], tuple[str, bytes, dict[str, str]]], int, Any]] = [
    ("get", lambda: ("GET", GITLAB_ISSUE, _gl(GITLAB_ISSUE)), 405, {"error": "method not allowed"}),
    (
        "form",
        lambda: ("POST", GITLAB_ISSUE, {**_gl(GITLAB_ISSUE), "Content-Type": "application/x-www-form"}),
        415,
        {"error": "unsupported media type"},
    ),
    (
        "no-event-header",
        lambda: ("POST", GITLAB_ISSUE, _without(_gl(GITLAB_ISSUE), "X-Gitlab-Event")),
        400,
        {"error": "missing gitlab event header"},
    ),
    (
        "no-delivery-id",
        lambda: ("POST", GITLAB_ISSUE, _without(_gl(GITLAB_ISSUE), "webhook-id")),
        400,
        MISSING_DELIVERY_ID,
    ),
    (
        "delivery-id-not-a-key",
        lambda: ("POST", GITLAB_ISSUE, _gl(GITLAB_ISSUE, "has space")),
        400,
        {"error": "invalid delivery id"},
    ),
    (
        "no-signature",
        lambda: ("POST", GITLAB_ISSUE, _without(_gl(GITLAB_ISSUE), "webhook-signature")),
        401,
        {"error": "missing signature"},
    ),
    (
        "no-timestamp",
        lambda: ("POST", GITLAB_ISSUE, _without(_gl(GITLAB_ISSUE), "webhook-timestamp")),
        401,
        {"error": "missing signature"},
    ),
    (
        "only-idempotency-key",
        lambda: (
            "POST",
            GITLAB_ISSUE,
            {**_without(_gl(GITLAB_ISSUE, "k-1"), "webhook-id"), "Idempotency-Key": "k-1"},
        ),
        401,
        {"error": "missing signature"},
    ),
    (
        "stale-six-minutes",
        lambda: ("POST", GITLAB_ISSUE, _gl(GITLAB_ISSUE, ts=NOW_S - 360)),
        401,
        {"error": "stale or invalid timestamp"},
    ),
    (
        "future-six-minutes",
        lambda: ("POST", GITLAB_ISSUE, _gl(GITLAB_ISSUE, ts=NOW_S + 360)),
        401,
        {"error": "stale or invalid timestamp"},
    ),
    (
        "not-a-timestamp",
        lambda: ("POST", GITLAB_ISSUE, {**_gl(GITLAB_ISSUE), "webhook-timestamp": "soon"}),
        401,
        {"error": "stale or invalid timestamp"},
    ),
    (
        "tampered",
        lambda: ("POST", GITLAB_ISSUE.replace(b'"issue"', b'"note"', 1), _gl(GITLAB_ISSUE)),
        401,
        {"error": "invalid signature"},
    ),
    (
        "other-key",
        lambda: ("POST", GITLAB_ISSUE, _gl(GITLAB_ISSUE, key=b"another gitlab key")),
        401,
        {"error": "invalid signature"},
    ),
    (
        "token-modes-header",
        lambda: ("POST", GITLAB_ISSUE, gitlab_token_headers(str(uuid.uuid4()), token=GITLAB_SIGNING_TOKEN)),
        401,
        {"error": "missing signature"},
    ),
    ("not-json", lambda: ("POST", b"{ not json", _gl(b"{ not json")), 400, {"error": "invalid-json"}),
    ("push", lambda: ("POST", b'{"object_kind":"push"}', _gl(b'{"object_kind":"push"}')), 204, None),
]


@pytest.mark.parametrize(
    ("make", "status", "answer"),
    [row[1:] for row in GITLAB_SIGNATURE_ROWS],
    ids=[row[0] for row in GITLAB_SIGNATURE_ROWS],
)
async def test_gitlab_signature_mode_row(
    client: Client,
    redis: Redis,
    keys: Keys,
    make: Callable[[], tuple[str, bytes, dict[str, str]]],
    status: int,
    answer: Any,
) -> None:
    method, body, headers = make()
    assert await _post(client, "/gitlab", body, headers, method) == (status, answer)
    assert await stored_keys(redis, keys) == []


async def test_gitlab_timestamp_at_the_window_edge_is_accepted(client: Client) -> None:
    # RECEIVED_AT is NOW_S + 0.123 s: 299 s back and 300 s ahead are both inside five minutes.
    for ts in (NOW_S - 299, NOW_S + 300):
        assert (await _post(client, "/gitlab", GITLAB_ISSUE, _gl(GITLAB_ISSUE, ts=ts)))[0] == 202


async def test_gitlab_several_signatures_one_valid_is_accepted(client: Client) -> None:
    headers = _gl(GITLAB_ISSUE)
    headers["webhook-signature"] = "v1,AAAA v2,xyz " + headers["webhook-signature"]
    assert await _post(client, "/gitlab", GITLAB_ISSUE, headers) == (202, {"status": "accepted"})


async def test_gitlab_token_mode_rows(make_client: MakeClient, redis: Redis, keys: Keys) -> None:
    client = await make_client(**gitlab_token_env())
    body = GITLAB_ISSUE
    refusals = [
        (_without(gitlab_token_headers("t-1"), "X-Gitlab-Token"), {"error": "missing token"}),
        ({**gitlab_token_headers("t-2"), "X-Gitlab-Token": ""}, {"error": "missing token"}),
        (gitlab_token_headers("t-3", token="guessed"), {"error": "invalid token"}),
        # The signature mode's headers, correctly made, are not this mode's credential.
        (_gl(body, "t-4", key=GITLAB_TOKEN_SECRET.encode()), {"error": "missing token"}),
    ]
    for headers, answer in refusals:
        assert await _post(client, "/gitlab", body, headers) == (401, answer)
    assert await stored_keys(redis, keys) == []
    assert (await _post(client, "/gitlab", body, gitlab_token_headers("t-5")))[0] == 202
    legacy = gitlab_token_headers("t-6", legacy_id=True)
    assert (await _post(client, "/gitlab", body, legacy))[0] == 202
    assert [e["delivery"] for e in await _entries(redis, keys)] == [b"t-5", b"t-6"]


async def test_gitlab_previous_token_is_accepted_and_counted(make_client: MakeClient) -> None:
    env = {**gitlab_token_env(), "GITLAB_WEBHOOK_SECRET": "new-gitlab-token-01"}
    client = await make_client(**env, GITLAB_WEBHOOK_SECRET_PREVIOUS=GITLAB_TOKEN_SECRET)
    with structlog.testing.capture_logs() as logs:
        assert (await _post(client, "/gitlab", GITLAB_ISSUE, gitlab_token_headers("r-1")))[0] == 202
        new = gitlab_token_headers("r-2", token="new-gitlab-token-01")
        assert (await _post(client, "/gitlab", GITLAB_ISSUE, new))[0] == 202
    # Only the delivery verified by the previous secret is an info line (the current one is debug).
    lines = [line for line in logs if line["event"] == "delivery"]
    assert [(line["delivery"], line.get("verified_with")) for line in lines] == [("r-1", "previous")]
    text = await (await client.get("/metrics")).text()
    assert metric(text, "pd_receiver_verified_with_previous_secret_total", forge="gitlab") == 1
    assert "new-gitlab-token-01" not in repr(logs) and GITLAB_TOKEN_SECRET not in repr(logs)


# --- Forgejo's rows -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "change", "status", "answer"),
    [
        ("GET", {}, 405, {"error": "method not allowed"}),
        ("POST", {"Content-Type": "text/plain"}, 415, {"error": "unsupported media type"}),
        ("POST", {"drop": "Signature"}, 401, {"error": "missing signature"}),
        ("POST", {"drop": "Event"}, 400, {"error": "missing github event headers"}),
        ("POST", {"drop": "Delivery"}, 400, {"error": "missing github event headers"}),
        ("POST", {"delivery": "x" * 129}, 400, {"error": "invalid delivery id"}),
        ("POST", {"secret": TEST_SECRET}, 401, {"error": "invalid signature"}),  # GitHub's secret
        ("POST", {"tamper": True}, 401, {"error": "invalid signature"}),
        ("POST", {"body": b"[1]"}, 400, {"error": "invalid-json"}),
        ("POST", {"event": "push"}, 204, None),
    ],
    ids=["get", "text", "no-signature", "no-event", "no-delivery", "bad-delivery", "github-secret",
         "tampered", "not-object", "push"],
)
async def test_forgejo_row(
    client: Client, redis: Redis, keys: Keys, method: str, change: dict[str, Any], status: int, answer: Any
) -> None:
    body = change.get("body", GITEA_ISSUES)
    headers = _fj(
        body,
        change.get("event", "issues"),
        change.get("delivery"),
        secret=change.get("secret", FORGEJO_SECRET),
    )
    if "drop" in change:
        headers = {k: v for k, v in headers.items() if change["drop"] not in k}
    if "Content-Type" in change:
        headers["Content-Type"] = change["Content-Type"]
    if change.get("tamper"):
        body = body.replace(b'"opened"', b'"closed"', 1)
    assert await _post(client, "/forgejo", body, headers, method) == (status, answer)
    assert await stored_keys(redis, keys) == []


async def test_forgejo_delivery_at_github_path_is_checked_against_githubs_secret(
    client: Client, redis: Redis, keys: Keys
) -> None:
    headers = _fj(GITEA_ISSUES, delivery="fj-at-root")
    assert await _post(client, "/", GITEA_ISSUES, headers) == (401, {"error": "invalid signature"})
    github = github_headers(GITEA_ISSUES, "issues", "gh-at-forgejo")
    assert await _post(client, "/forgejo", GITEA_ISSUES, github) == (401, {"error": "invalid signature"})
    assert await stored_keys(redis, keys) == []
    assert await _post(client, "/forgejo", GITEA_ISSUES, headers) == (202, {"status": "accepted"})
    assert [e["forge"] for e in await _entries(redis, keys)] == [b"forgejo"]


async def test_forgejo_bad_own_signature_is_not_rescued_by_a_good_gitea_one(
    client: Client, redis: Redis, keys: Keys
) -> None:
    headers = _fj(GITEA_ISSUES)
    headers["X-Forgejo-Signature"] = "0" * 64
    assert await _post(client, "/forgejo", GITEA_ISSUES, headers) == (401, {"error": "invalid signature"})
    assert await stored_keys(redis, keys) == []


# --- Azure's rows -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "headers", "body", "status", "answer"),
    [
        ("GET", azure_basic_headers(), AZURE_PR, 405, {"error": "method-not-allowed"}),
        (
            "POST",
            {**azure_basic_headers(), "Content-Type": "application/x-www-form-urlencoded"},
            AZURE_PR,
            415,
            {"error": "unsupported-media-type"},
        ),
        ("POST", azure_basic_headers("aG9va3M6d3Jvbmc="), AZURE_PR, 401, {"error": "unauthorized"}),
        ("POST", {**azure_basic_headers(), "Authorization": f"Bearer {AZURE_BASIC_SECRET}"}, AZURE_PR, 401,
         {"error": "unauthorized"}),
        ("POST", azure_header_headers(secret=AZURE_BASIC_SECRET), AZURE_PR, 401, {"error": "unauthorized"}),
        ("POST", {"Content-Type": "application/json"}, AZURE_PR, 401, {"error": "unauthorized"}),
        ("POST", azure_basic_headers(), b"{ not valid json", 400, {"error": "invalid-json"}),
        ("POST", azure_basic_headers(), b'{"eventType":"workitem.updated"}', 400,
         {"error": "missing-delivery-id"}),
        ("POST", azure_basic_headers(), b'{"id":"","eventType":"workitem.updated"}', 400,
         {"error": "missing-delivery-id"}),
        ("POST", azure_basic_headers(), b'{"id":7,"eventType":"workitem.updated"}', 400,
         {"error": "missing-delivery-id"}),
        ("POST", azure_basic_headers(), b'{"id":"a\\nb","eventType":"workitem.updated"}', 400,
         {"error": "invalid-delivery-id"}),
        ("POST", azure_basic_headers(), fixture_bytes("azuredevops/git.push.json"), 204, None),
    ],
    ids=["get", "form", "wrong-password", "bearer", "custom-header", "no-credential", "not-json", "no-id",
         "empty-id", "numeric-id", "id-not-a-key", "push"],
)
async def test_azure_basic_mode_row(
    client: Client,
    redis: Redis,
    keys: Keys,
    method: str,
    headers: dict[str, str],
    body: bytes,
    status: int,
    answer: Any,
) -> None:
    assert await _post(client, "/azure", body, headers, method) == (status, answer)
    assert await stored_keys(redis, keys) == []


async def test_azure_header_mode(make_client: MakeClient, redis: Redis, keys: Keys) -> None:
    client = await make_client(**azure_header_env())
    other = azure_header_headers(name="X-Other")
    assert await _post(client, "/azure", AZURE_PR, other) == (401, {"error": "unauthorized"})
    basic = azure_basic_headers(secret=azure_header_env()["AZURE_WEBHOOK_SECRET"])
    assert await _post(client, "/azure", AZURE_PR, basic) == (401, {"error": "unauthorized"})
    assert await stored_keys(redis, keys) == []
    assert await _post(client, "/azure", AZURE_PR, azure_header_headers()) == (202, {"status": "accepted"})


# --- limits, shared by every arm ----------------------------------------------------------------------

TOO_LARGE = {
    "gitlab": (_gl, b'{"error":"payload too large"}'),
    "forgejo": (_fj, b'{"error":"payload too large"}'),
    "azure": (lambda body: azure_basic_headers(), b'{"error":"payload-too-large"}'),
}


@pytest.mark.parametrize("forge", list(TOO_LARGE))
async def test_declared_length_over_2mib_is_413_before_the_body_is_read(
    client: Client, redis: Redis, keys: Keys, forge: str
) -> None:
    headers_for, answer = TOO_LARGE[forge]
    response = await post_declaring(client.port, f"/{forge}", headers_for(b"{}"), 3 * 1024 * 1024, b"{}")
    assert response.startswith(b"HTTP/1.1 413 ")
    assert response.endswith(answer)
    assert await stored_keys(redis, keys) == []


@pytest.mark.parametrize("forge", list(TOO_LARGE))
async def test_streamed_body_over_2mib_is_413(client: Client, redis: Redis, keys: Keys, forge: str) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(48):  # 3 MiB, chunked, no Content-Length
            yield b" " * 65536

    headers_for, answer = TOO_LARGE[forge]
    resp = await client.post(f"/{forge}", data=chunks(), headers=headers_for(b"{}"))
    assert (resp.status, await resp.read()) == (413, answer)
    assert await stored_keys(redis, keys) == []


# --- which arms exist ---------------------------------------------------------------------------------


async def test_deployment_without_github_answers_404_on_githubs_paths(make_client: MakeClient) -> None:
    client = await make_client(WEBHOOK_SECRET="", **gitlab_token_env())
    for method, path in (("POST", "/"), ("GET", "/"), ("POST", "/anything"), ("POST", "/github")):
        headers = github_headers(b"{}", "issues", "d")
        resp = await client.request(method, path, data=GITEA_ISSUES, headers=headers)
        assert (resp.status, await resp.json()) == (404, {"error": "github webhooks are not configured"})
    for path in ("/forgejo", "/azure"):
        forge = path[1:]
        resp = await client.post(path, data=b"{}")
        assert (resp.status, await resp.json()) == (404, {"error": f"{forge} webhooks are not configured"})
    for path in ("/healthz", "/readyz", "/metrics"):
        assert (await client.get(path)).status == 200, path
    assert (await _post(client, "/gitlab", GITLAB_ISSUE, gitlab_token_headers("only-gitlab")))[0] == 202


# --- Redis stopped mid-test ---------------------------------------------------------------------------


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    """A redis-server this test may stop and restart; append-only so a restart keeps data."""
    server = RedisProcess(tmp_path / "own-redis", persist=True)
    server.start()
    yield server
    if server.proc is not None and server.proc.poll() is None:
        server.proc.send_signal(signal.SIGCONT)
    server.stop()


@pytest.mark.parametrize("forge", ["gitlab", "forgejo", "azure"])
async def test_redis_stopped_mid_test_is_503_then_202_with_nothing_half_written(
    own_redis: RedisProcess, base_env: dict[str, str], keys: Keys, forge: str
) -> None:
    sends = {
        "gitlab": (GITLAB_ISSUE, _gl(GITLAB_ISSUE, "gl-outage"), "gl-outage"),
        "forgejo": (GITEA_ISSUES, _fj(GITEA_ISSUES, delivery="fj-outage"), "fj-outage"),
        "azure": (AZURE_PR, azure_basic_headers(), AZURE_PR_ID),
    }
    body, headers, delivery = sends[forge]
    redis = create_redis(own_redis.url)
    client = await _app_client(redis, {**base_env, **ALL_ARMS, "REDIS_URL": own_redis.url})
    try:
        own_redis.stop()
        assert await _post(client, f"/{forge}", body, headers) == (503, {"error": "enqueue-failed"})
        own_redis.start()
        assert await _post(client, f"/{forge}", body, headers) == (202, {"status": "accepted"})
        assert await _post(client, f"/{forge}", body, headers) == (202, {"status": "duplicate"})
        entries = await _entries(redis, keys)
        assert [(e["forge"].decode(), e["delivery"].decode(), e["body"]) for e in entries] == [
            (forge, delivery, body)
        ]
        assert await remembered_count(redis, f"{keys.prefix}:deliveries:*") == 1
        text = await (await client.get("/metrics")).text()
        assert metric(text, "pd_receiver_append_failures_total", forge=forge) == 1
    finally:
        await client.close()
        await redis.aclose()


# --- logs ---------------------------------------------------------------------------------------------


async def test_log_lines_name_delivery_and_reason_never_payload_logins_or_secrets(client: Client) -> None:
    with debug_logs() as logs:
        await _post(client, "/gitlab", GITLAB_ISSUE, _gl(GITLAB_ISSUE, "gl-log"))
        await _post(client, "/gitlab", GITLAB_ISSUE, _gl(GITLAB_ISSUE, "gl-stale", ts=NOW_S - 999))
        await _post(client, "/forgejo", GITEA_ISSUES, _fj(GITEA_ISSUES, delivery="fj-log"))
        await _post(client, "/forgejo", GITEA_ISSUES, _fj(GITEA_ISSUES, delivery="fj-bad", secret="x"))
        await _post(client, "/azure", AZURE_PR, azure_basic_headers())
        await _post(client, "/azure", AZURE_PR, azure_basic_headers("d3Jvbmc="))
    lines = [line for line in logs if line["event"] == "delivery"]
    fields = ("forge", "forge_event", "delivery", "status", "outcome", "reason")
    assert [tuple(x.get(f) for f in fields) for x in lines] == [
        ("gitlab", "issue", "gl-log", 202, "accepted", None),
        ("gitlab", None, "gl-stale", 401, "refused", "invalid-timestamp"),  # "Issue Hook" is not name-shaped
        ("forgejo", "issues", "fj-log", 202, "accepted", None),
        ("forgejo", "issues", "fj-bad", 401, "refused", "invalid-signature"),
        ("azure", "git.pullrequest.created", AZURE_PR_ID, 202, "accepted", None),
        ("azure", None, None, 401, "refused", "invalid-credential"),  # nothing of the body is read
    ]
    text = repr(logs)
    for leaked in (
        "root",
        "Administrator",
        "example@example.com",
        "fabrikamfiber4@hotmail.com",
        "Jamal Hartnett",
        "my first pull request",
        FORGEJO_SECRET,
        GITLAB_SIGNING_TOKEN,
        AZURE_BASIC_SECRET,
    ):
        assert leaked not in text, leaked


# --- the process --------------------------------------------------------------------------------------


def _service(base_env: dict[str, str], tmp_path: Path, **env: str) -> tuple[ServiceProcess, int]:
    port = free_port()
    full = {**base_env, "RECEIVER_PORT": str(port), "RECEIVER_BIND": "127.0.0.1", **env}
    full = {k: v for k, v in full.items() if v}
    return ServiceProcess("receiver", full, tmp_path / f"receiver-{port}.log"), port


async def test_receiver_process_serves_every_arm_and_exits_zero(
    base_env: dict[str, str], tmp_path: Path, redis: Redis, keys: Keys
) -> None:
    service, port = _service(
        base_env, tmp_path, **ALL_ARMS, FORGEJO_WEBHOOK_SECRET_PREVIOUS="old-forgejo-secret"
    )
    service.start()
    try:
        await wait_for(lambda: service.logged("receiver_started"), timeout=15, what="receiver_started")
        started = service.logged("receiver_started")[0]
        assert started["arms"] == ["github", "gitlab", "forgejo", "azure"]
        assert started["rotating"] == ["forgejo"]
        gitlab = gitlab_signature_headers(GITLAB_ISSUE, "proc-gl", int(time.time()))  # the real clock here
        old_forgejo = _fj(GITEA_ISSUES, delivery="proc-fj", secret="old-forgejo-secret")
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:
            for path, body, headers in (
                ("/gitlab", GITLAB_ISSUE, gitlab),
                ("/forgejo", GITEA_ISSUES, old_forgejo),
                ("/azure", AZURE_PR, azure_basic_headers()),
            ):
                async with session.post(path, data=body, headers=headers) as resp:
                    assert (resp.status, await resp.json()) == (202, {"status": "accepted"}), path
    finally:
        code = await asyncio.to_thread(service.stop)
    assert code == 0
    assert [e["forge"] for e in await _entries(redis, keys)] == [b"gitlab", b"forgejo", b"azure"]
    previous = [x for x in service.logged("delivery") if x.get("verified_with") == "previous"]
    assert [x["delivery"] for x in previous] == ["proc-fj"]
    text = service.log_path.read_text()
    for secret in (FORGEJO_SECRET, "old-forgejo-secret", GITLAB_SIGNING_TOKEN, AZURE_BASIC_SECRET, "root"):
        assert secret not in text


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"FORGEJO_URL": "https://forgejo.example"}, "FORGEJO_WEBHOOK_SECRET is required"),
        ({"GITLAB_WEBHOOK_MODE": "signature", "GITLAB_WEBHOOK_SECRET": "whsec_"}, "GITLAB_WEBHOOK_SECRET is"),
        ({"AZURE_WEBHOOK_MODE": "header", "AZURE_WEBHOOK_SECRET": "azure-secret"}, "AZURE_WEBHOOK_HEADER is"),
    ],
    ids=["forgejo-without-secret", "gitlab-empty-key", "azure-header-without-name"],
)
async def test_half_configured_arm_refuses_to_start_with_exit_2(
    base_env: dict[str, str], tmp_path: Path, env: dict[str, str], named: str
) -> None:
    service, _ = _service(base_env, tmp_path, **env)
    service.start()
    assert service.proc is not None
    code = await asyncio.to_thread(service.proc.wait, 15)
    service.stop()
    assert code == 2
    output = service.log_path.read_text()
    assert named in output
    assert len([line for line in output.splitlines() if "configuration error" in line]) == 1
    assert "azure-secret" not in output
