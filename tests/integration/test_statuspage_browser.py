"""The status page in a real browser: headless Chromium renders each page of a stack with jobs in it and
takes a screenshot. Skips without Chromium unless ``PD_REQUIRE_BROWSER=1``; ``PD_UPDATE_SCREENSHOT=1``
also copies the overview's screenshot to ``docs/status-page.png``."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import aiodocker
import pytest

from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from tests.support.statusstack import HELD_JOB, status_stack

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BROWSER_TIMEOUT_S = 60


@pytest.fixture
def key_prefix() -> str:
    """The deployed default, so the screenshot reads as an operator's page would (this session's Redis is
    the test run's own)."""
    return "pd"


@pytest.fixture
def worker_name() -> str:
    return "build-1"


@pytest.fixture
def chromium() -> str:
    candidates = ("/usr/bin/chromium", shutil.which("chromium"))
    found = next((p for p in candidates if p and os.path.exists(p)), None)
    if found is None:
        if os.environ.get("PD_REQUIRE_BROWSER") == "1":
            pytest.fail("PD_REQUIRE_BROWSER=1 but no chromium (apt-get install -y chromium)")
        pytest.skip("no chromium on this machine (apt-get install -y chromium)")
    return found


async def browse(chromium: str, tmp_path: Path, *args: str) -> bytes:
    """One headless Chromium run with its own profile; its stdout. Fails on a non-zero exit or a hang."""
    proc = await asyncio.create_subprocess_exec(
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--no-first-run", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), BROWSER_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"chromium did not finish within {BROWSER_TIMEOUT_S}s: {args}") from None
    assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    return out


async def test_each_page_renders_in_chromium_with_its_data(
    chromium: str, env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path,
    worker_name: str,
) -> None:
    async with status_stack(env, redis, keys, docker, tmp_path) as stack:
        expected = {
            "overview": ("/", [keys.events, keys.jobs, keys.host_jobs(worker_name), worker_name, "live"]),
            "runs": ("/runs", [stack.job_id, "completed", "output"]),
            "deliveries": ("/deliveries", [stack.queued, stack.dropped, "no-allowlisted-label"]),
            "delivery": (f"/deliveries/github/{stack.queued}", ["today's rules would: fire rule #0"]),
            "schedules": ("/schedules", ["nightly", "0 3 * * *", "unserved"]),
            "waits": ("/waits", [HELD_JOB, "profile=ci"]),
        }
        for name, (path, texts) in expected.items():
            dom = (await browse(chromium, tmp_path, "--dump-dom", stack.url + path)).decode()
            for wanted in texts:
                assert wanted in dom.replace("&#x27;", "'").replace("&#39;", "'"), (name, wanted)
            assert "<script" not in dom.lower(), name
            shot = tmp_path / f"{name}.png"
            size = "--window-size=1280,900"
            await browse(chromium, tmp_path, f"--screenshot={shot}", size, stack.url + path)
            data = shot.read_bytes()
            assert data.startswith(PNG_MAGIC) and len(data) > 10_000, (name, len(data))
    if os.environ.get("PD_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(tmp_path / "overview.png", ROOT / "docs" / "status-page.png")
