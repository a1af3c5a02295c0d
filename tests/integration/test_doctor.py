"""``pi-dispatch doctor`` run as operators run it (a subprocess, ``--json``) against real broken setups:
a Redis nobody listens for, an evicting or non-persistent Redis, missing groups, a missing image, bad and
spent triggers, a forge that refuses the token, a missing webhook secret, a full budget, dead entries, no
live host; and a healthy setup, where every check is ok."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import aiodocker
import pytest

from pidispatch.common.embedded import free_port
from pidispatch.common.keys import ROUTER_GROUP, WORKER_GROUP, Keys
from pidispatch.common.redis import Redis, create_redis
from tests.support.doctor import RUN_BOUND_S, doctor
from tests.support.forges import GithubStandIn, gitlab_forge
from tests.support.images import require_built
from tests.support.processes import RedisProcess

GITHUB_RULE = {"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}
GITLAB_RULE = {"on": {"type": "pull_request", "action": ["open"], "any": ["pi:review"]},
               "run": {"kind": "gitlab", "flow": "review"}}
SPENT_RULE = {
    "on": {"type": "issue", "action": ["closed"], "number": 41, "once": True,
           "disarmed": {"at": "2026-05-01T10:00:00Z", "jobId": "gh-1f2e3d"}},
    "run": {"kind": "github", "command": "release-notes"},
}
def triggers(path: Path, *rules: dict[str, Any]) -> None:
    path.write_text(json.dumps({"triggers": list(rules)}))


@pytest.fixture
def setup(base_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    triggers(tmp_path / "triggers.json", GITHUB_RULE)
    return dict(base_env)


async def test_no_redis_fails_fast_and_skips_what_needs_it(setup: dict[str, str]) -> None:
    report = await doctor({**setup, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})
    assert report.code == 2 and report.status("redis") == "fail"
    assert report.checks["redis"]["fix"]
    for name in ("streams", "topology", "budget", "clock", "hosts", "dead"):
        assert report.checks[name]["finding"] == "skipped: redis unreachable"
    # The checks that need no Redis still ran.
    assert report.status("triggers") == "ok" and report.status("config") == "ok"
    assert report.seconds < RUN_BOUND_S


async def test_a_bad_variable_fails_config_and_the_rest_still_runs(setup: dict[str, str]) -> None:
    report = await doctor({**setup, "PI_DAILY_CAP": "lots"})
    assert report.code == 2 and report.status("config") == "fail"
    assert "PI_DAILY_CAP" in report.checks["config"]["finding"]
    assert report.status("triggers") == "ok" and report.status("hosts") == "warn"
    assert report.checks["budget"]["finding"].startswith("skipped:")


async def test_an_evicting_redis_fails(setup: dict[str, str], own_redis: RedisProcess) -> None:
    client = create_redis(own_redis.url)
    await client.config_set("maxmemory-policy", "allkeys-lru")
    await client.aclose()
    report = await doctor({**setup, "REDIS_URL": own_redis.url})
    assert report.status("redis") == "fail" and "allkeys-lru" in report.checks["redis"]["finding"]


async def test_a_redis_without_persistence_warns(setup: dict[str, str]) -> None:
    # The session's redis-server runs with appendonly no and save "".
    report = await doctor(setup)
    assert report.status("redis") == "warn" and "no persistence" in report.checks["redis"]["finding"]


async def test_missing_groups_warn(setup: dict[str, str], redis: Redis, keys: Keys) -> None:
    await redis.xgroup_create(keys.events, ROUTER_GROUP, id="0", mkstream=True)
    report = await doctor(setup)
    assert report.status("streams") == "warn"
    assert report.checks["streams"]["finding"] == f"missing consumer group {WORKER_GROUP} on {keys.jobs}"


async def test_a_missing_job_image_fails(setup: dict[str, str], require_docker: None) -> None:
    report = await doctor({**setup, "PI_JOB_IMAGE": "pd-nope:latest"})
    assert report.status("job-image") == "fail"
    assert "pi-dispatch job-image build" in report.checks["job-image"]["fix"]


async def test_invalid_triggers_fail(setup: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "triggers.json").write_text('{"triggers": [{"on": {"type": "label"}, "run": {}}]}')
    report = await doctor(setup)
    assert report.status("triggers") == "fail" and "triggers[0]" in report.checks["triggers"]["finding"]
    assert report.checks["webhook-secrets"]["finding"] == "skipped: triggers.json refused"


async def test_a_disarmed_rule_warns(setup: dict[str, str], tmp_path: Path) -> None:
    triggers(tmp_path / "triggers.json", GITHUB_RULE, SPENT_RULE)
    report = await doctor(setup)
    assert report.status("triggers") == "warn"
    assert report.checks["triggers"]["finding"] == "2 rules; disarmed (spent one-shots): triggers[1]"


async def test_a_forge_that_refuses_the_token_fails(setup: dict[str, str]) -> None:
    async with gitlab_forge() as gitlab:
        report = await doctor({**setup, "GITLAB_URL": gitlab.url, "GITLAB_TOKEN": "glpat-wrong"})
    assert report.status("forge:gitlab") == "fail" and "401" in report.checks["forge:gitlab"]["finding"]
    assert "forge:github" not in report.checks  # no credentials there: not listed


async def test_a_missing_webhook_secret_for_an_arm_with_rules_fails(
    setup: dict[str, str], tmp_path: Path
) -> None:
    triggers(tmp_path / "triggers.json", GITHUB_RULE, GITLAB_RULE)
    report = await doctor(setup)
    check = report.checks["webhook-secrets"]
    assert check["status"] == "fail" and "gitlab" in check["finding"] and "github" not in check["finding"]
    # Its rules ask GitLab about every delivery, and it has no credentials: the router would exit 2.
    assert report.status("forge:gitlab") == "fail"
    assert "has no credentials" in report.checks["forge:gitlab"]["finding"]


async def test_a_budget_at_its_cap_warns(setup: dict[str, str], redis: Redis, keys: Keys) -> None:
    today = dt.datetime.now(dt.UTC).date().isoformat()
    await redis.set(keys.budget_day(today), 3)
    report = await doctor({**setup, "PI_DAILY_CAP": "3"})
    assert report.status("budget") == "warn" and "day 3/3" in report.checks["budget"]["finding"]


async def test_dead_entries_warn(setup: dict[str, str], redis: Redis, keys: Keys) -> None:
    for n in range(2):
        await redis.xadd(keys.dead, {"source": keys.events, "reason": "lookup-failed", "n": str(n)})
    report = await doctor(setup)
    assert report.status("dead") == "warn" and report.checks["dead"]["finding"].startswith("2 entries")
    assert "pi-dispatch replay" in report.checks["dead"]["fix"]


async def test_no_live_host_warns(setup: dict[str, str]) -> None:
    report = await doctor(setup)
    assert report.status("hosts") == "warn" and "pi-dispatch worker" in report.checks["hosts"]["fix"]


async def test_a_healthy_setup_is_all_ok(
    setup: dict[str, str], own_redis: RedisProcess, test_image: str, github: GithubStandIn
) -> None:
    keys = Keys(setup["PD_KEY_PREFIX"])
    client = create_redis(own_redis.url)
    await client.xgroup_create(keys.events, ROUTER_GROUP, id="0", mkstream=True)
    await client.xgroup_create(keys.jobs, WORKER_GROUP, id="0", mkstream=True)
    now = str(int(time.time() * 1000))
    row = {"name": "w1", "beatAt": now, "concurrency": "3", "running": "1"}
    await client.hset(keys.host("w1"), mapping=row)
    await client.sadd(keys.hosts, "w1")
    await client.aclose()
    github.forge.state["scopes"] = "repo, read:org"
    # Healthy includes the egress filter on (the default) with its proxy image here.
    require_built("pi-egress:latest", "egress-image", required=os.environ.get("PD_REQUIRE_DOCKER") == "1",
                  flag="PD_REQUIRE_DOCKER")
    env = {k: v for k, v in setup.items() if k != "PI_EGRESS"}
    report = await doctor({**env, **github.env(), "REDIS_URL": own_redis.url, "PI_JOB_IMAGE": test_image})
    docker = aiodocker.Docker()
    driver = (await docker.system.info())["Driver"]
    await docker.close()
    expected = {c: "ok" for c in report.checks} | ({"docker": "warn"} if driver == "vfs" else {})
    assert {c: report.status(c) for c in report.checks} == expected, report.body
    assert list(report.checks) == [
        "config", "variables", "redis", "streams", "topology", "docker", "job-image", "egress", "model",
        "triggers", "forge:github", "heal", "webhook-secrets", "budget", "clock", "hosts", "dead",
    ]
    assert report.code == (1 if driver == "vfs" else 0)
    assert report.checks["forge:github"]["finding"] == "identity resolved; token scopes repo,read:org"
    assert report.checks["hosts"]["finding"] == "1 live: w1 1/3"


async def test_a_hung_redis_fails_within_the_bound(setup: dict[str, str], own_redis: RedisProcess) -> None:
    assert own_redis.proc is not None
    own_redis.proc.send_signal(signal.SIGSTOP)  # accepts connections (the kernel does), answers nothing
    try:
        report = await doctor({**setup, "REDIS_URL": own_redis.url})
    finally:
        own_redis.proc.send_signal(signal.SIGCONT)
    assert report.checks["redis"]["finding"] == "did not answer within 2 s"
    assert report.checks["clock"]["finding"] == "skipped: redis unreachable"
    assert report.seconds < 10


async def test_a_forge_that_never_answers_fails_within_the_bound(setup: dict[str, str]) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(-1)  # reads the request, never answers; returns when the client gives up
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        report = await doctor({**setup, "GITLAB_URL": f"http://127.0.0.1:{port}", "GITLAB_TOKEN": "t"})
    assert report.checks["forge:gitlab"]["finding"] == "did not answer within 2 s"
    assert report.seconds < 10


async def test_in_one_service_s_container_only_its_checks_run(setup: dict[str, str]) -> None:
    """Compose gives each container its own variables: the receiver has the secret and no rules or Docker,
    the router has rules and no secret or Docker."""
    receiver_env = {k: v for k, v in setup.items() if k not in ("PI_TRIGGERS_FILE", "DOCKER_HOST")}
    receiver = await doctor({**receiver_env, "DOCKER_HOST": "unix:///nonexistent"}, "--service", "receiver")
    assert list(receiver.checks) == ["config", "variables", "redis", "streams", "topology", "webhook-secrets"]
    assert receiver.checks["webhook-secrets"]["finding"] == "serves github"
    assert receiver.code < 2, receiver.body  # streams warn: no router or worker made its group yet
    router_env = {k: v for k, v in setup.items() if k != "WEBHOOK_SECRET"}
    router = await doctor({**router_env, "DOCKER_HOST": "unix:///nonexistent"}, "--service", "router")
    assert "docker" not in router.checks and "webhook-secrets" not in router.checks
    assert {"triggers", "heal", "hosts", "dead"} <= set(router.checks)
