"""The ``pi-dispatch`` command line, run in-process by a test, or in a fresh process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any


class Cli:
    """Runs the verbs ``register`` adds the way ``pi-dispatch`` does (same exit-code mapping), in a thread
    because the CLI calls asyncio.run, and captures what they print."""

    def __init__(self, capsys: Any, register: Callable[[Any], None]) -> None:
        self.capsys, self.register = capsys, register
        self.out = self.err = ""

    async def __call__(self, *argv: str) -> int:
        import argparse

        from pidispatch.common import cli

        parser = argparse.ArgumentParser(prog="pi-dispatch")
        self.register(parser.add_subparsers())
        args = parser.parse_args(argv)
        code = await asyncio.to_thread(cli.run, args.func, args)
        captured = self.capsys.readouterr()
        self.out, self.err = captured.out, captured.err
        return code

    def json(self) -> Any:
        return json.loads(self.out)


def run_cli(env: Mapping[str, str], *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``pi-dispatch <argv>`` in a fresh process that sees only ``env`` (plus PATH and HOME), as an
    operator's shell would run it; the caller checks the exit code."""
    full = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root"), **env}
    return subprocess.run([sys.executable, "-m", "pidispatch.common.cli", *argv],
                          env=full, capture_output=True, text=True, timeout=timeout, check=False)
