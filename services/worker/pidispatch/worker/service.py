"""The worker's consumer loop: read no more jobs than free slots, run each in its own task.

Streams: a declared host (``PI_WORKER_NAME``) drains its own ``pd:jobs:<name>`` first and the shared
``pd:jobs`` with one pool of slots; an undeclared one drains ``pd:jobs``. On start it reads its own
pending entries first (a restart re-attaches to their containers); every beat it looks for the pending
entries of hosts whose liveness row expired. What one job goes through is ``lifecycle.process``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Mapping

import aiodocker
from redis.exceptions import RedisError
from redis.typing import KeyT, StreamIdT

from pidispatch.common.delayed import run_promoter
from pidispatch.common.filewatch import watch_file
from pidispatch.common.health import Backoff, Health
from pidispatch.common.instance import instance_id
from pidispatch.common.keys import READ_BLOCK_MS, WORKER_GROUP, Keys
from pidispatch.common.log import get_logger
from pidispatch.common.models import Fields
from pidispatch.common.outcome import InfraFault
from pidispatch.common.redis import Redis
from pidispatch.common.registry import IMAGE_MISSING, IMAGE_PRESENT, capability_tokens
from pidispatch.common.replication import Replicas
from pidispatch.common.runtime import EpochMsClock, stopped, unless_stopped
from pidispatch.common.settings import Settings
from pidispatch.common.streams import Entry, ensure_group, read_group
from pidispatch.forges.api import start_forges
from pidispatch.forges.config import load_forge_config
from pidispatch.forges.http import create_http
from pidispatch.worker.context import Held, WorkerContext, set_state
from pidispatch.worker.cron.serve import start_schedules
from pidispatch.worker.egress.network import reap_networks
from pidispatch.worker.egress.proxy import egress_for, reap_proxies
from pidispatch.worker.engine.preflight import inspect_image
from pidispatch.worker.engine.reaper import reap_strays
from pidispatch.worker.engine.runner import DockerUnavailable
from pidispatch.worker.engine.workspace import ensure_jobs_dir
from pidispatch.worker.history.mirror import Mirror
from pidispatch.worker.history.records import run_log_sweeper
from pidispatch.worker.hook import FailureHook
from pidispatch.worker.lifecycle import HANDED_OVER, Hold, process
from pidispatch.worker.limits.pausewindows import PauseWindow, load_windows
from pidispatch.worker.limits.scoped import ScopedLimit, load_limits
from pidispatch.worker.metrics import WorkerMetrics
from pidispatch.worker.upkeep import SlotKey, Upkeep
from pidispatch.worker.waits.gate import WaitGate

DOCKER_CHECK_S = 3.0
PAUSE_CHECK_S = 1.0
PENDING_PAGE = 100
DOCKER_HINT = (
    "jobs wait in their stream until the Docker daemon answers; check that dockerd runs and that "
    "DOCKER_HOST or the default socket reaches it"
)


class Worker:
    def __init__(
        self, settings: Settings, redis: Redis, keys: Keys, docker: aiodocker.Docker,
        stop: asyncio.Event, clock: EpochMsClock, env: Mapping[str, str],
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.settings, self.redis, self.keys, self.docker, self.stop = settings, redis, keys, docker, stop
        caps = frozenset(capability_tokens(
            (name for name, _ in settings.secret_profiles), (name for name, _ in settings.wait.profiles),
        ))
        mirror = Mirror(redis, keys, settings.log_retention_days) if settings.worker_name_declared else None
        forges = load_forge_config(env)  # validated now: a bad forge variable refuses the start (exit 2)
        self.ctx = WorkerContext(
            settings, redis, keys, docker, clock, env, Health("redis_unreachable", "redis_restored"),
            caps=caps,
            mirror=mirror,
            forges=forges,
            egress=egress_for(settings, docker, forges.job_urls()),
            hook=FailureHook(settings.on_failure, settings.on_failure_timeout_ms, env)
            if settings.on_failure else None,
            wait_gate=WaitGate(settings.wait, redis, keys, clock, env),
            replicas=Replicas.of(settings),
        )
        if metrics is not None:
            self.ctx.metrics = metrics
        self.consumer = settings.worker_name
        own = [keys.host_jobs(settings.worker_name)] if settings.worker_name_declared else []
        self.streams = [*own, keys.jobs]
        self.log = get_logger()
        self.slots: dict[SlotKey, Held] = {}
        self.ctx.metrics.watch_slots(self.slots, settings.concurrency)
        self.tasks: dict[SlotKey, asyncio.Task[None]] = {}
        self.slot_freed = asyncio.Event()
        self.upkeep = Upkeep(self.ctx, self.streams, self.slots, stop)
        self.docker_health = Health("docker_unreachable", "docker_reachable")
        self.docker_ok = False
        self.pending_due: float | None = 0.0  # own pending entries are read first, at once
        self.takeover_due = 0.0
        self.hold_backoff = Backoff()
        self.is_paused = False
        self.reaped = False

    # ---- the loop ---------------------------------------------------------------------------------

    async def run(self) -> None:
        await asyncio.to_thread(ensure_jobs_dir, self.settings.jobs_dir)
        windows_file = self.settings.pause_windows_file
        if windows_file is not None:  # a bad file refuses the start (exit 2); a bad edit keeps these
            self.ctx.pause_windows = await asyncio.to_thread(load_windows, windows_file)
        limits_file = self.settings.scoped_limits_file
        if limits_file is not None:  # likewise
            self.ctx.scoped_limits = await asyncio.to_thread(load_limits, limits_file)
        if not await self._ensure_groups():
            return
        own_stream = self.streams[0]  # this host's stream when it has a name, else the shared one
        schedules = await start_schedules(
            self.ctx.env, self.redis, self.keys, own_stream, self.ctx.clock, self.stop, host=self.ctx.host,
            recheck_s=self.settings.host_beat_ms / 1000,
        )
        if schedules is not None:
            self.upkeep.scheduler = schedules[0]
        self.log.info(
            "worker_started", concurrency=self.settings.concurrency, image=self.settings.job_image,
            streams=len(self.streams), retry_attempts=self.settings.retry_attempts,
            daily_cap=self.settings.daily_cap,
        )
        self.ctx.http = create_http()
        self.ctx.forge_clients = start_forges(self.ctx.forges, self.ctx.http, self.ctx.clock)
        background = [
            asyncio.create_task(self.upkeep.run_heartbeat()),
            asyncio.create_task(self.upkeep.run_cancel_poll()),
            asyncio.create_task(run_promoter(self.redis, self.keys, self.stop)),
            asyncio.create_task(run_log_sweeper(self.settings, self.stop, self.ctx.clock)),
            *(schedules[1] if schedules is not None else ()),
        ]
        if windows_file is not None:
            background.append(asyncio.create_task(watch_file(
                windows_file, load_windows, self._swap_windows, self.stop, what="pause_windows",
            )))
        if limits_file is not None:
            background.append(asyncio.create_task(watch_file(
                limits_file, load_limits, self._swap_limits, self.stop, what="scoped_limits",
                fields=lambda rows: {"rows": len(rows)}, first={"rows": len(self.ctx.scoped_limits)},
            )))
        try:
            await self._loop()
        finally:
            left = await self._shutdown()
            await asyncio.gather(*background, return_exceptions=True)
            if not left:
                await self.upkeep.remove_row()
            if self.ctx.hook is not None:
                await self.ctx.hook.drain(self.settings.on_failure_timeout_ms / 1000 + 3)
            await self.ctx.http.close()

    def _swap_windows(self, windows: tuple[PauseWindow, ...]) -> None:
        self.ctx.pause_windows = windows

    def _swap_limits(self, limits: tuple[ScopedLimit, ...]) -> None:
        self.ctx.scoped_limits = limits

    async def _ensure_groups(self) -> bool:
        backoff = Backoff()
        while not self.stop.is_set():
            try:
                for stream in self.streams:
                    await ensure_group(self.redis, stream, WORKER_GROUP)
                # Before any container is looked at: this deployment's label on all it makes and finds.
                self.ctx.instance = await instance_id(self.redis, self.keys)
                if self.ctx.egress is not None:
                    self.ctx.egress.start(self.ctx.instance)
                self.ctx.redis_health.ok()
                return True
            except RedisError as exc:
                self.ctx.redis_health.failed(reason=type(exc).__name__)
                await backoff.pause(self.stop)
        return False

    async def _loop(self) -> None:
        backoff = Backoff()
        while not self.stop.is_set():
            if not await self._docker_ready():
                await stopped(self.stop, DOCKER_CHECK_S)
                continue
            if self._free() == 0:
                self.slot_freed.clear()
                await stopped(self.stop, None, wake=self.slot_freed)
                continue
            try:
                # Jobs this worker already holds (a restart's own pending ones) are followed even when
                # paused: a running container must be re-attached, never left alone.
                if self.pending_due is not None and time.monotonic() >= self.pending_due:
                    self.pending_due = None if await self._launch_pending() else time.monotonic()
                if time.monotonic() >= self.takeover_due:
                    self.takeover_due = time.monotonic() + self.settings.host_beat_ms / 1000
                    for stream, entry_id, fields in await self.upkeep.claim_orphans(self._free()):
                        self._launch(stream, entry_id, fields, origin="peer")
                if await self._paused():
                    await stopped(self.stop, PAUSE_CHECK_S)
                    continue
                entries = await self._read_new() if self._free() > 0 else []
                self.ctx.redis_health.ok()
                backoff.reset()
            except RedisError as exc:
                self.ctx.redis_health.failed(reason=type(exc).__name__)
                await backoff.pause(self.stop)
                continue
            for stream, entry_id, fields in entries:
                # Read after the stop: left pending, and a restart reads its own pending entries first.
                if not self.stop.is_set():
                    self._launch(stream, entry_id, fields, origin="new")

    async def _paused(self) -> bool:
        """``pi-dispatch pause`` (fleet-wide or this host): take no new jobs; they wait in the stream."""
        paused = bool(await self.redis.exists(self.keys.paused, self.keys.paused_host(self.consumer)))
        if paused != self.is_paused:
            self.is_paused = paused
            self.log.info("worker_paused" if paused else "worker_resumed")
        return paused

    async def _read_new(self) -> list[Entry]:
        """New entries, never more than the free slots, this host's stream first.

        XREADGROUP's COUNT applies per stream, so the streams are read one by one without blocking; when
        all are empty, a plain XREAD blocks from each stream's newest id (taken before the group reads, so
        an entry added in between wakes it at once) and the next pass reads the group again.
        """
        async with self.redis.pipeline(transaction=False) as pipe:
            for stream in self.streams:
                pipe.xrevrange(stream, count=1)
            tips = [hit[0][0] if hit else b"0-0" for hit in await pipe.execute()]
        entries: list[Entry] = []
        for stream in self.streams:
            room = self._free() - len(entries)
            if room <= 0:
                break
            entries += await read_group(self.redis, WORKER_GROUP, self.consumer, {stream: ">"}, count=room)
        if not entries:
            await self._wait_for_new({s: tip for s, tip in zip(self.streams, tips, strict=True)})
        return entries

    async def _wait_for_new(self, tips: dict[KeyT, StreamIdT]) -> None:
        # Only a wake-up: a failed read costs nothing, the next pass reads the group again.
        with contextlib.suppress(RedisError):
            await unless_stopped(self.redis.xread(tips, count=1, block=READ_BLOCK_MS), self.stop)

    async def _launch_pending(self) -> bool:
        """Start own pending entries that are not running; True when none was left over for lack of slots."""
        for stream in self.streams:
            cursor = "0"
            while True:
                entries = await read_group(
                    self.redis, WORKER_GROUP, self.consumer, {stream: cursor}, count=PENDING_PAGE
                )
                if not entries:
                    break
                for _, entry_id, fields in entries:
                    if (stream, entry_id) in self.slots:
                        continue
                    if self._free() == 0:
                        return False
                    self._launch(stream, entry_id, fields, origin="own")
                cursor = entries[-1][1]
        return True

    async def _docker_ready(self) -> bool:
        if self.docker_ok:
            return True
        try:
            await asyncio.wait_for(self.docker.version(), DOCKER_CHECK_S)
        except Exception:
            self.docker_health.failed(hint=DOCKER_HINT)
            return False
        self.docker_ok = True
        if not self.reaped:
            self.reaped = await reap_strays(self.ctx, self.streams)
            if self.reaped:
                host, instance, egress = self.ctx.host, self.ctx.instance, self.ctx.egress
                await reap_networks(self.docker, host, instance)
                await reap_proxies(self.docker, host, instance, egress.name if egress is not None else None)
            await self._say_if_job_image_missing()
        if self.docker_health.down:
            self.pending_due = time.monotonic()  # jobs that waited for Docker go first
        self.docker_health.ok()
        return True

    def down(self) -> list[str]:
        """What ``/readyz`` names: a pure read of the loop's own state. Docker counts as down until it
        first answers, as no job starts before then."""
        docker_down = self.docker_health.down or not self.docker_ok
        return [name for name, is_down in (("redis", self.ctx.redis_health.down), ("docker", docker_down))
                if is_down]

    def _free(self) -> int:
        return self.settings.concurrency - len(self.slots)

    def _launch(self, stream: str, entry_id: str, fields: Fields, *, origin: str) -> None:
        key = (stream, entry_id)
        held = Held(stream, entry_id, fields, origin)
        self.slots[key] = held
        task = asyncio.create_task(self._run_job(held))
        self.tasks[key] = task
        task.add_done_callback(lambda t: self._release(key, t))

    async def _run_job(self, held: Held) -> None:
        try:
            await process(self.ctx, held)
            self.hold_backoff.reset()
        except Hold as hold:
            self._hold(held, hold.cause)

    def _release(self, key: SlotKey, task: asyncio.Task[None]) -> None:
        self.slots.pop(key, None)
        self.tasks.pop(key, None)
        self.slot_freed.set()
        if not task.cancelled() and task.exception() is not None:
            # A bug, not a fault: the entry stays pending and the next pass retries it.
            self.log.error("job_crashed", entry=key[1], error=type(task.exception()).__name__)
            self._retry_pending_later()

    def _hold(self, held: Held, cause: BaseException) -> None:
        """Docker or Redis went away mid-job: the entry stays pending, retried once they answer."""
        if isinstance(cause, DockerUnavailable):
            self.docker_ok = False  # the loop re-checks and logs docker_unreachable once
        else:
            self.ctx.redis_health.failed(reason=type(cause).__name__)
        self.log.info("job_held", job=held.job_id, cause=type(cause).__name__)
        self._retry_pending_later()

    async def _say_if_job_image_missing(self) -> None:
        """Once Docker answers at start: every job would be refused ``job-image-missing``, so say so now."""
        ref = self.settings.job_image
        with contextlib.suppress(DockerUnavailable, InfraFault):
            missing = await inspect_image(self.docker, ref) is None
            self.upkeep.job_image = IMAGE_MISSING if missing else IMAGE_PRESENT
            with contextlib.suppress(RedisError):
                await self.upkeep.beat()  # the fleet sees it now, not a beat later
            if missing:
                self.log.warning("job_image_missing", image=ref,
                                 fix="build it: pi-dispatch job-image build (or set PI_JOB_IMAGE)")

    def _retry_pending_later(self) -> None:
        due = time.monotonic() + self.hold_backoff.next()
        self.pending_due = due if self.pending_due is None else min(self.pending_due, due)

    async def _shutdown(self) -> bool:
        """Reading has stopped. Running jobs get ``PI_SHUTDOWN_GRACE`` to finish; the rest are left
        running, their entries pending, for the next start to re-attach. True when any was left."""
        tasks = list(self.tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=self.settings.shutdown_grace_s)
        late_keys = [k for k, t in self.tasks.items() if not t.done()]
        late = [self.tasks[k] for k in late_keys]
        handed = [h.job_id for k in late_keys if (h := self.slots.get(k)) is not None and h.job_id]
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
        for job_id in handed:  # not a worker death: the stall guard does not count their re-attach
            await set_state(self.ctx, job_id, left=HANDED_OVER)
        if late:
            self.log.warning(
                "jobs_left_running", count=len(late),
                note="their containers keep running; the next start of this worker re-attaches to them",
            )
        return bool(late)


async def run_worker(
    settings: Settings, redis: Redis, keys: Keys, docker: aiodocker.Docker, stop: asyncio.Event,
    clock: EpochMsClock, env: Mapping[str, str] | None = None,
) -> None:
    """Run the worker until ``stop`` is set; returns after a clean shutdown (resources stay the caller's)."""
    await Worker(settings, redis, keys, docker, stop, clock, os.environ if env is None else env).run()
