"""``pi-dispatch dev``: the whole system on one machine, on the embedded default.

Starts a private redis-server (unless ``REDIS_URL`` is set), writes a sample triggers file and a webhook
secret under ``./.pi-dispatch/`` on first run, starts receiver, router and one worker as child processes
(``python -m pidispatch.<service>``), prints the webhook URL and a signed ``curl``, and stops everything
on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pidispatch.common import devstate
from pidispatch.common.embedded import find_redis_server, free_port, redis_server_argv
from pidispatch.common.envnames import REDIS_PASSWORD_VARS
from pidispatch.common.errors import ConfigError, InfraError
from pidispatch.common.instance import LABEL_INSTANCE, instance_id
from pidispatch.common.keys import Keys
from pidispatch.common.redis import redis_for
from pidispatch.common.runtime import stop_on_signals
from pidispatch.common.settings import Settings, load_settings
from pidispatch.dev.banner import DEFAULT_IMAGE, print_banner, webhook_url
from pidispatch.dev.forgestandin import DEMO_LABEL
from pidispatch.forges.github import FORGE as DEMO_FORGE

if TYPE_CHECKING:
    from pidispatch.dev.forgestandin import DemoForge
    from pidispatch.dev.modelstandin import ModelStandIn

SERVICES = ("receiver", "router", "worker")
DEMO_IMAGE = "pi-dispatch-demo:latest"
# The image label the worker's preflight reads (pidispatch.dev.demoimage.CAPABILITIES_LABEL).
DEMO_CAPABILITIES_LABEL = "dev.pi-dispatch.capabilities"
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
    redis_proc: asyncio.subprocess.Process | None = None
    children: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    forge: DemoForge | None = None
    model: ModelStandIn | None = None
    own: set[str] = field(default_factory=set)  # credentials dev made itself (devstate.DEV_OWNED)
    # The deployment's id in dev's Redis: what dev's worker labels its containers and networks with, and
    # all that the stop path removes (never another stack's of the same host name).
    instance: str | None = None


async def dev(args: argparse.Namespace) -> int:
    state = await asyncio.to_thread(Path(args.dir).resolve)
    stop = stop_on_signals()
    stack = _Stack(env=dict(os.environ))
    try:
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
        await asyncio.to_thread(devstate.remove_state, state, os.getpid())
        await _stop_children(stack.children)
        if stack.instance is not None:
            await _sweep_containers(stack.env, stack.instance)
        if stack.forge is not None:
            await stack.forge.close()
        if stack.model is not None:
            await stack.model.close()
        if stack.redis_proc is not None:
            await _stop_process(stack.redis_proc, 3.0)


async def _start(stack: _Stack, state: Path, stop: asyncio.Event) -> Settings | None:
    """Start everything into ``stack``; the settings once the receiver answers, None if it did not."""
    from pidispatch.dev import forgestandin as standin  # only the demo commands need aiohttp's server

    await asyncio.to_thread(state.mkdir, mode=0o700, parents=True, exist_ok=True)
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
    stack.instance = await _instance_of(settings)
    _require_free_port(settings.receiver_bind, settings.receiver_port)
    env["PI_JOB_IMAGE"] = await _job_image(env, settings.job_image)
    if env["PI_JOB_IMAGE"] == DEFAULT_IMAGE:
        stack.model = await _model_standin(env)
    if settings.egress.enabled and not await _has_image(settings.egress.image):
        # The first run must work without the proxy image (a minute of Debian packages to build); the
        # banner says the filter is off and how to turn it on.
        env["PI_EGRESS"] = "0"
    for name in SERVICES:
        stack.children[name] = await asyncio.create_subprocess_exec(
            sys.executable, "-m", f"pidispatch.{name}", env=env, start_new_session=True
        )
    return settings if await _wait_healthy(settings.receiver_port, stack.children, stop) else None


async def _model_standin(env: dict[str, str]) -> ModelStandIn | None:
    """The real agent image runs against the stand-in model unless the operator configured a provider (a
    key for ``PI_PROVIDER``, or ``PI_MODEL_BASE_URL``): the demo then costs nothing and needs no account."""
    import aiodocker

    from pidispatch.common.envnames import PROVIDER_KEY_VARS
    from pidispatch.dev.modelstandin import (  # only dev serves a model: aiohttp's server stays unloaded
        STANDIN_KEY_VAR,
        STANDIN_MODEL,
        STANDIN_PROVIDER,
        ModelStandIn,
        bridge_gateway,
    )

    provider = (env.get("PI_PROVIDER") or "anthropic").lower()
    if env.get("PI_MODEL_BASE_URL") or any(env.get(v) for v in PROVIDER_KEY_VARS.get(provider, ())):
        return None
    docker = aiodocker.Docker()
    try:
        gateway = await bridge_gateway(docker)
    finally:
        await docker.close()
    if gateway is None:
        print("pi-dispatch dev: Docker's bridge has no gateway address; jobs run with no model configured")
        return None
    key = secrets.token_urlsafe(24)
    model = ModelStandIn(key, host=gateway)
    await model.start()
    env.update({"PI_PROVIDER": STANDIN_PROVIDER, "PI_MODEL": STANDIN_MODEL, STANDIN_KEY_VAR: key,
                "PI_MODEL_BASE_URL": model.base_url})
    return model


def _prepare_env(state: Path, env: dict[str, str]) -> dict[str, str]:
    """Fill what the operator did not set with the embedded default's files."""
    env = dict(env)
    env.setdefault("WEBHOOK_SECRET", _persistent_secret(state / "webhook-secret"))
    env.setdefault("PI_TRIGGERS_FILE", str(_sample_triggers(state / "triggers.json")))
    env.setdefault("PI_LOGS_DIR", str(state / "logs"))
    env.setdefault("PI_JOBS_DIR", str(state / "jobs"))
    env.setdefault("PD_SPOOL_DIR", str(state / "spool"))
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
    await asyncio.to_thread(data_dir.mkdir, mode=0o700, parents=True, exist_ok=True)
    port = free_port()
    argv = redis_server_argv(find_redis_server(), port, data_dir, persist=True)
    proc = stack.redis_proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, start_new_session=True
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


