"""The ``pi-dispatch`` command. Each service registers its own verbs through the ``pidispatch.commands``
entry-point group, so this module imports no service.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from pidispatch.common import __version__
from pidispatch.common.errors import ConfigError, InfraError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pi-dispatch", description="Self-hosted job harness for a coding agent."
    )
    parser.add_argument("--version", action="version", version=f"pi-dispatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from pidispatch.common import dev, jobimage, serviceimage  # local import keeps `--help` light

    dev.register(sub)
    jobimage.register(sub)
    serviceimage.register(sub)
    for ep in sorted(entry_points(group="pidispatch.commands"), key=lambda e: e.name):
        ep.load()(sub)
    return parser


def run(func: object, args: argparse.Namespace) -> int:
    """Call a command and map the project's error classes to exit codes (2 config, 1 infra)."""
    try:
        result = func(args)  # type: ignore[operator]
        if inspect.iscoroutine(result):
            result = asyncio.run(result)
        return int(result or 0)
    except ConfigError as exc:
        print(f"pi-dispatch: configuration error: {exc}", file=sys.stderr)
        return 2
    except InfraError as exc:
        print(f"pi-dispatch: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return run(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
