"""The receiver against adnanh/webhook (Debian's ``webhook``) checking the same HMAC (issue #29).

Both get the same ~12 KB real GitHub ``issues`` delivery with a valid ``X-Hub-Signature-256``, a fresh
delivery id per request, from this process's closed-loop client, in rounds alternating the order. The
peer is configured as its documentation shows for GitHub: a ``payload-hmac-sha256`` trigger rule on
that header, running ``/bin/true`` (it starts its command per delivery; it keeps nothing). The receiver
does more for each: it verifies, remembers the delivery id and appends it to ``pd:events`` in Redis.
Target: receiver >= 1.2x the peer's rate.

    .venv/bin/python benchmarks/peer.py [--duration 10] [--rounds 4]

Needs ``webhook`` on PATH (apt-get install webhook); exit 2 without it, 1 when something broke.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path

from _load import Headers, closed_loop, new_session
from receiver import (
    SECRET,
    Broken,
    Target,
    check_alive,
    cpu_s,
    deployment,
    load_payload,
    signed_headers,
    spawn,
    wait_until,
)

from pidispatch.common.embedded import free_port

TARGET = 1.2


def hooks_file(directory: Path) -> Path:
    path = directory / "hooks.json"
    path.write_text(json.dumps([{
        "id": "github",
        "execute-command": "/bin/true",
        "command-working-directory": str(directory),
        "trigger-rule": {"match": {
            "type": "payload-hmac-sha256", "secret": SECRET,
            "parameter": {"source": "header", "name": "X-Hub-Signature-256"},
        }},
    }]))
    return path


async def settled(timeout_s: float = 60.0, idle_cores: float = 0.3) -> None:
    """Until the machine is quiet again: the peer runs its command after answering, and what a round left
    running would take the next round's CPU (measured here: the receiver at a quarter of its rate right
    after the peer's round when it did not wait)."""
    for _ in range(int(timeout_s / 0.5)):
        before = cpu_s()
        await asyncio.sleep(0.5)
        if (cpu_s() - before) / 0.5 < idle_cores:
            return


async def rounds(
    args: argparse.Namespace, body: bytes, targets: dict[str, tuple[Target, int]], headers: Headers
) -> dict[str, list[float]]:
    """Warm each target up, then closed-loop rounds alternating the order; every answer must be its 2xx."""
    rates: dict[str, list[float]] = {name: [] for name in targets}
    async with new_session(args.concurrency) as session:
        for name, (t, status) in targets.items():
            async def up(t: Target = t, status: int = status) -> bool:
                async with session.post(t.url, data=body, headers=headers()) as r:
                    return bool(r.status == status)

            await wait_until(up, name, t.proc)
            await closed_loop(session, t.url, body, headers, args.concurrency, args.warmup)
        order = tuple(targets)
        for i in range(args.rounds):
            for name in order if i % 2 == 0 else order[::-1]:
                t, status = targets[name]
                result = await closed_loop(session, t.url, body, headers, args.concurrency, args.duration)
                check_alive(t, f"round {i + 1}")
                if bad := result.unexpected(status):
                    raise Broken(f"{name}: {bad} answers not {status}: {dict(result.statuses)}")
                rates[name].append(result.rate)
                print(f"  round {i + 1} {name:<9} {result.rate:8.0f} req/s", flush=True)
                await settled()
    return rates


async def bench(args: argparse.Namespace, body: bytes, tmp: Path, binary: str) -> dict[str, list[float]]:
    base = signed_headers(body)

    def headers() -> Mapping[str, str]:
        return {**base, "X-GitHub-Delivery": str(uuid.uuid4())}

    async with deployment(tmp) as dep:
        port = free_port()
        argv = [binary, "-hooks", str(hooks_file(tmp)), "-ip", "127.0.0.1", "-port", str(port)]
        peer_proc = await spawn(argv, os.environ, tmp / "webhook.log")
        peer = Target("webhook", peer_proc, f"http://127.0.0.1:{port}/hooks/github", "")
        try:
            targets = {"receiver": (dep.targets["receiver"], 202), "webhook": (peer, 200)}
            return await rounds(args, body, targets, headers)
        finally:
            peer_proc.terminate()
            await peer_proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per target, alternating the order")
    parser.add_argument("--concurrency", type=int, default=32, help="connections")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of load before measuring")
    args = parser.parse_args()
    binary = shutil.which("webhook")
    if binary is None:
        print("peer: no webhook on PATH; install Debian's package: apt-get install webhook", file=sys.stderr)
        return 2
    body, action = load_payload()
    print(f"payload: real GitHub issues/{action} example, {len(body)} bytes; {args.rounds} x "
          f"{args.duration:g} s per target, {args.concurrency} connections; peer: {binary}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="pd-bench-peer-"))
    try:
        rates = asyncio.run(bench(args, body, tmp, binary))
    except Broken as exc:
        print(f"BROKEN: {exc} (logs kept in {tmp})", file=sys.stderr)
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    mine, peer = statistics.median(rates["receiver"]), statistics.median(rates["webhook"])
    print(f"receiver {mine:.0f} req/s, adnanh/webhook {peer:.0f} req/s (medians): "
          f"{mine / peer:.2f}x (target >= {TARGET:g}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
