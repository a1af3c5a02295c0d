"""Jobs from a matched rule: ids, the semantic dedup key and replica fan-out. Pure."""

from __future__ import annotations

from typing import Any

import msgspec

from pidispatch.common.models import Job, Target, Trigger
from pidispatch.forges import FORGES, item_sep
from pidispatch.triggers.rules import RunSpec

JOB_ID_PREFIX = {f.name: f.job_id_prefix for f in FORGES}
# Every forge's word for a pull request close (an issue close is told by its trigger type).
_CLOSE_ACTIONS = frozenset(f.pr_close_word for f in FORGES if f.pr_close_word is not None)


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
    *,
    kind: str,
    delivery: str,
    repo: str,
    target: Target,
    trigger: Trigger,
    run: RunSpec,
    flow: str | None = None,
    project_id: int | None = None,
    azure: dict[str, Any] | None = None,
) -> Job:
    """The job before fan-out. An explicit allow-list of the rule's run fields (no spread),
    so a field added to ``RunSpec`` later never reaches a container by accident; an unset field stays
    absent. ``flow``, when given, replaces the rule's (a comment naming a known flow); a command rule
    carries no flow at all. No login, username, email or display name is a parameter here."""
    chosen = flow if flow is not None else run.flow
    return Job(
        id=job_id(kind, delivery),
        kind=kind,
        repo=repo,
        target=target,
        flow=chosen if run.command is None else None,
        command=run.command,
        trigger=trigger,
        project_id=project_id,
        azure=azure,
        provider=run.provider,
        model=run.model,
        max_turns=run.max_turns,
        models=list(run.models) if run.models is not None else None,
        packages=run.packages,
        image=run.image,
        backend=run.backend,
        exclude_tools=list(run.exclude_tools) if run.exclude_tools is not None else None,
        max_cost_usd=run.max_cost_usd,
        skills_dir=run.skills_dir,
        instructions=run.instructions,
        resume=run.resume,
        secrets=dict(run.secrets) if run.secrets is not None else None,
        secrets_profile=run.secrets_profile,
        wait_for=[dict(c) for c in run.wait_for] if run.wait_for is not None else None,
        replicas=run.replicas,
    )


def is_close_job(job: Job) -> bool:
    matched = job.trigger.matched if job.trigger else None
    if matched is None:
        return False
    return matched.type == "issue" or (matched.type == "pull_request" and matched.action in _CLOSE_ACTIONS)


def item_ref(job: Job) -> str:
    """``<repo><sep><number>``, the item a forge job is about: ``sep`` is ``!`` for pull requests on
    GitLab and Azure (numbered apart from issues there), else ``#``. A wait check gets it as argv[1]."""
    if job.target is None:
        raise ValueError("a forge job needs a target")
    return f"{job.repo}{item_sep(job.kind, job.target.type == 'pull_request')}{job.target.number}"


def semantic_key(job: Job) -> str:
    """``<item_ref>:<flowSlot>[:r<i>]``: one job per item and flow per window. ``flowSlot`` is
    ``[closed:]`` then ``cmd:<command>`` or the flow."""
    slot = f"cmd:{job.command}" if job.command is not None else f"{job.flow}"
    if is_close_job(job):
        slot = "closed:" + slot
    key = f"{item_ref(job)}:{slot}"
    return f"{key}:r{job.replica}" if job.replica is not None else key


def fan_out(job: Job) -> list[Job]:
    """One job per replica, ids ``<id>-r1`` .. ``-r<n>`` in order. Deterministic, so a fan-out that
    failed at replica k and is re-run re-finds 1..k-1 by their ids and creates only k..n: exactly n.
    An unflagged job stays byte-identical (no ``replica`` key, no suffix)."""
    n = job.replicas or 1
    if n <= 1:
        return [job]
    return [msgspec.structs.replace(job, id=f"{job.id}-r{i}", replica=i) for i in range(1, n + 1)]


def planned(job: Job, enqueued_at: int) -> list[tuple[Job, str]]:
    """The jobs to enqueue, stamped, each with its semantic dedup key."""
    stamped = msgspec.structs.replace(job, enqueued_at=enqueued_at)
    return [(j, semantic_key(j)) for j in fan_out(stamped)]
