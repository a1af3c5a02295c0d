"""The worker's consumer loop: read no more jobs than free slots, run each in its own task, record, ack.

Delivery guarantee (DESIGN.md §4): an entry is acked only after its run record is written, so a worker
that dies mid-job leaves the entry pending; on restart it reads its own pending entries first, and a job
that already has a container (or a record for this attempt) is followed or acked, never started twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiodocker
from aiodocker.exceptions import DockerError
from redis.exceptions import RedisError

from pidispatch.common.health import Backoff, Health
from pidispatch.common.keys import (
    JOB_STATE_TTL_S,
    READ_BLOCK_MS,
    WORKER_GROUP,
    Keys,
)
from pidispatch.common.log import get_logger
from pidispatch.common.models import Fields, Job, decode_fields, job_from_fields
from pidispatch.common.redis import Redis
from pidispatch.common.settings import Settings
from pidispatch.common.streams import Entry, ack, delivery_count, ensure_group, read_group, send_to_dead
from pidispatch.worker.container import LABEL_HOST, LABEL_JOB, SpecRefused, build_spec, resolve_image
from pidispatch.worker.exitline import parse_exit_line
from pidispatch.worker.history import build_record, read_record, write_record
from pidispatch.worker.runner import (
    Abort,
    ContainerGone,
    DockerUnavailable,
    Leftover,
    RunResult,
    classify,
    find_started,
    force_remove,
    is_unreachable,
    reattach_container,
    run_container,
)
from pidispatch.worker.workspace import ensure_jobs_dir, prepare_workspace, remove_workspace

Clock = Callable[[], int]

DOCKER_CHECK_S = 3.0
PAUSE_CHECK_S = 1.0
SHUTDOWN_STOP_S = 3
SHUTDOWN_BUDGET_S = 45.0
PENDING_PAGE = 100
TERMINAL_STATES = frozenset({"completed", "policy", "failed"})
DOCKER_HINT = (
    "jobs wait in their stream until the Docker daemon answers; check that dockerd runs and that "
    "DOCKER_HOST or the default socket reaches it"
)


class Retry(Exception):
    """An infrastructure fault before anything was spent: leave the entry pending, retry after a backoff."""


def _docker_fault(exc: DockerError, what: str) -> Exception:
    if is_unreachable(exc):
        return DockerUnavailable(f"{what}: Docker daemon not answering")
    return Retry(f"{what}-{exc.status}")


@dataclass(frozen=True)
class Prior:
    """What an earlier delivery of the same entry left behind."""

    recorded: bool = False
    started_ms: int | None = None
    container: str | None = None


@dataclass(frozen=True)
class Outcome:
    outcome: str
    reason: str | None
    result: RunResult | None = None


@dataclass
class Slot:
    task: asyncio.Task[None]
    abort: Abort = field(default_factory=Abort)


class Worker:
    def __init__(
        self, settings: Settings, redis: Redis, keys: Keys, docker: aiodocker.Docker,
        stop: asyncio.Event, clock: Clock,
    ) -> None:
        self.settings, self.redis, self.keys, self.docker = settings, redis, keys, docker
        self.stop, self.clock = stop, clock
        self.consumer = settings.worker_name
        self.log = get_logger()
        self.slots: dict[str, Slot] = {}
        self.containers: set[str] = set()
        self.slot_freed = asyncio.Event()
        self.redis_health = Health("redis_unreachable", "redis_restored")
        self.docker_health = Health("docker_unreachable", "docker_reachable")
        self.docker_ok = False
        self.pending_due: float | None = 0.0  # own pending entries are read first, at once
        self.retry_backoff = Backoff()
        self.retry_logged: set[str] = set()
        self.is_paused = False
        self.reaped = False

    # ---- the loop ---------------------------------------------------------------------------------

    async def run(self) -> None:
        await asyncio.to_thread(ensure_jobs_dir, self.settings.jobs_dir)
        if await self._ensure_group():
            self.log.info(
                "worker_started", host=self.settings.worker_name, concurrency=self.settings.concurrency,
                image=self.settings.job_image,
            )
            await self._loop()
        await self._shutdown()

    async def _ensure_group(self) -> bool:
        backoff = Backoff()
        while not self.stop.is_set():
            try:
                await ensure_group(self.redis, self.keys.jobs, WORKER_GROUP)
                self.redis_health.ok()
                return True
            except RedisError as exc:
                self.redis_health.failed(reason=type(exc).__name__)
                await self._pause(backoff.next())
        return False

    async def _loop(self) -> None:
        backoff = Backoff()
        while not self.stop.is_set():
            if not await self._docker_ready():
                await self._pause(DOCKER_CHECK_S)
                continue
            if self._free() == 0:
                self.slot_freed.clear()
                await self._pause(None, self.slot_freed)
                continue
            try:
                # Jobs this worker already took (a restart's own pending ones) are followed even when
                # paused: a running container must be re-attached, never left alone.
                if self.pending_due is not None and time.monotonic() >= self.pending_due:
                    self.pending_due = None if await self._launch_pending() else time.monotonic()
                if await self._paused():
                    await self._pause(PAUSE_CHECK_S)
                    continue
                entries = await self._read_new() if self._free() > 0 else []
                self.redis_health.ok()
                backoff.reset()
            except RedisError as exc:
                self.redis_health.failed(reason=type(exc).__name__)
                await self._pause(backoff.next())
                continue
            for _, entry_id, fields in entries:
                # Read after the stop: left pending, and a restart reads its own pending entries first.
                if not self.stop.is_set():
                    self._launch(entry_id, fields, resumed=False)

    async def _paused(self) -> bool:
        """``pi-dispatch pause`` (fleet-wide or this host): take no new jobs; they wait in the stream."""
        paused = bool(await self.redis.exists(self.keys.paused, self.keys.paused_host(self.consumer)))
        if paused != self.is_paused:
            self.is_paused = paused
            self.log.info("worker_paused" if paused else "worker_resumed")
        return paused

    async def _read_new(self) -> list[Entry]:
        """New entries, never more than the free slots; a stop interrupts the blocking read at once."""
        read = asyncio.ensure_future(
            read_group(
                self.redis, WORKER_GROUP, self.consumer, {self.keys.jobs: ">"},
                count=self._free(), block_ms=READ_BLOCK_MS,
            )
        )
        stopping = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({read, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if read.done():
            return read.result()
        # Anything the server delivered meanwhile stays pending; a restart reads it first.
        read.cancel()
        with contextlib.suppress(asyncio.CancelledError, RedisError):
            await read
        return []

    async def _launch_pending(self) -> bool:
        """Start own pending entries that are not running; True when none was left over for lack of slots."""
        cursor = "0"
        while True:
            entries = await read_group(
                self.redis, WORKER_GROUP, self.consumer, {self.keys.jobs: cursor}, count=PENDING_PAGE
            )
            if not entries:
                return True
            for _, entry_id, fields in entries:
                if entry_id in self.slots:
                    continue
                if self._free() == 0:
                    return False
                self._launch(entry_id, fields, resumed=True)
            cursor = entries[-1][1]

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
            self.reaped = await self._reap_strays()
        if self.docker_health.down:
            self.pending_due = time.monotonic()  # jobs that waited for Docker go first
        self.docker_health.ok()
        return True

    async def _reap_strays(self) -> bool:
        """Boot reaper: remove containers labelled for this host that no pending entry of ours owns
        (left by a crash after the record and ack, or by a job recorded worker-lost). Runs before any
        job starts; containers of our pending jobs are left for re-attach. True once done."""
        try:
            rows = await self.redis.xpending_range(
                self.keys.jobs, WORKER_GROUP, min="-", max="+", count=10_000, consumername=self.consumer
            )
            async with self.redis.pipeline(transaction=False) as pipe:
                for row in rows:
                    pipe.xrange(self.keys.jobs, min=row["message_id"], max=row["message_id"], count=1)
                found = await pipe.execute()
            owned = {decode_fields(hit[0][1]).get("id") for hit in found if hit}
            mine = json.dumps({"label": [f"{LABEL_HOST}={self.consumer}"]})
            containers = await self.docker.containers.list(all="1", filters=mine)
        except (RedisError, DockerError, OSError) as exc:
            self.log.warning("reaper_skipped", error=type(exc).__name__)
            return False
        for container in containers:
            job_id = (container._container.get("Labels") or {}).get(LABEL_JOB)
            if job_id not in owned:
                await force_remove(container)
                self.log.warning("stray_container_removed", job=job_id)
        return True

    def _free(self) -> int:
        return self.settings.concurrency - len(self.slots)

    def _launch(self, entry_id: str, fields: Fields, *, resumed: bool) -> None:
        slot = Slot(task=asyncio.create_task(self._process(entry_id, fields, resumed)))
        self.slots[entry_id] = slot
        slot.task.add_done_callback(lambda task: self._release(entry_id, task))

    def _release(self, entry_id: str, task: asyncio.Task[None]) -> None:
        self.slots.pop(entry_id, None)
        self.slot_freed.set()
        if not task.cancelled() and task.exception() is not None:
            # A bug, not a fault: the entry stays pending and the next pass retries it.
            self.log.error("job_crashed", entry=entry_id, error=type(task.exception()).__name__)

    async def _pause(self, seconds: float | None, event: asyncio.Event | None = None) -> None:
        """Sleep until ``seconds`` pass, ``event`` is set or the worker is stopping."""
        waits = [asyncio.ensure_future(self.stop.wait())]
        if event is not None:
            waits.append(asyncio.ensure_future(event.wait()))
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def _shutdown(self) -> None:
        """Give running jobs the grace period, then stop the rest; no container outlives the worker."""
        tasks = [s.task for s in self.slots.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=self.settings.shutdown_grace_s)
        for slot in list(self.slots.values()):
            slot.abort.trigger("shutdown", stop_timeout_s=SHUTDOWN_STOP_S)
        tasks = [s.task for s in self.slots.values()]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=SHUTDOWN_BUDGET_S)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        for container_id in list(self.containers):
            await force_remove(self.docker.containers.container(container_id))

    # ---- one job ----------------------------------------------------------------------------------

    async def _process(self, entry_id: str, fields: Fields, resumed: bool) -> None:
        try:
            job, attempt = job_from_fields(fields)
        except ValueError:
            await self._dead(entry_id, fields, "malformed-job")
            return
        abort = self.slots[entry_id].abort
        try:
            prior = await self._prior(job, attempt) if resumed else Prior()
            if prior.recorded:
                # The run was recorded but the ack was lost: ack now, never run it again.
                self.log.info("job_already_recorded", job=job.id)
                await self._ack(entry_id)
                return
            started_ms = prior.started_ms or self.clock()
            done = await self._attempt(job, attempt, started_ms, abort, prior if resumed else None)
        except Exception as exc:
            # Infrastructure (Docker, Redis, disk) before a terminal answer: the entry stays pending.
            self._retry_later(entry_id, job.id, exc)
            return
        await self._finish(entry_id, job, attempt, started_ms, done)
        self.retry_backoff.reset()
        self.retry_logged.discard(entry_id)

    async def _prior(self, job: Job, attempt: int) -> Prior:
        """The live state hash and run record an earlier delivery of this attempt left."""
        state = decode_fields(await self.redis.hgetall(self.keys.job(job.id)))
        if state.get("attempt") != str(attempt):
            state = {}
        recorded = state.get("state") in TERMINAL_STATES
        if not recorded:
            record = await read_record(self.settings.logs_dir, job.id)
            recorded = record is not None and record.attempt == attempt
        started = state.get("startedAt", "")
        return Prior(recorded, int(started) if started.isdigit() else None, state.get("container"))

    async def _attempt(
        self, job: Job, attempt: int, started_ms: int, abort: Abort, prior: Prior | None
    ) -> Outcome:
        await self._set_state(
            job.id, state="starting", host=self.settings.worker_name, consumer=self.consumer,
            attempt=str(attempt), startedAt=str(started_ms), container="", reason="", endedAt="",
        )
        if prior is not None:
            leftover = await find_started(self.docker, job.id, self.settings.worker_name)
            if leftover is not None:
                return await self._reattach(job, leftover, abort)
            if prior.container:
                # It started a container that is gone with its exit code: never pay for it twice.
                return Outcome("failed", "worker-lost")
        try:
            image = resolve_image(job, self.settings)
        except ValueError:
            return self._refuse(job, "config-refused")
        try:
            await self.docker.images.inspect(image)
        except DockerError as exc:
            if exc.status == 404:
                return self._refuse(job, "job-image-missing")
            raise _docker_fault(exc, "image-preflight") from None
        job_dir = await prepare_workspace(job, self.settings)
        try:
            spec = build_spec(job, job_dir, self.settings)
            result = await run_container(
                self.docker, spec, timeout_s=self.settings.job_timeout_s, abort=abort,
                on_started=lambda cid: self._started(job, cid),
            )
        except SpecRefused:
            return self._refuse(job, "config-refused")
        finally:
            await remove_workspace(job_dir, self.settings.jobs_dir)
        if result.container_id is not None:
            self.containers.discard(result.container_id)
        outcome, reason = classify(result)
        return Outcome(outcome, reason, result)

    async def _started(self, job: Job, container_id: str) -> None:
        self.containers.add(container_id)
        self.log.info("job_started", job=job.id, container=container_id[:12])
        await self._set_state(job.id, state="running", container=container_id)

    async def _reattach(self, job: Job, leftover: Leftover, abort: Abort) -> Outcome:
        container_id = leftover.container_id
        self.log.info("job_reattached", job=job.id, container=container_id[:12])
        await self._set_state(job.id, state="running", container=container_id)
        self.containers.add(container_id)
        try:
            result = await reattach_container(
                self.docker, container_id, timeout_s=self.settings.job_timeout_s, abort=abort
            )
        except ContainerGone:
            return Outcome("failed", "worker-lost")
        finally:
            self.containers.discard(container_id)
            if leftover.job_dir:
                await remove_workspace(leftover.job_dir, self.settings.jobs_dir)
        outcome, reason = classify(result)
        return Outcome(outcome, reason, result)

    def _refuse(self, job: Job, reason: str) -> Outcome:
        self.log.info("job_refused", job=job.id, reason=reason)
        return Outcome("policy", reason)

    async def _finish(self, entry_id: str, job: Job, attempt: int, started_ms: int, done: Outcome) -> None:
        """Record, then mark terminal, then ack: the ack comes only after the record is written."""
        result = done.result
        record = build_record(
            job, attempt=attempt, outcome=done.outcome, reason=done.reason,
            exit_code=result.exit_code if result else None,
            exit_info=parse_exit_line(result.tail) if result else None,
            started_at_ms=started_ms, ended_at_ms=self.clock(), host=self.settings.worker_name,
        )
        await write_record(self.settings.logs_dir, record)
        await self._set_state(job.id, state=done.outcome, reason=done.reason or "", endedAt=str(self.clock()))
        await self._ack(entry_id)
        self.log.info(
            "job_finished", job=job.id, outcome=done.outcome, reason=done.reason,
            exit_code=result.exit_code if result else None,
        )

    def _retry_later(self, entry_id: str, job_id: str, exc: BaseException) -> None:
        if isinstance(exc, DockerUnavailable):
            self.docker_ok = False  # the loop re-checks and logs docker_unreachable once
        elif isinstance(exc, RedisError):
            self.redis_health.failed(reason=type(exc).__name__)
        elif entry_id not in self.retry_logged:
            self.retry_logged.add(entry_id)
            reason = exc.args[0] if isinstance(exc, Retry) else type(exc).__name__
            self.log.warning("job_retry_later", job=job_id, reason=reason)
        due = time.monotonic() + self.retry_backoff.next()
        self.pending_due = due if self.pending_due is None else min(self.pending_due, due)

    # ---- Redis side effects -----------------------------------------------------------------------

    async def _set_state(self, job_id: str, **fields: str) -> None:
        """Live state in ``pd:job:<id>``: best effort, a Redis outage must not fail a paid run."""
        key = self.keys.job(job_id)
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hset(key, mapping=fields)
                pipe.expire(key, JOB_STATE_TTL_S)
                await pipe.execute()
            self.redis_health.ok()
        except RedisError as exc:
            self.redis_health.failed(reason=type(exc).__name__)

    async def _ack(self, entry_id: str) -> None:
        """Ack, retrying through a Redis outage; while stopping, give up after a few tries (stays pending)."""
        backoff, tries = Backoff(), 0
        while True:
            try:
                await ack(self.redis, self.keys.jobs, WORKER_GROUP, entry_id)
                self.redis_health.ok()
                return
            except RedisError as exc:
                self.redis_health.failed(reason=type(exc).__name__)
            tries += 1
            if self.stop.is_set() and tries >= 3:
                return
            await asyncio.sleep(backoff.next())

    async def _dead(self, entry_id: str, fields: Fields, reason: str) -> None:
        self.log.warning("job_malformed", entry=entry_id, reason=reason)
        with contextlib.suppress(RedisError):
            deliveries = await delivery_count(self.redis, self.keys.jobs, WORKER_GROUP, entry_id)
            await send_to_dead(
                self.redis, self.keys, source=self.keys.jobs, group=WORKER_GROUP, entry_id=entry_id,
                reason=reason, deliveries=deliveries, fields=fields,
            )


async def run_worker(
    settings: Settings, redis: Redis, keys: Keys, docker: aiodocker.Docker, stop: asyncio.Event, clock: Clock
) -> None:
    """Run the worker until ``stop`` is set; returns after a clean shutdown (resources stay the caller's)."""
    await Worker(settings, redis, keys, docker, stop, clock).run()
