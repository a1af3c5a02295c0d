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
import shlex
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pidispatch.common.embedded import find_redis_cli, find_redis_server, free_port, redis_server_argv
from pidispatch.common.envnames import REDIS_PASSWORD_VARS
from pidispatch.common.errors import ConfigError, InfraError
from pidispatch.common.runtime import stop_on_signals
from pidispatch.common.settings import load_settings

# The forge `dev` stands in for when none is configured (its ``standin``): the sample rule's jobs run
# there and the printed delivery is its webhook.
from pidispatch.forges.github import FORGE as DEMO_FORGE

if TYPE_CHECKING:
    from pidispatch.common.modelstandin import ModelStandIn

SERVICES = ("receiver", "router", "worker")
DEMO_LABEL = "pi:demo"
DEMO_IMAGE = "pi-dispatch-demo:latest"
# The image label the worker's preflight reads (pidispatch.worker.image.CAPABILITIES_LABEL).
DEMO_CAPABILITIES_LABEL = "dev.pi-dispatch.capabilities"
DEFAULT_IMAGE = "pi-job:latest"
STOP_BUDGET_S = 5.0

SAMPLE_TRIGGERS = {
    "triggers": [
        {"on": {"type": "label", "any": [DEMO_LABEL]}, "run": {"kind": DEMO_FORGE.name, "flow": "demo"}},
    ]
}


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("dev", help="run receiver, router and a worker on this machine (embedded default)")
    p.add_argument("--dir", default=".pi-dispatch", help="state folder (default ./.pi-dispatch)")
    p.set_defaults(func=dev)
    c = sub.add_parser("demo-curl", help="print a fresh signed demo delivery for a running `pi-dispatch dev`")
    c.add_argument("--dir", default=".pi-dispatch", help="state folder (default ./.pi-dispatch)")
    c.set_defaults(func=demo_curl)


def demo_curl(args: argparse.Namespace) -> int:
    """A new delivery id and a new issue number, so neither dedup layer swallows it."""
    from pidispatch.forges.github import standin  # only the demo commands need aiohttp's server

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


def webhook_url(port: int) -> str:
    return f"http://127.0.0.1:{port}{DEMO_FORGE.path}"


async def dev(args: argparse.Namespace) -> int:
    state = await asyncio.to_thread(Path(args.dir).resolve)
    env = dict(os.environ)
    stop = stop_on_signals()
    redis_proc: asyncio.subprocess.Process | None = None
    children: dict[str, asyncio.subprocess.Process] = {}
    from pidispatch.forges.github import standin  # only the demo commands need aiohttp's server

    forge: standin.DemoForge | None = None
    model: ModelStandIn | None = None
    try:
        await asyncio.to_thread(state.mkdir, mode=0o700, parents=True, exist_ok=True)
        if not env.get("REDIS_URL") and not env.get("VALKEY_URL"):
            redis_proc, env["REDIS_URL"] = await _start_redis(state / "redis")
            # The private server has no password: one meant for the operator's own Redis would be refused.
            for name in REDIS_PASSWORD_VARS:
                env.pop(name, None)
        env = await asyncio.to_thread(_prepare_env, state, env)
        if not standin.credentials_set(env):
            # The demo forge is not configured: the demo rule's jobs clone demo/hello from a stand-in.
            forge, forge_env = await standin.start_demo_forge(state)
            env.update(forge_env)
        settings = load_settings(env)  # validates everything before any child starts
        env["PI_JOB_IMAGE"] = await _job_image(env, settings.job_image)
        if env["PI_JOB_IMAGE"] == DEFAULT_IMAGE:
            model = await _model_standin(env)
        for name in SERVICES:
            children[name] = await asyncio.create_subprocess_exec(
                sys.executable, "-m", f"pidispatch.{name}", env=env, start_new_session=True
            )
        if not await _wait_healthy(settings.receiver_port, children, stop):
            return 0 if stop.is_set() else 1
        _print_banner(env, settings.key_prefix, settings.receiver_port, settings.logs_dir, state,
                      model_standin=model is not None)
        return await _supervise(children, stop)
    finally:
        await _stop_children(children)
        await _sweep_containers(env)
        if forge is not None:
            await forge.close()
        if model is not None:
            await model.close()
        if redis_proc is not None:
            await _stop_process(redis_proc, 3.0)


