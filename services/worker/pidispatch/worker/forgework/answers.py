"""What the worker says on the issue or pull request: a fixed sentence for a
refusal before spend, for a paid stop, and for a terminal failure; nothing for a completed run (the agent
reports itself) and nothing for an attempt that will be retried.

Posting never fails a job: a comment that cannot be posted is logged ``comment_failed``. A local job has
nobody to tell, so its sentence is logged as a ``comment`` event instead.
"""

from __future__ import annotations

from pidispatch.common.errors import InfraError
from pidispatch.common.log import get_logger
from pidispatch.common.models import Job
from pidispatch.common.outcome import InfraFault, JobConfigRefused
from pidispatch.forges.api import forge_api
from pidispatch.worker.context import WorkerContext
from pidispatch.worker.forgework import sentences


def answer_for(outcome: str, reason: str | None, *, local: bool) -> str | None:
    """Pure: the sentence for a terminal outcome, or None when nothing is said. A paid stop's reason
    only ever comes from a container's end, so the reason alone tells a stop from a refusal."""
    if outcome == "completed":
        return None
    if outcome == "failed":
        return sentences.FAILED
    if reason in sentences.STOPS:
        return sentences.stopped(reason)
    return sentences.refusal(reason or "", local=local)


async def post_answer(ctx: WorkerContext, job: Job, text: str) -> None:
    log = get_logger()
    if job.is_local or ctx.http is None:
        log.info("comment", job=job.id, text=text)
        return
    try:
        api = forge_api(job, ctx.forge_clients)
        await api.comment(await api.mint(), text)
        log.info("comment_posted", job=job.id)
    except (JobConfigRefused, InfraError, InfraFault) as exc:
        log.warning("comment_failed", job=job.id, error=type(exc).__name__)
