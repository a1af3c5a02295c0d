"""``python -m pidispatch.receiver``: the same command as ``pi-dispatch receiver``."""

from __future__ import annotations

import argparse
import sys

from pidispatch.common.cli import run
from pidispatch.receiver.commands import add_arguments


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pidispatch.receiver")
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
