"""The receiver process: the spool, the listener, signals and shutdown around the app of ``app``."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from aiohttp import web

from pidispatch.common.errors import InfraError
from pidispatch.common.keys import RECEIVER_HEADER_TIMEOUT_S, Keys
from pidispatch.common.log import get_logger
from pidispatch.common.redis import check_redis_auth, redis_for
from pidispatch.common.runtime import now_ms, stop_on_signals
from pidispatch.common.settings import Settings
from pidispatch.forges.armconfig import ReceiverConfig
from pidispatch.receiver.app import RECEIVER, create_app
from pidispatch.receiver.config import SpoolConfig
from pidispatch.receiver.connections import LISTEN_BACKLOG, AcceptErrors, Connections, descriptor_budget
from pidispatch.receiver.spool import Spool

# On SIGTERM in-flight requests get this long to finish (a slow upload included; Redis calls are
# bounded at 2 s), then aiohttp gets CLEANUP_TIMEOUT_S to cancel any straggler.
DRAIN_TIMEOUT_S = 5.0
CLEANUP_TIMEOUT_S = 1.0
# After answering without reading a whole body, aiohttp reads and drops the rest this long at most.
LINGERING_S = 2.0


async def serve(settings: Settings, config: ReceiverConfig, spool_config: SpoolConfig) -> int:
    """Run the receiver until SIGTERM/SIGINT, then stop accepting, finish in-flight requests, exit 0.

    Redis need not be up: deliveries are spooled until it is. Exit 2 when the spool directory is held
    by another receiver.
    """
    log = get_logger()
    stop = stop_on_signals()
    spool = await asyncio.to_thread(Spool.open, Path(spool_config.directory), spool_config.max_bytes)
    redis = redis_for(settings)
    try:
        await check_redis_auth(redis, settings.redis_url)
        app = create_app(settings, redis, Keys(settings.key_prefix), now_ms, config, spool)
        # aiohttp's keep-alive timer also runs from the connection's start until its request headers are
        # in, so it is the header deadline as well as the idle limit.
        runner = web.AppRunner(
            app,
            access_log=None,
            shutdown_timeout=CLEANUP_TIMEOUT_S,
            keepalive_timeout=RECEIVER_HEADER_TIMEOUT_S,
            lingering_time=LINGERING_S,
        )
        await runner.setup()
        try:
            await _listen_until(stop, settings, config, runner, app)
        finally:
            await runner.cleanup()
    finally:
        await redis.aclose()
        spool.close()
    log.info("receiver_stopped")
    return 0


async def _listen_until(
    stop: asyncio.Event,
    settings: Settings,
    config: ReceiverConfig,
    runner: web.AppRunner,
    app: web.Application,
) -> None:
    log = get_logger()
    loop = asyncio.get_running_loop()
    receiver = app[RECEIVER]
    assert runner.server is not None
    connections = Connections(runner.server, descriptor_budget())
    receiver.connections = connections
    loop.set_exception_handler(AcceptErrors())
    bind, port = settings.receiver_bind, settings.receiver_port
    try:
        listener = await loop.create_server(
            connections, bind, port, backlog=LISTEN_BACKLOG, reuse_address=True
        )
    except OSError as exc:
        raise InfraError(
            f"cannot listen on RECEIVER_BIND:RECEIVER_PORT {bind}:{port}: {exc.strerror or exc}"
        ) from None
    # Everything allocated so far lives as long as the process: keep it out of every GC pass.
    gc.collect()
    gc.freeze()
    rotating = [forge for forge, block in config.arms.items() if len(block.secrets) > 1]
    log.info(
        "receiver_started",
        port=port,
        arms=config.forges(),
        rotating=rotating,
        connection_cap=connections.cap,
        spool_depth=receiver.spool.depth if receiver.spool is not None else 0,
    )
    await stop.wait()
    log.info("receiver_stopping")
    listener.close()  # no new connections; requests already in flight finish below
    await receiver.drain(DRAIN_TIMEOUT_S)
