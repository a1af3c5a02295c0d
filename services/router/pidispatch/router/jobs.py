"""Jobs from a matched rule: ids, the semantic dedup key and replica fan-out (spec ingest §5). Pure."""

from __future__ import annotations

import msgspec

from pidispatch.common.models import Job, Target, Trigger
from pidispatch.router.triggers import RunSpec

JOB_ID_PREFIX = {"github": "gh-", "gitlab": "gl-", "forgejo": "fj-", "azure": "az-"}
# Forges whose pull requests number apart from issues, so a PR key needs its own separator.
_BANG_PR_KINDS = frozenset({"gitlab", "azure"})
_CLOSE_ACTIONS = frozenset({"closed", "close"})


class JobIdError(ValueError):
    """No deterministic id can be built; never fall back to a random one (it would defeat dedup)."""


def job_id(kind: str, delivery: str) -> str:
    """``<prefix><delivery>``: the exact-dedup identity, the same on every redelivery."""
    prefix = JOB_ID_PREFIX.get(kind)
    if prefix is None:
        raise JobIdError(f"no job id prefix for kind {kind!r}")
    if not delivery:
        raise JobIdError("empty delivery id")
    return prefix + delivery


def build_job(
    *, kind: str, delivery: str, repo: str, target: Target, trigger: Trigger, run: RunSpec
) -> Job:
    """The job before fan-out. An explicit allow-list of the rule's run fields (no spread), so a field
    added to ``RunSpec`` later never reaches a container by accident."""
    return Job(
        id=job_id(kind, delivery),
        kind=kind,
        repo=repo,
        target=target,
        flow=run.flow,
        command=run.command,
        trigger=trigger,
        packages=run.packages,
        image=run.image,
        skills_dir=run.skills_dir,
        instructions=run.instructions,
        resume=run.resume,
        secrets=dict(run.secrets) if run.secrets is not None else None,
        secrets_profile=run.secrets_profile,
        replicas=run.replicas,
    )


def is_close_job(job: Job) -> bool:
    matched = job.trigger.matched if job.trigger else None
    if matched is None:
        return False
    return matched.type == "issue" or (matched.type == "pull_request" and matched.action in _CLOSE_ACTIONS)


def semantic_key(job: Job) -> str:
    """``<repo><sep><number>:<flowSlot>[:r<i>]`` (spec §5.3): one job per item and flow per window."""
    if job.target is None:
        raise ValueError("a forge job needs a target")
    sep = "!" if job.target.type == "pull_request" and job.kind in _BANG_PR_KINDS else "#"
    slot = f"cmd:{job.command}" if job.command is not None else f"{job.flow}"
    if is_close_job(job):
        slot = "closed:" + slot
    key = f"{job.repo}{sep}{job.target.number}:{slot}"
    return f"{key}:r{job.replica}" if job.replica is not None else key


def fan_out(job: Job) -> list[Job]:
    """One job per replica. An unflagged job stays byte-identical (no ``replica`` key, no suffix)."""
    n = job.replicas or 1
    if n <= 1:
        return [job]
    return [msgspec.structs.replace(job, id=f"{job.id}-r{i}", replica=i) for i in range(1, n + 1)]


def planned(job: Job, enqueued_at: int) -> list[tuple[Job, str]]:
    """The jobs to enqueue, stamped, each with its semantic dedup key."""
    stamped = msgspec.structs.replace(job, enqueued_at=enqueued_at)
    return [(j, semantic_key(j)) for j in fan_out(stamped)]
