"""The pre-spend ladder: every check that costs nothing runs before anything that costs something, and
the container runs last.

Rows that apply in this build (numbered as in docs/worker.md): the authored trigger now, a spent
one-shot or a narrowed rule (1, 2), image preflight and its labels (5, 6),
secrets (12), the forge token for this one repository (13), default-branch protection (14), the local
folder or the clone of the tip and the job folder (15), the daily token cap (16), the budget reservation
(18, scoped windows first), the container (19), its classification (20).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace

from redis.exceptions import RedisError

from pidispatch.common.faults import crash_point
from pidispatch.common.log import get_logger
from pidispatch.common.models import Job, job_from_fields
from pidispatch.common.outcome import JobConfigRefused, JobRefusal
from pidispatch.forges import FORGES
from pidispatch.forges.api import Tip, forge_api
from pidispatch.worker.context import Held, WorkerContext, set_state
from pidispatch.worker.cron.firings import previous_run_at
from pidispatch.worker.egress.proxy import EgressRefused
from pidispatch.worker.egress.rules import job_env
from pidispatch.worker.engine.attempt import AttemptOutcome
from pidispatch.worker.engine.container import SpecRefused, build_spec, container_name, resolve_image
from pidispatch.worker.engine.environment import container_env
from pidispatch.worker.engine.exitline import parse_exit_line
from pidispatch.worker.engine.preflight import image_refusal, inspect_image
from pidispatch.worker.engine.runner import DockerUnavailable, RunResult, classify, run_container
from pidispatch.worker.engine.secrets import resolve_secrets
from pidispatch.worker.engine.workspace import prepare_workspace, remove_workspace
from pidispatch.worker.forgework.authored import authored_refusal
from pidispatch.worker.forgework.clone import clone_tip
from pidispatch.worker.history.records import record_path
from pidispatch.worker.limits import budget
from pidispatch.worker.limits.scopedbudget import reserve_all
from pidispatch.worker.local import inspect_folder, local_user

NEVER_STARTED = "container-never-started"
# The user name git offers with a token as the password (GitHub and GitLab require these exact ones).
GIT_USERNAMES = {f.name: f.git_username for f in FORGES}


class Spend:
    """What this attempt has committed: a budget reservation, a started container."""

    def __init__(self) -> None:
        self.reservation: budget.Reservation | None = None
        self.started = False
        self.refunded = False

    @property
    def reserved(self) -> bool:
        return self.reservation is not None and not self.refunded

    async def refund(self) -> None:
        """Give the reserved slot back; never raises (a failed refund leaves ``budgetReserved`` true)."""
        if self.reservation is None or self.refunded:
            return
        try:
            await self.reservation.release()
            self.refunded = True
        except RedisError as exc:
            get_logger().warning("budget_refund_failed", error=type(exc).__name__)


def capture_path(ctx: WorkerContext, job: Job) -> str | None:
    """``<PI_LOGS_DIR>/<id>.log`` when ``PI_CAPTURE_JOB_LOGS=1``: the agent's output holds payload text, so it
    is kept only on this host, beside the record, and swept with it."""
    if not ctx.settings.capture_job_logs:
        return None
    return str(record_path(ctx.settings.logs_dir, job.id).with_suffix(".log"))


def refuse(job: Job, reason: str, *, budget_reserved: bool = False) -> AttemptOutcome:
    get_logger().info("job_refused", job=job.id, reason=reason)
    return AttemptOutcome("policy", reason, budget_reserved=budget_reserved)


def settle_result(result: RunResult, *, budget_reserved: bool) -> AttemptOutcome:
    """Pure: how a container's end is recorded (docs/worker.md); telemetry never moves the class."""
    info = parse_exit_line(result.tail)
    outcome, reason = classify(result)
    if outcome == "policy" and reason == "runner-policy" and info is not None and info.exit_reason:
        reason = info.exit_reason
    return AttemptOutcome(
        outcome, reason, result, info, budget_reserved=budget_reserved, retry=outcome == "failed",
    )


async def run_ladder(ctx: WorkerContext, held: Held, job: Job, spend: Spend) -> AttemptOutcome:
    """One attempt. Refusals return; ``InfraFault`` and ``DockerUnavailable``/``RedisError`` propagate."""
    s = ctx.settings
    authored = await authored_refusal(s.triggers_file, job)
    if authored is not None:
        return refuse(job, authored)
    try:
        image = resolve_image(job, s)
    except ValueError:
        return refuse(job, "config-refused")
    refusal = image_refusal(await inspect_image(ctx.docker, image), job, s)
    if refusal is not None:
        return refuse(job, refusal.reason)
    if ctx.egress is not None:
        try:
            await ctx.egress.ensure()  # before anything is spent; Docker away propagates (a hold)
        except EgressRefused as exc:
            get_logger().error("egress_proxy_refused", reason=exc.reason, detail=str(exc),
                               fix="pi-dispatch egress-image build (or PI_EGRESS=0 to run jobs unfiltered)")
            return refuse(job, exc.reason)
    secrets = await resolve_secrets(job, s, env=ctx.env, abort=held.abort)
    if isinstance(secrets, JobRefusal):
        return refuse(job, secrets.reason)
    user, workspace, sha = s.job_user, None, None
    token: str | None = None
    tip: Tip | None = None
    if job.is_local:
        folder = await inspect_folder(job.folder or "")
        if isinstance(folder, JobRefusal):
            return refuse(job, folder.reason)
        user, workspace, sha = local_user(folder), job.folder, folder.sha
    else:
        forge = await _forge_gates(ctx, job)
        if isinstance(forge, JobRefusal):
            return refuse(job, forge.reason)
        token, tip = forge
    previous = await previous_run_at(ctx.redis, ctx.keys, job) if job.is_local else None
    job_dir = await prepare_workspace(job, s, sha=sha, previous_run_at=previous)
    keep = False
    try:
        if tip is not None and token is not None:
            cloned = await _clone(job, job_dir, tip, token)
            if cloned is not None:
                return refuse(job, cloned.reason)
        return await _spend(ctx, held, job, spend, job_dir=job_dir, user=user, workspace=workspace,
                            secrets=secrets, token=token)
    except (DockerUnavailable, asyncio.CancelledError):
        # A started container whose end is not known yet still mounts the folder: the re-attach removes it.
        keep = spend.started
        raise
    finally:
        if not keep:
            await remove_workspace(job_dir, s.jobs_dir)


