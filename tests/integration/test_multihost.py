"""Several worker processes on one Redis: jobs bound to a secret profile run only where it is declared,
and jobs left in a dead host's stream reach a capable host."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import aiodocker
import msgspec

from pidispatch.common.keys import Keys
from pidispatch.common.models import Job, job_to_fields
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.router.reroute import reroute_orphans
from tests.support.polling import wait_for
from tests.support.processes import ServiceProcess
from tests.support.worker import enqueue, issue_job

FAST = {"PD_HOST_BEAT_MS": "200", "PD_HOST_TTL_MS": "1500", "PI_DAILY_CAP": "100000"}


def resolver(tmp_path: Path) -> Path:
    path = tmp_path / "resolver.sh"
    path.write_text("#!/bin/sh\nprintf 'value\\n'\n")
    path.chmod(0o755)
    return path


def prod_job(number: int) -> Job:
    return msgspec.structs.replace(
        issue_job("exit=0", number=number), secrets={"API_KEY": "ref"}, secrets_profile="prod"
    )


def records(logs_dir: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in logs_dir.glob("*.json"):
        with open(path) as f:
            rec = json.load(f)
        out[rec["jobId"]] = rec
    return out


def hosts_env(env: dict[str, str], tmp_path: Path) -> tuple[dict[str, str], dict[str, str]]:
    name = env["PI_WORKER_NAME"]
    profiles = f"prod:{resolver(tmp_path)}"
    prod = {**env, **FAST, "PI_WORKER_NAME": f"{name}-prod", "PI_SECRET_PROFILES": profiles,
            "PI_CONCURRENCY": "4"}
    plain = {**env, **FAST, "PI_WORKER_NAME": f"{name}-plain", "PI_CONCURRENCY": "4"}
    return prod, plain


async def test_jobs_needing_a_profile_run_only_on_the_host_that_declares_it_and_others_run_anywhere(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    prod_env, plain_env = hosts_env(env, tmp_path)
    prod = ServiceProcess("worker", prod_env, tmp_path / "prod.log")
    plain = ServiceProcess("worker", plain_env, tmp_path / "plain.log")
    bound = [prod_job(n) for n in range(1, 101)]
    free = [issue_job("exit=0", number=n) for n in range(101, 121)]
    logs_dir = Path(env["PI_LOGS_DIR"])
    try:
        prod.start()
        plain.start()
        await wait_for(lambda: prod.logged("worker_started") and plain.logged("worker_started"), 60,
                       what="both workers")
        # Everything goes to the shared stream, as a router without a fresh registry would put it: the
        # unbound jobs first, so both idle hosts take some, then the bound ones.
        for job in [*free, *bound]:
            await enqueue(redis, keys, job)
        await wait_for(lambda: len(records(logs_dir)) == 120, 150, what="all 120 records")
    finally:
        prod.stop()
        plain.stop()
    recs = records(logs_dir)
    assert Counter(r["outcome"] for r in recs.values()) == {"completed": 120}
    assert {recs[j.id]["host"] for j in bound} == {prod_env["PI_WORKER_NAME"]}
    assert {recs[j.id]["host"] for j in free} == {prod_env["PI_WORKER_NAME"], plain_env["PI_WORKER_NAME"]}
    # The plain host handed every bound job it read to the prod host, each once, and ran none of them.
    forwarded = [e["job"] for e in plain.logged("job_forwarded")]
    assert len(forwarded) == len(set(forwarded)) and set(forwarded) <= {j.id for j in bound}
    assert not {e["job"] for e in plain.logged("job_started")} & {j.id for j in bound}


async def test_a_job_no_live_host_can_serve_is_refused_as_an_unknown_secret_profile_not_forwarded(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    _, plain_env = hosts_env(env, tmp_path)
    plain = ServiceProcess("worker", plain_env, tmp_path / "plain.log")
    job = prod_job(1)
    try:
        plain.start()
        await enqueue(redis, keys, job)
        await wait_for(lambda: plain.logged("job_finished"), 30, what="the refusal")
    finally:
        plain.stop()
    rec = records(Path(env["PI_LOGS_DIR"]))[job.id]
    assert (rec["outcome"], rec["reason"]) == ("policy", "secret-profile-unknown")
    assert not plain.logged("job_forwarded")


async def test_jobs_left_unread_in_a_dead_hosts_stream_reach_a_capable_host(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    prod_env, _ = hosts_env(env, tmp_path)
    doomed_env = {**prod_env, "PI_WORKER_NAME": env["PI_WORKER_NAME"] + "-doomed"}
    doomed = ServiceProcess("worker", doomed_env, tmp_path / "doomed.log")
    survivor = ServiceProcess("worker", prod_env, tmp_path / "survivor.log")
    jobs = [prod_job(n) for n in range(1, 6)]
    try:
        doomed.start()
        survivor.start()
        await wait_for(lambda: doomed.logged("worker_started") and survivor.logged("worker_started"), 60,
                       what="both workers")
        assert doomed.proc is not None
        os.killpg(doomed.proc.pid, signal.SIGKILL)  # stopped hard
        doomed.proc.wait(10)
        # What the router had routed to the doomed host while its row was still fresh.
        for job in jobs:
            await redis.xadd(keys.host_jobs(doomed_env["PI_WORKER_NAME"]), job_to_fields(job))  # type: ignore[arg-type]

        async def rerouted() -> bool:
            await reroute_orphans(redis, keys, now_ms())  # what every router does every 15 s
            return len(records(Path(env["PI_LOGS_DIR"]))) == len(jobs)

        await wait_for(rerouted, 60, what="the dead host's jobs to run elsewhere")
    finally:
        doomed.stop()
        survivor.stop()
    recs = records(Path(env["PI_LOGS_DIR"]))
    assert {(recs[j.id]["outcome"], recs[j.id]["host"]) for j in jobs} == {
        ("completed", prod_env["PI_WORKER_NAME"])
    }
    assert sorted(e["job"] for e in survivor.logged("job_started")) == sorted(j.id for j in jobs)
