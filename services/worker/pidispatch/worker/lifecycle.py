"""One job from pickup to its record: settle what an earlier delivery left, then one attempt.

Delivery guarantee: an entry is acked only after its run record is written, or moved to
``pd:delayed`` (retry, defer) in the same server-side step that acks it. A job whose container may have
started is never started again: a restart re-attaches to it (running or exited: containers are kept
until their end is recorded), a peer records it ``worker-lost``. A container is removed after its record.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import msgspec
from redis.exceptions import RedisError

from pidispatch.common import delayed
from pidispatch.common.faults import crash_point
from pidispatch.common.keys import JOB_STATE_TTL_S, WORKER_GROUP
from pidispatch.common.log import get_logger
from pidispatch.common.models import Job, decode_fields, job_from_fields, job_to_fields
from pidispatch.common.outcome import InfraFault
from pidispatch.common.registry import RegistryUnreachable
from pidispatch.common.streams import delivery_count, send_to_dead, wire
from pidispatch.worker.context import Held, WorkerContext, set_state
from pidispatch.worker.cron.firings import count_stall
from pidispatch.worker.egress.network import reap_networks
from pidispatch.worker.engine.attempt import AttemptOutcome
from pidispatch.worker.engine.runner import (
    ContainerGone,
    DockerUnavailable,
    find_started,
    follow,
    remove_job_containers,
)
from pidispatch.worker.engine.workspace import remove_job_folders, remove_workspace
from pidispatch.worker.forgework.answers import answer_for, post_answer
from pidispatch.worker.forgework.disarm import disarm, should_disarm
from pidispatch.worker.forward import forward_if_unservable
from pidispatch.worker.history.records import build_record, read_record, write_record
from pidispatch.worker.ladder import Spend, capture_path, count_tokens, run_ladder, settle_result
from pidispatch.worker.limits.scopedlease import take_lease
from pidispatch.worker.pickup import defer, pickup_gates, until_done

TERMINAL_STATES = frozenset({"completed", "policy", "failed"})
# Failed outcomes that are final: the container may have spent (worker-lost) or the fault is ours (a bug).
NOT_RETRIED = frozenset({"worker-lost", "internal-error"})
# The job hash's ``left`` while a clean shutdown leaves the job's container running for the next start.
HANDED_OVER = "shutdown"


class Hold(Exception):
    """Docker or Redis is unreachable: leave the entry pending (no attempt used) and retry later."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(type(cause).__name__)
        self.cause = cause


async def process(ctx: WorkerContext, held: Held) -> None:
    """Run one held entry to an ack or a hold. Raises ``Hold`` to leave it pending."""
    try:
        job, attempt = job_from_fields(held.fields)
    except ValueError:
        await _dead(ctx, held, "malformed-job")
        return
    held.job_id = job.id
    try:
        if held.origin != "new" and await _settle_earlier(ctx, held, job, attempt):
            return
        if await forward_if_unservable(ctx, held, job):
            return
        gated = await pickup_gates(ctx, held, job, attempt)
        if isinstance(gated, AttemptOutcome):  # refused before anything was reserved
            await _conclude(ctx, held, job, attempt, ctx.clock(), gated)
            return
        if gated is None:
            await _leased_attempt(ctx, held, job, attempt)
    except (DockerUnavailable, RedisError, RegistryUnreachable) as exc:
        raise Hold(exc) from None


# ---- what an earlier delivery left ------------------------------------------------------------------


@dataclass(frozen=True)
class Prior:
    outcome: str | None  # set when this attempt already has a record
    reason: str | None
    launched: bool  # a container may have started for this attempt
    started_ms: int | None
    final: bool = False  # the state hash says terminal: only the ack can be missing
    host: str | None = None  # the host that ran this attempt (its containers carry its label)
    confirmed: bool = False  # the start itself was seen (state running, a container id stored)
    handed_over: bool = False  # a clean shutdown left it running: its worker did not die under it


