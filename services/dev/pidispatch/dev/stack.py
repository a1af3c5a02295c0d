"""``pi-dispatch dev``: the whole system on one machine, on the embedded default.

Starts a private redis-server (unless ``REDIS_URL`` is set), writes a sample triggers file and a webhook
secret under ``./.pi-dispatch/`` on first run, starts receiver, router and one worker as child processes
(``python -m pidispatch.<service>``), prints the webhook URL and a signed ``curl``, and stops everything
on Ctrl-C (or SIGTERM, or SIGHUP when its terminal closes).

Its seams: ``processes`` (children that die with dev, ``dev.pids``, orphans of an earlier dev), ``ports``,
``imagechoice`` (which image jobs run in), ``modelpath`` (the stand-in model, proven reachable from a job
container) and ``jobstop`` (running jobs cancelled and recorded before the worker stops).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pidispatch.common import devstate
from pidispatch.common.embedded import find_redis_server, redis_server_argv
from pidispatch.common.envnames import REDIS_PASSWORD_VARS
from pidispatch.common.errors import ConfigError, InfraError
from pidispatch.common.instance import LABEL_INSTANCE, instance_id
from pidispatch.common.keys import Keys
from pidispatch.common.redis import redis_for
from pidispatch.common.settings import Settings, load_settings
from pidispatch.dev import imagechoice, ports, processes
from pidispatch.dev.banner import DEFAULT_IMAGE, print_banner, webhook_url
from pidispatch.dev.forgestandin import DEMO_LABEL
from pidispatch.dev.imagechoice import DEMO_IMAGE
from pidispatch.dev.processes import PidFile
from pidispatch.forges.github import FORGE as DEMO_FORGE

if TYPE_CHECKING:
    from pidispatch.dev.forgestandin import DemoForge
    from pidispatch.dev.modelstandin import ModelStandIn

__all__ = ["DEMO_IMAGE", "DEMO_LABEL", "SAMPLE_TRIGGERS", "demo_curl", "register"]

SERVICES = ("receiver", "router", "worker")
STOP_BUDGET_S = 5.0

SAMPLE_TRIGGERS = {
    "triggers": [
        {"on": {"type": "label", "any": [DEMO_LABEL]}, "run": {"kind": DEMO_FORGE.name, "flow": "demo"}},
    ]
}


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "dev", help="run receiver, router and a worker on this machine (embedded default)",
        description="Start a private Redis (unless REDIS_URL is set), a stand-in forge and model when none "
        "is configured, the receiver, the router and one worker; print the webhook URL, a signed demo "
        "delivery and the commands to watch it. State lives in --dir; Ctrl-C stops everything.",
    )
    p.add_argument("--dir", default=".pi-dispatch", help="state folder (default ./.pi-dispatch)")
    p.set_defaults(func=dev)
    c = sub.add_parser(
        "demo-curl", help="print a fresh signed demo delivery for a running `pi-dispatch dev`",
        description="Print a curl that posts a new demo delivery (new delivery id, new issue number, so "
        "no dedup swallows it), signed with WEBHOOK_SECRET or dev's saved secret, to RECEIVER_PORT.",
    )
    c.add_argument("--dir", default=".pi-dispatch", help="state folder (default ./.pi-dispatch)")
    c.set_defaults(func=demo_curl)


def demo_curl(args: argparse.Namespace) -> int:
    """A new delivery id and a new issue number, so neither dedup layer swallows it."""
    from pidispatch.dev import forgestandin as standin  # only the demo commands need aiohttp's server

    secret = os.environ.get("WEBHOOK_SECRET", "").strip()
    if not secret:
        path = Path(args.dir) / "webhook-secret"
        if not path.exists():
            raise ConfigError(
                f"WEBHOOK_SECRET is unset and {path} does not exist; start `pi-dispatch dev` first"
            )
        secret = path.read_text().strip()
    port = load_settings().receiver_port
    number = secrets.randbelow(9000) + 2
    body = standin.demo_delivery(number)
    print(standin.signed_curl(webhook_url(port), secret, body, str(uuid.uuid4())))
    return 0


@dataclass
class _Stack:
    """What a dev run has started so far: the stop path cleans up whatever is here, at any point."""

    env: dict[str, str]
    pids: PidFile
    redis_proc: asyncio.subprocess.Process | None = None
    children: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    group: list[int] = field(default_factory=list)  # the children's process group, once the first started
    forge: DemoForge | None = None
    model: ModelStandIn | None = None
    settings: Settings | None = None
    own: set[str] = field(default_factory=set)  # credentials dev made itself (devstate.DEV_OWNED)
    # The deployment's id in dev's Redis: what dev's worker labels its containers and networks with, and
    # all that the stop path removes (never another stack's of the same host name).
    instance: str | None = None


async def dev(args: argparse.Namespace) -> int:
    state = await asyncio.to_thread(Path(args.dir).resolve)
    await asyncio.to_thread(state.mkdir, mode=0o700, parents=True, exist_ok=True)
    processes.refuse_live_dev_state(state)
    pids = PidFile(state)
    earlier = pids.acquire()  # refuses when a dev runs here now
    stop, hurry = processes.stop_on_signals()
    stack = _Stack(env=dict(os.environ), pids=pids)
    try:
        await processes.stop_orphans(earlier)
        # Ctrl-C during the start (a demo image build, say) cancels it rather than waiting for it.
        starting = asyncio.ensure_future(_start(stack, state, stop))
        stopper = asyncio.ensure_future(stop.wait())
        await asyncio.wait([starting, stopper], return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if not starting.done():
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            return 0
        settings = starting.result()
        if settings is None:
            return 0 if stop.is_set() else 1
        await asyncio.to_thread(devstate.write_state, state, stack.env, os.getpid(), stack.own)
        print_banner(stack.env, settings.key_prefix, settings.receiver_port, settings.logs_dir, state,
                     model_standin=stack.model is not None)
        return await _supervise(stack.children, stop)
    finally:
        await _stop(stack, state, hurry)
        pids.release()


async def _stop(stack: _Stack, state: Path, hurry: asyncio.Event) -> None:
    """Stop whatever ``stack`` holds: running jobs cancelled and recorded first (while the worker, Redis
    and the stand-ins still run), then the services, Redis last, then what dev's worker left in Docker."""
    worker = stack.children.get("worker")
    if stack.settings is not None and worker is not None and worker.returncode is None:
        from pidispatch.dev import jobstop  # the worker's job states: loaded by dev alone, not every verb

        await jobstop.cancel_running(stack.settings, hurry)
    await asyncio.to_thread(devstate.remove_state, state, os.getpid())
    await asyncio.gather(*(processes.stop_process(p, STOP_BUDGET_S - 0.5) for p in stack.children.values()))
    if stack.instance is not None:
        await _sweep_containers(stack.env, stack.instance)
    if stack.forge is not None:
        await stack.forge.close()
    if stack.model is not None:
        await stack.model.close()
    if stack.redis_proc is not None:
        await processes.stop_process(stack.redis_proc, 3.0)


