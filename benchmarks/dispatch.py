"""Worker dispatch: enqueue → container start latency and jobs/s at concurrency 3, beside bare aiodocker.

Starts a private redis-server, builds a tiny job image (the test agent: prints an exit line, exits 0) and
runs the real worker in this process (``run_worker``), the way ``pi-dispatch worker`` runs it. In the same
run it measures the floor: bare aiodocker create → wait → start of the same image with the same container
config (``to_docker_config`` of an equal spec: on an internal network too when egress is on, the default),
no Redis, no records. With ``--kind github`` (forge jobs on
dev's stand-in GitHub) the floor is what a hand-written job does: ``git clone --depth 1`` of the
repository, then the same create → start; the worker side mints, reads the tip and the protection from the
API and fetches exactly that commit.

(a) Start latency, one job at a time, worker and bare samples interleaved so drift favours neither:
    worker = XADD → the container's ``start`` event; bare = the create call (or the clone) → ``start``.
(b) Throughput: N trivial jobs at concurrency 3, end to end (enqueue all → every run record written),
    beside the bare loop running the same number of containers 3 at a time; rounds alternate the order.
(c) With ``--image IMAGE`` (e.g. ``pi-job:latest``, the real pi agent behind its runner, built by
    ``pi-dispatch job-image build``), afterwards: the same kind of job, one at a time, run by a second
    worker in that image against the stand-in model (``ModelStandIn`` on Docker's bridge gateway):
    XADD → the stand-in's first model request, p50 and p95, beside the busybox figure of (a) (XADD →
    container start of the test agent) and their ratio, with the image's size in the closing note. Each
    such sample runs a whole (two-turn) agent job and takes several seconds, more on a ``vfs`` storage
    driver, which copies the image's layers for every container: ``--samples`` defaults to 5 in this mode.
Targets: start overhead (p50 worker - p50 bare) ≤ 50 ms; throughput ≥ 0.9 of the bare figure. The
real-agent figures have no target.

    .venv/bin/python benchmarks/dispatch.py [--samples 25] [--jobs 30] [--rounds 2] [--check]
    .venv/bin/python benchmarks/dispatch.py --image pi-job:latest [--samples 5] [--jobs 3 --rounds 1]

Exit 1 when something broke (a job not ``completed``, a container that did not start, a crash), or with
``--check`` when a target is missed; 0 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiodocker
import yarl

from pidispatch.common.embedded import find_redis_server, free_port, redis_server_argv
from pidispatch.common.keys import Keys
from pidispatch.common.log import configure_logging
from pidispatch.common.models import Job, Matched, Sender, Target, Trigger, job_to_fields
from pidispatch.common.redis import Redis, create_redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.settings import Settings, load_settings
from pidispatch.dev.demoimage import TEST_AGENT_SCRIPT, build_image
from pidispatch.dev.forgestandin import REPO as DEMO_REPO
from pidispatch.dev.forgestandin import DemoForge, start_demo_forge
from pidispatch.dev.modelstandin import (
    STANDIN_KEY_VAR,
    STANDIN_MODEL,
    STANDIN_PROVIDER,
    ModelStandIn,
    bridge_gateway,
)
from pidispatch.worker.engine import dockerapi
from pidispatch.worker.engine.container import (
    CONTAINER_HOME,
    JOB_MOUNT,
    LABEL_HOST,
    LABEL_JOB,
    SHM_CAP_BYTES,
    WORKSPACE_MOUNT,
    ContainerSpec,
    Mount,
    to_docker_config,
)
from pidispatch.worker.engine.workspace import ensure_jobs_dir, prepare_workspace
from pidispatch.worker.history.records import record_path
from pidispatch.worker.service import run_worker

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = ROOT / "tests" / "fixtures" / "github" / "issues.labeled.json"
CONCURRENCY = 3
# The worker's host environment: nothing of the operator's; for --kind github, the stand-in's variables.
WORKER_ENV: dict[str, str] = {}
TARGET_OVERHEAD_MS = 50.0
TARGET_RATIO = 0.9
FOREIGN_CORES_WARN = 0.1
JOB_TIMEOUT_S = 60.0
# A real agent job: a container of a large image (a full copy of its layers on vfs), node starting, two turns.
AGENT_JOB_TIMEOUT_S = 300.0
AGENT_SAMPLES_DEFAULT, SAMPLES_DEFAULT = 5, 25
STANDIN_KEY = "gsk-bench-standin-0123456789abcdef"  # the stand-in's own key; nothing real
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Broken(Exception):
    """Something other than speed went wrong: the numbers would mean nothing."""


# --- clocks ----------------------------------------------------------------------------------------

def machine_cpu_s() -> float:
    user, nice, system, _, _, _, _, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return (user + nice + system + steal) / CLK_TCK


async def foreign_cores(seconds: float = 1.0) -> float:
    """Cores the machine keeps busy while this benchmark does nothing: anything above noise skews it."""
    before = machine_cpu_s()
    await asyncio.sleep(seconds)
    return (machine_cpu_s() - before) / seconds


def percentile(values: list[float], p: float) -> float:
    """Nearest rank (a latency some run really had)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


