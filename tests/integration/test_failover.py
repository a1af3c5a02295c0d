"""Guarantee: a Redis primary failover loses no acknowledged delivery and runs no job twice.

A primary, a replica and three sentinels (Debian's redis-server and redis-sentinel, on loopback); the
receiver, router and worker find the primary through the sentinels (REDIS_SENTINELS) and, by default
there, hold each acknowledged delivery and each container start on a replica first (PD_REPLICA_ACKS=1).
400 signed deliveries are posted; after the 150th answer the primary is killed with SIGKILL. Sentinel
promotes the replica; the killed primary comes back as a replica of the new one (as an operator restarts
it). Then every delivery answered 2xx is in the events stream exactly once, no answer after the new
primary was known is 5xx, the router and worker still run, and every job ran in one container.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pidispatch.common.embedded import free_port
from pidispatch.common.keys import Keys
from tests.support.chaos import RULES, SECRET, SERVICES, ContainerLedger, Service, stand_in_github
from tests.support.payloads import load_fixture
from tests.support.polling import poll_until
from tests.support.receiver import github_signature
from tests.support.sentinel import RedisHA, require_sentinel

pytestmark = pytest.mark.usefixtures("require_docker")

DELIVERIES = 400
KILL_AFTER = 150
JOB_EVERY = 40  # every 40th delivery carries the label the rule runs on: 10 jobs
POSTERS = 8


@dataclass
class Posted:
    id: str
    body: bytes
    job: bool
    answer: str = ""
    status: int = 0
    sent: float = 0.0  # monotonic time of the post
    at: float = 0.0  # and of its answer


@dataclass
class Run:
    killed: asyncio.Event = field(default_factory=asyncio.Event)
    killed_at: float = 0.0
    promoted_at: float = 0.0
    answered: int = 0
    posted: list[Posted] = field(default_factory=list)

    @property
    def acked(self) -> list[Posted]:
        return [d for d in self.posted if 200 <= d.status < 300]

    @property
    def jobs(self) -> set[str]:
        return {f"gh-{d.id}" for d in self.acked if d.job}


def _deliveries() -> list[Posted]:
    out = []
    for n in range(1, DELIVERIES + 1):
        payload: dict[str, Any] = load_fixture("github/issues.labeled.json")
        payload["issue"]["number"] = n
        job = n % JOB_EVERY == 0
        payload["label"]["name"] = "bug" if job else "wontfix"
        payload["issue"]["labels"] = [payload["label"]]
        payload["issue"]["body"] = "Failover issue.\n\npd-test exit=0 sleep=0"
        out.append(Posted(id=str(uuid.uuid4()), body=json.dumps(payload).encode(), job=job))
    return out


def _env(tmp_path: Path, ha: RedisHA, forge_env: dict[str, str], image: str, port: int) -> dict[str, str]:
    host = f"ha-{uuid.uuid4().hex[:6]}"
    (tmp_path / "triggers.json").write_text(json.dumps(RULES))
    return {
        **forge_env, **ha.env,
        "PD_KEY_PREFIX": host.replace("-", ""), "WEBHOOK_SECRET": SECRET,
        "PI_TRIGGERS_FILE": str(tmp_path / "triggers.json"), "PI_WORKER_NAME": host,
        "PD_ROUTER_NAME": f"router-{host}", "RECEIVER_PORT": str(port), "RECEIVER_BIND": "127.0.0.1",
        "PI_JOB_IMAGE": image, "PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "1", "PI_CONCURRENCY": "3",
        "PI_LOGS_DIR": str(tmp_path / "logs"), "PI_JOBS_DIR": str(tmp_path / "jobs"),
        "PD_SPOOL_DIR": str(tmp_path / "spool"), "PI_SHUTDOWN_GRACE": "0", "PI_DAILY_CAP": "1000000",
        "PD_HOST_BEAT_MS": "200", "PD_HOST_TTL_MS": "3000", "PI_RETRY_BASE_MS": "200",
    }  # fmt: skip


async def _post(http: aiohttp.ClientSession, url: str, d: Posted) -> None:
    headers = {
        "Content-Type": "application/json", "X-GitHub-Event": "issues", "X-GitHub-Delivery": d.id,
        "X-Hub-Signature-256": github_signature(SECRET, d.body),
    }  # fmt: skip
    d.sent = time.monotonic()
    try:
        async with http.post(url, data=d.body, headers=headers) as r:
            d.status = r.status
            d.answer = str(r.status)
            if r.status < 300:
                d.answer += " " + str((await r.json()).get("status"))
    except (aiohttp.ClientError, TimeoutError):
        d.answer = "no-answer"
    d.at = time.monotonic()


async def _post_all(http: aiohttp.ClientSession, url: str, run: Run, ha: RedisHA) -> None:
    """In order, ``POSTERS`` at a time; the primary is killed the moment the 150th answer is in."""
    queue: asyncio.Queue[Posted] = asyncio.Queue()
    for d in run.posted:
        queue.put_nowait(d)

    async def poster() -> None:
        while not queue.empty():
            await _post(http, url, queue.get_nowait())
            run.answered += 1
            if run.answered == KILL_AFTER:
                ha.primary.kill()
                run.killed_at = time.monotonic()
                run.killed.set()

    await asyncio.gather(*(poster() for _ in range(POSTERS)))


async def _watch_promotion(ha: RedisHA, run: Run) -> None:
    await run.killed.wait()
    await asyncio.to_thread(ha.wait_promoted, 30.0)
    run.promoted_at = time.monotonic()


class Landed:
    """What reached the new primary and the run records, read on demand."""

    def __init__(self, ha: RedisHA, prefix: str, logs: Path) -> None:
        self.client = ha.replica.client()
        self.events = Keys(prefix).events
        self.logs = logs

    def stored(self) -> Counter[str]:
        return Counter(f.get(b"delivery", b"").decode() for _id, f in self.client.xrange(self.events))

    def outcomes(self) -> dict[str, str]:
        out = {}
        for path in self.logs.glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                rec = json.loads(path.read_text())
                out[str(rec.get("jobId"))] = str(rec.get("outcome"))
        return out

    def settled(self, run: Run) -> bool:
        seen, done = self.stored(), self.outcomes()
        return all(seen[d.id] for d in run.acked) and all(done.get(j) == "completed" for j in run.jobs)

    def why(self, run: Run) -> str:
        seen, done = self.stored(), self.outcomes()
        missing = Counter(d.answer for d in run.acked if not seen[d.id])
        unrun = {j: done.get(j) for j in run.jobs if done.get(j) != "completed"}
        return f"acknowledged, not stored: {missing}; jobs not completed: {unrun}"


async def test_primary_killed_mid_stream_loses_no_acknowledged_delivery_and_runs_each_job_once(
    tmp_path: Path, test_image: str
) -> None:
    ha = RedisHA(tmp_path / "ha", require_sentinel())
    await asyncio.to_thread(ha.start)
    port = free_port()
    services: list[Service] = []
    host = ""
    try:
        async with stand_in_github(tmp_path / "git") as forge_env, ContainerLedger() as ledger, \
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:  # fmt: skip
            env = _env(tmp_path, ha, forge_env, test_image, port)
            host = env["PI_WORKER_NAME"]
            services = [Service(name, env, tmp_path) for name in SERVICES]
            for s in services:
                s.start()
            assert await poll_until(lambda: all(s.started() for s in services), 30, 0.1), [
                s.last_line() for s in services
            ]
            run = Run(posted=_deliveries())
            watcher = asyncio.create_task(_watch_promotion(ha, run))
            await _post_all(http, f"http://127.0.0.1:{port}/github", run, ha)
            await asyncio.wait_for(watcher, 40)
            # The operator restarts the killed primary; Sentinel makes it a replica of the new one.
            ha.primary.replica_of = ha.replica.port
            await asyncio.to_thread(ha.primary.start)

            landed = Landed(ha, env["PD_KEY_PREFIX"], tmp_path / "logs")
            assert await poll_until(lambda: asyncio.to_thread(landed.settled, run), 90, 0.25), landed.why(run)
            seen = landed.stored()
            starts = {job: c["start"] for job, c in ledger.for_host(host).items()}
            first_202 = min(d.at for d in run.posted if d.sent > run.killed_at and d.status == 202)
            answers = Counter(d.answer for d in run.posted)
            print(
                f"failover: {len(run.acked)}/{DELIVERIES} answered 2xx ({answers}); "
                f"promoted {run.promoted_at - run.killed_at:.2f} s after the kill; first 202 to a post "
                f"sent after it {first_202 - run.killed_at:.3f} s; "
                f"{sum(seen.values())} events stored; {len(run.jobs)} jobs, starts {sorted(starts.values())}"
            )
            assert [d.id for d in run.acked if seen[d.id] != 1] == []
            assert max(seen.values()) == 1
            assert [d.answer for d in run.posted if d.at > run.promoted_at and d.status >= 500] == []
            assert [s.name for s in services if not s.running] == []
            assert {j: starts.get(j, 0) for j in run.jobs} == dict.fromkeys(run.jobs, 1)
    finally:
        for s in services:
            await s.stop()
        await asyncio.to_thread(ha.stop)
        if host:
            async with ContainerLedger() as sweeper:
                await sweeper.sweep([host])
