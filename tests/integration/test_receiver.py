"""The receiver against a real redis-server: what each delivery answers and what it leaves in Redis.

GitHub's arm and what every arm shares (health, metrics, rotation, logs, the process). The other forges
are in ``test_receiver_forges``. The app runs in aiohttp's TestServer; the lifecycle tests run the real
process (``python -m pidispatch.receiver``).
"""

from __future__ import annotations

import asyncio
import gzip
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from aiohttp.test_utils import TestClient, TestServer

from pidispatch.common.dedup import DAY_MS, WINDOW_DAYS, remembered
from pidispatch.common.embedded import free_port
from pidispatch.common.keys import Keys
from pidispatch.common.models import Event
from pidispatch.common.redis import Redis, create_redis
from pidispatch.common.settings import load_settings
from pidispatch.forges.receive import load_receiver_config
from pidispatch.receiver.app import create_app
from tests.support.dedup import is_remembered, remembered_count
from tests.support.payloads import FIXTURES, octokit_examples
from tests.support.polling import wait_for
from tests.support.processes import RedisProcess, ServiceProcess
from tests.support.receiver import (
    TEST_SECRET,
    debug_logs,
    github_signature,
    metric,
    post_declaring,
    stored_keys,
)

ISSUES_LABELED = (FIXTURES / "github" / "issues.labeled.json").read_bytes()
PING = (FIXTURES / "github" / "ping.json").read_bytes()
# Today (a delivery's dedup bucket lives from its day on), at .123 s past a second.
RECEIVED_AT = int(time.time()) * 1000 + 123

Client = TestClient[aiohttp.web.Request, aiohttp.web.Application]


def _headers(body: bytes, event: str, delivery: str, secret: str = TEST_SECRET) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": github_signature(secret, body),
    }


async def _post(
    client: Client,
    body: bytes = ISSUES_LABELED,
    *,
    event: str = "issues",
    delivery: str | None = None,
    path: str = "/",
    drop: tuple[str, ...] = (),
    **overrides: str,
) -> tuple[int, Any, aiohttp.ClientResponse]:
    headers = _headers(body, event, delivery or str(uuid.uuid4()))
    headers.update(overrides)
    for name in drop:
        headers.pop(name)
    resp = await client.post(path, data=body, headers=headers)
    payload = await resp.json() if resp.status != 204 else None
    return resp.status, payload, resp


async def _app_client(redis: Redis, env: dict[str, str]) -> Client:
    settings = load_settings(env)
    config = load_receiver_config(settings, env)
    app = create_app(settings, redis, Keys(settings.key_prefix), lambda: RECEIVED_AT, config)
    client: Client = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
async def client(redis: Redis, base_env: dict[str, str]) -> AsyncIterator[Client]:
    client = await _app_client(redis, base_env)
    yield client
    await client.close()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    """A redis-server this test may stop, freeze and restart; append-only so a restart keeps data."""
    server = RedisProcess(tmp_path / "own-redis", persist=True)
    server.start()
    yield server
    if server.proc is not None and server.proc.poll() is None:
        server.proc.send_signal(signal.SIGCONT)
    server.stop()


@pytest.fixture
async def own_client(
    own_redis: RedisProcess, base_env: dict[str, str]
) -> AsyncIterator[tuple[Client, Redis]]:
    redis = create_redis(own_redis.url)
    client = await _app_client(redis, {**base_env, "REDIS_URL": own_redis.url})
    yield client, redis
    await client.close()
    await redis.aclose()


# --- accepted, duplicate, ignored -------------------------------------------------------------------