async def _start(stack: _Stack, state: Path, stop: asyncio.Event) -> Settings | None:
    """Start everything into ``stack``; the settings once the receiver answers, None if it did not."""
    from pidispatch.dev import forgestandin as standin  # only the demo commands need aiohttp's server

    env = stack.env
    if not env.get("REDIS_URL") and not env.get("VALKEY_URL"):
        env["REDIS_URL"] = await _start_redis(state / "redis", stack)
        # The private server has no password: one meant for the operator's own Redis would be refused.
        for name in REDIS_PASSWORD_VARS:
            env.pop(name, None)
    stack.own.update(n for n in ("WEBHOOK_SECRET",) if not env.get(n))
    env.update(await asyncio.to_thread(_prepare_env, state, env))
    if not standin.credentials_set(env):
        # The demo forge is not configured: the demo rule's jobs clone demo/hello from a stand-in.
        stack.forge, forge_env = await standin.start_demo_forge(state)
        env.update(forge_env)
        stack.own.update(forge_env)
    settings = load_settings(env)  # validates everything before any child starts
    metrics = ports.metrics_ports(env)
    stack.instance = await _instance_of(settings)
    ports.require_free_port(settings.receiver_bind, settings.receiver_port)
    env["PI_JOB_IMAGE"] = await imagechoice.job_image(env, settings.job_image)
    if env["PI_JOB_IMAGE"] == DEFAULT_IMAGE:
        stack.model = await _model_standin(env, settings.worker_name, stack.instance)
        if stack.model is not None:
            stack.own.add(stack.model.key_var)
    if settings.egress.enabled and not await imagechoice.has_image(settings.egress.image):
        # The first run must work without the proxy image (a minute of Debian packages to build); the
        # banner says the filter is off and how to turn it on.
        env["PI_EGRESS"] = "0"
    if metrics:
        print(f"pi-dispatch dev: metrics: the router on port {metrics['router']['PD_METRICS_PORT']}, the "
              f"worker on port {metrics['worker']['PD_METRICS_PORT']} (PD_METRICS_PORT and the next port)")
    stack.settings = settings
    for name in SERVICES:
        stack.children[name] = await processes.spawn(
            name, [sys.executable, "-m", f"pidispatch.{name}"], {**env, **metrics.get(name, {})}, stack.pids,
            stack.group,
        )
    return settings if await _wait_healthy(settings.receiver_port, stack.children, stop) else None


async def _model_standin(env: dict[str, str], host: str, instance: str | None) -> ModelStandIn | None:
    # Only dev serves a model: aiohttp's server stays unloaded for every other verb.
    from pidispatch.dev import modelpath
    from pidispatch.worker.engine.container import LABEL_HOST

    labels = {LABEL_HOST: host, **({LABEL_INSTANCE: instance} if instance is not None else {})}
    return await modelpath.model_standin(env, labels)


