"""Chaos trials of the whole stack, shared by ``benchmarks/chaos.py`` and ``tests/integration/test_chaos.py``.

One trial: a receiver, a router and a worker run as separate OS processes (``python -m pidispatch.<name>``,
configured only by environment variables) on a real redis-server with append-only persistence and a real
Docker daemon, against a stand-in GitHub (``tests.support.forges`` for the API, ``tests.support.gitserver``
for the clone). A batch of signed ``issues.labeled`` deliveries (the real octokit example, one distinct
delivery id and issue number each, so no dedup layer may merge two of them) is posted while, at a random
moment, one target is killed with SIGKILL and started again: the receiver, the router, the worker (with
everything it spawned) or redis-server itself (restarted on the same port from its append-only file). The
harness plays the forge: a delivery answered 5xx or not at all is redelivered, same id, same bytes, until it
is answered 2xx or the trial's deadline passes. Then it waits, with a deadline, until the system is
quiescent, stops the services and counts.

What is counted, per delivery and per job (job ``gh-<delivery>``):

- answered 2xx (``accepted``, ``duplicate``, ``spooled``), first answers that were not, never accepted;
- stored: entries in ``<prefix>:events`` per delivery id (exactly one expected);
- enqueued: distinct job ids in the job streams;
- containers created and started, from the Docker daemon's own event stream (label ``pd.job``);
- run records: the final ``$PI_LOGS_DIR/<job>.json``, every distinct ``completed`` version of it seen
  while the trial ran, and the worker's ``job_finished`` log lines over all its lives;
- lost: answered 2xx but no ``completed`` record; doubled: more than one container start, more than
  one ``job_finished`` or more than one distinct ``completed`` record; paid twice: more than one
  container start.

Each trial has its own key prefix, worker name (the ``pd.host`` label), folders and receiver port, and
starts its services fresh, so one trial's damage cannot be counted in another; one redis-server, one
stand-in GitHub and one Docker event stream serve the whole run. Every process and container the run
started is gone when ``Chaos`` exits, whatever ended it (Ctrl-C included).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiodocker
import aiohttp
from redis.exceptions import RedisError

from pidispatch.common.embedded import free_port
from pidispatch.common.keys import ROUTER_GROUP, WORKER_GROUP, Keys
from pidispatch.common.models import decode_fields, text
from pidispatch.common.redis import Redis, create_redis
from pidispatch.worker.engine import dockerapi
from tests.support.forges import FakeForge, github_forge, set_repo
from tests.support.gitserver import git_server
from tests.support.payloads import load_fixture
from tests.support.polling import poll_until
from tests.support.processes import RedisProcess
from tests.support.receiver import github_signature

SERVICES = ("receiver", "router", "worker")
TARGETS = (*SERVICES, "redis")
SECRET = "chaos-webhook-secret"
REPO = "Codertocat/Hello-World"  # the repository of the octokit issues.labeled example
RULES = {"triggers": [{"on": {"type": "label", "any": ["bug"]}, "run": {"kind": "github", "flow": "fix"}}]}
POST_TIMEOUT = aiohttp.ClientTimeout(total=10, connect=2)
POLL_S = 0.1


@dataclass(frozen=True)
class ChaosConfig:
    """The shape of every trial. The defaults keep one trial to a few seconds."""

    batch: int = 6  # deliveries per trial
    post_window_s: float = 2.5  # deliveries are posted at random moments in this window
    kill_window_s: float = 3.0  # the kill lands at a random moment this long after the first post
    max_down_s: float = 1.0  # a killed target stays down a random time up to this
    max_job_sleep_s: int = 2  # each job's container sleeps a random whole number of seconds up to this
    concurrency: int = 3
    settle_timeout_s: float = 60.0  # from the restart to quiescence
    redeliver_s: float = 30.0  # how long after the restart a refused delivery is still redelivered
    start_timeout_s: float = 20.0
    keep_logs: bool = False  # keep every trial's folder, not only those of trials that went wrong


# --- processes -----------------------------------------------------------------------------------------


class Service:
    """One service process, in its own session (so a kill takes its children too); one log per life."""

    def __init__(self, name: str, env: dict[str, str], log_dir: Path) -> None:
        self.name, self.env, self.log_dir = name, env, log_dir
        self.lives = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def log_path(self, life: int) -> Path:
        return self.log_dir / f"{self.name}-{life}.log"

    def start(self) -> None:
        self.lives += 1
        env = {name: os.environ[name] for name in ("PATH", "HOME", "PYTHONPATH") if name in os.environ}
        env.update(self.env)
        env["PYTHONUNBUFFERED"] = "1"
        with self.log_path(self.lives).open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", f"pidispatch.{self.name}"], env=env, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the whole process group: the crash every guarantee must survive."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    async def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; the exit code (None when it never ran)."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(proc.wait, timeout)
        code = proc.poll()
        self.kill()  # anything left in its group
        return code

    def events(self, name: str) -> list[dict[str, Any]]:
        """Log lines named ``name`` over every life of this service."""
        found = []
        for life in range(1, self.lives + 1):
            path = self.log_path(life)
            if not path.exists():
                continue
            for line in path.read_text(errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    parsed = json.loads(line)
                    if isinstance(parsed, dict) and parsed.get("event") == name:
                        found.append(parsed)
        return found

    def last_line(self) -> str:
        path = self.log_path(self.lives)
        lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
        return lines[-1][:300] if lines else "(no output)"

    def started(self) -> bool:
        """The current life logged ``<name>_started``."""
        path = self.log_path(self.lives)
        return path.exists() and f'"{self.name}_started"' in path.read_text(errors="replace")


# --- the Docker daemon's view ----------------------------------------------------------------------------


class ContainerLedger:
    """Every ``create``/``start``/``die`` of a container labelled ``pd.job``, counted per (host, job).

    Counted from the daemon's own event stream, not from the worker, so a second container is seen even
    when the worker that started it died before it could say so. ``since`` replays anything that fired
    before the stream was connected.
    """

    def __init__(self) -> None:
        self.docker = aiodocker.Docker()
        self.counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ContainerLedger:
        self._task = asyncio.create_task(self._read(int(time.time()) - 1))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self.docker.close()

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _read(self, since_s: int) -> None:
        filters = {"type": ["container"], "event": ["create", "start", "die"], "label": ["pd.job"]}
        params = {"filters": json.dumps(filters), "since": str(since_s)}
        async with dockerapi.events(self.docker, params) as resp:
            async for line in resp.content:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    event = json.loads(line)
                    attrs = event["Actor"]["Attributes"]
                    self.counts[(attrs.get("pd.host", ""), attrs["pd.job"])][event["Action"]] += 1

    def for_host(self, host: str) -> dict[str, Counter[str]]:
        return {job: c for (h, job), c in self.counts.items() if h == host}

    async def running(self, host: str) -> int:
        found = await self.docker.containers.list(  # job containers: not the host's egress proxy
            filters=json.dumps({"label": [f"pd.host={host}", "pd.job"], "status": ["running"]})
        )
        return len(found)

    async def sweep(self, hosts: Iterable[str]) -> int:
        """Remove every container of these hosts, then their job networks; how many containers there were."""
        removed = 0
        for host in hosts:
            mine = json.dumps({"label": [f"pd.host={host}"]})
            for c in await self.docker.containers.list(all=True, filters=mine):
                with contextlib.suppress(aiodocker.DockerError):
                    await c.delete(force=True)
                    removed += 1
            for net in await self.docker.networks.list(filters={"label": [f"pd.host={host}"]}):
                with contextlib.suppress(aiodocker.DockerError):
                    await (await self.docker.networks.get(net["Id"])).delete()
        return removed


# --- what one trial saw ----------------------------------------------------------------------------------


@dataclass
class Delivery:
    id: str
    number: int
    body: bytes
    answers: list[str] = field(default_factory=list)  # "202 accepted", "503", "no-answer", ...

    @property
    def job(self) -> str:
        return f"gh-{self.id}"

    @property
    def accepted(self) -> bool:
        return bool(self.answers) and self.answers[-1].startswith("2")


@dataclass
class TrialResult:
    index: int
    target: str
    prefix: str
    kill_at_s: float = 0.0  # after the first post
    down_s: float = 0.0
    seconds: float = 0.0
    posted: int = 0
    answered_2xx: int = 0
    first_refused: int = 0  # first answer not 2xx (5xx or none): redelivered like a forge would
    answers: Counter[str] = field(default_factory=Counter)  # every answer, redeliveries included
    unaccepted: int = 0  # never answered 2xx before the deadline
    stored: int = 0  # deliveries with exactly one entry in <prefix>:events
    stored_twice: int = 0
    enqueued: int = 0  # distinct job ids in the job streams
    started: int = 0  # container start events
    completed: int = 0
    reattached: int = 0  # jobs a restarted worker re-attached to (its container outlived the kill)
    lost: list[str] = field(default_factory=list)  # "job: why"
    doubled: list[str] = field(default_factory=list)
    paid_twice: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)  # seconds: start, chaos, settle, stop, count

    @property
    def ok(self) -> bool:
        return not (self.lost or self.doubled or self.paid_twice or self.stored_twice)


@dataclass
class Totals:
    trials: int = 0
    posted: int = 0
    answered_2xx: int = 0
    first_refused: int = 0
    unaccepted: int = 0
    stored: int = 0
    stored_twice: int = 0
    enqueued: int = 0
    started: int = 0
    completed: int = 0
    lost: int = 0
    doubled: int = 0
    paid_twice: int = 0
    seconds: float = 0.0
    failed_trials: Counter[str] = field(default_factory=Counter)  # per kill target
    trials_by_target: Counter[str] = field(default_factory=Counter)
    phases: Counter[str] = field(default_factory=Counter)  # seconds per phase, summed over trials
    answers: Counter[str] = field(default_factory=Counter)  # every answer the forge got, per kind

    @property
    def ok(self) -> bool:
        return self.lost == self.doubled == self.paid_twice == self.stored_twice == 0


def summarize(results: Sequence[TrialResult]) -> Totals:
    t = Totals(trials=len(results))
    for r in results:
        t.posted += r.posted
        t.answered_2xx += r.answered_2xx
        t.first_refused += r.first_refused
        t.unaccepted += r.unaccepted
        t.stored += r.stored
        t.stored_twice += r.stored_twice
        t.enqueued += r.enqueued
        t.started += r.started
        t.completed += r.completed
        t.lost += len(r.lost)
        t.doubled += len(r.doubled)
        t.paid_twice += len(r.paid_twice)
        t.seconds += r.seconds
        t.trials_by_target[r.target] += 1
        t.phases.update(r.phases)
        t.answers.update(r.answers)
        if not r.ok:
            t.failed_trials[r.target] += 1
    return t


HEADER = (f"{'trial':>5} {'kill':<8} {'at s':>5} {'down':>5} {'posted':>6} {'2xx':>4} {'refused':>7} "
          f"{'stored':>6} {'jobs':>4} {'starts':>6} {'reatt':>5} {'done':>4} {'lost':>4} {'doubled':>7} "
          f"{'paid2x':>6} {'secs':>5}")


def format_row(r: TrialResult) -> str:
    return (f"{r.index:>5} {r.target:<8} {r.kill_at_s:5.2f} {r.down_s:5.2f} {r.posted:>6} "
            f"{r.answered_2xx:>4} {r.first_refused:>7} {r.stored:>6} {r.enqueued:>4} {r.started:>6} "
            f"{r.reattached:>5} {r.completed:>4} {len(r.lost):>4} {len(r.doubled):>7} "
            f"{len(r.paid_twice):>6} {r.seconds:5.1f}")


def format_details(r: TrialResult) -> list[str]:
    """What went wrong in a trial, one line each (empty when nothing did)."""
    lines = [f"  trial {r.index} ({r.target}): lost {item}" for item in r.lost]
    lines += [f"  trial {r.index} ({r.target}): doubled {item}" for item in r.doubled]
    lines += [f"  trial {r.index} ({r.target}): paid twice {item}" for item in r.paid_twice]
    if r.stored_twice:
        lines.append(f"  trial {r.index} ({r.target}): {r.stored_twice} delivery(ies) stored more than once")
    if r.unaccepted:
        lines.append(f"  trial {r.index} ({r.target}): {r.unaccepted} delivery(ies) never answered 2xx")
    lines += [f"  trial {r.index} ({r.target}): {note}" for note in r.notes]
    if set(r.answers) - {"202 accepted"}:
        lines.append(f"  trial {r.index} ({r.target}): answers " + ", ".join(
            f"{a} {n}" for a, n in sorted(r.answers.items())))
    return lines


def format_totals(t: Totals) -> list[str]:
    per_trial = t.seconds / t.trials if t.trials else 0.0
    failed = ", ".join(f"{k} {t.failed_trials[k]}/{n}" for k, n in sorted(t.trials_by_target.items()))
    return [
        f"trials {t.trials} ({per_trial:.1f} s each, {t.seconds:.0f} s in all); failed trials per kill "
        f"target: {failed}",
        f"deliveries posted {t.posted}, answered 2xx {t.answered_2xx}, first answer refused "
        f"{t.first_refused}, never accepted {t.unaccepted}",
        "answers (redeliveries included): " + ", ".join(f"{a} {n}" for a, n in sorted(t.answers.items())),
        f"stored once {t.stored}, stored twice {t.stored_twice}; jobs enqueued {t.enqueued}; containers "
        f"started {t.started}; records completed {t.completed}",
        f"lost {t.lost}  doubled {t.doubled}  paid twice {t.paid_twice}",
        "mean seconds per phase: " + ", ".join(
            f"{name} {seconds / max(t.trials, 1):.1f}" for name, seconds in t.phases.items()),
    ]


# --- the stand-in GitHub -----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def stand_in_github(root: Path) -> AsyncIterator[dict[str, str]]:
    """The stand-in GitHub API and its git server, with ``REPO`` on a protected ``main``; yields the
    variables that point a router and a worker at it."""
    forge: FakeForge = github_forge()
    await forge.start()
    try:
        token = str(forge.state["pat"])
        async with git_server(root, username="x-access-token", token=token) as git:
            sha = await git.add_commit({"README.md": "Hello World\n"}, message="initial")
            set_repo(forge, REPO, sha=sha, clone_url=git.url, protected=True)
            yield {"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": token, "GITHUB_API_URL": forge.url}
    finally:
        await forge.close()


# --- the run ---------------------------------------------------------------------------------------------


def plan_targets(trials: int, seed: int, targets: Sequence[str] = TARGETS) -> list[str]:
    """Kill targets for ``trials`` trials: each target once in a shuffled round, round after round, so
    every target gets its share even in a short run."""
    rng = random.Random(f"plan-{seed}")
    plan: list[str] = []
    while len(plan) < trials:
        round_ = list(targets)
        rng.shuffle(round_)
        plan.extend(round_)
    return plan[:trials]


class Chaos:
    """One run: a redis-server with an append-only file, a stand-in GitHub and a Docker event stream,
    shared by every trial. Use as ``async with Chaos(...) as chaos: await chaos.trial(...)``."""

    def __init__(self, root: Path, image: str, seed: int, config: ChaosConfig | None = None) -> None:
        self.root = root
        self.image = image
        self.rng = random.Random(seed)
        self.config = config or ChaosConfig()
        self.run = uuid.uuid4().hex[:6]
        self.redis_server = RedisProcess(root / "redis", persist=True)
        self.hosts: list[str] = []
        self.services: list[Service] = []  # the current trial's, for the cleanup
        self._stack = contextlib.AsyncExitStack()
        self._forge_env: dict[str, str] = {}
        self._ledger: ContainerLedger | None = None
        self._redis: Redis | None = None
        self._http: aiohttp.ClientSession | None = None
        self._issue = 0

    async def __aenter__(self) -> Chaos:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / "triggers.json").write_text(json.dumps(RULES))
            await asyncio.to_thread(self.redis_server.start)
            self._stack.callback(self.redis_server.stop, signal.SIGKILL)
            self._forge_env = await self._stack.enter_async_context(stand_in_github(self.root / "git"))
            self._ledger = await self._stack.enter_async_context(ContainerLedger())
            self._redis = create_redis(self.redis_server.url)
            self._stack.push_async_callback(self._redis.aclose)
            self._http = await self._stack.enter_async_context(aiohttp.ClientSession(timeout=POST_TIMEOUT))
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        # Processes first (synchronously, so a second Ctrl-C cannot stop half-way), then containers.
        for s in self.services:
            s.kill()
        try:
            if self._ledger is not None:
                await asyncio.shield(self._ledger.sweep(self.hosts))
        finally:
            await self._stack.aclose()

    @property
    def redis(self) -> Redis:
        assert self._redis is not None
        return self._redis

    @property
    def ledger(self) -> ContainerLedger:
        assert self._ledger is not None
        return self._ledger

    @property
    def http(self) -> aiohttp.ClientSession:
        assert self._http is not None
        return self._http

    # --- one trial ------------------------------------------------------------------------------------

    async def trial(self, index: int, target: str) -> TrialResult:
        if target not in TARGETS:
            raise ValueError(f"unknown kill target {target!r}; accepted: {', '.join(TARGETS)}")
        cfg = self.config
        began = time.monotonic()
        prefix = f"chaos{self.run}t{index}"
        host = f"chaos-{self.run}-{index}"
        self.hosts.append(host)
        folder = self.root / f"trial-{index}"
        folder.mkdir()
        port = free_port()
        env = {
            **self._forge_env,
            "REDIS_URL": self.redis_server.url, "PD_KEY_PREFIX": prefix, "WEBHOOK_SECRET": SECRET,
            "PI_TRIGGERS_FILE": str(self.root / "triggers.json"), "PI_WORKER_NAME": host,
            "PD_ROUTER_NAME": f"router-{host}", "RECEIVER_PORT": str(port), "RECEIVER_BIND": "127.0.0.1",
            "PI_JOB_IMAGE": self.image, "PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "1",
            "PI_CONCURRENCY": str(cfg.concurrency), "PI_LOGS_DIR": str(folder / "logs"),
            "PI_JOBS_DIR": str(folder / "jobs"), "PD_SPOOL_DIR": str(folder / "spool"),
            "PI_SHUTDOWN_GRACE": "0", "PI_DAILY_CAP": "1000000",
            # Short clocks, so a crash is noticed within the trial: liveness, claims, retries.
            "PD_HOST_BEAT_MS": "200", "PD_HOST_TTL_MS": "1500", "PD_CLAIM_IDLE_MS": "1000",
            "PI_RETRY_BASE_MS": "200",
        }
        keys = Keys(prefix)
        result = TrialResult(index=index, target=target, prefix=prefix)
        mark = _Stopwatch(result.phases)
        self.services = [Service(name, env, folder) for name in SERVICES]
        by_name = {s.name: s for s in self.services}
        for s in self.services:
            s.start()
        await self._started(self.services, result)
        mark("start")
        records = RecordWatcher(Path(env["PI_LOGS_DIR"]))
        watching = asyncio.create_task(records.watch())
        try:
            deliveries = [self._delivery() for _ in range(cfg.batch)]
            url = f"http://127.0.0.1:{port}/github"
            result.kill_at_s = round(self.rng.uniform(0, cfg.kill_window_s), 2)
            result.down_s = round(self.rng.uniform(0, cfg.max_down_s), 2)
            offsets = [self.rng.uniform(0, cfg.post_window_s) for _ in deliveries]
            t0 = time.monotonic()
            redeliver_until = t0 + cfg.kill_window_s + cfg.max_down_s + cfg.redeliver_s
            posts = [
                asyncio.create_task(self._post(url, d, t0 + off, redeliver_until))
                for d, off in zip(deliveries, offsets, strict=True)
            ]
            await asyncio.sleep(max(0.0, t0 + result.kill_at_s - time.monotonic()))
            await self._crash(target, by_name.get(target), result.down_s)
            if target in by_name:
                await self._started([by_name[target]], result)
            await asyncio.gather(*posts)
            mark("chaos")
            if not await self._quiesce(keys, host, deliveries, records, cfg.settle_timeout_s):
                result.notes.append(f"not quiescent within {cfg.settle_timeout_s:.0f} s")
            mark("settle")
        finally:
            stopped = await asyncio.gather(*(s.stop() for s in self.services))
            codes = {s.name: code for s, code in zip(self.services, stopped, strict=True)}
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
        mark("stop")
        records.scan()
        odd = {n: c for n, c in codes.items() if c != 0}
        if odd:
            result.notes.append(f"exit codes after SIGTERM: {odd}")
        await self._count(result, keys, host, deliveries, records, by_name["worker"])
        await self.ledger.sweep([host])
        await self._forget(prefix)
        mark("count")
        result.seconds = time.monotonic() - began
        if result.ok and not result.notes and not cfg.keep_logs:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            result.notes.append(f"logs kept in {folder}")
        return result

    async def _started(self, services: list[Service], result: TrialResult) -> None:
        """Wait until each logged ``<name>_started``; note any that died or stayed silent instead."""
        await poll_until(
            lambda: all(s.started() or not s.running for s in services), self.config.start_timeout_s, POLL_S
        )
        for s in services:
            if not s.started():
                state = "is silent" if s.running else f"exited {s.proc.returncode if s.proc else None}"
                result.notes.append(f"{s.name} life {s.lives} did not start ({state}): {s.last_line()}")

    def _delivery(self) -> Delivery:
        self._issue += 1
        payload = load_fixture("github/issues.labeled.json")
        payload["issue"]["number"] = self._issue
        sleep = self.rng.randint(0, self.config.max_job_sleep_s)
        payload["issue"]["body"] = f"Chaos trial issue.\n\npd-test exit=0 sleep={sleep}"
        return Delivery(id=str(uuid.uuid4()), number=self._issue, body=json.dumps(payload).encode())

    async def _post(self, url: str, d: Delivery, at: float, until: float) -> None:
        """Post once, and redeliver (same id, same bytes) while the answer is 5xx or none, as a forge
        would: a refused delivery is the forge's to send again, an accepted one is ours to keep."""
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        headers = {
            "Content-Type": "application/json", "X-GitHub-Event": "issues", "X-GitHub-Delivery": d.id,
            "X-Hub-Signature-256": github_signature(SECRET, d.body),
        }
        pause = 0.1
        while True:
            try:
                async with self.http.post(url, data=d.body, headers=headers) as r:
                    answer = str(r.status)
                    if r.status < 300:
                        with contextlib.suppress(ValueError, aiohttp.ContentTypeError):
                            answer += " " + str((await r.json()).get("status"))
            except (aiohttp.ClientError, TimeoutError):
                answer = "no-answer"
            d.answers.append(answer)
            if answer[0] in "24" or time.monotonic() > until:
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def _crash(self, target: str, service: Service | None, down_s: float) -> None:
        if service is not None:
            service.kill()
            await asyncio.sleep(down_s)
            service.start()
            return
        self.redis_server.stop(signal.SIGKILL)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(self.redis_server.start)

    async def _idle(self, keys: Keys, host: str) -> bool:
        """Nothing unread or pending in any stream, nothing delayed, no container running."""
        r = self.redis
        try:
            for stream, group in ((keys.events, ROUTER_GROUP), (keys.jobs, WORKER_GROUP),
                                  (keys.host_jobs(host), WORKER_GROUP)):
                if not await r.exists(stream):
                    continue
                last = (await r.xinfo_stream(stream))["last-generated-id"]
                groups = {text(g["name"]): g for g in await r.xinfo_groups(stream)}
                g = groups.get(group)
                if g is None or g["pending"] or g["last-delivered-id"] != last:
                    return False
            if await r.zcard(keys.delayed):
                return False
        except (RedisError, OSError):
            return False
        return await self.ledger.running(host) == 0

    async def _quiesce(
        self, keys: Keys, host: str, deliveries: list[Delivery], records: RecordWatcher, timeout: float
    ) -> bool:
        """Until the system is idle and every accepted delivery has a run record, or idle for 3 s (10 s
        after a spooled answer) with some missing (they are lost: waiting longer changes nothing), or
        ``timeout``."""
        deadline = time.monotonic() + timeout
        idle_since: float | None = None
        while time.monotonic() < deadline:
            records.scan()
            if await self._idle(keys, host):
                now = time.monotonic()
                idle_since = idle_since or now
                recorded = all(records.final(d.job) is not None for d in deliveries if d.accepted)
                # A spooled delivery reaches Redis only when the receiver drains its spool: give it time.
                patience = 10.0 if any("spooled" in a for d in deliveries for a in d.answers) else 3.0
                if (recorded and now - idle_since >= 0.5) or now - idle_since >= patience:
                    return True
            else:
                idle_since = None
            await asyncio.sleep(0.2)
        return False

    async def _count(
        self, res: TrialResult, keys: Keys, host: str, deliveries: list[Delivery], records: RecordWatcher,
        worker: Service,
    ) -> None:
        r = self.redis
        res.posted = len(deliveries)
        for d in deliveries:
            res.answers.update(d.answers)
        res.answered_2xx = sum(d.accepted for d in deliveries)
        res.first_refused = sum(not d.answers[0].startswith("2") for d in deliveries if d.answers)
        res.unaccepted = res.posted - res.answered_2xx
        stored = Counter(f.get("delivery", "") for f in await entries(r, keys.events))
        res.stored = sum(stored[d.id] == 1 for d in deliveries)
        res.stored_twice = sum(stored[d.id] > 1 for d in deliveries)
        enqueued = {f.get("id", "") for s in (keys.jobs, keys.host_jobs(host)) for f in await entries(r, s)}
        res.enqueued = len(enqueued)
        containers = self.ledger.for_host(host)
        res.started = sum(c["start"] for c in containers.values())
        finished = Counter(str(e.get("job")) for e in worker.events("job_finished"))
        res.reattached = len(worker.events("job_reattached"))
        for d in deliveries:
            job = d.job
            final = records.final(job)
            c = containers.get(job, Counter())
            if final is not None and final.get("outcome") == "completed":
                res.completed += 1
            if d.accepted and (final is None or final.get("outcome") != "completed"):
                res.lost.append(f"{job}: {self._why_lost(d, stored[d.id], job in enqueued, c, final)}")
            if c["start"] > 1:
                res.paid_twice.append(f"{job}: {c['start']} container starts")
            if c["create"] > c["start"]:
                # Not a double (nothing ran twice), but worth seeing: a crash between create and start.
                res.notes.append(f"{job}: {c['create']} containers created, {c['start']} started")
            if c["start"] > 1 or finished[job] > 1 or records.completions(job) > 1:
                res.doubled.append(
                    f"{job}: {c['create']} containers created, {c['start']} started, {finished[job]} "
                    f"job_finished, {records.completions(job)} distinct completed records"
                )
        dead = await r.xlen(keys.dead)
        if dead:
            res.notes.append(f"{dead} entr(ies) in {keys.dead}")

    @staticmethod
    def _why_lost(
        d: Delivery, stored: int, enqueued: bool, containers: Counter[str], final: dict[str, Any] | None
    ) -> str:
        answers = ",".join(d.answers)
        if not stored:
            where = "answered 2xx but never stored in events"
        elif not enqueued:
            where = "stored but no job enqueued"
        elif not containers["start"]:
            where = f"enqueued, {containers['create']} container(s) created, none started, " + (
                "no record" if final is None else f"record {final.get('outcome')}/{final.get('reason')}")
        elif final is None:
            where = f"{containers['start']} container start(s), no record"
        else:
            where = f"container started, record {final.get('outcome')}/{final.get('reason')}"
        return f"{where} (answers: {answers})"

    async def _forget(self, prefix: str) -> None:
        """Drop the trial's keys, so the append-only file (and a restart's load) stays small."""
        with contextlib.suppress(RedisError, OSError):
            batch: list[bytes] = []
            async for key in self.redis.scan_iter(match=f"{prefix}:*", count=500):
                batch.append(key)
            if batch:
                await self.redis.unlink(*batch)