class ContainerEvents:
    """The Docker daemon's ``create`` and ``start`` events of labelled containers, by ``pd.job`` label.

    Why events and not the ``pd:job:<id>`` hash: the hash says ``running`` only after the start call
    returned, the worker logged and a Redis round trip landed, and the benchmark would see it only at
    its next poll; its ``startedAt`` is the pickup time, not the start. The event's ``timeNano`` is the
    daemon's own stamp of the start, taken the same way for worker and bare containers, on this host's
    realtime clock, the clock the enqueue and create moments are read from. ``since`` replays any event
    that fired before the stream was connected, so none is missed.
    """

    def __init__(self) -> None:
        self.docker = aiodocker.Docker()
        self.seen: dict[tuple[str, str], int] = {}
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ContainerEvents:
        self.task = asyncio.create_task(self._read(int(time.time()) - 1))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        await self.docker.close()

    async def _read(self, since_s: int) -> None:
        filters = {"type": ["container"], "event": ["create", "start"], "label": [LABEL_JOB]}
        params = {"filters": json.dumps(filters), "since": str(since_s)}
        async with dockerapi.events(self.docker, params) as resp:
            async for line in resp.content:
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    job_id = event["Actor"]["Attributes"][LABEL_JOB]
                    self.seen[(job_id, event["Action"])] = int(event["timeNano"])
                    self.changed.set()

    async def moments(self, job_id: str, timeout: float = JOB_TIMEOUT_S) -> tuple[int, int]:
        """The create and start moments (epoch ns) of ``job_id``'s container."""
        deadline = time.monotonic() + timeout
        while (job_id, "start") not in self.seen:
            if self.task is not None and self.task.done():
                raise Broken("the Docker events stream ended")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), max(0.0, deadline - time.monotonic()))
            if time.monotonic() > deadline and (job_id, "start") not in self.seen:
                raise Broken(f"no start event for {job_id} within {timeout:.0f} s")
        created = self.seen.pop((job_id, "create"), None)
        if created is None:
            raise Broken(f"a start event for {job_id} came without its create event")
        return created, self.seen.pop((job_id, "start"))


# --- the worker side -------------------------------------------------------------------------------

def bench_job(run: str, n: int, kind: str, root: Path) -> Job:
    """A job steering the test agent to exit 0 at once: a local job on its own fresh git folder (the
    dispatch path), or a GitHub issue job on ``dev``'s stand-in GitHub (adds mint, tip, protection and
    the clone of the tip, which the bare side does not do)."""
    if kind == "local":
        folder = root / "folders" / f"{run}-{n}"
        _git_folder(folder)
        job_id = f"local-{run}-{n}"
        return Job(id=job_id, kind="local", repo=f"local:{folder.name}", folder=str(folder),
                   task="pd-test exit=0 sleep=0")
    p = json.loads(PAYLOAD.read_text())
    delivery = f"{run}-{n}-{uuid.uuid4().hex[:8]}"
    return Job(
        id=f"gh-{delivery}", kind="github", repo=DEMO_REPO, flow="triage",
        target=Target(type="issue", number=p["issue"]["number"], title=p["issue"]["title"],
                      body=f"{p['issue']['body']}\n\npd-test exit=0 sleep=0"),
        trigger=Trigger(
            event="issues", action="labeled", delivery_id=delivery, sender=Sender(id=p["sender"]["id"]),
            matched=Matched(index=0, type="label", label="bug"),
        ),
    )


