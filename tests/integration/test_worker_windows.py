"""Quiet hours with a real worker, Redis and Docker: a job picked up inside a window waits in
``pd:delayed`` using no attempt, and starts within a second of the window's end; a bad file refuses the
worker's start."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiodocker
from structlog.testing import capture_logs

from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.settings import load_settings
from pidispatch.worker.service import run_worker
from tests.support.worker import enqueue, issue_job, record


async def test_a_job_inside_a_window_starts_within_a_second_of_its_end(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    # A window closing at the next whole minute; the worker's clock is set 2 s before that close, so the
    # test waits 2 s, not up to a minute (the delay itself runs on Redis's clock).
    closes = (datetime.now(UTC) + timedelta(minutes=1)).replace(second=0, microsecond=0)
    offset_ms = int(closes.timestamp() * 1000) - 2_000 - now_ms()
    opened = closes - timedelta(minutes=10)
    path = tmp_path / "pause-windows.json"
    path.write_text(json.dumps({"version": 1, "windows": [{
        "scope": "*", "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
        "from": opened.strftime("%H:%M"), "to": closes.strftime("%H:%M"), "tz": "UTC",
    }]}))
    settings = load_settings({**env, "PI_PAUSE_WINDOWS_FILE": str(path)})
    stop = asyncio.Event()
    job = issue_job("exit=0")
    with capture_logs() as logs:
        worker = asyncio.create_task(
            run_worker(settings, redis, keys, docker, stop, lambda: now_ms() + offset_ms, env)
        )
        try:
            enqueued_at = time.monotonic()
            await enqueue(redis, keys, job)
            rec = await record(settings, job)
        finally:
            stop.set()
            await asyncio.wait_for(worker, 60)
    started_real_ms = int(datetime.fromisoformat(rec["startedAt"]).timestamp() * 1000) - offset_ms
    waited_s = time.monotonic() - enqueued_at
    assert rec["outcome"] == "completed" and rec["attempt"] == 1  # the hold used no attempt
    assert started_real_ms >= int(closes.timestamp() * 1000) - offset_ms - 50  # not before the close
    assert waited_s >= 1.9 and started_real_ms - (int(closes.timestamp() * 1000) - offset_ms) < 1_000
    paused = [e for e in logs if e["event"] == "job_paused_by_window"]
    assert [e["job"] for e in paused] == [job.id]


def test_a_bad_windows_file_refuses_the_start(env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "pause-windows.json"
    path.write_text(json.dumps({"version": 1, "windows": [{"scope": "*", "days": ["mon"], "from": "22:00",
                                                           "to": "07:00", "tz": "Nowhere/Land"}]}))
    proc = subprocess.run(
        [sys.executable, "-m", "pidispatch.worker"], env={**env, "PI_PAUSE_WINDOWS_FILE": str(path)},
        check=False, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "windows[0].tz" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
