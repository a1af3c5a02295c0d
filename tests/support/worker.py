"""Helpers for tests that drive a worker: real jobs from a real payload, enqueued and followed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiodocker
import aiohttp

from pidispatch.common.keys import Keys
from pidispatch.common.models import Job, Matched, Sender, Target, Trigger, job_to_fields, text
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.settings import Settings, load_settings
from pidispatch.common.streams import wire
from pidispatch.worker.engine import dockerapi
from pidispatch.worker.history.records import record_path
from pidispatch.worker.local import local_job_id
from pidispatch.worker.service import run_worker
from tests.support.payloads import load_fixture
from tests.support.polling import wait_for
from tests.support.processes import ServiceProcess


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


def git_repo(path: Path, owner: int | None) -> Path:
    """A committed repository; ``owner`` (needs root) gives it to another account, as a local job needs."""
    path.mkdir()
    (path / "README").write_text("hello\n")
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for argv in (["init", "-q"], ["add", "README"], [*ident, "commit", "-qm", "init"]):
        subprocess.run(["git", "-C", str(path), *argv], check=True, capture_output=True)
    if owner is not None:
        subprocess.run(["chown", "-R", f"{owner}:{owner}", str(path)], check=True)
    return path


def local_job(folder: Path, steer: str, minute_ms: int | None = None) -> Job:
    """A local job as ``pi-dispatch run <folder> --task <steer>`` queues it."""
    job_id = local_job_id(
        str(folder), flow=None, task=steer, model=None, image=None,
        now_ms=now_ms() if minute_ms is None else minute_ms,
    )
    return Job(id=job_id, kind="local", repo=f"local:{folder.name}", folder=str(folder), task=steer)


async def enqueue(redis: Redis, keys: Keys, job: Job, stream: str | None = None) -> str:
    return text(await redis.xadd(stream or keys.jobs, wire(job_to_fields(job))))


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


def read_record(logs_dir: str, job: Job) -> dict[str, Any] | None:
    """The job's record file as the worker names it, or None when there is none yet."""
    path = record_path(logs_dir, job.id)
    found: dict[str, Any] | None = json.loads(path.read_text()) if path.exists() else None
    return found


async def record(settings: Settings, job: Job, timeout: float = 60) -> dict[str, Any]:
    path = record_path(settings.logs_dir, job.id)
    await wait_for(path.exists, timeout, what=f"run record of {job.id}")
    found: dict[str, Any] = json.loads(path.read_text())
    return found


async def host_containers(docker: aiodocker.Docker, host: str, *, running: bool = False) -> list[Any]:
    filters: dict[str, list[str]] = {"label": [f"pd.host={host}"]}
    if running:
        filters["status"] = ["running"]
    return await docker.containers.list(all=True, filters=json.dumps(filters))


# Container starts by host, followed live while a test runs (``watching_starts``): the daemon keeps only
# its last 1,000 events, which a suite running several tests at once turns over within a long test.
_starts: dict[str, list[tuple[int, str]]] = {}


@contextlib.asynccontextmanager
async def watching_starts(docker: aiodocker.Docker, host: str) -> AsyncIterator[None]:
    """Follow the daemon's container starts on ``host``'s label from now until the block ends."""
    seen: list[tuple[int, str]] = []
    opened = asyncio.Event()
    # Job containers only: the host's egress proxy carries its pd.host label too.
    filters = {"type": ["container"], "event": ["start"], "label": [f"pd.host={host}", "pd.job"]}

    async def follow() -> None:
        async with dockerapi.events(docker, {"filters": json.dumps(filters)}) as resp:
            opened.set()
            async for line in resp.content:
                if line.strip():
                    event = json.loads(line)
                    seen.append((int(event["time"]), event["Actor"]["Attributes"]["pd.job"]))

    task = asyncio.create_task(follow())
    try:
        await wait_for(lambda: opened.is_set() or task.done(), 10, what="the event stream to open")
        _starts[host] = seen
        yield
    finally:
        _starts.pop(host, None)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
            await task


async def container_starts(docker: aiodocker.Docker, host: str, since_s: int) -> list[str]:
    """The job id of every container start on this host's label since ``since_s``, from the daemon's
    own events: what was actually started, whoever started it (followed live when the test's ``docker``
    fixture watches the host, else read back from the daemon's recent events)."""
    if host in _starts:  # asked after the runs were recorded: their starts came through long before
        return [job for at, job in _starts[host] if at >= since_s]
    until = int(time.time()) + 1
    filters = {"type": ["container"], "event": ["start"], "label": [f"pd.host={host}", "pd.job"]}
    params = {"since": since_s, "until": until, "filters": json.dumps(filters)}
    async with dockerapi.events(docker, params) as resp:
        body = await resp.text()
    events = [json.loads(line) for line in body.splitlines() if line.strip()]
    return [e["Actor"]["Attributes"]["pd.job"] for e in events]


class DockerSocketProxy:
    """A unix socket in front of the real daemon that a test can take away and bring back."""

    def __init__(self, path: Path, target: str = "/var/run/docker.sock") -> None:
        self.path, self.target = path, target
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    async def start(self) -> None:
        self.server = await asyncio.start_unix_server(self._serve, path=str(self.path))

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in list(self.writers):
            w.close()
        await self.server.wait_closed()
        self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(self.target)
        self.writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self.writers -= {writer, up_writer}



def kill_tree(proc: ServiceProcess) -> None:
    """kill -9 the worker and anything it spawned (it runs in its own session)."""
    if proc.proc and proc.proc.poll() is None:
        os.killpg(proc.proc.pid, signal.SIGKILL)
        proc.proc.wait(10)


IS_ROOT = os.geteuid() == 0


def sh_git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "safe.directory=*", *args],
        cwd=cwd, check=True, capture_output=True,
    )


def make_repo(path: Path) -> Path:
    """A committed repository owned by an ordinary account (a root-owned folder is refused)."""
    path.mkdir(parents=True)
    sh_git(path, "init", "-q")
    (path / "README.md").write_text("hello\n")
    sh_git(path, "add", "README.md")
    sh_git(path, "commit", "-qm", "first")
    if IS_ROOT:
        for root, dirs, files in os.walk(path):
            for name in [*dirs, *files]:
                os.lchown(os.path.join(root, name), 4242, 4242)
        os.chown(path, 4242, 4242)
    return path
