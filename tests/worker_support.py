"""Helpers for tests that drive a worker: real jobs from a real payload, enqueued and followed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiodocker

from pidispatch.common.keys import Keys
from pidispatch.common.models import Job, Matched, Sender, Target, Trigger, job_to_fields
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.settings import Settings, load_settings
from pidispatch.worker.service import run_worker
from tests.helpers import load_fixture, wait_for


def issue_job(steer: str, *, number: int = 1) -> Job:
    p = load_fixture("github/issues.labeled.json")
    delivery = str(uuid.uuid4())
    return Job(
        id=f"gh-{delivery}", kind="github", repo=p["repository"]["full_name"], flow="triage",
        target=Target(type="issue", number=number, title=p["issue"]["title"],
                      body=f"{p['issue']['body']}\n\npd-test {steer}"),
        trigger=Trigger(
            event="issues", action="labeled", delivery_id=delivery, sender=Sender(id=p["sender"]["id"]),
            matched=Matched(index=0, type="label", label="bug"),
        ),
    )


async def enqueue(redis: Redis, keys: Keys, job: Job) -> str:
    entry_id = await redis.xadd(keys.jobs, job_to_fields(job))
    return entry_id.decode()


@contextlib.asynccontextmanager
async def running_worker(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker
) -> AsyncIterator[tuple[Settings, asyncio.Event, asyncio.Task[None]]]:
    settings = load_settings(env)
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(settings, redis, keys, docker, stop, now_ms, env))
    try:
        yield settings, stop, task
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


async def record(settings: Settings, job: Job, timeout: float = 60) -> dict[str, Any]:
    path = Path(settings.logs_dir) / f"{job.id}.json"
    await wait_for(path.exists, timeout, what=f"run record of {job.id}")
    return json.loads(path.read_text())
