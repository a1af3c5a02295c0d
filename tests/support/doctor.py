"""``pi-dispatch doctor --json`` run as an operator runs it, in its own process, and its report."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

# Each run must end well within this, whatever does not answer (the doctor's own bound is 2 s a call).
RUN_BOUND_S = 20.0


class Report:
    def __init__(self, code: int, body: dict[str, Any], seconds: float) -> None:
        self.code, self.body, self.seconds = code, body, seconds
        self.checks = {c["name"]: c for c in body["checks"]}

    def status(self, name: str) -> str:
        return str(self.checks[name]["status"])


async def doctor(env: dict[str, str], *args: str) -> Report:
    full = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root"), **env}
    if "DOCKER_HOST" in os.environ:
        full.setdefault("DOCKER_HOST", os.environ["DOCKER_HOST"])
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pidispatch.common.cli", "doctor", "--json", "--timeout", "2", *args,
        env=full, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), RUN_BOUND_S)
    assert proc.returncode is not None
    body = json.loads(out)  # stdout is exactly one JSON object
    assert body["exit"] == proc.returncode, err
    return Report(proc.returncode, body, time.monotonic() - started)
