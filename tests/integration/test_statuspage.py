"""``pi-dispatch web`` against a real Redis with real data: a router process's decisions, a worker's real
job in the test image with its output captured, a held job; every page fetched over HTTP."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import sys
import time
import uuid
from pathlib import Path

import aiodocker
import aiohttp

from pidispatch.common.embedded import free_port
from pidispatch.common.keys import Keys
from pidispatch.common.models import Event
from pidispatch.common.redis import Redis, create_redis
from pidispatch.common.runtime import now_ms
from pidispatch.console.statuspage import PAGE_TIMEOUT_S, load_web_config
from tests.support.cli import run_cli
from tests.support.decisions import decision_fields
from tests.support.payloads import FIXTURES
from tests.support.polling import wait_for
from tests.support.processes import RedisProcess, ServiceProcess
from tests.support.statusstack import HELD_JOB, HOSTILE, serving, status_stack

PAGES = ("/", "/runs", "/deliveries", "/schedules", "/waits")


async def get(url: str, **kwargs: object) -> tuple[int, str, aiohttp.typedefs.LooseHeaders]:
    async with aiohttp.ClientSession() as http, http.get(url, **kwargs) as r:  # type: ignore[arg-type]
        return r.status, await r.text(), r.headers


async def test_every_page_shows_the_stack_and_nothing_from_the_payload(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path, worker_name: str
) -> None:
    async with status_stack(env, redis, keys, docker, tmp_path) as stack:
        bodies = {}
        for path in PAGES:
            status, body, headers = await get(stack.url + path)
            assert status == 200, (path, body)
            assert '<meta http-equiv="refresh" content="5">' in body
            assert "<script" not in body.lower() and "alert(" not in body, path
            assert "/srv/pd-status-app" not in body and stack.logs_dir not in body, path
            assert "default-src 'none'" in headers["Content-Security-Policy"]
            bodies[path] = body
        overview = bodies["/"]
        for stream in (keys.events, keys.jobs, keys.host_jobs(worker_name), keys.delayed, keys.dead):
            assert f"<td>{stream}</td>" in overview, stream
        assert f"<td>{worker_name}</td>" in overview and ">live<" in overview
        for link in ("/runs", "/deliveries", "/schedules", "/waits"):
            assert f'href="{link}"' in overview

        runs = bodies["/runs"]
        output_link = f'href="/runs/{stack.job_id}/output"'
        assert stack.job_id in runs and output_link in runs and 'class="ok">completed<' in runs
        status, text, headers = await get(f"{stack.url}/runs/{stack.job_id}/output")
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        assert '{"event":"exit"' in text and headers["X-Content-Type-Options"] == "nosniff"

        deliveries = bodies["/deliveries"]
        for delivery in (stack.queued, stack.dropped):
            assert f'href="/deliveries/github/{delivery}"' in deliveries
        assert "no-allowlisted-label" in deliveries and stack.job_id in deliveries
        status, trace, _ = await get(f"{stack.url}/deliveries/github/{stack.queued}")
        assert status == 200, trace
        assert f"queued by rule #0, job(s) {stack.job_id}" in trace
        assert f"today's rules would: fire rule #0, job(s) {stack.job_id}" in trace
        assert "<script" not in trace.lower() and "Codertocat" not in trace
        status, trace, _ = await get(f"{stack.url}/deliveries/github/{stack.dropped}")
        assert status == 200 and "dropped, reason no-allowlisted-label" in trace

        assert "<td>nightly</td>" in bodies["/schedules"] and "0 3 * * *" in bodies["/schedules"]
        assert "unserved" in bodies["/schedules"]  # its folder is on no host's disk
        assert f"<td>{HELD_JOB}</td>" in bodies["/waits"] and "profile=ci" in bodies["/waits"]
        assert "acme/app#42" in bodies["/waits"]


async def test_traversal_and_unknown_ids_are_404(
    env: dict[str, str], redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    logs = Path(env["PI_LOGS_DIR"])
    logs.mkdir(parents=True)
    (tmp_path / "secret.log").write_text("not for the page\n")
    async with serving(load_web_config(env, "127.0.0.1")[0], redis) as url:
        for path in ("/runs/..%2F..%2Fetc%2Fpasswd/output", "/runs/..%2Fsecret/output",
                     "/runs/%2E%2E/output", "/runs/no-such-job/output", "/deliveries/github/nope",
                     "/deliveries/..%2F..%2Fetc/passwd", "/deliveries/nosuchforge/x", "/nope"):
            status, body, _ = await get(url + path)
            assert status == 404, (path, status)
            assert "root:" not in body and "not for the page" not in body
        async with aiohttp.ClientSession() as http, http.post(url + "/") as r:
            assert r.status == 405  # read-only


async def test_basic_auth_refuses_without_and_with_wrong_credentials(
    env: dict[str, str], redis: Redis
) -> None:
    credentials = {"PD_WEB_USER": "ops", "PD_WEB_PASSWORD": "s3cret-passphrase"}
    config = load_web_config({**env, **credentials}, "0.0.0.0")[0]

    def basic(user: str, password: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    async with serving(config, redis) as url:
        for headers in ({}, basic("ops", "wrong"), basic("other", "s3cret-passphrase"),
                        {"Authorization": "Bearer x"}, {"Authorization": "Basic !!!"}):
            status, body, got = await get(url + "/runs", headers=headers)
            assert status == 401 and got["WWW-Authenticate"].startswith("Basic realm=")
            assert "s3cret" not in body
        status, body, _ = await get(url + "/runs", headers=basic("ops", "s3cret-passphrase"))
        assert status == 200 and "no runs recorded yet" in body


async def test_redis_down_gives_every_page_a_banner_and_503_quickly(env: dict[str, str]) -> None:
    down = {**env, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    redis = create_redis(down["REDIS_URL"])
    try:
        async with serving(load_web_config(down, "127.0.0.1")[0], redis) as url:
            for path in (*PAGES, "/deliveries/github/some-delivery"):
                started = time.monotonic()
                status, body, _ = await get(url + path)
                assert status == 503, (path, status)
                assert "Redis at REDIS_URL is not answering" in body and 'class="banner"' in body
                assert time.monotonic() - started < 6
    finally:
        await redis.aclose()


def test_the_verb_refuses_half_credentials_and_an_open_bind_without_auth(base_env: dict[str, str]) -> None:
    half = run_cli({**base_env, "PD_WEB_USER": "ops"}, "web")
    assert half.returncode == 2
    assert "PD_WEB_USER and PD_WEB_PASSWORD go together" in half.stderr
    open_bind = run_cli(base_env, "web", "--bind", "0.0.0.0")
    assert open_bind.returncode == 2
    assert "--bind 0.0.0.0 is not a loopback address" in open_bind.stderr
    assert "PD_WEB_USER" in open_bind.stderr and "PD_WEB_PASSWORD" in open_bind.stderr


async def test_the_verb_serves_until_sigterm(base_env: dict[str, str]) -> None:
    full = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root"), **base_env}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pidispatch.common.cli", "web", "--port", "0", env=full,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        found = re.search(r"serving (http://127\.0\.0\.1:\d+/)", line)
        assert found, line
        status, body, _ = await get(found.group(1))
        assert status == 200 and "no live hosts" in body
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_frozen_redis_costs_a_bounded_wait_and_a_banner_not_a_hang(
    env: dict[str, str], own_redis: RedisProcess
) -> None:
    frozen = {**env, "REDIS_URL": own_redis.url}
    redis = create_redis(own_redis.url)
    try:
        async with serving(load_web_config(frozen, "127.0.0.1")[0], redis) as url:
            assert (await get(url + "/waits"))[0] == 200  # a pooled connection that then stops answering
            assert own_redis.proc is not None
            own_redis.proc.send_signal(signal.SIGSTOP)
            try:
                for path in ("/", "/deliveries"):
                    started = time.monotonic()
                    status, body, _ = await get(url + path)
                    took = time.monotonic() - started
                    assert status == 503 and "Redis at REDIS_URL is not answering" in body, path
                    assert took < PAGE_TIMEOUT_S + 2, (path, took)
            finally:
                own_redis.proc.send_signal(signal.SIGCONT)
            assert (await get(url + "/waits"))[0] == 200  # and back once it answers
    finally:
        await redis.aclose()


async def test_an_uploaded_triggers_file_is_compared_behind_the_auth_and_nothing_is_written(
    base_env: dict[str, str], redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    """``/triggers/test``: the form posts a candidate file; the answer is ``triggers test``'s table, a refused
    file shows the loader's line (escaped), an oversized one is refused unread, Redis is untouched."""
    bug = {"on": {"type": "label", "any": ["bug"]}, "run": {"kind": "github", "flow": "fix"}}
    docs = {"on": {"type": "label", "any": ["docs"]}, "run": {"kind": "github", "flow": "docs"}}
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": [bug]}))
    router = ServiceProcess("router", base_env, tmp_path / "router.log")
    router.start()
    try:
        bugs = [await _labeled(redis, keys, "bug", n) for n in (1, 2)]
        documented = await _labeled(redis, keys, "docs", 3)
        for delivery in (*bugs, documented):
            await wait_for(lambda d=delivery: _decided(redis, keys, d), timeout=20, what="the decision")
    finally:
        assert await asyncio.to_thread(router.stop) == 0
    credentials = {"PD_WEB_USER": "ops", "PD_WEB_PASSWORD": "s3cret-passphrase"}
    auth = {"Authorization": "Basic " + base64.b64encode(b"ops:s3cret-passphrase").decode()}
    before = {key: await redis.dump(key) async for key in redis.scan_iter(match=f"{keys.prefix}:*")}

    async def post(content: bytes, headers: dict[str, str] = auth, **fields: str) -> tuple[int, str]:
        form = aiohttp.FormData()
        form.add_field("file", content, filename="<b>cand.json", content_type="application/json")
        for name, value in fields.items():
            form.add_field(name, value)
        async with aiohttp.ClientSession() as http, http.post(url + "/triggers/test", data=form,
                                                              headers=headers) as r:
            return r.status, await r.text()

    async with serving(load_web_config({**base_env, **credentials}, "0.0.0.0")[0], redis) as url:
        assert (await get(url + "/triggers/test"))[0] == 401
        assert (await post(b"{}", headers={}))[0] == 401
        status, form, _ = await get(url + "/triggers/test", headers=auth)
        assert status == 200 and 'enctype="multipart/form-data"' in form and 'name="file"' in form
        assert "http-equiv" not in form  # a form's page does not reload itself

        status, body = await post(json.dumps({"triggers": [docs]}).encode())
        assert status == 200, body
        assert "compared 3 deliveries: 0 unchanged, 3 would change" in body
        assert f"<td>{documented}</td>" in body and all(f"<td>{d}</td>" in body for d in bugs)
        assert "<td>queued rule #0, flow fix</td><td>drop: no-allowlisted-label</td>" in body
        assert "<td>dropped: no-allowlisted-label</td><td>fire rule #0, flow docs</td>" in body
        assert "<script" not in body.lower() and "Spelling error" not in body and "cand.json" not in body
        status, body = await post(json.dumps({"triggers": [bug]}).encode(), last="2")
        assert status == 200 and "compared 2 deliveries: 2 unchanged, 0 would change" in body

        status, body = await post(json.dumps({"triggers": [{"<script>x</script>": 1}]}).encode())
        assert status == 400 and "PI_TRIGGERS_FILE upload: triggers[0]" in body
        assert "<script>x" not in body and "&lt;script&gt;x" in body
        status, body = await post(b" " * (1024 * 1024 + 1))
        assert status == 413 and "is larger than 1048576 bytes" in body
        assert (await post(b"{}", last="zero"))[0] == 400
    assert {key: await redis.dump(key) async for key in redis.scan_iter(match=f"{keys.prefix}:*")} == before


async def _labeled(redis: Redis, keys: Keys, label: str, number: int) -> str:
    payload = json.loads((FIXTURES / "github" / "issues.labeled.json").read_text())
    payload["issue"]["number"] = number
    payload["label"] = {"name": label}
    payload["issue"]["labels"] = [{"name": label}]
    payload["issue"]["title"] = HOSTILE
    delivery = str(uuid.uuid4())
    event = Event(forge="github", event="issues", delivery=delivery, received_at=now_ms(),
                  body=json.dumps(payload))
    await redis.xadd(keys.events, event.to_fields())  # type: ignore[arg-type]
    return delivery


async def _decided(redis: Redis, keys: Keys, delivery: str) -> str | None:
    return (await decision_fields(redis, keys, "github", delivery)).get("outcome")
