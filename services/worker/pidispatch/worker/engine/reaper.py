"""The boot reaper: containers of this deployment labelled for this host that nothing will ever record or
remove (another deployment's, on the same daemon and host name, carry another ``pd.instance``).

Job containers are kept after their exit until their record is written, so the reaper
must never take one whose outcome is not recorded yet: that one is re-attached by the job's own pending
entry (this host's), or belongs to a job another host holds now. It removes one that never started, one
whose job is recorded (a crash between the record and the removal), and one that no job owns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from aiodocker.containers import DockerContainer
from aiodocker.exceptions import DockerError
from redis.exceptions import RedisError

from pidispatch.common.instance import LABEL_INSTANCE
from pidispatch.common.keys import WORKER_GROUP
from pidispatch.common.log import get_logger
from pidispatch.common.models import decode_fields
from pidispatch.common.streams import pending
from pidispatch.worker.context import WorkerContext
from pidispatch.worker.engine import dockerapi
from pidispatch.worker.engine.container import LABEL_HOST, LABEL_JOB
from pidispatch.worker.engine.runner import force_remove, is_ours
from pidispatch.worker.history.records import read_record
from pidispatch.worker.lifecycle import TERMINAL_STATES

PENDING_MAX = 10_000
# What the stream-side scripts write into pd:job:<id> wherever a job is (re)queued: where it waits, not
# that anything ran. A hash holding only these (and state queued) tells the reaper what an absent one did.
LOCATION_FIELDS = frozenset({"stream", "entry", "eventEntry"})


def _says_nothing_ran(job_state: Mapping[str, str]) -> bool:
    """Pure: no job owns a container by this state (absent, or only where the job is queued)."""
    rest = {k: v for k, v in job_state.items() if k not in LOCATION_FIELDS}
    return not rest or rest == {"state": "queued"}


def should_remove(
    *, owned: bool, container_state: str, job_state: Mapping[str, str], recorded_attempt: int | None
) -> bool:
    """Pure: whether the boot reaper removes one of this host's job containers."""
    if owned:
        return False  # this host's pending job: its next pass re-attaches, records, then removes
    if container_state == "created":
        return True  # never started: nothing ran, nothing to record
    if job_state.get("state") in TERMINAL_STATES:
        return True
    if recorded_attempt is not None and job_state.get("attempt") in (None, str(recorded_attempt)):
        return True  # this attempt is recorded (it waits in pd:delayed for a retry, or the ack is done)
    # No job owns it any more: its state expired, or it never had one beyond where it was queued.
    return _says_nothing_ran(job_state)


async def _owned_jobs(ctx: WorkerContext, streams: list[str]) -> set[str]:
    """The job ids of this host's pending entries."""
    owned: set[str] = set()
    for stream in streams:
        rows = await pending(ctx.redis, stream, WORKER_GROUP, count=PENDING_MAX, consumer=ctx.host)
        async with ctx.redis.pipeline(transaction=False) as pipe:
            for row in rows:
                pipe.xrange(stream, min=row.entry_id, max=row.entry_id, count=1)
            found = await pipe.execute()
        owned |= {job for hit in found if hit and (job := decode_fields(hit[0][1]).get("id"))}
    return owned


async def _decide(ctx: WorkerContext, container: DockerContainer, owned: set[str]) -> tuple[bool, str | None]:
    info = dockerapi.listed(container)
    labels = info.get("Labels") or {}
    job_id = labels.get(LABEL_JOB)
    if not isinstance(job_id, str) or not job_id:
        return False, None  # not a job container (listed by the label's presence: cannot happen)
    state = decode_fields(await ctx.redis.hgetall(ctx.keys.job(job_id)))
    record = await read_record(ctx.settings.logs_dir, job_id)
    if LABEL_INSTANCE not in labels and not state and record is None:
        return False, job_id  # made before the label and unknown here: maybe another deployment's
    remove = should_remove(
        owned=job_id in owned, container_state=str(info.get("State") or ""), job_state=state,
        recorded_attempt=record.attempt if record is not None else None,
    )
    return remove, job_id


async def reap_strays(ctx: WorkerContext, streams: list[str]) -> bool:
    """Remove this host's containers that nothing will record or remove; True once done.

    Runs before any job starts. Redis or Docker failing skips it (False: the next check tries again).
    """
    log = get_logger()
    # This host's, of this deployment (or from before containers carried the label: see ``_decide``).
    mine = json.dumps({"label": [f"{LABEL_HOST}={ctx.host}", LABEL_JOB]})  # job containers: not the proxy
    try:
        owned = await _owned_jobs(ctx, streams)
        containers = [c for c in await ctx.docker.containers.list(all=True, filters=mine)
                      if is_ours(dockerapi.listed(c).get("Labels") or {}, ctx.instance)]
        verdicts = [(c, *await _decide(ctx, c, owned)) for c in containers]
    except (RedisError, DockerError, OSError) as exc:
        log.warning("reaper_skipped", error=type(exc).__name__)
        return False
    for container, remove, job_id in verdicts:
        if remove:
            await force_remove(container)
            log.warning("stray_container_removed", job=job_id)
        elif job_id not in owned:
            log.info("stray_container_kept", job=job_id, why="outcome-not-recorded")
    return True