async def _prior(ctx: WorkerContext, job: Job, attempt: int) -> Prior:
    state = decode_fields(await ctx.redis.hgetall(ctx.keys.job(job.id)))
    if state.get("attempt") != str(attempt):
        state = {}
    started = state.get("startedAt", "")
    launched = state.get("state") in ("launching", "running") or bool(state.get("container"))
    started_ms = int(started) if started.isdigit() else None
    host = state.get("host") or None
    confirmed = state.get("state") == "running" or bool(state.get("container"))
    if state.get("state") in TERMINAL_STATES:
        return Prior(state["state"], state.get("reason") or None, launched, started_ms, True, host, confirmed)
    record = await read_record(ctx.settings.logs_dir, job.id)
    if record is not None and record.attempt == attempt:
        return Prior(record.outcome, record.reason, launched, started_ms, host=host, confirmed=confirmed)
    handed_over = state.get("left") == HANDED_OVER
    return Prior(None, None, launched, started_ms, host=host, confirmed=confirmed, handed_over=handed_over)


async def _settle_earlier(ctx: WorkerContext, held: Held, job: Job, attempt: int) -> bool:
    """True when the entry is fully handled by what an earlier delivery of it did or left."""
    prior = await _prior(ctx, job, attempt)
    log = get_logger()
    if prior.outcome is not None:
        # Recorded, but the ack (or the move to delayed) was lost: finish that step, never run again.
        log.info("job_already_recorded", job=job.id)
        # A crash between the record and the container's removal left it behind: remove it first.
        await _remove_job(ctx, job.id, ctx.host, since_ms=prior.started_ms or 0)
        await _after_record(ctx, held, job, attempt, prior.outcome, prior.reason, retry=not prior.final,
                            started=prior.launched)
        return True
    started_ms = prior.started_ms or ctx.clock()
    if held.origin == "peer" and not prior.launched:
        return False  # it never started a container on the dead host: run it here
    # A peer sees the dead host's container only when both share one Docker daemon.
    owner = prior.host if held.origin == "peer" else ctx.host
    leftover = await find_started(ctx.docker, job.id, owner, ctx.instance) if owner else None
    if leftover is not None and not leftover.started:
        # Its container was created and never started (now removed): nothing was spent, run it.
        log.info("job_never_started", job=job.id)
        return False
    if leftover is not None:
        if not prior.handed_over:  # its worker died under a running container: a scheduled run's stall
            await count_stall(ctx.redis, ctx.keys, job.id, ctx.settings.scheduler_stall_max)
        done = await _reattach(ctx, held, job, leftover.container_id, leftover.job_dir)
        await _conclude(ctx, held, job, attempt, started_ms, done, owner=owner)
        return True
    if prior.launched and not prior.confirmed and held.origin != "peer":
        # Died between "launching" and a confirmed start, and no container of ours exists: containers
        # are kept until recorded, so none started and nothing was spent. Run it (the slot reserved
        # then stays counted: one slot too many, never one too few).
        log.info("job_never_started", job=job.id)
        return False
    if prior.launched:
        # It started a container that is gone with its exit code: never pay for it twice.
        if held.origin == "peer":
            log.warning("job_lost_with_its_host", job=job.id)
        await _conclude(ctx, held, job, attempt, started_ms, AttemptOutcome("failed", "worker-lost"))
        return True
    return False


async def _reattach(
    ctx: WorkerContext, held: Held, job: Job, container_id: str, job_dir: str | None,
) -> AttemptOutcome:
    get_logger().info("job_reattached", job=job.id, container=container_id[:12])
    ctx.metrics.reattached()
    await set_state(ctx, job.id, state="running", container=container_id, left="")
    try:
        result = await follow(
            ctx.docker, container_id, timeout_s=ctx.settings.job_timeout_s, abort=held.abort,
            capture=capture_path(ctx, job),
        )
    except ContainerGone:
        return AttemptOutcome("failed", "worker-lost", budget_reserved=True)
    if job_dir:
        await remove_workspace(job_dir, ctx.settings.jobs_dir)
    done = settle_result(result, budget_reserved=True)
    await count_tokens(ctx, done)
    return done


# ---- one attempt ------------------------------------------------------------------------------------