async def _has_image(image: str) -> bool:
    """``image`` is on the daemon (False when no daemon answers: jobs wait for one anyway)."""
    import aiodocker

    try:
        docker = aiodocker.Docker()
    except Exception:
        return False
    try:
        return await asyncio.wait_for(_image_exists(docker, image), 5)
    except Exception:
        return False
    finally:
        await docker.close()


async def _job_image(env: dict[str, str], image: str) -> str:
    """The image jobs run in. With nothing configured and ``pi-job:latest`` absent, use (and if needed
    build) a tiny demo image from this machine's own binaries, so the first run needs no registry.
    """
    import aiodocker

    try:
        docker = aiodocker.Docker()
    except Exception:
        print("pi-dispatch dev: no Docker daemon reachable; events are accepted and routed, and jobs wait "
              "in their stream until a daemon appears")
        return image
    try:
        try:
            await asyncio.wait_for(docker.version(), 3)
        except Exception:
            print("pi-dispatch dev: no Docker daemon reachable; events are accepted and routed, and jobs "
                  "wait in their stream until a daemon appears")
            return image
        if await _image_exists(docker, image):
            return image
        if env.get("PI_JOB_IMAGE"):
            print(f"pi-dispatch dev: job image {image} is missing; jobs will be refused (job-image-missing). "
                  f"Build it, or run `pi-dispatch demo-image --tag {image}` for a demo image (no registry)")
            return image
        if not await _demo_image_current(docker):
            print(f"pi-dispatch dev: {DEFAULT_IMAGE} is missing; building the demo image {DEMO_IMAGE} "
                  "from this machine's busybox (no registry needed)")
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "pidispatch.common.cli", "demo-image", "--tag", DEMO_IMAGE, env=env
            )
            try:
                built = await proc.wait()
            except asyncio.CancelledError:  # Ctrl-C: the build must not outlive dev
                proc.kill()
                raise
            if built != 0:
                print("pi-dispatch dev: building the demo image failed; jobs will be refused until "
                      f"{DEFAULT_IMAGE} exists")
                return image
        return DEMO_IMAGE
    finally:
        await docker.close()


async def _demo_image_current(docker: object) -> bool:
    """The demo image exists and declares what the worker's preflight requires (one built by an older
    version lacks the ``anyUid`` capability label and every job would be refused)."""
    info = await _inspect(docker, DEMO_IMAGE)
    labels = ((info or {}).get("Config") or {}).get("Labels") or {}
    return "anyUid" in labels.get(DEMO_CAPABILITIES_LABEL, "").replace(" ", "").split(",")


async def _image_exists(docker: object, ref: str) -> bool:
    return await _inspect(docker, ref) is not None


async def _inspect(docker: object, ref: str) -> dict[str, Any] | None:
    """The image's inspect data, or None when the daemon has no such image."""
    from aiodocker.exceptions import DockerError

    try:
        return await docker.images.inspect(ref)  # type: ignore[attr-defined,no-any-return]
    except DockerError as exc:
        if exc.status == 404:
            return None
        raise


def _require_free_port(bind: str, port: int) -> None:
    """Refuse a receiver port something else holds: a server there that never answers would otherwise
    pass for a receiver that is slow to start."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the receiver binds
        try:
            probe.bind((bind, port))
        except OSError:
            raise ConfigError(
                f"RECEIVER_PORT={port} is in use on {bind} by another process; accepted: a free port "
                "(set RECEIVER_PORT, or stop what listens there)"
            ) from None


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


async def _stop_process(proc: asyncio.subprocess.Process, timeout: float) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


async def _stop_children(children: dict[str, asyncio.subprocess.Process]) -> None:
    # The worker first: it stops its containers and records them while Redis is still up.
    await asyncio.gather(*(_stop_process(p, STOP_BUDGET_S - 0.5) for p in children.values()))


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