async def _model_standin(env: dict[str, str]) -> ModelStandIn | None:
    """The real agent image runs against the stand-in model unless the operator configured a provider (a
    key for ``PI_PROVIDER``, or ``PI_MODEL_BASE_URL``): the demo then costs nothing and needs no account."""
    import aiodocker

    from pidispatch.common.envnames import PROVIDER_KEY_VARS
    from pidispatch.common.modelstandin import (  # only dev serves a model: aiohttp's server stays unloaded
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


async def _start_redis(data_dir: Path) -> tuple[asyncio.subprocess.Process, str]:
    await asyncio.to_thread(data_dir.mkdir, mode=0o700, parents=True, exist_ok=True)
    port = free_port()
    argv = redis_server_argv(find_redis_server(), port, data_dir, persist=True)
    proc = await asyncio.create_subprocess_exec(
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
            return proc, f"redis://127.0.0.1:{port}/0"
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
            if await proc.wait() != 0:
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
            line = await reader.readline()
            writer.close()
            if b" 200 " in line:
                return True
        await asyncio.sleep(0.1)
    if not stop.is_set():
        print(f"pi-dispatch dev: the receiver did not answer on port {port}", file=sys.stderr)
    return False


def cli_path() -> str:
    """The command as a new shell can run it: the venv's script by its path (a new shell has no venv)."""
    beside = os.path.join(os.path.dirname(sys.executable), "pi-dispatch")
    return shlex.quote(beside) if os.access(beside, os.X_OK) else "pi-dispatch"


def _model_line(env: dict[str, str], standin: bool) -> str:
    if env["PI_JOB_IMAGE"] != DEFAULT_IMAGE:
        return "none: the demo image plays the agent (build the real one: pi-dispatch job-image build)"
    if standin:
        return (f"the stand-in at {env['PI_MODEL_BASE_URL']}: a scripted write, then an answer "
                "(set a provider key, e.g. ANTHROPIC_API_KEY, for a real model)")
    named = f"{env.get('PI_PROVIDER') or 'anthropic'}/{env.get('PI_MODEL') or 'its default model'}"
    return f"{named} at {env['PI_MODEL_BASE_URL']}" if env.get("PI_MODEL_BASE_URL") else named


def _print_banner(
    env: dict[str, str], prefix: str, port: int, logs_dir: str, state: Path, *, model_standin: bool
) -> None:
    from pidispatch.forges.github import standin

    url = webhook_url(port)
    curl = standin.signed_curl(url, env["WEBHOOK_SECRET"], standin.demo_delivery(), str(uuid.uuid4()))
    rc = f"{find_redis_cli() or 'redis-cli'} -u {env['REDIS_URL']}"
    # What the CLI in another terminal needs to see this deployment: its Redis, rules and run records.
    shared = ("REDIS_URL", "PI_TRIGGERS_FILE", "PI_LOGS_DIR")
    cli_env = [f"{name}={env[name]}" for name in shared if env.get(name)]
    cli = cli_path()
    # Its own folder named, so the command works from any directory of another terminal.
    fresh = f"{cli} demo-curl --dir {shlex.quote(str(state))}"
    print(
        "\n"
        "pi-dispatch dev is running. Ctrl-C stops everything.\n"
        f"  webhook URL  {url}\n"
        f"  triggers     {env['PI_TRIGGERS_FILE']}\n"
        f"  run records  {logs_dir}\n"
        f"  job image    {env['PI_JOB_IMAGE']}\n"
        f"  model        {_model_line(env, model_standin)}\n"
        f"\nFire the sample rule (a {DEMO_FORGE.display} 'issues labeled {DEMO_LABEL}' delivery, signed):\n\n"
        f"{curl}\n\n"
        "Pasting it again creates no second job: the delivery id counts once for 31 days, and issue #1\n"
        f"with flow 'demo' once per 10 minutes. `{fresh}` prints a fresh delivery.\n"
        "Watch it:\n"
        f"  {rc} XRANGE {prefix}:events - +\n"
        f"  {rc} XRANGE {prefix}:jobs - +\n"
        f"  {rc} XINFO GROUPS {prefix}:jobs\n"
        "Ask why a delivery did or did not fire, and see the runs (from another terminal):\n"
        f"  {shlex.join(['export', *cli_env])}\n"
        f"  {cli} events; {cli} explain <delivery>; {cli} runs; {cli} status; {cli} schedules\n",
        flush=True,
    )


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


async def _sweep_containers(env: dict[str, str]) -> None:
    """Belt and braces: remove any job container of this dev worker that outlived it."""
    import aiodocker

    try:
        host = load_settings(env).worker_name
        docker = aiodocker.Docker()
    except Exception:
        return
    try:
        found = await asyncio.wait_for(
            docker.containers.list(all="1", filters=json.dumps({"label": [f"pd.host={host}"]})), 3
        )
        for c in found:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(c.delete(force=True), 3)
    except Exception:
        return
    finally:
        await docker.close()
