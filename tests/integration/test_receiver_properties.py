"""Property: whatever arrives, the receiver answers a precise status, never 500, never hangs, and stores
only bodies whose credential the sender got right.

Hypothesis builds requests for every arm (both modes of GitLab and Azure across two deployments):
a body (real payloads, JSON objects shaped like each forge's, or raw bytes), a credential that is right,
made over other bytes, made with the wrong secret, garbage or absent, random header damage, and random
methods, content types and paths. The app runs in-process against the real Redis fixture.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from pidispatch.common.settings import load_settings
from pidispatch.forges.receive import load_receiver_config
from pidispatch.receiver.app import create_app
from tests.support.payloads import fixture_bytes
from tests.support.receiver import (
    AZURE_BASIC_SECRET,
    AZURE_HEADER_NAME,
    AZURE_HEADER_SECRET,
    FORGEJO_SECRET,
    GITHUB_SECRET,
    GITLAB_KEY,
    GITLAB_TOKEN_SECRET,
    azure_basic_env,
    azure_header_env,
    forgejo_env,
    forgejo_headers,
    github_headers,
    gitlab_signature_env,
    gitlab_signature_headers,
    gitlab_token_env,
    gitlab_token_headers,
)

# Today (a delivery's dedup bucket lives from its day on), at .123 s past a second.
RECEIVED_AT = int(time.time()) * 1000 + 123
NOW_S = RECEIVED_AT // 1000
# Deployment "a": GitLab signature mode, Azure basic; "b": GitLab token mode, Azure header mode.
DEPLOYMENTS = {
    "a": {**forgejo_env(), **gitlab_signature_env(), **azure_basic_env()},
    "b": {**forgejo_env(), **gitlab_token_env(), **azure_header_env()},
}
EXPECTED_STATUSES = {202, 204, 400, 401, 404, 405, 413, 415}
HANG_DETECTOR = aiohttp.ClientTimeout(total=10)

Client = TestClient[aiohttp.web.Request, aiohttp.web.Application]

REAL_BODIES = {
    "github": fixture_bytes("github/issues.labeled.json"),
    "forgejo": fixture_bytes("gitea/issue-comment-event.json"),
    "gitlab": fixture_bytes("gitlab/merge-request-event.json"),
    "azure": fixture_bytes("azuredevops/git.pullrequest.updated.json"),
}
PATHS = {"github": "/", "forgejo": "/forgejo", "gitlab": "/gitlab", "azure": "/azure"}

# Event names: the ones each arm stores, and some it answers 204 to.
_names = st.sampled_from(
    ["issue", "note", "merge_request", "workitem.updated", "git.pullrequest.created", "issues",
     "issue_comment", "pull_request", "push", "git.push", "ping", ""]
)
# Header event names: half of them ones GitHub and Forgejo store.
_events = st.one_of(st.sampled_from(["issues", "issue_comment", "pull_request"]), _names)
_ids = st.one_of(st.uuids().map(str), st.text(min_size=0, max_size=140), st.integers(), st.none())
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def _objects(draw: st.DrawFn) -> bytes:
    """JSON objects shaped like each forge's: the fields the arms read, with right and wrong types."""
    payload: dict[str, Any] = draw(st.dictionaries(st.text(max_size=8), _json_values, max_size=3))
    if draw(st.booleans()):
        payload["object_kind"] = draw(st.one_of(_names, _json_values))
    if draw(st.booleans()):
        payload["eventType"] = draw(st.one_of(_names, _json_values))
    if draw(st.booleans()):
        payload["id"] = draw(_ids)
    return json.dumps(payload, ensure_ascii=draw(st.booleans())).encode()


def _bodies(forge: str) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.just(REAL_BODIES[forge]),
        st.just(REAL_BODIES[forge]),
        _objects(),
        st.sampled_from(sorted(REAL_BODIES.values())),
        st.binary(max_size=300),
        st.sampled_from([b"", b"{}", b"[]", b"null", b'{"a":"\xff"}', b"{ not json"]),
    )
# Header values a client can send: printable ASCII, tab, and some non-ASCII; never CR, LF or NUL.
_header_text = st.text(
    st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"], exclude_characters="\r\n\x00"),
    max_size=60,
)
_credential_modes = st.sampled_from(["right"] * 6 + ["other-bytes", "wrong-secret", "garbage", "absent"])


@dataclass
class Ledger:
    """What the test itself signed correctly: (forge, body) pairs the receiver may store."""

    signed: set[tuple[str, bytes]] = field(default_factory=set)
    accepted: int = 0


CREDENTIAL_HEADERS = {
    "x-hub-signature-256",
    "x-gitea-signature",
    "x-forgejo-signature",
    "webhook-signature",
    "x-gitlab-token",
    "authorization",
    AZURE_HEADER_NAME.lower(),
}