def _prepare_env(state: Path, env: dict[str, str]) -> dict[str, str]:
    """Fill what the operator did not set with the embedded default's files."""
    env = dict(env)
    env.setdefault("WEBHOOK_SECRET", _persistent_secret(state / "webhook-secret"))
    env.setdefault("PI_TRIGGERS_FILE", str(_sample_triggers(state / "triggers.json")))
    env.setdefault("PI_LOGS_DIR", str(state / "logs"))
    env.setdefault("PI_JOBS_DIR", str(state / "jobs"))
    env.setdefault("PD_SPOOL_DIR", str(state / "spool"))
    # One machine's demo: the receiver listens where the banner's URL says (RECEIVER_BIND=0.0.0.0 opens it).
    env.setdefault("RECEIVER_BIND", "127.0.0.1")
    # Ctrl-C must leave no container behind within the stop budget: no grace for running jobs.
    env.setdefault("PI_SHUTDOWN_GRACE", "0")
    # The demo agent's output (what it saw in /workspace) lands beside its record.
    env.setdefault("PI_CAPTURE_JOB_LOGS", "1")
    return env


async def _supervise(children: dict[str, asyncio.subprocess.Process], stop: asyncio.Event) -> int:
    """Run until Ctrl-C (exit 0) or until any service dies (exit 1: the others are stopped)."""
    waiters = [asyncio.ensure_future(p.wait()) for p in children.values()]
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait([*waiters, stopper], return_when=asyncio.FIRST_COMPLETED)
    for task in (*waiters, stopper):
        task.cancel()
    if stop.is_set():
        return 0
    dead = [n for n, p in children.items() if p.returncode is not None]
    print(f"pi-dispatch dev: {', '.join(dead)} exited; stopping the rest", file=sys.stderr)
    return 1


async def _start_redis(data_dir: Path, stack: _Stack) -> str:
    """dev's private Redis, on the port the last dev here used when it is free (printed ``redis-cli``
    lines and a running ``web`` stay valid across a restart)."""
    await asyncio.to_thread(data_dir.mkdir, mode=0o700, parents=True, exist_ok=True)
    port = await asyncio.to_thread(ports.redis_port, data_dir)
    argv = redis_server_argv(find_redis_server(), port, data_dir, persist=True)
    proc = stack.redis_proc = await processes.spawn(
        "redis-server", argv, stack.env, stack.pids, stack.group, quiet=True
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            break
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            await writer.wait_closed()
            return f"redis://127.0.0.1:{port}/0"
        except OSError:
            await asyncio.sleep(0.05)
    raise InfraError(f"the embedded redis-server did not start; see {data_dir / 'redis.log'}")


def _persistent_secret(path: Path) -> str:
    """A generated secret kept across runs, so a forge configured once keeps working."""
    if path.exists():
        return path.read_text().strip()
    value = secrets.token_hex(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return value


def _sample_triggers(path: Path) -> Path:
    if not path.exists():
        path.write_text(json.dumps(SAMPLE_TRIGGERS, indent=2) + "\n")
    return path


async def _wait_healthy(
    port: int, children: dict[str, asyncio.subprocess.Process], stop: asyncio.Event
) -> bool:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not stop.is_set():
        exited = [n for n, p in children.items() if p.returncode is not None]
        if exited:
            print(f"pi-dispatch dev: {', '.join(exited)} exited during start; see its log above",
                  file=sys.stderr)
            return False
        with contextlib.suppress(OSError):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /healthz HTTP/1.0\r\n\r\n")
            await writer.drain()
            try:  # something that accepts and never answers must not hold the start past its deadline
                line = await asyncio.wait_for(reader.readline(), 1)
            except TimeoutError:
                line = b""
            writer.close()
            if b" 200 " in line:
                return True
        await asyncio.sleep(0.1)
    if not stop.is_set():
        print(f"pi-dispatch dev: the receiver did not answer on port {port}", file=sys.stderr)
    return False


async def _instance_of(settings: Settings) -> str | None:
    """The deployment's id in the Redis dev uses (made now if new), or None when it does not answer."""
    redis = redis_for(settings)
    try:
        return await asyncio.wait_for(instance_id(redis, Keys(settings.key_prefix)), 5)
    except Exception:
        return None
    finally:
        await redis.aclose()


async def _sweep_containers(env: dict[str, str], instance: str) -> None:
    """Belt and braces: remove what this dev's worker made and left (job containers, its egress proxy and
    job networks), found by this stack's own instance label, never by the host name alone."""
    import aiodocker

    try:
        host = load_settings(env).worker_name
        docker = aiodocker.Docker()
    except Exception:
        return
    mine = [f"pd.host={host}", f"{LABEL_INSTANCE}={instance}"]
    try:
        found = await asyncio.wait_for(
            docker.containers.list(all="1", filters=json.dumps({"label": mine})), 3
        )
        for c in found:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(c.delete(force=True), 3)
        for net in await asyncio.wait_for(docker.networks.list(filters={"label": mine}), 3):
            with contextlib.suppress(Exception):
                await asyncio.wait_for((await docker.networks.get(net["Id"])).delete(), 3)
    except Exception:
        return
    finally:
        await docker.close()
