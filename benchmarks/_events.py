"""Shared by the router-side benchmarks: real GitHub payloads, a preloaded events stream, a drain wait."""

from __future__ import annotations

import asyncio
import gzip
import json
import subprocess
import time
import uuid
from pathlib import Path

from pidispatch.common.models import Event
from pidispatch.common.redis import Redis

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "tests" / "fixtures" / "github" / "webhooks-examples.json.gz"
EVENTS = ("issues", "issue_comment", "pull_request")


def payloads() -> list[tuple[str, str]]:
    data = json.loads(gzip.decompress(EXAMPLES.read_bytes()))
    out = []
    for entry in data:
        if entry["name"] in EVENTS:
            out += [(entry["name"], json.dumps(ex)) for ex in entry["examples"]]
    return out


async def preload(r: Redis, stream: str, n: int) -> None:
    bodies = payloads()
    now = int(time.time() * 1000)
    for start in range(0, n, 1000):
        async with r.pipeline(transaction=False) as pipe:
            for i in range(start, min(n, start + 1000)):
                name, body = bodies[i % len(bodies)]
                fields = Event(forge="github", event=name, delivery=str(uuid.uuid4()),
                               received_at=now, body=body).to_fields()
                pipe.xadd(stream, fields)
            await pipe.execute()


async def wait_drained(
    r: Redis, stream: str, group: str, n: int, timeout: float, proc: subprocess.Popen[bytes]
) -> float:
    """Seconds from the first delivery to the moment the group has read and acked all ``n`` entries."""
    deadline = time.monotonic() + timeout
    start: float | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{group} consumer exited with {proc.returncode}")
        groups = {g["name"].decode(): g for g in await r.xinfo_groups(stream)}
        g = groups.get(group)
        if g is not None:
            delivered_any = g["last-delivered-id"] != b"0-0"
            if delivered_any and start is None:
                start = time.monotonic()
            last = (await r.xrevrange(stream, count=1))[0][0]
            if g["last-delivered-id"] == last and g["pending"] == 0 and start is not None:
                return time.monotonic() - start
        await asyncio.sleep(0.005)
    raise RuntimeError(f"{group} did not drain {n} entries within {timeout}s")
