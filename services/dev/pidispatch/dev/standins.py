"""``pi-dispatch standin forge|model|deliver``: dev's stand-ins as processes of their own, for compose's
``demo`` profile (``deploy/demo.env``), where a job goes the whole way without a forge or a model account.

``forge`` serves the stand-in GitHub (``demo/hello``) on a fixed port under the URL the other containers
use; its token is ``GITHUB_PAT``, the one the router and the worker are given. ``model`` serves the
stand-in model keyed by the provider variable the worker hands each job. ``deliver`` posts one signed
demo delivery, a fresh id and issue number each time, once the receiver takes it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import time
import uuid
from pathlib import Path

import aiohttp

from pidispatch.common.errors import ConfigError, InfraError

# The forge the stand-in plays (its display name and webhook path in the help texts).
from pidispatch.forges.github import FORGE as DEMO_FORGE

# GITHUB_PAT's floor: a stand-in reachable on a shared network still wants a token nobody guesses.
TOKEN_MIN = 16
DELIVER_DEADLINE_S = 180.0
_RETRY_S = 2.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "standin", help=f"run dev's stand-in {DEMO_FORGE.display} or model on its own (compose's demo "
        "profile)",
        description=f"Serve dev's stand-in {DEMO_FORGE.display} or stand-in model until stopped, or post "
        "one signed demo delivery: what compose's demo profile runs (README, Deploy with compose).",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    f = actions.add_parser("forge", help=f"serve the stand-in {DEMO_FORGE.display} (repository demo/hello)",
                           description=f"Serve the stand-in {DEMO_FORGE.display} with GITHUB_PAT as its "
                           "token.")
    f.add_argument("--bind", default="0.0.0.0", help="address to listen on (default %(default)s)")
    f.add_argument("--port", type=int, default=8080, help="port (default %(default)s)")
    f.add_argument("--url", help="the URL the other containers reach it at (default http://BIND:PORT)")
    f.add_argument("--dir", default="/tmp/pd-demo-forge", help="its repository folder (default %(default)s)")
    f.set_defaults(func=forge_command)
    m = actions.add_parser("model", help="serve the stand-in model (a scripted write, then an answer)",
                           description="Serve the stand-in model; requests must carry the key in "
                           "the provider variable the worker hands each job.")
    m.add_argument("--bind", default="0.0.0.0", help="address to listen on (default %(default)s)")
    m.add_argument("--port", type=int, default=8181, help="port (default %(default)s)")
    m.set_defaults(func=model_command)
    d = actions.add_parser("deliver", help="post one signed demo delivery (issues labeled pi:demo)",
                           description="Post one demo delivery signed with WEBHOOK_SECRET, retrying "
                           f"until the receiver takes it or {DELIVER_DEADLINE_S:.0f} s have passed.")
    d.add_argument("--url", required=True, help=f"the receiver's {DEMO_FORGE.display} webhook URL, e.g. "
                   f"http://front:3000{DEMO_FORGE.path}")
    d.set_defaults(func=deliver_command)


def _required(name: str, floor: int = 1) -> str:
    value = os.environ.get(name, "").strip()
    if len(value) < floor:
        raise ConfigError(f"{name} is {'unset' if not value else 'too short'}; accepted: at least {floor} "
                          "characters (deploy/demo.env sets it)")
    return value


async def _until_stopped() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def forge_command(args: argparse.Namespace) -> int:
    from pidispatch.dev.forgestandin import REPO, DemoForge, prepare

    token = _required("GITHUB_PAT", TOKEN_MIN)
    root = Path(args.dir)
    await prepare(root)  # the repository, seeded on first use; its own generated token is not used here
    forge = DemoForge(root, token)
    await forge.start(args.bind, args.port)
    forge.url = args.url or forge.url  # what clone URLs name: the address the worker reaches
    print(f"demo forge: serving {REPO} at {forge.url}", flush=True)
    try:
        await _until_stopped()
    finally:
        await forge.close()
    return 0


async def model_command(args: argparse.Namespace) -> int:
    from pidispatch.dev.modelstandin import STANDIN_KEY_VAR, STANDIN_MODEL, STANDIN_PROVIDER, ModelStandIn

    standin = ModelStandIn(_required(STANDIN_KEY_VAR), args.bind, args.port)
    await standin.start()
    print(f"demo model: serving {STANDIN_PROVIDER}/{STANDIN_MODEL} on port {standin.port}", flush=True)
    try:
        await _until_stopped()
    finally:
        await standin.close()
    return 0


async def deliver_command(args: argparse.Namespace) -> int:
    from pidispatch.dev.forgestandin import REPO, demo_delivery, signed_headers

    secret = _required("WEBHOOK_SECRET")
    number = secrets.randbelow(9000) + 2  # a new issue each time: the 10-minute dedup window holds none
    body, delivery = demo_delivery(number), str(uuid.uuid4())
    headers = signed_headers(secret, body, delivery)
    deadline = time.monotonic() + DELIVER_DEADLINE_S
    last = "no answer"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        while time.monotonic() < deadline:
            try:
                async with session.post(args.url, data=body, headers=headers) as response:
                    text = (await response.text())[:200]
                    if response.status == 202:
                        print(f"demo delivery {delivery} ({REPO}#{number} labeled pi:demo): 202 {text}")
                        return 0
                    last = f"HTTP {response.status} {text}"
                    if response.status < 500:
                        raise ConfigError(f"the receiver refused the demo delivery: {last}; check "
                                          "WEBHOOK_SECRET is the receiver's")
            except (TimeoutError, aiohttp.ClientError) as exc:
                last = type(exc).__name__
            await asyncio.sleep(_RETRY_S)
    raise InfraError(f"the receiver did not take the demo delivery in {DELIVER_DEADLINE_S:.0f} s ({last})")