async def entries(redis: Redis, stream: str) -> list[dict[str, str]]:
    """Every entry's fields of ``stream``, as text (none when it does not exist)."""
    return [decode_fields(fields or {}) for _, fields in await redis.xrange(stream) or []]


class _Stopwatch:
    """Writes the seconds since its last call under a phase name."""

    def __init__(self, phases: dict[str, float]) -> None:
        self.phases, self.last = phases, time.monotonic()

    def __call__(self, phase: str) -> None:
        now = time.monotonic()
        self.phases[phase] = round(now - self.last, 2)
        self.last = now


class RecordWatcher:
    """The run records of one trial's ``PI_LOGS_DIR``, read every ``POLL_S``: the final one per job and
    every distinct ``completed`` version seen (a record is rewritten per attempt, so a second completed
    version of one job would otherwise be invisible once the last one overwrote it)."""

    def __init__(self, logs_dir: Path) -> None:
        self.logs_dir = logs_dir
        self._final: dict[str, dict[str, Any]] = {}
        self._completed: dict[str, set[tuple[Any, ...]]] = defaultdict(set)

    async def watch(self) -> None:
        while True:
            await asyncio.to_thread(self.scan)
            await asyncio.sleep(POLL_S)

    def scan(self) -> None:
        if not self.logs_dir.is_dir():
            return
        for path in self.logs_dir.glob("*.json"):
            try:
                rec = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # replaced between the listing and the read
            if not isinstance(rec, dict):
                continue
            job = str(rec.get("jobId"))
            self._final[job] = rec  # keyed by the jobId the record names
            if rec.get("outcome") == "completed":
                self._completed[job].add((rec.get("attempt"), rec.get("startedAt"), rec.get("endedAt"),
                                          rec.get("host")))

    def final(self, job: str) -> dict[str, Any] | None:
        return self._final.get(job)

    def completions(self, job: str) -> int:
        return len(self._completed.get(job, ()))


async def run_trials(
    root: Path, image: str, plan: Sequence[str], *, seed: int, config: ChaosConfig | None = None,
    on_result: Callable[[TrialResult], None] | None = None,
) -> list[TrialResult]:
    """One trial per entry of ``plan`` (its kill target), on one shared Redis, forge and event stream;
    ``seed`` fixes the kill moments, downtimes and job lengths."""
    results: list[TrialResult] = []
    async with Chaos(root, image, seed, config) as chaos:
        for index, target in enumerate(plan, start=1):
            if not chaos.ledger.alive:
                raise RuntimeError("the Docker event stream ended: container starts can no longer be counted")
            result = await chaos.trial(index, target)
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results