async def _attempt(ctx: WorkerContext, held: Held, job: Job, attempt: int) -> None:
    folder = job.folder if job.is_local else None
    if folder is not None and folder in ctx.busy_folders:
        await defer(ctx, held, job, attempt)  # one local job per folder at a time
        return
    if folder is not None:
        ctx.busy_folders.add(folder)
    started_ms = ctx.clock()
    try:
        await set_state(
            ctx, job.id, state="starting", host=ctx.host, consumer=ctx.host, attempt=str(attempt),
            startedAt=str(started_ms), container="", reason="", endedAt="", stream=held.stream,
        )
        done = await _run(ctx, held, job)
    finally:
        if folder is not None:
            ctx.busy_folders.discard(folder)
    await _conclude(ctx, held, job, attempt, started_ms, done)


async def _run(ctx: WorkerContext, held: Held, job: Job) -> AttemptOutcome:
    """The ladder and the container; an infrastructure fault becomes a retried ``failed`` attempt.

    A hold (Docker or Redis gone) or a shutdown past its grace writes no record: an attempt that started
    nothing gives its slot back and runs again; a started container keeps it and is re-attached.
    """
    spend = Spend()
    try:
        return await run_ladder(ctx, held, job, spend)
    except InfraFault as fault:
        if fault.refund:
            await spend.refund()
        get_logger().warning("job_attempt_failed", job=job.id, reason=fault.reason)
        return AttemptOutcome("failed", fault.reason, budget_reserved=spend.reserved, retry=True)
    except (DockerUnavailable, RedisError, RegistryUnreachable):
        if not spend.started:
            await spend.refund()
        raise
    except asyncio.CancelledError:
        if not spend.started:
            await asyncio.shield(spend.refund())
        raise
    except OSError as exc:
        # The job folder could not be made (disk full, permissions): nothing ran, try again later.
        await spend.refund()
        get_logger().warning(
            "job_attempt_failed", job=job.id, reason="workspace-fault", error=type(exc).__name__
        )
        return AttemptOutcome("failed", "workspace-fault", retry=True)
    except Exception as exc:
        # A bug: recorded once ``failed``/``internal-error``, never retried.
        get_logger().error("job_crashed", job=job.id, error=type(exc).__name__)
        if not spend.started:
            await spend.refund()
        return AttemptOutcome("failed", "internal-error", budget_reserved=spend.reserved)


# ---- after the attempt ------------------------------------------------------------------------------


async def _conclude(
    ctx: WorkerContext, held: Held, job: Job, attempt: int, started_ms: int, done: AttemptOutcome,
    *, owner: str | None = None,
) -> None:
    """Record, remove the container, then retry later or mark terminal and ack: the container's exit
    code and the entry both outlive a crash until the record is written."""
    result, ended_ms = done.result, ctx.clock()
    record = build_record(
        job, attempt=attempt, outcome=done.outcome, reason=done.reason,
        exit_code=result.exit_code if result else None, exit_info=done.exit_info,
        started_at_ms=started_ms, ended_at_ms=ended_ms, host=ctx.host,
    )
    record = msgspec.structs.replace(
        record, budget_reserved=done.budget_reserved,
        provider=(job.provider or ctx.settings.provider) if result else None,
        model=(job.model or ctx.settings.model) if result else None,
    )
    if await write_record(ctx.settings.logs_dir, record) and ctx.mirror is not None:
        await ctx.mirror.write(record, ctx.clock())
    ctx.metrics.recorded(done, max(ended_ms - started_ms, 0) / 1000)
    crash_point("worker_after_record")
    # Docker unreachable here is a hold: the next pass finds the record, removes, then acks.
    await _remove_job(ctx, job.id, owner or ctx.host, since_ms=started_ms)
    await _after_record(ctx, held, job, attempt, done.outcome, done.reason, retry=done.retry,
                        started=_may_have_spent(done))


