"""The whole path on real processes: a signed GitHub delivery becomes exactly one locked-down container
run and one run record.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiodocker
import aiohttp
import pytest

from pidispatch.common.embedded import free_port
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from tests.support.decisions import decision_fields
from tests.support.forges import GithubStandIn
from tests.support.payloads import FIXTURES
from tests.support.polling import wait_for
from tests.support.processes import ServiceProcess
from tests.support.receiver import TEST_SECRET, github_signature


@pytest.fixture
def services(
    base_env: dict[str, str], test_image: str, tmp_path: Path, github: GithubStandIn
) -> Iterator[dict[str, Any]]:
    port = free_port()
    rule = {"on": {"type": "label", "any": ["bug"]}, "run": {"kind": "github", "flow": "fix"}}
    triggers = {"triggers": [rule]}
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps(triggers))
    env = {
        **base_env,
        **github.env(),
        "RECEIVER_PORT": str(port),
        "RECEIVER_BIND": "127.0.0.1",
        "PI_JOB_IMAGE": test_image,
        "PI_JOB_MEMORY": "256m",
        "PI_JOB_CPUS": "1",
        "PI_SHUTDOWN_GRACE": "0",
    }
    procs = {n: ServiceProcess(n, env, tmp_path / f"{n}.log") for n in ("receiver", "router", "worker")}
    for p in procs.values():
        p.start()
    yield {"port": port, "env": env, "procs": procs}
    codes = {n: p.stop() for n, p in procs.items()}
    assert codes == {"receiver": 0, "router": 0, "worker": 0}, codes


async def _container_for(docker: aiodocker.Docker, job_id: str) -> dict[str, Any] | None:
    found = await docker.containers.list(all="1", filters=json.dumps({"label": [f"pd.job={job_id}"]}))
    if not found:
        return None
    info = await found[0].show()
    return info if info["State"]["Running"] else None


async def test_signed_github_delivery_runs_one_isolated_container_and_records_it(
    services: dict[str, Any], redis: Redis, keys: Keys, require_docker: None
) -> None:
    port = services["port"]
    payload = json.loads((FIXTURES / "github/issues.labeled.json").read_text())
    payload["issue"]["body"] = "Real octokit example; pd-test exit=0 sleep=5"
    body = json.dumps(payload).encode()
    delivery = str(uuid.uuid4())
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": github_signature(TEST_SECRET, body),
    }
    url = f"http://127.0.0.1:{port}/github"
    async with aiohttp.ClientSession() as http:

        async def healthy() -> bool:
            try:
                async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                    return r.status == 200
            except aiohttp.ClientError:
                return False

        await wait_for(healthy, timeout=20, what="receiver /healthz")
        async with http.post(url, data=body, headers=headers) as r:
            assert (r.status, await r.json()) == (202, {"status": "accepted"})
        async with http.post(url, data=body, headers=headers) as r:
            assert (r.status, await r.json()) == (202, {"status": "duplicate"})
        bad = {**headers, "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": "sha256=" + "0" * 64}
        async with http.post(url, data=body, headers=bad) as r:
            assert r.status == 401

    job_id = f"gh-{delivery}"
    docker = aiodocker.Docker()
    try:
        info = await wait_for(
            lambda: _container_for(docker, job_id), timeout=60, what="running job container"
        )
    finally:
        await docker.close()
    host = info["HostConfig"]
    assert host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["PidsLimit"] and host["PidsLimit"] > 0
    assert host["Memory"] == 256 * 1024**2
    assert host["NanoCpus"] == 1_000_000_000
    assert host["Init"] is True
    assert host["AutoRemove"] is False  # kept until its end is recorded, then removed by the worker
    assert host.get("Privileged") is False
    uid, _, gid = info["Config"]["User"].partition(":")
    assert int(uid) != 0 and int(gid) != 0
    mounts = {m["Destination"]: m for m in info["Mounts"]}
    assert mounts["/job"]["RW"] is False
    assert mounts["/workspace"]["RW"] is True
    labels = info["Config"]["Labels"]
    assert labels["pd.job"] == job_id and labels["pd.host"] == services["env"]["PI_WORKER_NAME"]
    env_names = {e.split("=", 1)[0] for e in info["Config"]["Env"]}
    assert "WEBHOOK_SECRET" not in env_names and "REDIS_URL" not in env_names

    record_path = Path(services["env"]["PI_LOGS_DIR"]) / f"{job_id}.json"
    await wait_for(record_path.exists, timeout=60, what="run record")
    record = json.loads(record_path.read_text())
    assert record["jobId"] == job_id
    assert record["outcome"] == "completed"
    assert record["exitCode"] == 0
    assert record["target"] == "Codertocat/Hello-World#1"
    assert record["host"] == services["env"]["PI_WORKER_NAME"]
    assert "Real octokit example" not in record_path.read_text()

    # One event, one job, both fully processed.
    assert await redis.xlen(keys.events) == 1
    assert await redis.xlen(keys.jobs) == 1
    decision = await decision_fields(redis, keys, "github", delivery)
    assert decision["outcome"] == "queued" and decision["jobs"] == job_id

    async def jobs_acked() -> bool:
        groups = await redis.xinfo_groups(keys.jobs)
        return all(g["pending"] == 0 for g in groups)

    await wait_for(jobs_acked, timeout=10, what="job entry acked")
