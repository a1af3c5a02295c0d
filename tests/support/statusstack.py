"""A stack with things in it for the status page's tests: a real router process decides two deliveries
(one queued, one dropped), a real worker runs the queued job in the test image with its output captured,
and a job is held on a wait condition; then the page is served in-process on a free loopback port."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiodocker
from aiohttp import web

from pidispatch.common.keys import Keys
from pidispatch.common.models import Event
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.console.statuspage import WebConfig, build_app, load_web_config
from pidispatch.worker.history.records import record_path
from pidispatch.worker.waits.state import conditions_json, take_hold
from tests.support.decisions import decision_fields
from tests.support.payloads import FIXTURES
from tests.support.polling import wait_for
from tests.support.processes import ServiceProcess
from tests.support.worker import running_worker

HOSTILE = "<script>alert('pd')</script>"
BUG_RULE = {"on": {"type": "label", "any": ["bug"]}, "run": {"kind": "github", "flow": "fix"}}
CRON_RULE = {"on": {"type": "cron", "id": "nightly", "pattern": "0 3 * * *"},
             "run": {"kind": "local", "folder": "/srv/pd-status-app", "flow": "tidy", "task": "tidy"}}
HELD_JOB = "gh-held-0001"


@dataclass
class Stack:
    url: str
    queued: str  # the delivery that made the job
    dropped: str  # the delivery no rule took
    job_id: str
    logs_dir: str


async def _append(redis: Redis, keys: Keys, label: str) -> str:
    payload = json.loads((FIXTURES / "github" / "issues.labeled.json").read_text())
    payload["issue"]["title"] = HOSTILE  # payload text: it must never reach a page
    payload["issue"]["body"] = f"{HOSTILE} pd-test exit=0"
    payload["label"]["name"] = label
    payload["issue"]["labels"] = [{"name": label}]
    delivery = str(uuid.uuid4())
    event = Event(forge="github", event="issues", delivery=delivery, received_at=now_ms(),
                  body=json.dumps(payload))
    await redis.xadd(keys.events, event.to_fields())  # type: ignore[arg-type]
    return delivery


async def _decided(redis: Redis, keys: Keys, delivery: str) -> str:
    async def outcome() -> str | None:
        return (await decision_fields(redis, keys, "github", delivery)).get("outcome")

    found: str = await wait_for(outcome, timeout=20, what=f"the router's decision on {delivery}")
    return found


@contextlib.asynccontextmanager
async def serving(config: WebConfig, redis: Redis) -> AsyncIterator[str]:
    """The page on a free loopback port, as ``pi-dispatch web`` serves it; yields its base URL."""
    runner = web.AppRunner(build_app(config, redis, now_ms), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def page_config(env: dict[str, str]) -> WebConfig:
    """``pi-dispatch web``'s configuration as it is read from ``env`` at start."""
    return load_web_config(env, "127.0.0.1")[0]


@contextlib.asynccontextmanager
async def status_stack(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> AsyncIterator[Stack]:
    Path(env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": [BUG_RULE, CRON_RULE]}))
    worker_env = {**env, "PI_CAPTURE_JOB_LOGS": "1", "TZ": "UTC"}
    router = ServiceProcess("router", env, tmp_path / "router.log")
    router.start()
    try:
        queued, dropped = await _append(redis, keys, "bug"), await _append(redis, keys, "wontfix")
        assert await _decided(redis, keys, queued) == "queued"
        assert await _decided(redis, keys, dropped) == "dropped"
    finally:
        assert router.stop() == 0
    conditions = conditions_json([{"profile": "ci"}])
    fields = {"target": "acme/app#42", "dedupId": "d-acme", "conditions": conditions}
    assert await take_hold(redis, keys, job_id=HELD_JOB, dedup_id="d-acme", ttl_ms=3_600_000, now_ms=now_ms(),
                           fields=fields) is None
    async with running_worker(worker_env, redis, keys, docker) as (settings, _, _):
        path = record_path(settings.logs_dir, f"gh-{queued}")
        await wait_for(path.exists, timeout=90, what="the job's run record")
        assert json.loads(path.read_text())["outcome"] == "completed", path.read_text()
        async with serving(page_config(worker_env), redis) as url:
            yield Stack(url, queued, dropped, f"gh-{queued}", settings.logs_dir)
