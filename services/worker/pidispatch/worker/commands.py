"""The worker's CLI verbs: ``pi-dispatch worker`` (the service) and ``pi-dispatch run`` (a local job)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from pidispatch.common.runtime import now_ms
from pidispatch.worker import local
from pidispatch.worker.cron.manual import run_trigger
from pidispatch.worker.engine.dockerapi import create_docker

if TYPE_CHECKING:
    pass




def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "worker", help="run jobs from the job stream in locked-down containers",
        description="Take jobs from the job streams and run each in a locked-down container of "
        "PI_JOB_IMAGE, writing a run record to PI_LOGS_DIR (the service; docs/worker.md).",
    )
    p.set_defaults(func=worker_command, service=True)
    local.register(sub).set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> object:
    """``pi-dispatch run``: a cron trigger now (``--trigger``), else a job on a local folder."""
    if args.trigger is not None:
        return run_trigger(args, now_ms)
    return local.run_main(args, now_ms)


async def worker_main() -> int:
    # Imported here so `pi-dispatch --help` stays light.
    import structlog

    from pidispatch.common.keys import Keys
    from pidispatch.common.log import configure_logging
    from pidispatch.common.monitor import monitoring, service_registry
    from pidispatch.common.redis import check_redis_auth, redis_for
    from pidispatch.common.runtime import now_ms, stop_on_signals
    from pidispatch.common.settings import load_settings
    from pidispatch.worker.metrics import WorkerMetrics
    from pidispatch.worker.replica import resolve_worker_name
    from pidispatch.worker.service import Worker

    settings = load_settings()
    configure_logging("worker", settings.log_level)
    stop = stop_on_signals()
    redis = redis_for(settings)
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
        async with monitoring(settings.metrics_port, "worker", worker.down, registry=registry,
                              bind=settings.metrics_bind):
            await worker.run()
    finally:
        await docker.close()
        await redis.aclose()
    return 0


def worker_command(args: argparse.Namespace) -> object:
    return worker_main()