async def test_signed_issues_labeled_is_appended_once_with_the_posted_bytes(
    client: Client, redis: Redis, keys: Keys
) -> None:
    delivery = str(uuid.uuid4())
    status, body, resp = await _post(client, delivery=delivery)
    assert (status, body) == (202, {"status": "accepted"})
    assert resp.headers["Content-Type"] == "application/json"

    entries = await redis.xrange(keys.events)
    assert len(entries) == 1
    fields = entries[0][1]
    assert fields[b"body"] == ISSUES_LABELED
    event = Event.from_fields(fields)
    assert event == Event(
        forge="github",
        event="issues",
        delivery=delivery,
        received_at=RECEIVED_AT,
        body=ISSUES_LABELED.decode(),
    )
    assert await is_remembered(redis, keys.deliveries, f"github:{delivery}", RECEIVED_AT)
    # Remembered for the dedup window: its table outlives its newest day by WINDOW_DAYS, and no longer.
    bucket = remembered(keys.deliveries, f"github:{delivery}", RECEIVED_AT).keys[0]
    expires_in = (RECEIVED_AT // DAY_MS + WINDOW_DAYS + 1) * DAY_MS // 1000 - int(time.time())
    assert expires_in - 2 <= await redis.ttl(bucket) <= expires_in


async def test_redelivery_answers_duplicate_and_appends_nothing(
    client: Client, redis: Redis, keys: Keys
) -> None:
    delivery = str(uuid.uuid4())
    assert (await _post(client, delivery=delivery))[:2] == (202, {"status": "accepted"})
    assert (await _post(client, delivery=delivery))[:2] == (202, {"status": "duplicate"})
    assert await redis.xlen(keys.events) == 1


async def test_concurrent_copies_of_one_delivery_append_it_once(
    client: Client, redis: Redis, keys: Keys
) -> None:
    delivery = str(uuid.uuid4())
    results = await asyncio.gather(*(_post(client, delivery=delivery) for _ in range(8)))
    assert sorted(body["status"] for _, body, _ in results) == ["accepted"] + ["duplicate"] * 7
    assert await redis.xlen(keys.events) == 1


async def test_every_unrouted_path_reaches_github(client: Client, redis: Redis, keys: Keys) -> None:
    for path in ("/github", "/github/", "/anything?x=1", "/?x=1"):
        assert (await _post(client, path=path))[:2] == (202, {"status": "accepted"}), path
    assert await redis.xlen(keys.events) == 4


async def test_ping_is_answered_204_and_not_stored(client: Client, redis: Redis, keys: Keys) -> None:
    status, _, resp = await _post(client, PING, event="ping")
    assert status == 204
    assert await resp.read() == b""
    assert "Content-Type" not in resp.headers
    assert await stored_keys(redis, keys) == []


async def test_event_the_router_cannot_act_on_is_204_even_with_issue_payload(
    client: Client, redis: Redis, keys: Keys
) -> None:
    assert (await _post(client, event="push"))[0] == 204
    assert await stored_keys(redis, keys) == []


async def test_ignored_deliveries_are_counted_by_forge_and_event_type(
    client: Client, redis: Redis, keys: Keys
) -> None:
    for event in ("push", "push", "ping"):
        assert (await _post(client, PING if event == "ping" else ISSUES_LABELED, event=event))[0] == 204
    assert await redis.hgetall(keys.ignored) == {b"github:push": b"2", b"github:ping": b"1"}
    assert await stored_keys(redis, keys) == []  # counted, never stored
    text = await (await client.get("/metrics")).text()
    assert metric(text, "pd_receiver_ignored_total", forge="github", event="push") == 2
    assert metric(text, "pd_receiver_ignored_total", forge="github", event="ping") == 1


# Events the router can act on; written out here so the test pins the arm's set.
STORED_GITHUB_EVENTS = {"issues", "issue_comment", "pull_request", "pull_request_review"}


async def test_every_octokit_example_is_202_or_204_as_its_event_type_says(
    client: Client, redis: Redis, keys: Keys
) -> None:
    stored: list[bytes] = []
    answers: dict[str, set[int]] = {}
    for event, body in octokit_examples():
        status, _, _ = await _post(client, body, event=event)
        answers.setdefault(event, set()).add(status)
        if event in STORED_GITHUB_EVENTS:
            stored.append(body)
    assert len(answers) == 58  # every event of the package, ping and push included
    assert {e: s for e, s in answers.items() if s != ({202} if e in STORED_GITHUB_EVENTS else {204})} == {}
    entries = await redis.xrange(keys.events)
    assert [fields[b"body"] for _, fields in entries] == stored
    assert {fields[b"event"].decode() for _, fields in entries} == STORED_GITHUB_EVENTS


async def test_previous_secret_is_accepted_logged_and_counted(
    redis: Redis, base_env: dict[str, str], keys: Keys
) -> None:
    env = {**base_env, "WEBHOOK_SECRET": "rotated-secret-01", "WEBHOOK_SECRET_PREVIOUS": TEST_SECRET}
    client = await _app_client(redis, env)
    try:
        with structlog.testing.capture_logs() as logs:
            old = await _post(client, delivery="signed-with-old")  # _post signs with TEST_SECRET
            new_signature = github_signature("rotated-secret-01", ISSUES_LABELED)
            new = await _post(client, delivery="signed-with-new", **{"X-Hub-Signature-256": new_signature})
            other = github_signature("neither", ISSUES_LABELED)
            wrong = await _post(client, delivery="signed-with-other", **{"X-Hub-Signature-256": other})
        text = await (await client.get("/metrics")).text()
    finally:
        await client.close()
    assert [old[:2], new[:2], wrong[:2]] == [
        (202, {"status": "accepted"}),
        (202, {"status": "accepted"}),
        (401, {"error": "invalid signature"}),
    ]
    lines = [line for line in logs if line["event"] == "delivery"]
    # The delivery verified by the current secret is a quiet debug line; rotation and refusal are info.
    assert [(line.get("verified_with"), line.get("outcome")) for line in lines] == [
        ("previous", "accepted"), (None, "refused")
    ]
    assert metric(text, "pd_receiver_verified_with_previous_secret_total", forge="github") == 1
    assert await redis.xlen(keys.events) == 2
    assert "rotated-secret-01" not in repr(logs) and TEST_SECRET not in repr(logs)


async def test_metrics_count_deliveries_by_forge_outcome_and_reason(client: Client) -> None:
    delivery = str(uuid.uuid4())
    await _post(client, delivery=delivery)
    await _post(client, delivery=delivery)
    await _post(client, PING, event="ping")
    await _post(client, **{"X-Hub-Signature-256": "sha256=00"})
    await _post(client, drop=("X-Hub-Signature-256",))
    await client.post("/gitlab", data=b"{}")
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain; version=")
    text = await resp.text()

    def deliveries(outcome: str, reason: str = "", forge: str = "github") -> float:
        return metric(text, "pd_receiver_deliveries_total", forge=forge, outcome=outcome, reason=reason)

    assert (deliveries("accepted"), deliveries("duplicate"), deliveries("ignored")) == (1, 1, 1)
    assert deliveries("refused", "invalid-signature") == 1
    assert deliveries("refused", "missing-signature") == 1
    assert deliveries("refused", "not-configured", forge="gitlab") == 1
    assert metric(text, "pd_receiver_verify_seconds_count", forge="github") == 4  # bodies read and checked
    assert metric(text, "pd_receiver_append_seconds_count") == 2
    assert metric(text, "pd_receiver_body_bytes_sum", forge="github") == 3 * len(ISSUES_LABELED) + len(PING)
    assert metric(text, "pd_receiver_append_failures_total", forge="github") == 0
    assert "Codertocat" not in text and TEST_SECRET not in text


async def test_metrics_is_read_only_and_never_routed_to_github(client: Client) -> None:
    assert (await client.get("/metrics/")).status == 200
    status, body, _ = await _post(client, path="/metrics")
    assert (status, body) == (405, {"error": "method not allowed"})
    text = await (await client.get("/metrics")).text()
    assert metric(text, "pd_receiver_deliveries_total", forge="github", outcome="accepted", reason="") == 0


async def test_two_apps_keep_separate_metrics(redis: Redis, base_env: dict[str, str], client: Client) -> None:
    other = await _app_client(redis, base_env)
    try:
        assert (await _post(other))[0] == 202
        mine = await (await client.get("/metrics")).text()
        theirs = await (await other.get("/metrics")).text()
    finally:
        await other.close()
    labels = {"forge": "github", "outcome": "accepted", "reason": ""}
    assert metric(mine, "pd_receiver_deliveries_total", **labels) == 0
    assert metric(theirs, "pd_receiver_deliveries_total", **labels) == 1


# --- refusals: nothing stored -----------------------------------------------------------------------


async def test_wrong_signature_is_401_and_stores_nothing(client: Client, redis: Redis, keys: Keys) -> None:
    wrong = github_signature(TEST_SECRET, ISSUES_LABELED + b"tampered")
    status, body, _ = await _post(client, **{"X-Hub-Signature-256": wrong})
    assert (status, body) == (401, {"error": "invalid signature"})
    other_secret = github_signature("not-the-secret", ISSUES_LABELED)
    status, body, _ = await _post(client, **{"X-Hub-Signature-256": other_secret})
    assert (status, body) == (401, {"error": "invalid signature"})
    assert await stored_keys(redis, keys) == []


@pytest.mark.parametrize(
    ("method", "status", "error"),
    [("GET", 405, "method not allowed"), ("PUT", 405, "method not allowed")],
)
async def test_non_post_is_405(client: Client, method: str, status: int, error: str) -> None:
    resp = await client.request(method, "/", headers=_headers(b"", "issues", "d"))
    assert (resp.status, await resp.json()) == (status, {"error": error})


async def test_form_content_type_is_415(client: Client, redis: Redis, keys: Keys) -> None:
    status, body, _ = await _post(client, **{"Content-Type": "application/x-www-form-urlencoded"})
    assert (status, body) == (415, {"error": "unsupported media type"})
    assert await stored_keys(redis, keys) == []


async def test_json_content_type_with_parameters_is_accepted(client: Client) -> None:
    status, _, _ = await _post(client, **{"Content-Type": "Application/JSON; charset=utf-8"})
    assert status == 202


async def test_missing_signature_is_401(client: Client, redis: Redis, keys: Keys) -> None:
    status, body, _ = await _post(client, drop=("X-Hub-Signature-256",))
    assert (status, body) == (401, {"error": "missing signature"})
    assert await stored_keys(redis, keys) == []


@pytest.mark.parametrize("missing", ["X-GitHub-Event", "X-GitHub-Delivery"])
async def test_missing_github_event_headers_is_400(
    client: Client, redis: Redis, keys: Keys, missing: str
) -> None:
    status, body, _ = await _post(client, drop=(missing,))
    assert (status, body) == (400, {"error": "missing github event headers"})
    status, body, _ = await _post(client, **{missing: ""})
    assert (status, body) == (400, {"error": "missing github event headers"})
    assert await stored_keys(redis, keys) == []


@pytest.mark.parametrize("delivery", ["has space", "x" * 129, "tab\there"])
async def test_delivery_id_that_cannot_be_a_key_is_400(
    client: Client, redis: Redis, keys: Keys, delivery: str
) -> None:
    status, body, _ = await _post(client, delivery=delivery)
    assert (status, body) == (400, {"error": "invalid delivery id"})
    assert await stored_keys(redis, keys) == []


@pytest.mark.parametrize("raw", [b"{ not valid json", b"[1, 2]", b'"text"', b'{"a":"\xff"}'])
async def test_verified_body_that_is_not_a_json_object_is_400(
    client: Client, redis: Redis, keys: Keys, raw: bytes
) -> None:
    status, body, _ = await _post(client, raw)
    assert (status, body) == (400, {"error": "invalid-json"})
    assert await stored_keys(redis, keys) == []


async def test_content_encoding_is_not_inflated_before_verification(
    client: Client, redis: Redis, keys: Keys
) -> None:
    wire = gzip.compress(ISSUES_LABELED)
    status, body, _ = await _post(client, wire, **{"Content-Encoding": "gzip"})
    # Signed over the bytes on the wire, which verify; they are not a JSON object.
    assert (status, body) == (400, {"error": "invalid-json"})
    assert await stored_keys(redis, keys) == []


async def test_declared_content_length_over_2mib_is_413_before_the_body_is_read(
    client: Client, redis: Redis, keys: Keys
) -> None:
    small = b"{}"
    headers = _headers(small, "issues", "big-declared")
    response = await post_declaring(client.port, "/", headers, 3 * 1024 * 1024, small)
    assert response.startswith(b"HTTP/1.1 413 ")
    assert response.endswith(b'{"error":"payload too large"}')
    assert await stored_keys(redis, keys) == []


async def test_streamed_body_over_2mib_is_413(client: Client, redis: Redis, keys: Keys) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(48):  # 3 MiB, chunked, no Content-Length
            yield b" " * 65536

    headers = _headers(b"{}", "issues", "big-streamed")
    resp = await client.post("/", data=chunks(), headers=headers)
    assert resp.headers.get("Content-Length") != str(3 * 1024 * 1024)
    assert (resp.status, await resp.json()) == (413, {"error": "payload too large"})
    assert await stored_keys(redis, keys) == []


async def test_body_of_exactly_2mib_is_read(client: Client) -> None:
    body = b"{" + b" " * (2 * 1024 * 1024 - 2) + b"}"
    status, result, _ = await _post(client, body)
    assert (status, result) == (202, {"status": "accepted"})


@pytest.mark.parametrize("path", ["/gitlab", "/gitlab/", "/gitlab?x=1", "/forgejo", "/azure"])
async def test_unconfigured_forge_path_is_404_whatever_the_request(client: Client, path: str) -> None:
    forge = path.strip("/").partition("?")[0].rstrip("/")
    for method in ("POST", "GET"):
        resp = await client.request(method, path, data=b"{}")
        assert (resp.status, await resp.json()) == (404, {"error": f"{forge} webhooks are not configured"})


# --- health -----------------------------------------------------------------------------------------


async def test_healthz_answers_without_redis(client: Client) -> None:
    for path in ("/healthz", "/healthz/", "/healthz?probe=1"):
        resp = await client.get(path)
        assert (resp.status, await resp.json()) == (200, {"status": "ok"})


async def test_health_paths_are_never_routed_to_github(client: Client) -> None:
    status, body, _ = await _post(client, path="/healthz")
    assert (status, body) == (405, {"error": "method not allowed"})
    status, body, _ = await _post(client, path="/readyz")
    assert (status, body) == (405, {"error": "method not allowed"})


async def test_readyz_is_200_then_503_after_redis_stops(
    own_redis: RedisProcess, own_client: tuple[Client, Redis]
) -> None:
    client, _ = own_client
    resp = await client.get("/readyz")
    assert (resp.status, await resp.json()) == (200, {"status": "ready"})
    own_redis.stop()
    resp = await client.get("/readyz")
    assert (resp.status, await resp.json()) == (503, {"status": "redis-unreachable"})
    resp = await client.get("/healthz")
    assert resp.status == 200


# --- Redis faults -----------------------------------------------------------------------------------


async def _deliveries(redis: Redis, keys: Keys, delivery: str) -> int:
    return sum(1 for _, f in await redis.xrange(keys.events) if f[b"delivery"] == delivery.encode())


async def test_receiver_answers_503_when_redis_is_stopped_and_202_after_it_returns(
    own_redis: RedisProcess, own_client: tuple[Client, Redis], keys: Keys
) -> None:
    client, redis = own_client
    before = str(uuid.uuid4())
    assert (await _post(client, delivery=before))[:2] == (202, {"status": "accepted"})

    own_redis.stop()
    delivery = str(uuid.uuid4())
    with structlog.testing.capture_logs() as logs:
        assert (await _post(client, delivery=delivery))[:2] == (503, {"error": "enqueue-failed"})
        assert (await _post(client, delivery=delivery))[:2] == (503, {"error": "enqueue-failed"})

        own_redis.start()  # same port, append-only: the earlier entry survives, the script cache does not
        assert (await _post(client, delivery=delivery))[:2] == (202, {"status": "accepted"})
        assert (await _post(client, delivery=before))[:2] == (202, {"status": "duplicate"})
    events = [line["event"] for line in logs if line["event"] != "delivery"]
    assert events == ["redis_unreachable", "enqueue_failed", "enqueue_failed", "redis_restored"]
    outcomes = [(x["status"], x["outcome"], x.get("reason")) for x in logs if x["event"] == "delivery"]
    assert outcomes[:2] == [(503, "failed", "enqueue-failed")] * 2
    text = await (await client.get("/metrics")).text()
    assert metric(text, "pd_receiver_append_failures_total", forge="github") == 2
    failed = {"forge": "github", "outcome": "failed", "reason": "enqueue-failed"}
    assert metric(text, "pd_receiver_deliveries_total", **failed) == 2
    assert await _deliveries(redis, keys, delivery) == 1
    assert await _deliveries(redis, keys, before) == 1
    assert await redis.xlen(keys.events) == 2
    assert await remembered_count(redis, f"{keys.prefix}:deliveries:*") == 2


async def test_receiver_answers_503_within_bound_when_redis_hangs(
    own_redis: RedisProcess, own_client: tuple[Client, Redis], keys: Keys
) -> None:
    client, redis = own_client
    assert (await _post(client))[0] == 202  # a pooled connection exists before the freeze
    assert own_redis.proc is not None
    delivery = str(uuid.uuid4())
    own_redis.proc.send_signal(signal.SIGSTOP)
    try:
        headers = _headers(ISSUES_LABELED, "issues", delivery)
        # The hang detector: without the receiver's own bound this request would never be answered.
        resp = await client.post(
            "/", data=ISSUES_LABELED, headers=headers, timeout=aiohttp.ClientTimeout(total=3)
        )
        assert (resp.status, await resp.json()) == (503, {"error": "enqueue-failed"})
    finally:
        own_redis.proc.send_signal(signal.SIGCONT)
    # The frozen server may still run the script it had buffered; either way the delivery exists once.
    status, body, _ = await _post(client, delivery=delivery)
    assert status == 202
    assert body in ({"status": "accepted"}, {"status": "duplicate"})
    assert await _deliveries(redis, keys, delivery) == 1


# --- logs -------------------------------------------------------------------------------------------


async def test_one_log_line_per_delivery_without_payload_text(client: Client) -> None:
    accepted = str(uuid.uuid4())
    with debug_logs() as logs:
        await _post(client, delivery=accepted)
        await _post(client, delivery=accepted)
        await _post(client, PING, event="ping", delivery="ping-1")
        await _post(client, delivery="bad-sig", **{"X-Hub-Signature-256": "sha256=00"})
    lines = [line for line in logs if line["event"] == "delivery"]
    # The hot path (stored or ignored) logs at debug; refusals at info, where operators look.
    assert [(x["delivery"], x["status"], x["outcome"], x.get("reason"), x["log_level"]) for x in lines] == [
        (accepted, 202, "accepted", None, "debug"),
        (accepted, 202, "duplicate", None, "debug"),
        ("ping-1", 204, "ignored", None, "debug"),
        ("bad-sig", 401, "refused", "invalid-signature", "info"),
    ]
    assert all(x["forge"] == "github" for x in lines)
    assert [x["forge_event"] for x in lines] == ["issues", "issues", "ping", "issues"]
    text = repr(logs)
    for secret_or_payload in (TEST_SECRET, "Codertocat", "Hello-World", "Spelling error"):
        assert secret_or_payload not in text


# --- the process ------------------------------------------------------------------------------------


def _service(base_env: dict[str, str], tmp_path: Path, **env: str) -> tuple[ServiceProcess, int]:
    port = free_port()
    spool = str(tmp_path / f"spool-{port}")  # never the default under $HOME
    full = {**base_env, "RECEIVER_PORT": str(port), "RECEIVER_BIND": "127.0.0.1", "PD_SPOOL_DIR": spool}
    full.update(env)
    full = {k: v for k, v in full.items() if v}
    return ServiceProcess("receiver", full, tmp_path / f"receiver-{port}.log"), port


async def test_receiver_process_serves_and_exits_zero_on_sigterm(
    base_env: dict[str, str], tmp_path: Path, redis: Redis, keys: Keys
) -> None:
    service, port = _service(base_env, tmp_path)
    service.start()
    try:
        await wait_for(lambda: service.logged("receiver_started"), timeout=15, what="receiver_started")
        assert service.logged("receiver_started")[0]["arms"] == ["github"]
        delivery = str(uuid.uuid4())
        async with aiohttp.ClientSession() as session:
            resp = await session.post(
                f"http://127.0.0.1:{port}/github",
                data=ISSUES_LABELED,
                headers=_headers(ISSUES_LABELED, "issues", delivery),
            )
            assert (resp.status, await resp.json()) == (202, {"status": "accepted"})
        assert await _deliveries(redis, keys, delivery) == 1
    finally:
        code = await asyncio.to_thread(service.stop)
    assert code == 0
    assert service.logged("receiver_stopped")
    text = service.log_path.read_text()
    assert "Codertocat" not in text and TEST_SECRET not in text


async def test_receiver_finishes_an_in_flight_delivery_after_sigterm(
    base_env: dict[str, str], tmp_path: Path, redis: Redis, keys: Keys
) -> None:
    service, port = _service(base_env, tmp_path)
    service.start()
    delivery = str(uuid.uuid4())
    head = "".join(f"{k}: {v}\r\n" for k, v in _headers(ISSUES_LABELED, "issues", delivery).items())
    request = (
        f"POST / HTTP/1.1\r\nHost: x\r\n{head}Content-Length: {len(ISSUES_LABELED)}\r\n"
        "Expect: 100-continue\r\n\r\n"
    )
    try:
        await wait_for(lambda: service.logged("receiver_started"), timeout=15, what="receiver_started")
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request.encode())
        await writer.drain()
        # "100 Continue" is written in the same loop step that enters our handler: it is in flight now.
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10) == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(ISSUES_LABELED[:100])
        await writer.drain()
        assert service.proc is not None
        service.proc.send_signal(signal.SIGTERM)
        await wait_for(lambda: service.logged("receiver_stopping"), timeout=10, what="receiver_stopping")
        writer.write(ISSUES_LABELED[100:])
        await writer.drain()
        response = await asyncio.wait_for(reader.readuntil(b"}"), 10)
        writer.close()
        code = await asyncio.to_thread(service.proc.wait, 15)  # the one SIGTERM suffices
    finally:
        service.stop()
    assert response.startswith(b"HTTP/1.1 202 ")
    assert response.endswith(b'{"status":"accepted"}')
    assert code == 0
    assert await _deliveries(redis, keys, delivery) == 1


@pytest.mark.parametrize(
    "env",
    [{"WEBHOOK_SECRET": ""}, {"WEBHOOK_SECRET": "", "GITHUB_AUTH_SOURCE": "gh"}],
    ids=["no-arm", "auth-source-without-secret"],
)
async def test_receiver_refuses_to_start_on_bad_configuration_with_exit_2(
    base_env: dict[str, str], tmp_path: Path, env: dict[str, str]
) -> None:
    service, _ = _service(base_env, tmp_path, **env)
    service.start()
    assert service.proc is not None
    proc = service.proc
    code = await asyncio.to_thread(proc.wait, 15)
    service.stop()
    assert code == 2
    assert "WEBHOOK_SECRET" in service.log_path.read_text()
