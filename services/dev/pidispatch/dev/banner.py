"""What ``pi-dispatch dev`` prints once it is up: every command in it runs as printed from a new shell
(absolute paths, no placeholder), and in the dev folder the CLI verbs find the running dev by themselves."""

from __future__ import annotations

import os
import shlex
import sys
import uuid
from pathlib import Path

from pidispatch.common import devstate
from pidispatch.common.embedded import find_redis_cli
from pidispatch.common.errors import InfraError
from pidispatch.dev import forgestandin as standin
from pidispatch.dev.forgestandin import DEMO_LABEL

# The forge `dev` stands in for when none is configured (its ``standin``): the sample rule's jobs run
# there and the printed delivery is its webhook.
from pidispatch.forges.github import FORGE as DEMO_FORGE

DEFAULT_IMAGE = "pi-job:latest"


def webhook_url(port: int) -> str:
    return f"http://127.0.0.1:{port}{DEMO_FORGE.path}"


def cli_path() -> str:
    """The command as a new shell can run it: the venv's script by its path (a new shell has no venv)."""
    beside = os.path.join(os.path.dirname(sys.executable), "pi-dispatch")
    return shlex.quote(beside) if os.access(beside, os.X_OK) else "pi-dispatch"


def _model_line(env: dict[str, str], standin: bool) -> str:
    if env["PI_JOB_IMAGE"] != DEFAULT_IMAGE:
        return f"none: the demo image plays the agent (build the real one: {cli_path()} job-image build)"
    if standin:
        return (f"the stand-in at {env['PI_MODEL_BASE_URL']}: a scripted write, then an answer "
                "(set a provider key, e.g. ANTHROPIC_API_KEY, for a real model)")
    named = f"{env.get('PI_PROVIDER') or 'anthropic'}/{env.get('PI_MODEL') or 'its default model'}"
    return f"{named} at {env['PI_MODEL_BASE_URL']}" if env.get("PI_MODEL_BASE_URL") else named


def _bind_note(env: dict[str, str]) -> str:
    bind = env.get("RECEIVER_BIND", "127.0.0.1")
    return "" if bind == "127.0.0.1" else f" (listening on {bind}: reachable from other machines)"


def _egress_line(env: dict[str, str]) -> str:
    if env.get("PI_EGRESS") == "0":
        return (f"off: jobs reach the whole network (build the filter once: {cli_path()} egress-image build, "
                "then start dev again)")
    return "on: each job reaches only its forge and its model, through the egress proxy"


def print_banner(
    env: dict[str, str], prefix: str, port: int, logs_dir: str, state: Path, *, model_standin: bool
) -> None:

    url = webhook_url(port)
    delivery = str(uuid.uuid4())
    curl = standin.signed_curl(url, env["WEBHOOK_SECRET"], standin.demo_delivery(), delivery)
    cli = cli_path()
    # Its own folder named, so the command works from any directory of another terminal.
    fresh = f"{cli} demo-curl --dir {shlex.quote(str(state))}"
    if env.get("RECEIVER_PORT"):  # another terminal has not set it: the command carries it
        fresh = f"RECEIVER_PORT={shlex.quote(env['RECEIVER_PORT'])} {fresh}"
    try:
        redis_cli = find_redis_cli()
    except InfraError:  # REDIS_URL names the operator's Redis and this machine has no redis-server
        redis_cli = None
    rc = f"{shlex.quote(redis_cli)} -u {shlex.quote(env['REDIS_URL'])}" if redis_cli else ""
    watch = "".join(f"  {rc} {cmd}\n" for cmd in (
        f"ZREVRANGE {prefix}:decisions 0 19", f"XRANGE {prefix}:jobs - +", f"XINFO GROUPS {prefix}:jobs",
    )) if rc else ""
    print(
        "\n"
        "pi-dispatch dev is running. Ctrl-C stops everything.\n"
        f"  webhook URL  {url}{_bind_note(env)}\n"
        f"  triggers     {env['PI_TRIGGERS_FILE']}\n"
        f"  run records  {logs_dir}\n"
        f"  job image    {env['PI_JOB_IMAGE']}\n"
        f"  model        {_model_line(env, model_standin)}\n"
        f"  egress       {_egress_line(env)}\n"
        + _demo_lines(env, state, curl, fresh)
        + (f"Watch Redis (the last 20 decisions, the jobs, who holds them):\n{watch}" if watch else "")
        + "Ask why a delivery did or did not fire, and see the runs, from another terminal:\n"
        + _where_line(env, state)
        + f"  {cli} events\n"
        f"  {cli} explain {delivery}\n"
        f"  {cli} runs\n"
        f"  {cli} status\n"
        f"  {cli} doctor\n",
        flush=True,
    )


def _demo_lines(env: dict[str, str], state: Path, curl: str, fresh: str) -> str:
    """The signed demo delivery, when the rules in force are dev's sample (whose rule it fires); with the
    operator's own file (an ``init`` folder's) it would be dropped, so the banner says that instead."""
    if env["PI_TRIGGERS_FILE"] != str(state / "triggers.json"):
        return (f"\nThe rules are your own (PI_TRIGGERS_FILE): the demo delivery (a {DEMO_FORGE.display} "
                f"'issues labeled {DEMO_LABEL}')\nfires only if one of them takes that label. `{fresh}` "
                "prints it, signed.\n")
    return (
        f"\nFire the sample rule (a {DEMO_FORGE.display} 'issues labeled {DEMO_LABEL}' delivery, signed):\n\n"
        f"{curl}\n\n"
        "Pasting it again creates no second job: the delivery id counts once for 31 days, and issue #1\n"
        f"with flow 'demo' once per 10 minutes. `{fresh}` prints a fresh delivery.\n"
    )


def _where_line(env: dict[str, str], state: Path) -> str:
    """How another terminal's CLI finds this dev: in the folder holding ``.pi-dispatch`` the verbs read
    ``dev.json`` themselves; a state folder elsewhere needs the variables exported."""
    if state.name == devstate.STATE_DIR:
        return f"  cd {shlex.quote(str(state.parent))}\n"
    cli_env = [f"{name}={env[name]}" for name in devstate.SHARED if env.get(name)]
    return f"  {shlex.join(['export', *cli_env])}\n"