async def _forge_gates(ctx: WorkerContext, job: Job) -> tuple[str, Tip] | JobRefusal:
    """Rows 13-14: a token for this job's repository only, the default branch's tip from fresh API calls
    (never the webhook's fields), and that branch must be protected."""
    try:
        if ctx.http is None:  # only a worker built without its HTTP session (a test) gets here
            raise JobConfigRefused("no HTTP client for forge calls")
        api = forge_api(job, ctx.forge_clients)
        token = await api.mint()
        tip = await api.protected_tip(token)
        if tip is None:
            return JobRefusal("unprotected-branch")
    except JobConfigRefused:
        # Recorded ``config-refused``: the message may name paths or variables, so it stays out.
        get_logger().warning("refused_config", job=job.id, kind=job.kind, step="forge")
        return JobRefusal("config-refused")
    return token, tip


async def _clone(job: Job, job_dir: str, tip: Tip, token: str) -> JobRefusal | None:
    """Row 15 for forge jobs: the tip commit, fetched with the token only in a throw-away askpass."""
    try:
        return await clone_tip(
            os.path.join(job_dir, "workspace"), clone_url=tip.clone_url, sha=tip.sha, token=token,
            username=GIT_USERNAMES.get(job.kind, "pi-dispatch"),
        )
    except JobConfigRefused:
        get_logger().warning("refused_config", job=job.id, kind=job.kind, step="clone")
        return JobRefusal("config-refused")


async def _spend(
    ctx: WorkerContext, held: Held, job: Job, spend: Spend, *, job_dir: str, user: str, workspace: str | None,
    secrets: dict[str, str], token: str | None,
) -> AttemptOutcome:
    s = ctx.settings
    capped = await budget.token_cap_refusal(ctx.redis, ctx.keys, s, ctx.clock())
    if capped is not None:
        return refuse(job, capped.reason)
    attempt = job_from_fields(held.fields)[1]
    reserved = await reserve_all(ctx.redis, ctx.keys, s, ctx.scoped_limits, job, attempt, ctx.clock())
    if isinstance(reserved, JobRefusal):
        # A refused global reservation is not given back (the record says so); ``scope-cap`` took nothing.
        return refuse(job, reserved.reason, budget_reserved=reserved.budget_reserved)
    spend.reservation = reserved
    name = container_name(job.id)
    try:
        env = container_env(job, name=name, settings=s, host_env=ctx.env, secrets=secrets, forge_token=token)
        spec = build_spec(job, job_dir, s, env=env, user=user, workspace=workspace, instance=ctx.instance)
    except (SpecRefused, JobConfigRefused, ValueError):
        # Recorded ``config-refused``: nothing ran, so the reservation goes back.
        await spend.refund()
        return refuse(job, "config-refused")

    async def started(container_id: str) -> None:
        spend.started = True
        get_logger().info("job_started", job=job.id, container=container_id[:12])
        ctx.metrics.started(time.monotonic() - launched)
        await set_state(ctx, job.id, state="running", container=container_id)

    crash_point("worker_before_launch")
    await set_state(ctx, job.id, held=True, state="launching")
    crash_point("worker_after_launching")
    launched = time.monotonic()
    try:
        if ctx.egress is not None:
            network = await ctx.egress.networks.take(job.id)
            spec = replace(spec, network=network, env={**spec.env, **job_env(ctx.egress.name)})
        result = await run_container(
            ctx.docker, spec, timeout_s=s.job_timeout_s, abort=held.abort, on_started=started,
            capture=capture_path(ctx, job),
        )
    except (DockerUnavailable, asyncio.CancelledError):
        if not spend.started:
            # Nothing started (a created one is removed by the next find_started): the next try runs it.
            await asyncio.shield(set_state(ctx, job.id, state="starting"))
        raise
    if not spend.started or (result.exit_code in (125, 126, 127) and not result.aborted):
        await spend.refund()  # aborted before the start, or the runtime never started the runner
    done = settle_result(result, budget_reserved=spend.reserved)
    await count_tokens(ctx, done)
    return done


async def count_tokens(ctx: WorkerContext, done: AttemptOutcome) -> None:
    """Add a run's tokens to today's counter (never raises), whichever process saw it end."""
    if done.exit_info is not None and done.exit_info.tokens:
        total = done.exit_info.tokens["total"]
        await budget.record_token_spend(ctx.redis, ctx.keys, ctx.settings, ctx.clock(), total)
