"""The worker's CLI verbs: ``pi-dispatch worker`` and ``pi-dispatch demo-image``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from pidispatch.common.settings import Settings

if TYPE_CHECKING:
    import aiodocker

    from pidispatch.common.keys import Keys
    from pidispatch.common.redis import Redis

# How far back the run-history mirror is asked for hosts that ran jobs (it keeps about that long anyway).
SEEN_WINDOW_MS = 30 * 24 * 3600 * 1000

DEFAULT_SOCKET = "unix:///var/run/docker.sock"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "worker", help="run jobs from the job stream in locked-down containers",
        description="Take jobs from the job streams and run each in a locked-down container of "
        "PI_JOB_IMAGE, writing a run record to PI_LOGS_DIR (the service; docs/worker.md).",
    )
    p.set_defaults(func=worker_command, service=True)
    d = sub.add_parser(
        "demo-image", help="build a tiny demo job image from this machine's busybox",
        description="Build a tiny job image whose agent prints what a job is given (no model, no "
        "registry): what `pi-dispatch dev` runs when no real job image exists.",
    )
    d.add_argument("--tag", default=Settings().job_image, help="image tag (default %(default)s)")
    d.set_defaults(func=demo_image_command)
    for verb, text in (("pause", "stop taking new jobs (jobs still enqueue)"), ("resume", "take jobs again")):
        c = sub.add_parser(
            verb, help=f"{text}: every worker, or one host with --host",
            description=f"{text.capitalize()}: every worker, or one host with --host. The flag lives in "
            "Redis with no expiry, so it outlasts restarts of the workers.",
        )
        c.add_argument("--host", help="only this worker (its PI_WORKER_NAME)")
        c.add_argument("--json", action="store_true", help="print one JSON object")
        c.set_defaults(func=pause_command, paused=verb == "pause")
    from pidispatch.worker import control, doctor, local, runs, scheduleview, statuspage, waitview

    control.register(sub)
    doctor.register(sub)
    local.register(sub)
    runs.register(sub)
    scheduleview.register(sub)
    waitview.register(sub)
    statuspage.register(sub)


def create_docker() -> aiodocker.Docker:
    """A client even when no daemon is there yet: the worker must start and wait for Docker."""
    import aiodocker
    import aiohttp

    # Short calls (create, inspect, stop) fail fast on a hung daemon; long ones (wait, attach) set their own.
    timeout = aiohttp.ClientTimeout(total=60, connect=5, sock_connect=5)
    try:
        return aiodocker.Docker(timeout=timeout)
    except Exception:
        # No socket found at construction; calls fail (and are retried) until a daemon appears.
        return aiodocker.Docker(url=DEFAULT_SOCKET, timeout=timeout)


async def worker_main() -> int:
    # Imported here so `pi-dispatch --help` stays light.
    import structlog

    from pidispatch.common.keys import Keys
    from pidispatch.common.log import configure_logging
    from pidispatch.common.monitor import monitoring, service_registry
    from pidispatch.common.redis import check_redis_auth, create_redis
    from pidispatch.common.runtime import now_ms, stop_on_signals
    from pidispatch.common.settings import load_settings
    from pidispatch.worker.metrics import WorkerMetrics
    from pidispatch.worker.replica import resolve_worker_name
    from pidispatch.worker.service import Worker

    settings = load_settings()
    configure_logging("worker", settings.log_level)
    stop = stop_on_signals()
    redis = create_redis(settings.redis_url, settings.redis_password)
    docker = create_docker()
    try:
        # Before anything logs or claims under the name: {replica} needs this container's compose label.
        settings = await resolve_worker_name(settings, docker)
        structlog.contextvars.bind_contextvars(host=settings.worker_name)
        await check_redis_auth(redis, settings.redis_url)
        # Built here rather than in run_worker: the PD_METRICS_PORT endpoint reads its health and series.
        registry = service_registry("worker")
        worker = Worker(
            settings, redis, Keys(settings.key_prefix), docker, stop, now_ms, os.environ,
            metrics=WorkerMetrics(registry),
        )
        async with monitoring(settings.metrics_port, "worker", worker.down, registry=registry):
            await worker.run()
    finally:
        await docker.close()
        await redis.aclose()
    return 0


def worker_command(args: argparse.Namespace) -> object:
    return worker_main()


async def demo_image_command(args: argparse.Namespace) -> int:
    from pidispatch.worker.image import DEMO_AGENT_SCRIPT, build_image

    await build_image(args.tag, DEMO_AGENT_SCRIPT)
    hint = "" if args.tag == Settings().job_image else f"; set PI_JOB_IMAGE={args.tag} to run jobs in it"
    print(f"built {args.tag}{hint}")
    return 0


async def pause_command(args: argparse.Namespace) -> int:
    """Set or clear ``pd:paused`` (fleet) or ``pd:paused:<host>``. The flag has no expiry: a pause lasts
    until someone resumes, across restarts of Redis (with persistence) and of the workers."""
    import json

    from redis.exceptions import AuthenticationError

    from pidispatch.common.configsyntax import WORKER_NAME_RE
    from pidispatch.common.errors import ConfigError, InfraError
    from pidispatch.common.keys import Keys
    from pidispatch.common.redis import auth_refused, create_redis
    from pidispatch.common.settings import load_settings

    settings = load_settings()
    if args.host is not None and not WORKER_NAME_RE.match(args.host):
        raise ConfigError(f"--host {args.host!r} is not a worker name; accepted: 1-64 of [A-Za-z0-9._-]")
    keys = Keys(settings.key_prefix)
    key = keys.paused_host(args.host) if args.host else keys.paused
    redis = create_redis(settings.redis_url, settings.redis_password)
    try:
        if args.paused:
            await redis.set(key, "1")
        else:
            await redis.delete(key)
        fleet_paused = bool(await redis.exists(keys.paused))
        if args.host and args.paused:
            warning = unseen_host_warning(args.host, *await _seen_hosts(redis, keys))
            if warning:
                print(warning, file=sys.stderr)
    except AuthenticationError:
        raise auth_refused(settings.redis_url) from None
    except Exception as exc:
        raise InfraError(
            f"Redis at REDIS_URL did not answer ({type(exc).__name__}); nothing changed"
        ) from None
    finally:
        await redis.aclose()
    scope = args.host or "fleet"
    if args.json:
        print(json.dumps({"paused": args.paused, "scope": scope, "fleetPaused": fleet_paused}))
    elif args.paused:
        where = f"worker {args.host}" if args.host else "every worker"
        print(f"paused — {where} will stop taking new jobs (jobs still enqueue)")
    else:
        note = " (the fleet-wide pause is still on: pi-dispatch resume)" if args.host and fleet_paused else ""
        print(f"resumed {'worker ' + args.host if args.host else 'the fleet'}{note}")
    return 0


def unseen_host_warning(host: str, live: list[str], past: list[str]) -> str | None:
    """Pure: the stderr line for a pause of a host no registry row or mirrored run names (a typo, most
    likely: the pause is set all the same, and waits for a worker of that name)."""
    if host in live or host in past:
        return None
    named = ", ".join(live) or "none"
    return (f"pi-dispatch: warning: no worker named {host} has been seen (live now: {named}); the pause is "
            f"set and holds a worker of that name when one starts (undo: pi-dispatch resume --host {host})")


async def _seen_hosts(redis: Redis, keys: Keys) -> tuple[list[str], list[str]]:
    """The hosts with a live registry row, and those that mirrored a run lately (best effort)."""
    from pidispatch.common.registry import RegistryUnreachable, read_live_hosts
    from pidispatch.common.runtime import now_ms
    from pidispatch.worker.mirror import hosts_of, read_mirror

    now = now_ms()
    try:
        live = [h.name for h in await read_live_hosts(redis, keys, now)]
    except RegistryUnreachable:
        live = []
    records, _ = await read_mirror(redis, keys, since_ms=now - SEEN_WINDOW_MS, limit=1000)
    return live, hosts_of(records)