async def _remove_job(ctx: WorkerContext, job_id: str, host: str, *, since_ms: int) -> None:
    """The job's containers, then its egress network is free again: the proxy's refusals of it are counted
    on the way. A dead host's job: its idle networks go (nobody else would remove them)."""
    await remove_job_containers(ctx.docker, job_id, host, ctx.instance)
    # A folder no container took (its worker killed before the start) or one whose container is gone.
    await remove_job_folders(ctx.settings.jobs_dir, job_id)
    if ctx.egress is None:
        return
    if host != ctx.host:
        await reap_networks(ctx.docker, host, ctx.instance)
        return
    denied = await ctx.egress.networks.release(job_id, since=max(since_ms // 1000 - 1, 0))
    if denied:
        ctx.metrics.egress_denied(denied)
        get_logger().warning("egress_denied", job=job_id, requests=denied)


def _may_have_spent(done: AttemptOutcome) -> bool:
    # A container ran (the runtime never starting the runner is not a run) or one was lost mid-run.
    if done.result is not None:
        return done.reason != "container-never-started"
    return done.reason == "worker-lost"


async def _after_record(
    ctx: WorkerContext, held: Held, job: Job, attempt: int, outcome: str, reason: str | None, *, retry: bool,
    started: bool,
) -> None:
    log = get_logger()
    again = (retry and outcome == "failed" and reason not in NOT_RETRIED
             and attempt < ctx.settings.retry_attempts)
    # After the record and before the ack: a crash in between re-runs this step, which is idempotent.
    if should_disarm(job, reason, started=started, final=not again):
        await disarm(ctx.settings.triggers_file, job, ctx.clock())
    if reason == "worker-lost":  # a scheduled run's stall: its schedule's guard counts it
        await count_stall(ctx.redis, ctx.keys, job.id, ctx.settings.scheduler_stall_max)
    if again:
        delay_ms = ctx.settings.retry_base_ms * 2 ** (attempt - 1)
        await until_done(ctx, lambda: delayed.schedule(
            ctx.redis, ctx.keys, source=held.stream, group=WORKER_GROUP, entry_id=held.entry_id,
            stream=held.stream, fields=job_to_fields(job, attempt + 1), job_id=job.id,
            attempt=attempt + 1, delay_ms=delay_ms,
        ))
        log.info("job_retry_scheduled", job=job.id, attempt=attempt, reason=reason, delay_ms=delay_ms)
        ctx.metrics.retried()
        return
    terminal = {"state": outcome, "reason": reason or "", "endedAt": str(ctx.clock())}
    await until_done(ctx, lambda: _mark_terminal_and_ack(ctx, held, job.id, terminal))
    log.info("job_finished", job=job.id, outcome=outcome, reason=reason, attempt=attempt)
    # After the ack: a crash in between loses one comment (and one hook run) rather than giving two.
    if ctx.hook is not None:
        ctx.hook.fire(job.id, outcome, reason, ctx.host)
    text = answer_for(outcome, reason, local=job.is_local)
    if text is not None:
        await post_answer(ctx, job, text)


async def _mark_terminal_and_ack(ctx: WorkerContext, held: Held, job_id: str, fields: dict[str, str]) -> None:
    async with ctx.redis.pipeline(transaction=True) as pipe:
        pipe.hset(ctx.keys.job(job_id), mapping=wire(fields))
        pipe.expire(ctx.keys.job(job_id), JOB_STATE_TTL_S)
        pipe.xack(held.stream, WORKER_GROUP, held.entry_id)
        await pipe.execute()


async def _dead(ctx: WorkerContext, held: Held, reason: str) -> None:
    get_logger().warning("job_malformed", entry=held.entry_id, reason=reason)
    with contextlib.suppress(RedisError):
        deliveries = await delivery_count(ctx.redis, held.stream, WORKER_GROUP, held.entry_id)
        await send_to_dead(
            ctx.redis, ctx.keys, source=held.stream, group=WORKER_GROUP, entry_id=held.entry_id,
            reason=reason, deliveries=deliveries, fields=held.fields,
        )


# ---- scoped concurrency ceilings (PI_SCOPED_LIMITS_FILE "concurrent") -------------------------------


async def _leased_attempt(ctx: WorkerContext, held: Held, job: Job, attempt: int) -> None:
    """The attempt inside its scoped leases; at a ceiling the job goes back to ``pd:delayed`` using no
    attempt and recording nothing. A Redis fault raises (the job is held)."""
    if not ctx.scoped_limits:
        await _attempt(ctx, held, job, attempt)
        return
    lease = await take_lease(ctx.redis, ctx.keys, ctx.scoped_limits, job, ctx.host)
    if lease is None:
        await defer(ctx, held, job, attempt, why="scope-concurrent")
        return
    try:
        await _attempt(ctx, held, job, attempt)
    finally:
        await lease.release()
