"""The compose deployment, run as an operator runs it: the service image (built from Debian packages by
``pi-dispatch service-image build``, which ``.ci/run`` runs first), ``docker-compose up`` with every
service scaled, deliveries posted at the one published port.

Only the forge is played, by ``dev``'s stand-in GitHub on Docker's bridge address, where the containers
reach the host. Jobs run in the test agent image (``pd-test sleep=<s>`` in the issue body sets how long).
Skipped without ``docker-compose`` (or ``docker compose``) unless ``PD_REQUIRE_DEPLOY=1``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import secrets
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pidispatch.common.embedded import free_port
from pidispatch.dev.forgestandin import DemoForge, demo_delivery, start_demo_forge
from pidispatch.dev.modelstandin import gateway_of
from pidispatch.dev.serviceimage import DEFAULT_TAG as SERVICE_IMAGE
from pidispatch.dev.stack import SAMPLE_TRIGGERS
from tests.support.images import require_built

ROOT = Path(__file__).resolve().parents[2]
REQUIRE = os.environ.get("PD_REQUIRE_DEPLOY") == "1"
SCALE = {"receiver": 2, "router": 2, "worker": 3}
FIRST_BATCH = 60
IN_FLIGHT = 9  # every slot of three workers at PI_CONCURRENCY=3
LABEL_HOST = "pd.host"


def compose_argv() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and subprocess.run(
        ["docker", "compose", "version"], capture_output=True, check=False
    ).returncode == 0:
        return ["docker", "compose"]
    return None


COMPOSE = compose_argv()
if COMPOSE is None or shutil.which("docker") is None:
    if REQUIRE:
        raise RuntimeError("PD_REQUIRE_DEPLOY=1 but neither docker-compose nor `docker compose` is here")
    pytest.skip("no docker-compose here (apt-get install docker-compose)", allow_module_level=True)


async def run(*argv: str, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}:\n{text[-4000:]}")
    return text


@dataclass
class Stack:
    project: str
    env: dict[str, str]
    data: Path
    port: int
    prefix: str
    secret: str
    forge: DemoForge

    async def compose(self, *args: str, timeout: float = 600) -> str:
        assert COMPOSE is not None
        return await run(*COMPOSE, "-p", self.project, "-f", str(ROOT / "compose.yaml"), *args,
                         env=self.env, timeout=timeout)

    async def redis_cli(self, *args: str) -> str:
        return await self.compose("exec", "-T", "redis", "redis-cli", *args, timeout=30)

    async def up(self, scale: dict[str, int]) -> None:
        flags = [x for name, n in scale.items() for x in ("--scale", f"{name}={n}")]
        await self.compose("up", "-d", "--no-recreate", *flags)

    def records(self) -> list[dict[str, Any]]:
        logs = self.data / "logs"
        return [json.loads(p.read_text()) for p in logs.glob("*.json")] if logs.is_dir() else []


async def wait_for(what: str, check: Any, deadline_s: float, interval: float = 1.0) -> Any:
    """Poll ``check`` (async, returns a truthy value when done) until the deadline; fail naming ``what``."""
    end = time.monotonic() + deadline_s
    last: Any = None
    while time.monotonic() < end:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {deadline_s:.0f} s waiting for {what} (last: {last!r})")


async def health(stack: Stack) -> dict[str, str]:
    ids = (await stack.compose("ps", "-q", timeout=60)).split()
    if not ids:
        return {}
    out = await run("docker", "inspect", "-f",
                    "{{.Name}} {{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}",
                    *ids, timeout=60)
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def delivery(number: int, sleep_s: int) -> bytes:
    payload = json.loads(demo_delivery(number))
    payload["issue"]["body"] = f"A deploy check job. pd-test exit=0 sleep={sleep_s}"
    return json.dumps(payload, separators=(",", ":")).encode()


async def post(stack: Stack, numbers: range, sleep_s: int) -> Counter[int]:
    answers: Counter[int] = Counter()
    async with aiohttp.ClientSession() as session:
        for n in numbers:
            body = delivery(n, sleep_s)
            signature = "sha256=" + hmac.new(stack.secret.encode(), body, hashlib.sha256).hexdigest()
            headers = {
                "Content-Type": "application/json", "X-GitHub-Event": "issues",
                "X-GitHub-Delivery": f"{stack.project}-{n}", "X-Hub-Signature-256": signature,
            }
            async with session.post(f"http://127.0.0.1:{stack.port}/", data=body, headers=headers) as r:
                answers[r.status] += 1
    return answers


async def job_containers(stack: Stack, *hosts: str, every: bool = False) -> list[str]:
    """The hosts' running job containers; ``every``: all their containers (the egress proxy too), stopped
    ones included."""
    found: list[str] = []
    for host in hosts:
        which = ["-a"] if every else ["--filter", "label=pd.job"]
        out = await run("docker", "ps", "-q", *which, "--filter", f"label={LABEL_HOST}={host}", timeout=30)
        found += out.split()
    return found


async def bridge_address() -> str:
    out = await run("docker", "network", "inspect", "bridge")
    address = gateway_of(json.loads(out)[0])
    assert address is not None, "Docker's bridge network names no gateway and no IPv4 subnet"
    return address


@pytest.fixture
async def stack(tmp_path: Path, test_image: str) -> AsyncIterator[Stack]:
    require_built(SERVICE_IMAGE, "service-image", required=REQUIRE,
                  flag="PD_REQUIRE_DEPLOY")
    project = f"pdcheck{os.getpid()}"
    data, config = tmp_path / "data", tmp_path / "config"
    data.mkdir()
    config.mkdir()
    (config / "triggers.json").write_text(json.dumps(SAMPLE_TRIGGERS))
    forge, forge_env = await start_demo_forge(tmp_path, host=await bridge_address())
    secret = secrets.token_hex(16)
    env = {
        **os.environ, **forge_env,
        "WEBHOOK_SECRET": secret, "RECEIVER_PUBLISH": str(free_port()), "PI_DATA_DIR": str(data),
        "PD_CONFIG_DIR": str(config), "PI_JOB_IMAGE": test_image, "WORKER_NAME_PREFIX": f"{project}-worker",
        # Short liveness, so a worker scaled away is taken over within seconds, and a short grace, so
        # its running jobs are left running (the case that could lose them).
        "PD_HOST_BEAT_MS": "1000", "PD_HOST_TTL_MS": "5000", "PI_SHUTDOWN_GRACE": "2",
        "PI_DAILY_CAP": "1000",
    }
    s = Stack(project, env, data, int(env["RECEIVER_PUBLISH"]), project + "-worker", secret, forge)
    try:
        yield s
    finally:
        with_logs = os.environ.get("PD_DEPLOY_LOGS")
        if with_logs:
            print(await s.compose("logs", "--no-color", timeout=120))
        await s.compose("down", "-v", "--remove-orphans", "-t", "5", timeout=300)
        hosts = [f"{s.prefix}-{n}" for n in range(1, 4)]
        leftovers = await job_containers(s, *hosts, every=True)
        if leftovers:
            await run("docker", "rm", "-f", *leftovers, timeout=120)
        for host in hosts:  # the job networks a worker stopped mid-run left for its next start
            label = f"label={LABEL_HOST}={host}"
            nets = (await run("docker", "network", "ls", "-q", "--filter", label)).split()
            if nets:
                await run("docker", "network", "rm", *nets, timeout=60)
        await forge.close()


async def test_scaled_compose_stack_runs_every_delivery_once_and_scaling_workers_down_loses_none(
    stack: Stack,
) -> None:
    started = time.monotonic()
    await stack.up(SCALE)
    expected = sum(SCALE.values()) + 2  # redis and front
    states = await wait_for(
        f"{expected} healthy containers",
        lambda: _all_healthy(stack, expected), deadline_s=180,
    )
    print(f"deploy: {len(states)} containers healthy in {time.monotonic() - started:.0f} s")
    hosts = {f"{stack.prefix}-{n}" for n in range(1, 4)}

    # 60 deliveries at the one published port: 60 events, 60 jobs, 60 completed records on three workers.
    t0 = time.monotonic()
    answers = await post(stack, range(1, FIRST_BATCH + 1), sleep_s=1)
    assert answers == Counter({202: FIRST_BATCH})
    await wait_for(f"{FIRST_BATCH} records", lambda: _count(stack, FIRST_BATCH), deadline_s=300)
    print(f"deploy: {FIRST_BATCH} deliveries to {FIRST_BATCH} records in {time.monotonic() - t0:.0f} s")
    records = stack.records()
    assert Counter(r["outcome"] for r in records) == Counter({"completed": FIRST_BATCH})
    assert len({r["jobId"] for r in records}) == FIRST_BATCH
    spread = Counter(r["host"] for r in records)
    assert set(spread) == hosts, spread
    print(f"deploy: records per worker {dict(sorted(spread.items()))}")
    assert (await stack.redis_cli("XLEN", "pd:events")).strip() == str(FIRST_BATCH)
    # The operator's view, run where operators run it: one queued decision with one job per delivery.
    rows = json.loads(await stack.compose("exec", "-T", "router", "pi-dispatch", "events", "--limit", "100",
                                          "--json", timeout=60))
    assert len(rows) == FIRST_BATCH
    assert Counter(r.get("outcome") for r in rows) == Counter({"queued": FIRST_BATCH}), rows[:2]
    assert sum(len(r.get("jobs") or ()) for r in rows) == FIRST_BATCH

    # Each group's consumers are visible to redis-cli: two routers, three workers under their stable names.
    routers = _consumer_names(await stack.redis_cli("XINFO", "CONSUMERS", "pd:events", "router"))
    assert len(routers) == SCALE["router"], routers
    workers: set[str] = set()
    for stream in ("pd:jobs", *(f"pd:jobs:{h}" for h in sorted(hosts))):
        workers |= _consumer_names(await stack.redis_cli("XINFO", "CONSUMERS", stream, "workers"))
    assert workers == hosts, workers
    print(f"deploy: XINFO CONSUMERS: router group {sorted(routers)}, workers group {sorted(workers)}")

    # Jobs in flight on every worker, then scale to one: the two stopped workers leave theirs running
    # and the survivor takes them over; each is recorded once, completed.
    answers = await post(stack, range(FIRST_BATCH + 1, FIRST_BATCH + IN_FLIGHT + 1), sleep_s=25)
    assert answers == Counter({202: IN_FLIGHT})
    stays = f"{stack.prefix}-1"
    leaving = sorted(hosts - {stays})
    await wait_for(f"{IN_FLIGHT} job containers running",
                   lambda: _running(stack, sorted(hosts), IN_FLIGHT), deadline_s=120)
    in_flight = len(await job_containers(stack, *leaving))
    assert in_flight > 0
    t0 = time.monotonic()
    await stack.up({**SCALE, "worker": 1})
    total = FIRST_BATCH + IN_FLIGHT
    await wait_for(f"{total} records", lambda: _count(stack, total), deadline_s=240)
    print(f"deploy: scaled to one worker with {in_flight} of {IN_FLIGHT} jobs in flight on the two "
          f"stopped; all {IN_FLIGHT} recorded {time.monotonic() - t0:.0f} s later")
    records = stack.records()
    assert Counter(r["outcome"] for r in records) == Counter({"completed": total})
    assert len({r["jobId"] for r in records}) == total
    assert all(r["attempt"] == 1 for r in records)
    # The survivor recorded the stopped workers' jobs: it re-attached to their containers, never re-ran.
    batch = [r for r in records if r["target"] and int(r["target"].rsplit("#", 1)[-1]) > FIRST_BATCH]
    assert len(batch) == IN_FLIGHT and {r["host"] for r in batch} == {stays}, batch
    logs = await stack.compose("logs", "--no-color", "worker", timeout=120)
    assert logs.count("job_reattached") >= in_flight

    # A configuration error under the restart policy: the worker halts with one line, it does not loop.
    stack.env["PI_CONCURRENCY"] = "0"
    await stack.compose("up", "-d", "--no-deps", "worker")
    line = await wait_for("the halted worker's line", lambda: _halted(stack), deadline_s=60)
    state = (await run("docker", "inspect", "-f", "{{.State.Status}} {{.RestartCount}}",
                       f"{stack.project}_worker_1" if COMPOSE == ["docker-compose"] else
                       f"{stack.project}-worker-1", timeout=30)).split()
    assert state == ["running", "0"], state
    print(f"deploy: PI_CONCURRENCY=0 → {line}; container {state[0]}, restarts {state[1]}")
    assert not await job_containers(stack, *hosts)


async def _all_healthy(stack: Stack, expected: int) -> dict[str, str] | None:
    states = await health(stack)
    return states if len(states) == expected and set(states.values()) == {"healthy"} else None


async def _running(stack: Stack, hosts: list[str], n: int) -> bool:
    return len(await job_containers(stack, *hosts)) >= n


async def _halted(stack: Stack) -> str | None:
    logs = await stack.compose("logs", "--no-color", "worker", timeout=60)
    lines = [line.split("|", 1)[-1].strip() for line in logs.splitlines()]
    errors = [line for line in lines if line.startswith("pi-dispatch: configuration error:")]
    return errors[0] if len(errors) == 1 and "halted on the configuration error" in logs else None


async def _count(stack: Stack, n: int) -> bool:
    return len(stack.records()) >= n


def _consumer_names(xinfo: str) -> set[str]:
    """The ``name`` values of redis-cli's XINFO CONSUMERS reply (one field or value per line)."""
    lines = [line.strip() for line in xinfo.splitlines()]
    return {lines[i + 1] for i, line in enumerate(lines[:-1]) if line == "name"}
