"""Operator verbs that need only Redis: ``pi-dispatch cancel <jobId>`` and ``pi-dispatch status``.

They read nothing but REDIS_URL and PD_KEY_PREFIX, so they work while forge credentials or other settings
are broken, and they fail fast (exit 1, naming REDIS_URL) when Redis does not answer.

Cancel removes a job that has not started (waiting in ``pd:delayed``, or queued and not yet delivered to
any worker) with one atomic step each, so it never races a worker into a half-run; a job a worker holds
gets a request the worker acknowledges. A job removed while held on its ``waitFor`` conditions has its hold
(hash, index member, and the target's lease if it still names the job) removed after it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.typing import EncodableT

from pidispatch.common.connect import connected, redis_settings
from pidispatch.common.delayed import find_delayed, remove_delayed
from pidispatch.common.keys import (
    CANCEL_POLL_S,
    CANCEL_REQUEST_TTL_MS,
    CANCEL_WAIT_S,
    JOB_STATE_TTL_S,
    WORKER_GROUP,
    Keys,
)
from pidispatch.common.redis import Redis
from pidispatch.common.registry import EGRESS_FIELD, IMAGE_MISSING, JOB_IMAGE_FIELD, host_streams
from pidispatch.common.runtime import now_ms
from pidispatch.common.scripts import CANCEL_QUEUED, STREAM_COUNTS
from pidispatch.worker.waits.state import held_jobs, read_hold, release_hold

JOB_ID_MAX = 200
# States after which there is nothing left to cancel ("cancelled" is written by this module).
ENDED_STATES = frozenset({"completed", "policy", "failed", "cancelled"})
CANCEL_REASON = "operator-cancel"
# Entries a stream script reads per XRANGE/XPENDING call; the scan stays inside Redis either way.
SCAN_PAGE = 500

def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = sub.add_parser(
        "cancel", help="cancel a job: remove it if it has not started, else stop its run",
        description="Cancel a job by id: a queued or delayed job is removed (no record), a running one is "
        "stopped by the worker holding it, which must acknowledge. Exit 0 only when it was cancelled.",
    )
    c.add_argument("job_id", metavar="jobId", help="the job id (as `runs` or `events` list it)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.add_argument(
        "--wait", type=float, default=CANCEL_WAIT_S, metavar="SECONDS",
        help="how long to wait for a running job's worker to acknowledge (default %(default)s)",
    )  # fmt: skip
    c.set_defaults(func=cancel_command)
    s = sub.add_parser(
        "status", help="fleet pause state and job counts (queued, running, delayed, dead)",
        description="Whether the fleet is paused, how many jobs are queued, running, delayed and dead, "
        "and which hosts are registered, read from Redis (REDIS_URL).",
    )
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=status_command)


def valid_job_id(job_id: str) -> bool:
    """A job id is a Redis key suffix: 1-200 printable characters without whitespace."""
    return 0 < len(job_id) <= JOB_ID_MAX and job_id.isprintable() and not any(c.isspace() for c in job_id)


def _s(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


async def job_streams(redis: Redis, keys: Keys) -> list[str]:
    """The shared stream, then every host's stream (registered or found in the keyspace)."""
    return [keys.jobs, *sorted(set((await host_streams(redis, keys)).values()))]


# ---- cancel ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CancelResult:
    job: str
    cancelled: bool
    message: str
    where: str | None = None  # "delayed" | "queued" | "running"
    attempt: int | None = None
    host: str | None = None
    state: str | None = None
    waiting_on: bool = False  # a wait-for hold of the job existed and was removed

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job, "cancelled": self.cancelled, "where": self.where, "attempt": self.attempt,
            "host": self.host, "state": self.state, "waitingOn": self.waiting_on, "message": self.message,
        }  # fmt: skip


def _removed_message(job_id: str, where: str, attempt: int, waiting_on: bool = False) -> str:
    """``attempt`` is the attempt that would have run next; earlier ones left their records. A held job
    is queued (not delayed) while it waits for a worker to check its conditions again."""
    if where == "delayed":
        was = "waiting on a condition" if waiting_on else "waiting"
        if attempt > 1:
            ran = f"attempt {attempt - 1} already ran; its record stays"
            return f"cancelled {job_id}: it was {was} to run again ({ran})"
        return f"cancelled {job_id}: it was {was}, it never ran; no record was written"
    if attempt > 1:
        on = ", waiting on a condition" if waiting_on else ""
        ran = f"attempt {attempt - 1} already ran; its record stays"
        return f"cancelled {job_id}: it was queued to run again{on} ({ran})"
    was = "queued, waiting on a condition," if waiting_on else "queued"
    return f"cancelled {job_id}: it was {was} and never ran; no record was written"


async def _drop_hold(redis: Redis, keys: Keys, job_id: str) -> bool:
    """Remove the job's wait-for hold, if it has one; only once the job left pd:delayed and the streams,
    so no worker holds it (a running job's hold is its gate's to end). True when there was one."""
    hold = await read_hold(redis, keys, job_id)
    if hold is None:
        return False
    await release_hold(redis, keys, job_id, hold.dedup_id, cleared=False)
    return True


