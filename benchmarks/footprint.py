"""Idle resident memory of each service (target: at most 80 MB each).

Starts a private redis-server and the three services as their operators run them
(``python -m pidispatch.<service>``), lets them settle, and reads VmRSS from /proc. In the same run it
measures two baselines: a bare interpreter and an interpreter that has only imported the libraries the
services use, and prints each service's ratio to the library baseline.

    .venv/bin/python benchmarks/footprint.py [--settle 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from pidispatch.common.embedded import find_redis_server, free_port, redis_server_argv

TARGET_MB = 80.0
LIB_IMPORTS = "import aiohttp.web, redis.asyncio, msgspec, structlog, aiodocker, time; time.sleep(600)"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--settle", type=float, default=5.0, help="seconds to idle before measuring")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pd-footprint-"))
    redis_port = free_port()
    redis = subprocess.Popen(redis_server_argv(find_redis_server(), redis_port, tmp, persist=False),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port = free_port()
    rule = {"on": {"type": "label", "any": ["pi:demo"]}, "run": {"kind": "github", "flow": "demo"}}
    (tmp / "triggers.json").write_text(json.dumps({"triggers": [rule]}))
    env = {
        **os.environ,
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "WEBHOOK_SECRET": "footprint-secret-1",
        "RECEIVER_PORT": str(port),
        "RECEIVER_BIND": "127.0.0.1",
        "PI_TRIGGERS_FILE": str(tmp / "triggers.json"),
        "GITHUB_SELF_ID": "424242",  # the router refuses GitHub rules without its own id
        "PI_LOGS_DIR": str(tmp / "logs"),
        "PI_JOBS_DIR": str(tmp / "jobs"),
    }
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        procs["bare python"] = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        procs["libraries only"] = subprocess.Popen([sys.executable, "-c", LIB_IMPORTS])
        for name in ("receiver", "router", "worker"):
            procs[name] = subprocess.Popen([sys.executable, "-m", f"pidispatch.{name}"], env=env,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_http(f"http://127.0.0.1:{port}/healthz", 20)
        time.sleep(args.settle)
        for name, p in procs.items():
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode} before measuring")
        sizes = {name: rss_mb(p.pid) for name, p in procs.items()}
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait(10)
        redis.terminate()
        redis.wait(10)

    base = sizes["libraries only"]
    print(f"{'process':<16}{'RSS MB':>9}{'x libs':>9}  target")
    ok = True
    for name, mb in sizes.items():
        service = name in ("receiver", "router", "worker")
        verdict = ("ok" if mb <= TARGET_MB else "OVER") if service else "baseline"
        ok &= verdict != "OVER"
        target = f"<= {TARGET_MB:.0f} MB {verdict}" if service else verdict
        print(f"{name:<16}{mb:>9.1f}{mb / base:>9.2f}  {target}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
