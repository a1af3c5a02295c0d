"""Helpers for tests of cron schedules served by real worker processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.cli import run_cli
from tests.support.processes import ServiceProcess

# A dead host's row expires in 1.5 s, and a fleet gate re-check comes every 200 ms.
FAST = {"PD_HOST_BEAT_MS": "200", "PD_HOST_TTL_MS": "1500", "PI_DAILY_CAP": "100000", "TZ": "UTC"}


def occurrence(job_id: str) -> int:
    return int(job_id.rsplit(":", 1)[1])


def records(logs_dir: Path) -> dict[str, dict[str, Any]]:
    """Every run record in ``logs_dir`` by job id."""
    out = {}
    for path in logs_dir.glob("*.json"):
        rec = json.loads(path.read_text())
        out[rec["jobId"]] = rec
    return out


def cron_worker(env: dict[str, str], tmp_path: Path, name: str, trig: Path, **extra: str) -> ServiceProcess:
    host_env = {**env, **FAST, "PI_WORKER_NAME": f"{env['PI_WORKER_NAME']}-{name}",
                "PI_TRIGGERS_FILE": str(trig), **extra}
    return ServiceProcess("worker", host_env, tmp_path / f"{name}.log")


def queued(host: ServiceProcess) -> list[str]:
    """The occurrences this host queued (the others it fired were told ``duplicate``)."""
    return [e["jobId"] for e in host.logged("schedule_fired") if e["status"] == "queued"]


def cli_json(env: dict[str, str], *args: str) -> Any:
    """``pi-dispatch <args> --json`` in a fresh process; asserts exit 0."""
    done = run_cli(env, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