def _credential_headers(
    forge: str, deployment: str, body: bytes, mode: str, data: st.DataObject
) -> tuple[dict[str, str], bool]:
    """Headers as ``forge`` sends them with a credential made as ``mode`` says, and whether that
    credential is right for ``body`` (a static token is right whatever bytes it travels with)."""
    signed_over = body + b"x" if mode == "other-bytes" else body
    delivery = data.draw(st.one_of(st.uuids().map(str), _header_text), label="delivery")
    wrong = mode == "wrong-secret"
    covers_body = True
    if forge == "github":
        secret = "nope" if wrong else GITHUB_SECRET
        headers = github_headers(signed_over, data.draw(_events), delivery, secret)
    elif forge == "forgejo":
        sender = data.draw(st.sampled_from(["forgejo", "gitea"]))
        # Not GitHub's secret: sent to "/" that would be a right GitHub credential (tested elsewhere).
        secret = "nope" if wrong else FORGEJO_SECRET
        headers = forgejo_headers(signed_over, data.draw(_events), delivery, secret, sender)
    elif forge == "gitlab" and deployment == "a":
        ts = NOW_S + data.draw(st.sampled_from([0, -299, 299, -301, 301, -(10**6)]), label="age")
        key = b"not the key" if wrong else GITLAB_KEY
        headers = gitlab_signature_headers(signed_over, delivery, ts, key=key)
    else:
        covers_body = False
        if forge == "gitlab":
            token = "nope" if wrong else GITLAB_TOKEN_SECRET
            headers = gitlab_token_headers(delivery, token, legacy_id=data.draw(st.booleans()))
        elif deployment == "a":
            headers = {"Content-Type": "application/json", "Authorization": "Basic " + AZURE_BASIC_SECRET}
        else:
            headers = {"Content-Type": "application/json", AZURE_HEADER_NAME: AZURE_HEADER_SECRET}
        if forge == "azure" and wrong:
            headers = {k: v + "x" if k.lower() in CREDENTIAL_HEADERS else v for k, v in headers.items()}
    if mode == "garbage":
        for name in headers:
            if name.lower() in CREDENTIAL_HEADERS:
                headers[name] = data.draw(_header_text, label="garbage credential")
    elif mode == "absent":
        headers = {k: v for k, v in headers.items() if k.lower() not in CREDENTIAL_HEADERS}
    right = mode == "right" or (mode == "other-bytes" and not covers_body)
    return headers, right


EXTRA_HEADERS = ["X-GitHub-Event", "webhook-id", "Idempotency-Key", "X-Gitlab-Event", "Content-Type"]


def _damage(headers: dict[str, str], data: st.DataObject) -> dict[str, str]:
    """Drop some headers, overwrite some with noise, add a few."""
    out = {}
    for name, value in headers.items():
        action = data.draw(st.sampled_from(["keep"] * 6 + ["drop", "noise"]), label=f"damage {name}")
        if action == "keep":
            out[name] = value
        elif action == "noise":
            out[name] = data.draw(_header_text, label=f"noise {name}")
    for name in data.draw(st.lists(st.sampled_from(EXTRA_HEADERS), max_size=2), label="extra headers"):
        out[name] = data.draw(_header_text, label=f"extra {name}")
    return out


@pytest.fixture
async def clients(redis: Redis, base_env: dict[str, str]) -> Any:
    made: dict[str, Client] = {}
    for name, env in DEPLOYMENTS.items():
        full = {**base_env, **env}
        settings_ = load_settings(full)
        config = load_receiver_config(settings_, full)
        app = create_app(settings_, redis, Keys(settings_.key_prefix), lambda: RECEIVED_AT, config)
        made[name] = TestClient(TestServer(app))
        await made[name].start_server()
    yield made
    for client in made.values():
        await client.close()


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    deployment=st.sampled_from(sorted(DEPLOYMENTS)),
    forge=st.sampled_from(sorted(PATHS)),
    mode=_credential_modes,
    damaged=st.sampled_from([False] * 4 + [True]),
    data=st.data(),
)
async def test_receiver_never_errs_never_hangs_and_stores_only_what_it_verified(
    clients: dict[str, Client],
    redis: Redis,
    keys: Keys,
    ledger: Ledger,
    deployment: str,
    forge: str,
    mode: str,
    damaged: bool,
    data: st.DataObject,
) -> None:
    body = data.draw(_bodies(forge), label="body")
    # Mostly the forge's own path; sometimes another forge's, a variant, or an unrouted one.
    path = data.draw(
        st.one_of(
            st.just(PATHS[forge]),
            st.just(PATHS[forge]),
            st.just(PATHS[forge]),
            st.sampled_from(["/", "/github", "/gitlab", "/forgejo", "/azure", "/gitlab/", "/azure?x=1"]),
            st.integers(0, 10**6).map(lambda n: f"/p{n}"),
        ),
        label="path",
    )
    method = data.draw(st.sampled_from(["POST"] * 20 + ["GET", "PUT", "DELETE", "HEAD"]), label="method")
    headers, right = _credential_headers(forge, deployment, body, mode, data)
    if damaged:
        headers = _damage(headers, data)
    if right:
        ledger.signed.add((forge, body))
    resp = await clients[deployment].request(method, path, data=body, headers=headers, timeout=HANG_DETECTOR)
    answer = await resp.read()
    event(f"{forge} {resp.status}")
    assert resp.status in EXPECTED_STATUSES, (resp.status, answer)
    if resp.status == 202:
        assert right
        assert json.loads(answer) in ({"status": "accepted"}, {"status": "duplicate"})
        ledger.accepted += json.loads(answer) == {"status": "accepted"}
    elif resp.status != 204 and method != "HEAD":
        assert resp.headers["Content-Type"] == "application/json"
        assert set(json.loads(answer)) <= {"error", "detail"}

    entries = await redis.xrange(keys.events)
    assert len(entries) == ledger.accepted
    for _, fields in entries:
        assert (fields[b"forge"].decode(), fields[b"body"]) in ledger.signed
