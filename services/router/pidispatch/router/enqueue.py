"""Putting a page's jobs on their streams: which stream each job goes to, and the ENQUEUE script for
all of them in one pipeline (exact id and semantic window: a job is queued at most once)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pidispatch.common.keys import WORKER_GROUP, Keys
from pidispatch.common.log import get_logger
from pidispatch.common.luascript import run_calls
from pidispatch.common.models import Job
from pidispatch.common.redis import Redis
from pidispatch.common.registry import HostCache, job_needs
from pidispatch.common.runtime import EpochMsClock
from pidispatch.common.scripts import enqueue_call
from pidispatch.common.streams import ensure_group

Plan = Sequence[tuple[Job, str]]  # (job, semantic key) for every replica of one firing entry


class Enqueuer:
    def __init__(self, redis: Redis, keys: Keys, clock: EpochMsClock) -> None:
        self.redis, self.keys = redis, keys
        self.clock = clock
        self.hosts = HostCache(redis, keys, clock)
        self.log = get_logger()
        # Streams whose `workers` group this process has made sure of: the writer creates the group, so
        # `XPENDING <stream> workers` answers (and trimming protects the entries) before any worker ran.
        self.grouped: set[str] = set()
        # Until when job ids may also sit in the day buckets of the dedup layout before (common.dedup).
        self.before_until = 0

    async def stream_for(self, job: Job) -> str:
        """The job's stream: a capable host's, else the shared one. Never raises."""
        needs = job_needs(job)
        if not needs:
            return self.keys.jobs  # most jobs: no registry read, not even a cache lookup
        try:
            host = await self.hosts.route(needs, job.id)
        except Exception:  # a routing hint must never cost a job: the shared stream is always right
            return self.keys.jobs
        if host is None:
            return self.keys.jobs
        # Host names are topology: they reach this log, never a forge comment.
        self.log.info("forge_job_routed", kind=job.kind, host=host, needs=",".join(needs))
        return self.keys.host_jobs(host)

    async def enqueue(
        self, plans: Sequence[Plan], entries: Sequence[str]
    ) -> list[tuple[list[str], list[str], list[Any]]]:
        """Route, then enqueue every job of every plan in one pipeline. ``entries[i]`` is the pd:events entry
        id plan ``i`` came from (its jobs' state hashes keep it). Per plan: its job ids, the stream each was
        routed to, and the script's replies, an exception in place of a reply that failed."""
        # Per replica: replica ids differ, so replicas spread over capable hosts.
        routed = [[(job, semantic, await self.stream_for(job)) for job, semantic in plan] for plan in plans]
        for stream in {stream for planned in routed for _, _, stream in planned} - self.grouped:
            await ensure_group(self.redis, stream, WORKER_GROUP)
            self.grouped.add(stream)
        now = self.clock()
        before = now < self.before_until
        calls = [
            enqueue_call(self.keys, job, self.keys.dedup(semantic), stream, event_entry, now, before=before)
            for planned, event_entry in zip(routed, entries, strict=True)
            for job, semantic, stream in planned
        ]
        replies = await run_calls(self.redis, calls)
        out, at = [], 0
        for planned in routed:
            ids, streams = [job.id for job, _, _ in planned], [stream for _, _, stream in planned]
            out.append((ids, streams, replies[at:at + len(planned)]))
            at += len(planned)
        return out
