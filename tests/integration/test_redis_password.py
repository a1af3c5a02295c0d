"""VALKEY_PASSWORD / REDIS_PASSWORD against a real redis-server started with ``requirepass``: services and
CLI verbs connect with it, exit 1 without it, and no output ever holds the password."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from pidispatch.common.keys import Keys
from pidispatch.common.models import Event
from pidispatch.common.redis import Redis, create_redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.secret import Secret
from tests.support.decisions import decision_fields
from tests.support.payloads import FIXTURES
from tests.support.polling import wait_for
from tests.support.processes import RedisProcess, ServiceProcess

PASSWORD = "pw-" + uuid.uuid4().hex  # unique, so finding it in any output is a leak, never a coincidence
LABELED = (FIXTURES / "github" / "issues.labeled.json").read_text()
RULE = {"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path / "locked-redis", requirepass=PASSWORD)
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def client(locked: RedisProcess) -> AsyncIterator[Redis]:
    redis = create_redis(locked.url, Secret(PASSWORD))
    yield redis
    await redis.aclose()


@pytest.fixture
def env(base_env: dict[str, str], locked: RedisProcess) -> dict[str, str]:
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": [RULE]}))
    return {**base_env, "REDIS_URL": locked.url}


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pidispatch.common.cli", *args], env=env, capture_output=True, text=True,
        timeout=30, check=False,
    )


def exits(router: ServiceProcess) -> int | None:
    assert router.proc is not None
    return router.proc.poll()


async def test_the_router_connects_with_valkey_password_and_never_prints_it(
    env: dict[str, str], client: Redis, keys: Keys, tmp_path: Path
) -> None:
    router = ServiceProcess("router", {**env, "VALKEY_PASSWORD": PASSWORD}, tmp_path / "router.log")
    router.start()
    try:
        delivery = str(uuid.uuid4())
        event = Event(forge="github", event="issues", delivery=delivery, received_at=now_ms(), body=LABELED)
        await client.xadd(keys.events, event.to_fields())  # type: ignore[arg-type]

        async def decided() -> str | None:
            return (await decision_fields(client, keys, "github", delivery)).get("outcome")

        assert await wait_for(decided, timeout=15, what="the router's decision") == "dropped"
    finally:
        assert router.stop() == 0
    assert PASSWORD not in router.log_path.read_text()


# Ids fixed: each pytest-xdist worker collects the suite and all must agree (the value is per run).
@pytest.mark.parametrize("given", [None, "wrong-" + uuid.uuid4().hex], ids=["unset", "wrong"])
async def test_the_router_without_the_right_password_exits_1_naming_the_variables(
    env: dict[str, str], tmp_path: Path, given: str | None
) -> None:
    run_env = env if given is None else {**env, "REDIS_PASSWORD": given}
    router = ServiceProcess("router", run_env, tmp_path / "router.log")
    router.start()
    try:
        code = await wait_for(lambda: exits(router), timeout=20, what="the router to exit")
    finally:
        router.stop()
    output = router.log_path.read_text()
    assert code == 1, output
    assert "refused this connection's credentials" in output and "VALKEY_PASSWORD or REDIS_PASSWORD" in output
    assert PASSWORD not in output and (given is None or given not in output)


def test_cli_verbs_use_the_password_and_say_why_they_cannot_connect_without_it(env: dict[str, str]) -> None:
    with_it = {**env, "REDIS_PASSWORD": PASSWORD}
    for verb in (["events", "--json"], ["status", "--json"], ["hosts", "--json"]):
        done = cli(with_it, *verb)
        assert done.returncode == 0, (verb, done.stderr)
        assert PASSWORD not in done.stdout + done.stderr
    refused = cli(env, "events")
    assert refused.returncode == 1
    assert "refused this connection's credentials" in refused.stderr and "VALKEY_PASSWORD" in refused.stderr


def test_a_password_in_the_url_and_in_a_variable_is_refused_naming_both(
    env: dict[str, str], locked: RedisProcess
) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{locked.port}/0"
    assert cli({**env, "REDIS_URL": url}, "events").returncode == 0  # the URL alone is honoured
    both = cli({**env, "REDIS_URL": url, "VALKEY_PASSWORD": PASSWORD}, "events")
    assert both.returncode == 2
    assert "REDIS_URL carries a password and VALKEY_PASSWORD is set too" in both.stderr
    assert PASSWORD not in both.stdout + both.stderr
