"""The ``pi-dispatch`` command. Each service registers its own verbs through the ``pidispatch.commands``
entry-point group, so this module imports no service.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path

from pidispatch.common import __version__
from pidispatch.common.errors import ConfigError, InfraError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pi-dispatch", description="Self-hosted job harness for a coding agent."
    )
    parser.add_argument("--version", action="version", version=f"pi-dispatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for ep in sorted(entry_points(group="pidispatch.commands"), key=lambda e: e.name):
        ep.load()(sub)
    return parser


HALT_VARIABLE = "PD_HALT_ON_CONFIG_ERROR"
HALTED = (
    f"pi-dispatch: halted on the configuration error above ({HALT_VARIABLE}=1): "
    "fix it, then recreate this container"
)


def halt_on_config_error(env: Mapping[str, str]) -> bool:
    """Pure: whether a service should wait for a stop signal after a configuration error, not exit."""
    value = (env.get(HALT_VARIABLE) or "").strip()
    if value not in ("", "0", "1"):
        raise ConfigError(f"{HALT_VARIABLE}={value!r} is refused; accepted: 0 or 1")
    return value == "1"


def halt_until_stopped() -> None:
    """Say so, then block until SIGTERM or SIGINT. Blocked before the line is written, so a signal sent
    once it is seen stays pending for sigwait rather than taking its default action."""
    stop = {signal.SIGTERM, signal.SIGINT}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    try:
        print(HALTED, file=sys.stderr, flush=True)
        signal.sigwait(stop)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def run(func: object, args: argparse.Namespace) -> int:
    """Call a command and map the project's error classes to exit codes (2 config, 1 infra).

    A service (receiver, router, worker) under a restart policy would restart forever on exit 2, which
    Docker cannot exempt; with PD_HALT_ON_CONFIG_ERROR=1 it stays up, idle, until it is stopped."""
    halt = False  # a refused PD_HALT_ON_CONFIG_ERROR itself exits at once
    try:
        halt = bool(getattr(args, "service", False)) and halt_on_config_error(os.environ)
        result = func(args)  # type: ignore[operator]
        if inspect.iscoroutine(result):
            result = asyncio.run(result)
        # Flushed here, not by the interpreter at exit: a short listing sits in the buffer until then, and
        # a reader gone by now must take the quiet branch below, not "Exception ignored" and status 120.
        sys.stdout.flush()
        return int(result or 0)
    except ConfigError as exc:
        print(f"pi-dispatch: configuration error: {exc}", file=sys.stderr, flush=True)
        if halt:
            halt_until_stopped()
        return 2
    except InfraError as exc:
        print(f"pi-dispatch: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`pi-dispatch events | head -1`): nothing more to say. 141 is what `yes`,
        # `cat` and every tool that dies of SIGPIPE report (128 + 13): a pipeline under `set -o pipefail`
        # sees the verb cut short, as it would any of them, and without pipefail nothing changes.
        stdout_gone()
        return 141


def stdout_gone() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is still buffered cannot fail
    again and print a BrokenPipeError after the verb has ended quietly."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def flush_quietly() -> None:
    """Flush stdout now; a reader already gone only sends the rest to /dev/null."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_gone()


# The verbs that read a deployment: run in a `pi-dispatch dev` folder, they find that dev (devstate).
DEV_STATE_VERBS = frozenset({
    "events", "explain", "replay", "hosts", "pause", "resume", "cancel", "status", "run", "runs", "schedules",
    "waits", "doctor", "web", "triggers", "heal",
})


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        if args.command in DEV_STATE_VERBS:
            from pidispatch.common import devstate

            devstate.apply(os.environ, Path.cwd())
        return run(args.func, args)
    finally:
        # What argparse wrote (`--help | head -1`) is still buffered: flushed here, it cannot fail later.
        flush_quietly()


if __name__ == "__main__":
    sys.exit(main())