async def _find_in_streams(redis: Redis, keys: Keys, job_id: str) -> list[str] | None:
    """The first stream verdict that is not 'absent': removed wins at once, delivered beats done."""
    best: list[str] | None = None
    for stream in await job_streams(redis, keys):
        args: list[EncodableT] = [WORKER_GROUP, job_id, JOB_STATE_TTL_S, SCAN_PAGE]
        raw = await CANCEL_QUEUED(redis, [stream, keys.job(job_id)], args)
        verdict = [_s(v) or "" for v in raw]
        if verdict[0] == "removed":
            return verdict
        if verdict[0] == "delivered" or (verdict[0] == "done" and best is None):
            best = verdict
    return best


async def cancel_job(
    redis: Redis, keys: Keys, job_id: str, *, wait_s: float = CANCEL_WAIT_S, poll_s: float = CANCEL_POLL_S
) -> CancelResult:
    """Cancel wherever the job is: waiting, queued, or held by a worker (then ask it and wait)."""
    # Two rounds: a job can move between pd:delayed and a stream while we look (promoted, or retried).
    for _ in range(2):
        envelope = await find_delayed(redis, keys, job_id)
        if envelope and await remove_delayed(redis, keys, envelope.member, state="cancelled"):
            held = await _drop_hold(redis, keys, job_id)
            message = _removed_message(job_id, "delayed", envelope.attempt, held)
            return CancelResult(job_id, True, message, "delayed", envelope.attempt, state="cancelled",
                                waiting_on=held)  # fmt: skip
        verdict = await _find_in_streams(redis, keys, job_id)
        if verdict and verdict[0] == "removed":
            attempt = int(verdict[2]) if verdict[2].isdigit() else 1
            held = await _drop_hold(redis, keys, job_id)
            message = _removed_message(job_id, "queued", attempt, held)
            return CancelResult(job_id, True, message, "queued", attempt, state="cancelled", waiting_on=held)
        if verdict and verdict[0] == "delivered":
            return await _cancel_running(redis, keys, job_id, verdict[2], wait_s, poll_s)
    return await _nothing_to_cancel(redis, keys, job_id)


async def _cancel_running(
    redis: Redis, keys: Keys, job_id: str, host: str, wait_s: float, poll_s: float
) -> CancelResult:
    """Ask the worker holding the job to stop it; only its acknowledgement counts as success."""
    earlier = _s(await redis.get(keys.cancel_ack(job_id)))
    if earlier:
        message = f"nothing to cancel: a cancel of {job_id} was already accepted by {earlier}"
        return CancelResult(job_id, False, message, "running", host=earlier)
    await redis.set(keys.cancel(job_id), CANCEL_REASON, px=CANCEL_REQUEST_TTL_MS)
    for poll in range(max(1, math.ceil(wait_s / poll_s)) + 1):
        if poll:
            await asyncio.sleep(poll_s)
        acked_by = _s(await redis.get(keys.cancel_ack(job_id)))
        if acked_by:
            message = f"cancel accepted by {acked_by}; the run record will say {CANCEL_REASON}"
            return CancelResult(job_id, True, message, "running", host=acked_by)
    # The worker deletes the request when it acts on it: a request already gone was taken, not ignored.
    taken = await redis.delete(keys.cancel(job_id)) == 0
    acked_by = _s(await redis.get(keys.cancel_ack(job_id)))
    if acked_by:
        message = f"cancel accepted by {acked_by}; the run record will say {CANCEL_REASON}"
        return CancelResult(job_id, True, message, "running", host=acked_by)
    state = _s(await redis.hget(keys.job(job_id), "state"))
    if taken:
        message = (
            f"worker {host} took the cancel request for {job_id} but did not confirm within {wait_s:g}s; "
            "its run record will tell whether it stopped"
        )
    elif state in ENDED_STATES:
        message = f"cancel not confirmed: {job_id} finished meanwhile ({state}); nothing was changed"
    elif state == "delayed":
        message = (
            f"cancel not confirmed: {job_id} went back to wait for a retry meanwhile; nothing was changed "
            f"(run pi-dispatch cancel {job_id} again)"
        )
    elif not await redis.exists(keys.host(host)):
        message = (
            f"no worker acknowledged: {job_id} is held by {host}, which has no live registry row; "
            "nothing was changed"
        )
    else:
        message = (
            f"no worker acknowledged the cancel of {job_id} within {wait_s:g}s (held by {host}); "
            "nothing was changed"
        )
    return CancelResult(job_id, False, message, "running", host=host, state=state)


async def _nothing_to_cancel(redis: Redis, keys: Keys, job_id: str) -> CancelResult:
    """Nothing runs or waits; a hold that outlived its job is still removed, so ``waits`` stops listing it."""
    held = await _drop_hold(redis, keys, job_id)
    left = "; its leftover wait-for hold was removed" if held else ""
    state = _s(await redis.hget(keys.job(job_id), "state"))
    if state in ENDED_STATES:
        message = f"nothing to cancel: {job_id} already ended ({state}){left}"
        return CancelResult(job_id, False, message, state=state, waiting_on=held)
    message = f"no job {job_id} is queued, waiting or running{left}"
    return CancelResult(job_id, False, message, state=state, waiting_on=held)


