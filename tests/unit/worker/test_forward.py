"""Which host a worker hands a job it cannot serve to, and the hand-off itself against a real Redis."""

from __future__ import annotations

from pidispatch.common.health import Health
from pidispatch.common.keys import JOB_STATE_TTL_S, WORKER_GROUP, Keys
from pidispatch.common.models import Job, job_to_fields, text
from pidispatch.common.redis import Redis
from pidispatch.common.registry import ROUTE_FRESH_MS, HostRow
from pidispatch.common.runtime import now_ms
from pidispatch.common.settings import load_settings
from pidispatch.common.streams import ensure_group, read_group
from pidispatch.worker.context import Held, WorkerContext
from pidispatch.worker.forward import forward_if_unservable, forward_target


def host(name: str, caps: set[str], *, routes: bool = True, stale_ms: int | None = 0) -> HostRow:
    return HostRow(name=name, beat_at=0, started_at=None, version="", routes=routes, caps=frozenset(caps),
                   concurrency=None, running=None, tz="", image="", stale_ms=stale_ms)


def test_a_job_this_host_can_serve_or_that_needs_nothing_stays() -> None:
    hosts = [host("a", {"s:prod"})]
    assert forward_target([], frozenset(), hosts, "j", "me") is None
    assert forward_target(["s:prod"], frozenset({"s:prod"}), hosts, "j", "me") is None


def test_only_live_routable_capable_peers_are_candidates() -> None:
    hosts = [
        host("me", {"s:prod"}), host("stale", {"s:prod"}, stale_ms=ROUTE_FRESH_MS + 1),
        host("undated", {"s:prod"}, stale_ms=None), host("closed", {"s:prod"}, routes=False),
        host("other", {"s:dev"}), host("good", {"s:prod", "s:dev"}),
    ]
    assert {forward_target(["s:prod"], frozenset(), hosts, f"j{i}", "me") for i in range(50)} == {"good"}
    assert forward_target(["s:prod"], frozenset(), hosts[:5], "j", "me") is None


def test_even_when_every_live_host_can_serve_it_the_job_moves_and_the_choice_is_stable() -> None:
    # Unlike routing at enqueue, "everyone can" is no reason to keep a job this host cannot run.
    hosts = [host("b", {"s:prod"}), host("a", {"s:prod"})]
    chosen = forward_target(["s:prod"], frozenset(), hosts, "job-1", "me")
    assert chosen in {"a", "b"}
    assert forward_target(["s:prod"], frozenset(), list(reversed(hosts)), "job-1", "me") == chosen


async def test_a_forwarded_job_is_acked_here_and_its_state_names_the_new_stream_and_entry(
    redis: Redis, keys: Keys
) -> None:
    settings = load_settings({"PI_WORKER_NAME": "plain"})
    ctx = WorkerContext(settings, redis, keys, None, now_ms, {}, Health("down", "up"))  # type: ignore[arg-type]
    await redis.hset(keys.host("prod"), mapping={"name": "prod", "beatAt": str(now_ms()), "routes": "true",
                                                 "caps": "s:prod"})
    await redis.pexpire(keys.host("prod"), 90_000)
    await redis.sadd(keys.hosts, "prod")
    job = Job(id="local-fwd", kind="local", repo="local:app", folder="/srv/app", task="t",
              secrets={"API_KEY": "ref"}, secrets_profile="prod")
    await ensure_group(redis, keys.jobs, WORKER_GROUP)
    await redis.xadd(keys.jobs, job_to_fields(job))  # type: ignore[arg-type]
    [(stream, entry_id, fields)] = await read_group(redis, WORKER_GROUP, "plain", {keys.jobs: ">"}, count=1)
    await redis.hset(keys.job(job.id), mapping={"state": "queued", "stream": stream, "entry": entry_id})

    held = Held(stream, entry_id, fields, "new")
    assert await forward_if_unservable(ctx, held, job)

    target = keys.host_jobs("prod")
    named, entry = (text(v) for v in await redis.hmget(keys.job(job.id), ["stream", "entry"]))
    assert named == target
    [(_, copied)] = await redis.xrange(target, entry, entry)
    assert copied[b"id"] == job.id.encode() and copied[b"forwardedBy"] == b"plain"
    assert 0 < await redis.ttl(keys.job(job.id)) <= JOB_STATE_TTL_S
    assert (await redis.xpending(keys.jobs, WORKER_GROUP))["pending"] == 0