def _git_folder(folder: Path) -> None:
    """A one-commit repository owned by the job user (a local job runs as its folder's owner)."""
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("bench\n")
    ident = ["-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    for argv in (["init", "-q"], ["add", "README.md"], [*ident, "commit", "-qm", "bench"]):
        subprocess.run(["git", "-C", str(folder), *argv], check=True, capture_output=True)
    if os.geteuid() == 0:
        for path in (folder, *folder.rglob("*")):
            os.lchown(path, 1000, 1000)


def worker_coroutine(
    settings: Settings, redis: Redis, keys: Keys, docker: aiodocker.Docker, stop: asyncio.Event,
    env: dict[str, str] | None = None,
) -> Coroutine[Any, Any, None]:
    # The one call into the worker. An empty host environment: no operator variable (provider keys,
    # forwarded names) reaches the benchmark's containers; the real-agent worker gets the stand-in's key.
    return run_worker(settings, redis, keys, docker, stop, now_ms, env=WORKER_ENV if env is None else env)


@contextlib.asynccontextmanager
async def running_worker(
    settings: Settings, redis: Redis, keys: Keys, env: dict[str, str] | None = None
) -> AsyncIterator[asyncio.Task[None]]:
    docker = aiodocker.Docker()  # the worker's own client, as in production
    stop = asyncio.Event()
    task = asyncio.create_task(worker_coroutine(settings, redis, keys, docker, stop, env))
    try:
        yield task
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 60)
        await docker.close()


async def recorded(settings: Settings, job_ids: list[str], worker: asyncio.Task[None],
                   timeout: float = JOB_TIMEOUT_S) -> float:
    """Wait until every job has a ``completed`` record; returns time.monotonic() when the last appeared."""
    left = set(job_ids)
    deadline = time.monotonic() + timeout + 2 * len(job_ids)
    while left:
        if worker.done():
            raise Broken(f"the worker stopped ({worker.exception()!r})")
        left = {j for j in left if not record_path(settings.logs_dir, j).exists()}
        if time.monotonic() > deadline:
            raise Broken(f"{len(left)} job(s) got no run record within the deadline")
        if left:
            await asyncio.sleep(0.005)
    done = time.monotonic()
    for job_id in job_ids:
        rec = json.loads(record_path(settings.logs_dir, job_id).read_text())
        if rec["outcome"] != "completed":
            raise Broken(f"a job ended {rec['outcome']}/{rec['reason']}, not completed")
    return done


Sample = tuple[float, float]  # ms from the first moment to the create event, and to the start event


def sample(t0: int, moments: tuple[int, int]) -> Sample:
    return (moments[0] - t0) / 1e6, (moments[1] - t0) / 1e6


async def worker_latency(
    redis: Redis, keys: Keys, settings: Settings, events: ContainerEvents, worker: asyncio.Task[None],
    job: Job,
) -> Sample:
    fields = job_to_fields(job)
    t0 = time.time_ns()
    await redis.xadd(keys.jobs, fields)  # type: ignore[arg-type]
    moments = await events.moments(job.id)
    await recorded(settings, [job.id], worker)  # the worker is idle again before the next sample
    return sample(t0, moments)