async def cancel_command(args: argparse.Namespace) -> int:
    job_id: str = args.job_id
    if not valid_job_id(job_id):
        # A usage error (exit 1), refused before Redis is contacted.
        print(f"pi-dispatch: cancel: {job_id!r} is not a job id (1-{JOB_ID_MAX} printable, no spaces)",
              file=sys.stderr)  # fmt: skip
        return 1
    if not 0 < args.wait <= 3600:
        print("pi-dispatch: cancel: --wait must be between 0 and 3600 seconds", file=sys.stderr)
        return 1
    settings = redis_settings()
    on_failure = f"the cancel may not have happened; run pi-dispatch cancel {job_id} again once it answers"
    async with connected(settings, on_failure) as redis:
        result = await cancel_job(redis, Keys(settings.key_prefix), job_id, wait_s=args.wait)
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        print(result.message, file=sys.stdout if result.cancelled else sys.stderr)
    return 0 if result.cancelled else 1


# ---- status ---------------------------------------------------------------------------------------


async def fleet_status(redis: Redis, keys: Keys) -> dict[str, Any]:
    """Pause flags and job counts summed over every job stream."""
    queued = running = 0
    for stream in await job_streams(redis, keys):
        q, r = await STREAM_COUNTS(redis, [stream], [WORKER_GROUP, SCAN_PAGE])
        queued, running = queued + int(q), running + int(r)
    paused_prefix = keys.paused_host("")
    paused_hosts = sorted(
        [(_s(k) or "")[len(paused_prefix) :] async for k in redis.scan_iter(match=f"{paused_prefix}*")]
    )
    members = sorted(_s(m) or "" for m in await redis.smembers(keys.hosts))
    async with redis.pipeline(transaction=False) as pipe:
        for m in members:
            pipe.exists(keys.host(m))
            pipe.hget(keys.host(m), JOB_IMAGE_FIELD)
            pipe.hget(keys.host(m), EGRESS_FIELD)
        pipe.exists(keys.paused)
        pipe.zcard(keys.delayed)
        pipe.xlen(keys.dead)
        pipe.zcount(keys.window_held, f"({now_ms()}", "+inf")
        *per_host, paused, n_delayed, n_dead, n_windowed = await pipe.execute()
    rows = list(zip(members, per_host[0::3], per_host[1::3], per_host[2::3], strict=True))
    live = [m for m, alive, _, _ in rows if alive]
    no_image = [m for m, alive, image, _ in rows if alive and _s(image) == IMAGE_MISSING]
    unfiltered = [m for m, alive, _, egress in rows if alive and _s(egress) == "off"]
    # Read through the holds so an index member whose hash expired is pruned, not counted.
    n_waiting = len(await held_jobs(redis, keys))
    return {
        "paused": bool(paused), "pausedHosts": paused_hosts, "queued": queued, "running": running,
        "delayed": int(n_delayed), "dead": int(n_dead), "hosts": live, "heldByWindow": int(n_windowed),
        "heldByWait": n_waiting, "imageMissing": no_image, "egressOff": unfiltered,
    }  # fmt: skip


def paused_text(fleet: bool, hosts: Sequence[str]) -> str:
    """The fleet's pause and each host's, said apart once a host is paused: "no (paused hosts: b)" read
    as a contradiction."""
    said = "yes, every worker" if fleet else "no"
    return f"{said} (fleet); hosts paused: {', '.join(hosts)}" if hosts else said


def format_status(status: dict[str, Any]) -> str:
    """A few aligned lines for people."""
    rows = [
        ("paused", paused_text(status["paused"], status["pausedHosts"])),
        *((name, str(status[name])) for name in ("queued", "running", "delayed", "dead")),
        ("windowed", f"{status['heldByWindow']} of the delayed wait for a quiet-hours window"),
        ("waiting", f"{status['heldByWait']} of the delayed wait for a condition (pi-dispatch waits)"),
        ("hosts", ", ".join(status["hosts"]) or "none alive"),
    ]
    if status["imageMissing"]:
        rows.append(("image", f"missing on {', '.join(status['imageMissing'])}: every job there is refused "
                              "job-image-missing (build it: pi-dispatch job-image build)"))
    if status["egressOff"]:
        rows.append(("egress", f"off on {', '.join(status['egressOff'])}: jobs there reach the whole network "
                               "(PI_EGRESS=0)"))
    return "\n".join(f"{name:<8} {value}" for name, value in rows)


async def status_command(args: argparse.Namespace) -> int:
    settings = redis_settings()
    async with connected(settings, "no status to show") as redis:
        status = await fleet_status(redis, Keys(settings.key_prefix))
    print(json.dumps(status) if args.json else format_status(status))
    return 0
