"""A job this host cannot serve goes once to a live host that can (besides routing at enqueue, because
a stream hand-off is one atomic script, not a race between clocks).

Only capability needs (``s:<secret profile>``, ``w:<wait profile>``) are considered. A job forwarded
once is never forwarded again: if it cannot be served where it lands, that host refuses it with the
usual pre-spend reason, so a job can neither bounce between hosts nor vanish.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

from pidispatch.common.keys import JOB_STATE_TTL_S, WORKER_GROUP
from pidispatch.common.log import get_logger
from pidispatch.common.models import Job
from pidispatch.common.registry import HostRow, is_live, job_needs, pick_host, read_live_hosts
from pidispatch.common.workerscripts import FORWARD
from pidispatch.worker.context import Held, WorkerContext

FORWARDED_FIELD = "forwardedBy"


def forward_target(
    needs: Sequence[str], caps: frozenset[str], hosts: Sequence[HostRow], job_id: str, me: str
) -> str | None:
    """Pure: the host to hand this job to, or None to keep it (servable here, or nobody else can)."""
    wanted = set(needs)
    if not wanted or wanted <= caps:
        return None
    capable = (h.name for h in hosts if h.name != me and h.routes and is_live(h) and wanted <= h.caps)
    return pick_host(capable, job_id)


async def forward_if_unservable(ctx: WorkerContext, held: Held, job: Job) -> bool:
    """True when the job was handed to another host (and acked here). Raises RegistryUnreachable or
    RedisError when Redis cannot answer: the job is then held, never refused for want of a registry."""
    needs = job_needs(job)
    if not needs or set(needs) <= ctx.caps or held.fields.get(FORWARDED_FIELD):
        return False
    hosts = await read_live_hosts(ctx.redis, ctx.keys, ctx.clock())
    target = forward_target(needs, ctx.caps, hosts, job.id, ctx.host)
    if target is None:
        return False
    fields = {**held.fields, FORWARDED_FIELD: ctx.host}
    moved = await FORWARD(
        ctx.redis, [held.stream, ctx.keys.host_jobs(target), ctx.keys.job(job.id)],
        [WORKER_GROUP, held.entry_id, JOB_STATE_TTL_S, *chain.from_iterable(fields.items())],
    )
    if moved:
        get_logger().info("job_forwarded", job=job.id, to_host=target, needs=",".join(needs))
    return True