async def agent_latency(
    redis: Redis, keys: Keys, settings: Settings, events: ContainerEvents, worker: asyncio.Task[None],
    standin: ModelStandIn, job: Job,
) -> tuple[float, float]:
    """One real-agent job: ms from XADD to its container's start event and to the stand-in's first
    model request (both on this host's realtime clock); returns once the job's record is written."""
    before = len(standin.seen)
    fields = job_to_fields(job)
    t0 = time.time_ns()
    await redis.xadd(keys.jobs, fields)  # type: ignore[arg-type]
    _, started = await events.moments(job.id, AGENT_JOB_TIMEOUT_S)
    deadline = time.monotonic() + AGENT_JOB_TIMEOUT_S
    while len(standin.seen) <= before:
        if worker.done():
            raise Broken(f"the worker stopped ({worker.exception()!r})")
        if time.monotonic() > deadline:
            raise Broken(f"the agent of {job.id} made no model request within {AGENT_JOB_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.005)
    first = standin.seen[before]
    if not first.authorized:
        raise Broken("the stand-in refused the agent's key")
    await recorded(settings, [job.id], worker, AGENT_JOB_TIMEOUT_S)
    return (started - t0) / 1e6, first.at * 1e3 - t0 / 1e6


async def worker_throughput(
    redis: Redis, keys: Keys, settings: Settings, worker: asyncio.Task[None], jobs: list[Job]
) -> float:
    """Seconds from the enqueue of every job to the last run record."""
    batch = [job_to_fields(j) for j in jobs]
    t0 = time.monotonic()
    async with redis.pipeline(transaction=False) as pipe:
        for fields in batch:
            pipe.xadd(keys.jobs, fields)  # type: ignore[arg-type]
        await pipe.execute()
    done = await recorded(settings, [j.id for j in jobs], worker)
    return done - t0


# --- the bare floor --------------------------------------------------------------------------------

@dataclass
class Bare:
    """create → wait → start of the worker's container config, then remove it, as a script would.

    With ``clone_url`` (``--kind github``) each run first does what a hand-written job would:
    ``git clone --depth 1`` of the repository into a fresh folder, which becomes the workspace.
    """

    docker: aiodocker.Docker
    job_dir: str
    settings: Settings
    host: str
    clone_url: str | None = None
    count: int = field(default=0)
    # With egress on, an internal network like the worker's jobs get: Docker takes ~80 ms longer to start
    # a container on a user-defined network than on its bridge, and both sides pay it.
    network: str = "bridge"

    def config(self, job_id: str, name: str, workspace: str) -> dict[str, Any]:
        mem = self.settings.job_memory_bytes
        spec = ContainerSpec(
            image=self.settings.job_image, name=name,
            env={"PI_JOB_ID": name, "PI_FLOW": "triage", "PI_OFFLINE": "1", "HOME": CONTAINER_HOME},
            mounts=(Mount(self.job_dir, JOB_MOUNT, True), Mount(workspace, WORKSPACE_MOUNT, False)),
            memory_bytes=mem, nano_cpus=self.settings.job_nano_cpus, shm_size=min(SHM_CAP_BYTES, mem // 2),
            user=self.settings.job_user, labels={LABEL_JOB: job_id, LABEL_HOST: self.host},
            network=self.network,
        )
        return to_docker_config(spec)

    async def run(self) -> tuple[str, int]:
        """One container to its end: (its label, the create-call moment in epoch ns)."""
        self.count += 1
        job_id = f"bare-{self.host}-{self.count}"
        name = f"pi-{job_id}"
        workspace = os.path.join(self.job_dir, "workspace")
        t0 = time.time_ns()
        if self.clone_url is not None:
            workspace = os.path.join(self.job_dir, f"clone-{self.count}")
            git = await asyncio.create_subprocess_exec(
                "git", "clone", "-q", "--depth", "1", self.clone_url, workspace,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )
            if await git.wait() != 0:
                raise Broken("the bare git clone failed")
        container = await self.docker.containers.create(self.config(job_id, name, workspace), name=name)
        waiter = await dockerapi.wait_exit(self.docker, container.id)
        try:
            await container.start()
            data = await waiter.json(content_type=None)
        finally:
            waiter.release()
            with contextlib.suppress(aiodocker.DockerError):  # already gone where AutoRemove is set
                await container.delete(force=True)
        if data.get("StatusCode") != 0:
            raise Broken(f"a bare container exited {data.get('StatusCode')}")
        return job_id, t0

    async def latency(self, events: ContainerEvents) -> Sample:
        job_id, t0 = await self.run()
        return sample(t0, await events.moments(job_id))

    async def throughput(self, n: int) -> float:
        """Seconds to run ``n`` containers, ``CONCURRENCY`` at a time."""
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one() -> None:
            async with gate:
                await self.run()

        t0 = time.monotonic()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.monotonic() - t0


# --- the run ---------------------------------------------------------------------------------------

@dataclass
class Measured:
    samples: dict[str, list[Sample]] = field(default_factory=lambda: {"worker": [], "bare": []})
    jobs_per_s: dict[str, float] = field(default_factory=dict)
    foreign: list[float] = field(default_factory=list)
    # --image: per real-agent job, ms from XADD to its container's start event and to the first model request.
    agent: list[tuple[float, float]] = field(default_factory=list)
    image_bytes: int = 0


async def measure_agent(args: argparse.Namespace, m: Measured, base_env: dict[str, str], redis: Redis,
                        run: str, root: Path, events: ContainerEvents) -> None:
    """(c): a second worker runs ``args.image`` (the real agent) against the stand-in model."""
    docker = aiodocker.Docker()
    standin: ModelStandIn | None = None
    try:
        try:
            m.image_bytes = int((await docker.images.inspect(args.image))["Size"])
        except aiodocker.DockerError as exc:
            why = f"no image {args.image} on this daemon (build it: pi-dispatch job-image build)"
            raise Broken(why) from exc
        gateway = await bridge_gateway(docker)
        if gateway is None:
            raise Broken("Docker's bridge network names no gateway for the stand-in model")
        standin = ModelStandIn(STANDIN_KEY, host=gateway)
        await standin.start()
        agent_env = {**WORKER_ENV, "PI_PROVIDER": STANDIN_PROVIDER, "PI_MODEL": STANDIN_MODEL,
                     STANDIN_KEY_VAR: STANDIN_KEY, "PI_MODEL_BASE_URL": standin.base_url}
        settings = load_settings({**base_env, **agent_env, "PI_JOB_IMAGE": args.image, "PI_JOB_MEMORY": "1g",
                                  "PD_KEY_PREFIX": f"{base_env['PD_KEY_PREFIX']}a",
                                  "PI_WORKER_NAME": f"bench-agent-{run}"})
        keys = Keys(settings.key_prefix)
        async with running_worker(settings, redis, keys, agent_env) as worker:
            # Warm-up, as for the test agent: the daemon's first look at the image is not a start.
            await agent_latency(redis, keys, settings, events, worker, standin,
                                await asyncio.to_thread(bench_job, run, 9000, args.kind, root))
            for i in range(args.samples):
                m.agent.append(await agent_latency(
                    redis, keys, settings, events, worker, standin,
                    await asyncio.to_thread(bench_job, run, 9001 + i, args.kind, root),
                ))
                print(f"  real agent sample {i + 1}/{args.samples}: first model request after "
                      f"{m.agent[-1][1]:.0f} ms", flush=True)
    finally:
        if standin is not None:
            await standin.close()
        await docker.close()


async def measure(args: argparse.Namespace, settings: Settings, redis: Redis, keys: Keys,
                  run: str, bare_clone_url: str | None, base_env: dict[str, str]) -> Measured:
    m = Measured()
    m.foreign.append(await foreign_cores())
    await asyncio.to_thread(ensure_jobs_dir, settings.jobs_dir)
    root = Path(settings.jobs_dir).parent
    warm = bench_job(run, 0, args.kind, root)
    bare_docker = aiodocker.Docker()
    try:
        # The bare runs share one job folder prepared like the worker's (with a workspace/ inside).
        shaped = bench_job(run, 0, "github", root)
        bare = Bare(bare_docker, await prepare_workspace(shaped, settings), settings, f"bench-bare-{run}",
                    clone_url=bare_clone_url)
        if settings.egress.enabled:
            bare.network = f"bench-bare-net-{run}"
            await bare_docker.networks.create({
                "Name": bare.network, "Internal": True,
                "Options": {"com.docker.network.bridge.inhibit_ipv4": "true"}})
        async with ContainerEvents() as events, running_worker(settings, redis, keys) as worker:
            # Warm-up: the first create after an image import pays for the daemon's first look at it.
            await worker_latency(redis, keys, settings, events, worker, warm)
            await bare.latency(events)
            for i in range(args.samples):
                m.samples["worker"].append(
                    await worker_latency(
                        redis, keys, settings, events, worker,
                        await asyncio.to_thread(bench_job, run, 1 + i, args.kind, root),
                    )
                )
                m.samples["bare"].append(await bare.latency(events))
            print(f"  start latency: {args.samples} samples per side, interleaved", flush=True)
            seconds = {"worker": 0.0, "bare": 0.0}
            for r in range(args.rounds):
                # Alternate who goes first so drift (daemon state, other load) favours neither side.
                for side in ("worker", "bare") if r % 2 == 0 else ("bare", "worker"):
                    if side == "worker":
                        jobs = [bench_job(run, 1000 * (r + 1) + i, args.kind, root) for i in range(args.jobs)]
                        took = await worker_throughput(redis, keys, settings, worker, jobs)
                    else:
                        took = await bare.throughput(args.jobs)
                    seconds[side] += took
                    print(f"  throughput round {r + 1} {side:<6} {args.jobs / took:6.2f} jobs/s", flush=True)
            m.jobs_per_s = {side: args.jobs * args.rounds / s for side, s in seconds.items()}
        if args.image is not None:
            async with ContainerEvents() as events:
                await measure_agent(args, m, base_env, redis, run, root, events)
    finally:
        if settings.egress.enabled:
            with contextlib.suppress(aiodocker.DockerError):
                await (await bare_docker.networks.get(f"bench-bare-net-{run}")).delete()
        await bare_docker.close()
    m.foreign.append(await foreign_cores())
    return m


async def cleanup(tag: str, hosts: list[str]) -> None:
    """No container, network or image of this run outlives it."""
    docker = aiodocker.Docker()
    try:
        for host in hosts:
            mine = json.dumps({"label": [f"{LABEL_HOST}={host}"]})
            found = await docker.containers.list(all=True, filters=mine)
            for c in found:
                with contextlib.suppress(aiodocker.DockerError):
                    await c.delete(force=True)
            # The worker's job networks (egress on), its proxy gone with the containers above.
            for net in await docker.networks.list(filters={"label": [f"{LABEL_HOST}={host}"]}):
                with contextlib.suppress(aiodocker.DockerError):
                    await (await docker.networks.get(net["Id"])).delete()
        with contextlib.suppress(aiodocker.DockerError):
            await docker.images.delete(tag, force=True)
    finally:
        await docker.close()


async def bench(args: argparse.Namespace, tmp: Path) -> Measured:
    run = uuid.uuid4().hex[:8]
    tag = f"pd-bench-agent-{run}:latest"
    forge: DemoForge | None = None
    port = free_port()
    redis_proc = await asyncio.create_subprocess_exec(
        *redis_server_argv(find_redis_server(), port, tmp, persist=False),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    redis = create_redis(f"redis://127.0.0.1:{port}/0")
    host = f"bench-worker-{run}"
    base_env = {
        "REDIS_URL": f"redis://127.0.0.1:{port}/0", "PD_KEY_PREFIX": f"bench{run}", "PI_WORKER_NAME": host,
        "PI_JOB_IMAGE": tag, "PI_CONCURRENCY": str(CONCURRENCY), "PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "1",
        "PI_LOGS_DIR": str(tmp / "logs"), "PI_JOBS_DIR": str(tmp / "jobs"),
        # A benchmark spends no money: the default daily cap of 25 would refuse the later jobs.
        "PI_DAILY_CAP": "1000000",
        # The egress filter as deployed (on); PI_EGRESS=0 in this process's environment measures without
        # it. The bare side never has it: the difference is what the filter costs a job.
        "PI_EGRESS": os.environ.get("PI_EGRESS", "1"),
    }
    settings = load_settings(base_env)
    try:
        deadline = time.monotonic() + 10
        while not await _pings(redis):
            if time.monotonic() > deadline or redis_proc.returncode is not None:
                raise Broken("redis-server did not come up")
            await asyncio.sleep(0.05)
        await build_image(tag, TEST_AGENT_SCRIPT)
        bare_clone_url = None
        if args.kind == "github":
            forge, forge_env = await start_demo_forge(tmp)
            WORKER_ENV.update(forge_env)
            # The hand-written baseline: the token in the URL, as a quick script would have it.
            base = yarl.URL(forge_env["GITHUB_API_URL"])
            bare_clone_url = str(base.with_user("x-access-token").with_password(forge_env["GITHUB_PAT"])
                                 .with_path(f"/git/{DEMO_REPO}.git"))
        return await measure(args, settings, redis, Keys(settings.key_prefix), run, bare_clone_url, base_env)
    finally:
        if forge is not None:
            await forge.close()
        await redis.aclose()
        await cleanup(tag, [host, f"bench-bare-{run}", f"bench-agent-{run}"])
        if redis_proc.returncode is None:
            redis_proc.terminate()
            await redis_proc.wait()


async def _pings(redis: Redis) -> bool:
    try:
        return bool(await redis.ping())
    except Exception:
        return False


def report(args: argparse.Namespace, m: Measured) -> bool:
    create = {side: [c for c, _ in rows] for side, rows in m.samples.items()}
    start = {side: [s for _, s in rows] for side, rows in m.samples.items()}
    print(f"\nstart latency (ms)   {'p50':>8}{'p95':>8}  {'to create':>9}")
    cloned = args.kind == "github"
    bare_first = "git clone --depth 1 + create call" if cloned else "create call"
    for side, first in (("worker", "XADD"), ("bare", bare_first)):
        print(f"  {side + (' aiodocker' if side == 'bare' else ''):<19}{percentile(start[side], 50):8.1f}"
              f"{percentile(start[side], 95):8.1f}  {percentile(create[side], 50):9.1f}"
              f"   {first} -> container start event (p50 to its create event)")
    overhead = percentile(start["worker"], 50) - percentile(start["bare"], 50)
    overhead_ok = overhead <= TARGET_OVERHEAD_MS
    print(f"  overhead p50       {overhead:8.1f} ms  (target <= {TARGET_OVERHEAD_MS:g} ms: "
          f"{'met' if overhead_ok else 'MISSED'})")
    rate = m.jobs_per_s
    ratio = rate["worker"] / rate["bare"]
    ratio_ok = ratio >= TARGET_RATIO
    print(f"\nthroughput, {args.rounds} x {args.jobs} trivial jobs at concurrency {CONCURRENCY}")
    print(f"  worker             {rate['worker']:8.2f} jobs/s   enqueue all -> every run record written")
    print(f"  bare aiodocker     {rate['bare']:8.2f} jobs/s   create+wait+start, {CONCURRENCY} at a time")
    print(f"  ratio worker/bare  {ratio:8.2f}          (target >= {TARGET_RATIO}: "
          f"{'met' if ratio_ok else 'MISSED'})")
    if args.image is not None:
        report_agent(args, m, start["worker"])
    if (busy := max(m.foreign)) > FOREIGN_CORES_WARN:
        print(f"WARNING: other processes kept {busy:.2f} cores busy while this benchmark was idle; "
              "the machine was not quiet, so the figures are unreliable")
    return overhead_ok and ratio_ok


def report_agent(args: argparse.Namespace, m: Measured, busybox: list[float]) -> None:
    started = [s for s, _ in m.agent]
    first = [f for _, f in m.agent]
    rows = (
        (args.image, first, "XADD -> the agent's first model request (stand-in)"),
        ("  of which to container start", started, "XADD -> its container start event"),
        ("busybox test agent, (a) above", busybox, "XADD -> container start event"),
    )
    print(f"\nreal agent, {len(m.agent)} job(s) one at a time (ms)  {'p50':>8}{'p95':>8}")
    for name, values, what in rows:
        print(f"  {name:<36}{percentile(values, 50):8.1f}{percentile(values, 95):8.1f}   {what}")
    ratio = percentile(first, 50) / percentile(busybox, 50)
    print(f"  {'ratio real/busybox (p50)':<36}{ratio:8.1f}")
    print(f"Note: {args.image} is {m.image_bytes / 1e6:.0f} MB ({m.image_bytes} bytes, docker image "
          "inspect Size); each real-agent job starts a container of it and the agent's node process "
          "before the first request.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=None,
                        help=f"start-latency samples per side (default {SAMPLES_DEFAULT}; "
                             f"{AGENT_SAMPLES_DEFAULT} with --image)")
    parser.add_argument("--jobs", type=int, default=30, help="jobs per side and round for throughput")
    parser.add_argument("--rounds", type=int, default=2, help="throughput rounds per side")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--kind", choices=("local", "github"), default="local",
                        help="local jobs (the dispatch path, default) or GitHub jobs on dev's stand-in "
                             "GitHub (adds mint, tip, protection and the clone)")
    parser.add_argument("--image", default=None,
                        help="also measure XADD -> first model request of the real agent in this image "
                             "(e.g. pi-job:latest) against the stand-in model; several seconds per sample "
                             "(more on a vfs storage driver)")
    args = parser.parse_args()
    if args.samples is None:
        args.samples = AGENT_SAMPLES_DEFAULT if args.image is not None else SAMPLES_DEFAULT
    if args.samples < 1 or args.jobs < CONCURRENCY or args.rounds < 1:
        parser.error(f"--samples and --rounds must be >= 1, --jobs >= {CONCURRENCY}")
    # The in-process worker logs only what went wrong; its info lines would bury the figures.
    configure_logging("worker", "warning")
    print(f"dispatch: {args.samples} start-latency samples per side; {args.rounds} x {args.jobs} jobs per "
          f"side at concurrency {CONCURRENCY}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="pd-bench-dispatch-"))
    try:
        measured = asyncio.run(bench(args, tmp))
    except Broken as exc:
        print(f"BROKEN: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    met = report(args, measured)
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
