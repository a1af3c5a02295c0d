"""A job reaches only what it needs (PI_EGRESS, on by default), proven with a real worker process, real
containers, the real squid proxy image and servers on the host's bridge address that count what reaches
them.

The job is a probe image (node from the job image's Debian runtime) that tries each URL its prompt names,
directly or through the proxy its environment names, and prints what came back; the worker captures that
output (PI_CAPTURE_JOB_LOGS=1). Needs ``pi-dispatch job-image build`` and ``egress-image build`` (``.ci/run``
runs both); skipped without them unless ``PD_REQUIRE_AGENT_IMAGE=1``.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import tarfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiodocker
import aiohttp
import pytest
from aiohttp import web

from pidispatch.common.embedded import free_port
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from pidispatch.common.settings import load_settings
from pidispatch.dev.modelstandin import bridge_gateway
from pidispatch.worker.egress.network import members, reap_networks
from pidispatch.worker.egress.proxy import egress_for
from pidispatch.worker.engine.preflight import CAPABILITIES_LABEL
from tests.support.images import require_built
from tests.support.polling import wait_for
from tests.support.processes import ServiceProcess
from tests.support.scrape import parse, sample
from tests.support.worker import enqueue, issue_job

REQUIRE = os.environ.get("PD_REQUIRE_AGENT_IMAGE") == "1"
RUNTIME = "pd-job-runtime:trixie"  # the job image's own base, made by `pi-dispatch job-image build`
PROBE_IMAGE = "pd-egress-probe:latest"
PROBE = r"""
const fs = require('fs'), http = require('http');
const words = fs.readFileSync('/job/prompt.md', 'utf8').split(/\s+/);
const proxy = process.env.HTTP_PROXY ? new URL(process.env.HTTP_PROXY) : null;
function get(url, via) {
  return new Promise((resolve) => {
    const u = new URL(url);
    const o = via ? {host: via.hostname, port: via.port, path: url, headers: {host: u.host}}
                  : {host: u.hostname, port: u.port, path: u.pathname};
    const req = http.get({...o, timeout: 4000}, (res) => { res.resume(); resolve(String(res.statusCode)); });
    req.on('timeout', () => { req.destroy(); resolve('timeout'); });
    req.on('error', (e) => resolve(e.code || 'error'));
  });
}
(async () => {
  for (const w of words) {
    const m = /^(direct|proxied)=(\S+)$/.exec(w);
    if (!m) continue;
    const got = m[1] === 'direct' ? await get(m[2], null) : (proxy ? await get(m[2], proxy) : 'no-proxy');
    console.log(`probe ${m[1]} ${m[2]} ${got}`);
  }
  console.log(JSON.stringify({event: 'exit', turns: 1, tokens: {input: 1, output: 1, total: 2, cost: 0}}));
})();
"""


@dataclass
class Counting:
    """A server on the host that records every path it is asked for."""

    port: int
    seen: list[str] = field(default_factory=list)


@pytest.fixture(scope="session")
def egress_image(docker_available: bool) -> str:
    if not docker_available:
        pytest.fail("no Docker daemon") if REQUIRE else pytest.skip("no Docker daemon reachable")
    return require_built("pi-egress:latest", "egress-image", required=REQUIRE, flag="PD_REQUIRE_AGENT_IMAGE")


@pytest.fixture(scope="session")
def probe_image(egress_image: str) -> str:
    require_built("pi-job:latest", "job-image", required=REQUIRE, flag="PD_REQUIRE_AGENT_IMAGE")
    dockerfile = (f"FROM {RUNTIME}\nCOPY probe.js /probe.js\nLABEL {CAPABILITIES_LABEL}=anyUid\n"
                  'CMD ["node", "/probe.js"]\n')
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile.encode()), ("probe.js", PROBE.encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

    async def build() -> None:
        docker = aiodocker.Docker()
        try:
            context.seek(0)
            await docker.images.build(fileobj=context, encoding="identity", tag=PROBE_IMAGE, rm=True)
        finally:
            await docker.close()

    asyncio.run(build())
    return PROBE_IMAGE


@pytest.fixture
async def servers() -> AsyncIterator[tuple[Counting, Counting]]:
    """Two servers on every host address: the allowed one and one the allowlist does not name."""
    runners, made = [], []
    for _ in range(2):
        counting = Counting(free_port())

        async def seen(request: web.Request, counting: Counting = counting) -> web.Response:
            counting.seen.append(request.path)
            return web.Response(text="reached\n")

        app = web.Application()
        app.router.add_get("/{tail:.*}", seen)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "0.0.0.0", counting.port).start()
        runners.append(runner)
        made.append(counting)
    yield made[0], made[1]
    for runner in runners:
        await runner.cleanup()


def _probe_lines(env: dict[str, str], job_id: str) -> dict[str, str]:
    out = Path(env["PI_LOGS_DIR"], f"{job_id}.log").read_text()
    return {f"{w[1]} {w[2]}": w[3] for line in out.splitlines() if (w := line.split())[:1] == ["probe"]}


async def _scrape(port: int) -> float | None:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as resp:
        return sample(parse(await resp.text()), "pd_worker_egress_denied_total")


async def _run_probe(
    env: dict[str, str], redis: Redis, keys: Keys, tmp_path: Path, steer: str,
) -> tuple[ServiceProcess, str, dict[str, str]]:
    job = issue_job(steer)
    worker = ServiceProcess("worker", env, tmp_path / "worker.log")
    worker.start()
    try:
        await enqueue(redis, keys, job)
        recorded = Path(env["PI_LOGS_DIR"], f"{job.id}.json")
        await wait_for(recorded.exists, 90, what="the run's record")
        await wait_for(lambda: worker.logged("job_finished"), 30, what="the job's end")
        return worker, job.id, _probe_lines(env, job.id)
    except BaseException:
        worker.stop()  # the caller stops it on success; a failed wait must not leave it running
        raise


async def test_with_defaults_a_job_reaches_its_allowlist_through_the_proxy_and_nothing_else(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path,
    probe_image: str, servers: tuple[Counting, Counting],
) -> None:
    allowed, other = servers
    gateway = await bridge_gateway(docker)
    assert gateway is not None
    allowlist = tmp_path / "allow.txt"
    allowlist.write_text(f"# the one server a job may reach\n{gateway}:{allowed.port}\n")
    metrics_port = free_port()
    run_env = {**env, "PI_JOB_IMAGE": probe_image, "PI_CAPTURE_JOB_LOGS": "1",
               "PD_METRICS_PORT": str(metrics_port), "PI_EGRESS_ALLOWLIST": str(allowlist)}
    del run_env["PI_EGRESS"]  # the default: on
    a, b = f"http://{gateway}:{allowed.port}", f"http://{gateway}:{other.port}"
    steer = (f"direct={a}/direct direct={b}/direct proxied={a}/allowed proxied={b}/denied "
             "proxied=http://example.invalid/")
    worker, job_id, probes = await _run_probe(run_env, redis, keys, tmp_path, steer)
    try:
        denied = await wait_for(lambda: _scrape(metrics_port), 10, what="the refusals counted")
        networks = await docker.networks.list(filters={"label": [f"pd.host={env['PI_WORKER_NAME']}"]})
        on_them = [members(await (await docker.networks.get(n["Id"])).show()) for n in networks]
        proxies = await docker.containers.list(filters=json.dumps(
            {"label": ["pd.role=egress-proxy", f"pd.host={env['PI_WORKER_NAME']}"]}))
    finally:
        assert worker.stop() == 0
    record = json.loads(Path(env["PI_LOGS_DIR"], f"{job_id}.json").read_text())
    assert record["outcome"] == "completed"
    assert probes[f"proxied {a}/allowed"] == "200"
    assert probes[f"proxied {b}/denied"] == "403"
    assert probes["proxied http://example.invalid/"] == "403"
    # No route out of the job's network: a direct connection fails before any server sees it.
    assert {probes[f"direct {a}/direct"], probes[f"direct {b}/direct"]}.isdisjoint({"200", "403"})
    assert allowed.seen == ["/allowed"] and other.seen == []
    assert denied == 2
    # The job's network is free again for the next job: only the proxy (which stays) is on it.
    assert len(proxies) == 1 and on_them == [[proxies[0]["Names"][0].lstrip("/")]]
    assert [n["Internal"] for n in networks] == [True]
    assert worker.logged("egress_on") and not worker.logged("egress_off")


async def test_with_egress_off_a_job_connects_directly_and_the_worker_says_so(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path,
    probe_image: str, servers: tuple[Counting, Counting],
) -> None:
    allowed, _ = servers
    gateway = await bridge_gateway(docker)
    run_env = {**env, "PI_JOB_IMAGE": probe_image, "PI_CAPTURE_JOB_LOGS": "1", "PI_EGRESS": "0"}
    url = f"http://{gateway}:{allowed.port}/direct"
    worker, _, probes = await _run_probe(run_env, redis, keys, tmp_path, f"direct={url} proxied={url}")
    assert worker.stop() == 0
    assert probes == {f"direct {url}": "200", f"proxied {url}": "no-proxy"}
    assert allowed.seen == ["/direct"]
    (off,) = worker.logged("egress_off")
    assert off["level"] == "warning"


async def test_a_restarted_worker_never_hands_a_network_holding_a_reattached_job_to_another_job(
    env: dict[str, str], docker: aiodocker.Docker, egress_image: str, probe_image: str,
) -> None:
    # Jobs reuse this host's networks; a job's network holds only it and the proxy while it runs, also
    # when its worker restarted under it (a new process, nothing in memory).
    settings = load_settings({k: v for k, v in env.items() if k != "PI_EGRESS"})
    proxy = egress_for(settings, docker, ())
    assert proxy is not None
    proxy.start("inst1")
    await proxy.ensure()
    first = await proxy.networks.take("job-1")
    job = await docker.containers.create(
        {"Image": probe_image, "Cmd": ["sleep", "60"], "Entrypoint": [],
         "Labels": {"pd.host": settings.worker_name, "pd.job": "job-1"},
         "HostConfig": {"NetworkMode": first}}, name=f"pd-test-{settings.worker_name}")
    # Running: a network lists only running members; an exited job's container never runs again.
    await job.start()
    assert await proxy.networks.take("job-1") == first  # taken again (a hold, a retry): still its own
    restarted = egress_for(settings, docker, ())
    assert restarted is not None
    restarted.start("inst1")
    second = await restarted.networks.take("job-2")
    assert second != first
    assert await restarted.networks.release("job-2", since=0) == 0
    assert await restarted.networks.take("job-3") == second  # free again, reused
    await job.delete(force=True)
    # At boot, idle networks go; the proxy is left on none of them.
    assert await reap_networks(docker, settings.worker_name, "inst1") == 2
