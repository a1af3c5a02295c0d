"""Receiver throughput and latency against a minimal verify-and-XADD handler (issue #3).

Starts a private redis-server, the real receiver (``python -m pidispatch.receiver``) and a reference
aiohttp app (this file, ``--serve-reference PORT``) as separate processes on loopback; this process is
the load client. Both servers get the same ~12 KB real GitHub ``issues`` delivery, correctly signed, with
a fresh delivery id per request. Measures (1) max throughput, closed loop, rounds alternating the order,
(2) p50/p99 latency at a fixed open-loop rate, and (3) the receiver's spool: with Redis killed, how many
deliveries per second it answers 202 ``spooled`` (each fsynced first), then, with Redis back, how fast
it drains them. Targets: ratio >= 0.8, p99 <= 20 ms at 500 req/s.

    .venv/bin/python benchmarks/receiver.py [--duration 10] [--rate 500] [--check]

Exit 1 when something broke (a non-202 answer, a lost entry, a crashed server), or with ``--check``
when a target is missed; 0 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import hmac
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from _load import Result, closed_loop, new_session, open_loop, percentile
from _profile import record_argv, summary
from _redis import redis_us_by_command
from aiohttp import web

from pidispatch.common.embedded import find_redis_server, free_port, redis_server_argv
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis, create_redis
from pidispatch.common.runtime import now_ms, stop_on_signals

TARGET_RATIO = 0.8
TARGET_P99_MS = 20.0
TARGET_PAYLOAD_BYTES = 12 * 1024
FOREIGN_CORES_WARN = 0.1
SECRET = "benchmark-webhook-secret"
EXAMPLES = Path(__file__).resolve().parent.parent / "tests/fixtures/github/webhooks-examples.json.gz"
PREFIXES = {"receiver": "bench-recv", "reference": "bench-ref"}  # same Redis, separate streams
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- the reference: the least a correct handler can do (verify the raw bytes, one XADD, 202) ---------

async def serve_reference(port: int, redis_url: str, secret: bytes, stream: str) -> int:
    redis = create_redis(redis_url)  # the receiver's own client settings
    accepted = b'{"status":"accepted"}'

    async def deliver(request: web.Request) -> web.Response:
        body = await request.read()
        signature = request.headers.get("X-Hub-Signature-256", "")
        expected = "sha256=" + hmac.digest(secret, body, "sha256").hex()
        if not signature.isascii() or not hmac.compare_digest(expected, signature):
            return web.Response(status=401)
        await redis.xadd(stream, {
            "forge": "github", "event": request.headers.get("X-GitHub-Event", ""),
            "delivery": request.headers.get("X-GitHub-Delivery", ""), "receivedAt": now_ms(), "body": body,
        })
        return web.Response(status=202, body=accepted, content_type="application/json")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/github", deliver)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await stop_on_signals().wait()
    finally:
        await runner.cleanup()
        await redis.aclose()
    return 0


# --- the payload -----------------------------------------------------------------------------------

def load_payload() -> tuple[bytes, str]:
    """The largest real ``issues`` example whose compact JSON (as GitHub sends it) fits in 12 KiB."""
    examples = next(e["examples"] for e in json.loads(gzip.decompress(EXAMPLES.read_bytes()))
                    if e["name"] == "issues")
    bodies = [(json.dumps(x, separators=(",", ":"), ensure_ascii=False).encode(), x["action"])
              for x in examples]
    return max((b for b in bodies if len(b[0]) <= TARGET_PAYLOAD_BYTES), key=lambda b: len(b[0]))


def signed_headers(body: bytes) -> Mapping[str, str]:
    """One signature serves every request: the body never changes, only the delivery header does."""
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issues",
        "X-Hub-Signature-256": "sha256=" + hmac.digest(SECRET.encode(), body, "sha256").hex(),
    }


# --- processes -------------------------------------------------------------------------------------

class Broken(Exception):
    """Something other than speed went wrong: the numbers would mean nothing."""


@dataclass
class Target:
    name: str
    proc: asyncio.subprocess.Process
    url: str
    stream: str


@dataclass
class Deployment:
    redis: Redis  # the benchmark's own client: stream checks between phases
    redis_proc: asyncio.subprocess.Process
    targets: dict[str, Target]
    redis_argv: list[str]  # to restart it after the spool phase killed it
    tmp: Path


async def spawn(argv: list[str], env: Mapping[str, str], log: Path) -> asyncio.subprocess.Process:
    out = await asyncio.to_thread(log.open, "wb")
    with out:  # the child keeps its own descriptor
        return await asyncio.create_subprocess_exec(*argv, env=dict(env), stdout=out, stderr=out)


async def wait_until(check: Callable[[], Awaitable[object]], what: str, proc: asyncio.subprocess.Process,
                     timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise Broken(f"{what} exited with {proc.returncode} while starting")
        with contextlib.suppress(Exception):
            if await check():
                return
        await asyncio.sleep(0.1)
    raise Broken(f"{what} did not come up within {timeout:.0f} s")


async def stop_all(procs: list[asyncio.subprocess.Process]) -> None:
    for p in procs:
        if p.returncode is None:
            p.terminate()
    for p in procs:
        try:
            await asyncio.wait_for(p.wait(), 10)
        except TimeoutError:
            p.kill()
            await p.wait()


@contextlib.asynccontextmanager
async def deployment(tmp: Path) -> AsyncIterator[Deployment]:
    """redis-server, then the receiver and the reference on it; every process stopped on the way out."""
    redis_port = free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    redis = create_redis(redis_url)
    servers: list[asyncio.subprocess.Process] = []
    redis_argv = redis_server_argv(find_redis_server(), redis_port, tmp, persist=False)
    redis_proc = await spawn(redis_argv, os.environ, tmp / "redis.out")
    dep = Deployment(redis, redis_proc, {}, redis_argv, tmp)
    try:
        await wait_until(redis.ping, "redis-server", redis_proc)
        env = {**os.environ, "REDIS_URL": redis_url, "WEBHOOK_SECRET": SECRET, "RECEIVER_BIND": "127.0.0.1",
               "PD_SPOOL_DIR": str(tmp / "spool")}
        for name in ("receiver", "reference"):
            port, stream = free_port(), Keys(PREFIXES[name]).events
            argv = ([sys.executable, "-m", "pidispatch.receiver"] if name == "receiver" else
                    [sys.executable, __file__, "--serve-reference", str(port)])
            proc = await spawn(argv, {**env, "PD_KEY_PREFIX": PREFIXES[name], "RECEIVER_PORT": str(port)},
                               tmp / f"{name}.log")
            servers.append(proc)
            dep.targets[name] = Target(name, proc, f"http://127.0.0.1:{port}/github", stream)
        yield dep
    finally:
        await redis.aclose()
        await stop_all(servers)  # servers first, so none of them sees Redis vanish
        await stop_all([dep.redis_proc])  # the spool phase restarts it: the one running now


def cpu_s(pid: int | None = None) -> float:
    """User + system CPU seconds one process (or, with no pid, the whole machine) has used so far."""
    if pid is None:  # /proc/stat "cpu": user nice system idle iowait irq softirq steal ...
        user, nice, system, _, _, _, _, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
        # Interrupt time is left out: loopback traffic is the benchmark's own, not another process.
        return (user + nice + system + steal) / CLK_TCK
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        raise Broken(f"process {pid} is gone") from None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


# --- the run ---------------------------------------------------------------------------------------

@dataclass
class SpoolFigures:
    spooled: int
    spool_rate: float  # deliveries/s answered 202 spooled, closed loop, Redis down
    drain_s: float  # from the first drained delivery to an empty spool
    spool_bytes: int


@dataclass
class Measured:
    rounds: dict[str, list[Result]]  # closed loop, one per round
    cpu_us: dict[str, dict[str, list[float]]]  # target -> process (server, redis, client) -> µs/req
    latency: dict[str, Result]  # open loop
    foreign_cores: list[float] = field(default_factory=list)  # per round: cores busy with other work
    # target -> per round: Redis's own µs per answered request, by command (INFO commandstats)
    commands: dict[str, list[dict[str, float]]] = field(default_factory=lambda: defaultdict(list))
    spool: SpoolFigures | None = None


async def profile_start(
    args: argparse.Namespace, t: Target, round_no: int
) -> asyncio.subprocess.Process | None:
    """With ``--profile``: py-spy on the first round of each target, for that round's length."""
    if args.profile is None or round_no:
        return None
    out = Path(args.profile) / f"{t.name}.txt"
    return await asyncio.create_subprocess_exec(*record_argv(t.proc.pid, args.duration, out),
                                                stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.DEVNULL)


def check_alive(target: Target, phase: str) -> None:
    if target.proc.returncode is not None:
        raise Broken(f"{target.name} exited with {target.proc.returncode} during {phase}")


async def check_phase(redis: Redis, target: Target, result: Result, phase: str) -> None:
    """Every request answered 202, every 202 left exactly one entry; then empty the stream so each
    phase starts from the same Redis state."""
    check_alive(target, phase)
    if bad := result.unexpected(202):
        raise Broken(f"{target.name}: {bad} non-202 answers in {phase}: "
                     f"{dict(result.statuses)} errors {dict(result.errors)}")
    entries = await redis.xlen(target.stream)
    if entries != result.answered:
        raise Broken(f"{target.name}: {result.answered} accepted but {entries} entries in {phase}")
    await redis.delete(target.stream)


async def measure(args: argparse.Namespace, body: bytes, dep: Deployment) -> Measured:
    base = signed_headers(body)

    def headers() -> Mapping[str, str]:
        return {**base, "X-GitHub-Delivery": str(uuid.uuid4())}

    targets = dep.targets
    measured = Measured({n: [] for n in targets}, {n: defaultdict(list) for n in targets}, {})
    async with new_session(args.concurrency) as session:
        for t in targets.values():
            health = t.url.replace("/github", "/healthz")

            async def up(url: str = health) -> bool:
                async with session.get(url) as r:
                    return r.status == 200

            await wait_until(up, t.name, t.proc)
            warm = await closed_loop(session, t.url, body, headers, args.concurrency, args.warmup)
            await check_phase(dep.redis, t, warm, "warm-up")

        order = ("receiver", "reference")
        for i in range(args.rounds):
            # Alternate who goes first so drift (Redis memory, CPU clocks) favours neither side.
            for name in order if i % 2 == 0 else order[::-1]:
                t, phase = targets[name], f"throughput round {i + 1}"
                check_alive(t, phase)
                pids = {"server": t.proc.pid, "redis": dep.redis_proc.pid, "client": os.getpid(), "all": None}
                before = {k: cpu_s(pid) for k, pid in pids.items()}
                await dep.redis.config_resetstat()
                spy = await profile_start(args, t, i)
                result = await closed_loop(session, t.url, body, headers, args.concurrency, args.duration)
                check_alive(t, phase)
                if spy is not None:
                    await spy.wait()
                measured.commands[name].append(await redis_us_by_command(dep.redis, result.answered))
                used = {k: cpu_s(pid) - before[k] for k, pid in pids.items()}
                for k in ("server", "redis", "client"):
                    measured.cpu_us[name][k].append(used[k] / result.answered * 1e6)
                # CPU the machine spent on anything but this benchmark: other work skews the numbers.
                others = used["all"] - used["server"] - used["redis"] - used["client"]
                measured.foreign_cores.append(max(0.0, others / result.elapsed_s))
                await check_phase(dep.redis, t, result, phase)
                measured.rounds[name].append(result)
                print(f"  round {i + 1} {name:<9} {result.rate:8.0f} req/s  (other processes: "
                      f"{measured.foreign_cores[-1]:.2f} cores)", flush=True)

        for name in order if args.rounds % 2 == 0 else order[::-1]:
            t = targets[name]
            result = await open_loop(session, t.url, body, headers, args.rate, args.duration)
            await check_phase(dep.redis, t, result, f"latency at {args.rate:g} req/s")
            measured.latency[name] = result
    return measured


async def spool_depth(session: aiohttp.ClientSession, target: Target) -> tuple[int, int]:
    async with session.get(target.url.replace("/github", "/readyz")) as resp:
        ready = await resp.json()
    return int(ready["spool_depth"]), int(ready["spool_bytes"])


async def measure_spool(args: argparse.Namespace, body: bytes, dep: Deployment) -> SpoolFigures:
    """Kill Redis, spool for half a phase, restart it empty and time the drain into the stream."""
    target = dep.targets["receiver"]
    base = signed_headers(body)

    def headers() -> Mapping[str, str]:
        return {**base, "X-GitHub-Delivery": str(uuid.uuid4())}

    dep.redis_proc.kill()
    await dep.redis_proc.wait()
    async with new_session(args.concurrency) as session:
        result = await closed_loop(session, target.url, body, headers, args.concurrency, args.duration / 2)
        check_alive(target, "spooling")
        if bad := result.unexpected(202):
            raise Broken(f"receiver: {bad} non-202 answers while spooling: {dict(result.statuses)}")
        depth, size = await spool_depth(session, target)
        if depth != result.answered:
            raise Broken(f"receiver: {result.answered} answered spooled but the spool holds {depth}")
        dep.redis_proc = await spawn(dep.redis_argv, os.environ, dep.tmp / "redis-restarted.out")
        await wait_until(dep.redis.ping, "redis-server (restarted)", dep.redis_proc)
        first = last = None
        deadline = time.monotonic() + 120
        while (left := (await spool_depth(session, target))[0]) and time.monotonic() < deadline:
            if first is None and left < depth:
                first = time.perf_counter()
            await asyncio.sleep(0.01)
        last = time.perf_counter()
    if left or await dep.redis.xlen(target.stream) != depth:
        raise Broken(f"receiver: {left} left in the spool, {await dep.redis.xlen(target.stream)} of {depth} "
                     "in the stream after the drain")
    return SpoolFigures(depth, result.rate, last - (first or last), size)


async def bench(args: argparse.Namespace, body: bytes, tmp: Path) -> Measured:
    async with deployment(tmp) as dep:
        measured = await measure(args, body, dep)
        if not args.no_spool:
            measured.spool = await measure_spool(args, body, dep)
        return measured


def report(args: argparse.Namespace, m: Measured) -> tuple[bool, float]:
    """Print the table; (every target met, the throughput ratio)."""
    rate = {n: sum(r.answered for r in rs) / sum(r.elapsed_s for r in rs) for n, rs in m.rounds.items()}
    cpu = {n: {k: sum(v) / len(v) for k, v in per.items()} for n, per in m.cpu_us.items()}
    print(f"\n{'target':<10}{'req/s':>8}{'p50 ms':>8}{'p99 ms':>8}  CPU µs/req: {'server':>6}{'redis':>6}"
          f"{'client':>7}")
    for name in ("receiver", "reference"):
        lat, c = m.latency[name].latencies_ms, cpu[name]
        print(f"{name:<10}{rate[name]:>8.0f}{percentile(lat, 50):>8.2f}{percentile(lat, 99):>8.2f}"
              f"  {'':>11}{c['server']:>6.0f}{c['redis']:>6.0f}{c['client']:>7.0f}")
    print(f"(req/s: closed loop, {args.concurrency} connections, {args.rounds} x {args.duration:g} s; "
          f"p50/p99: open loop at {args.rate:g} req/s for {args.duration:g} s, from each send's due time)")
    ratio = rate["receiver"] / rate["reference"]
    p99 = percentile(m.latency["receiver"].latencies_ms, 99)
    late = max(percentile(r.late_ms, 99) for r in m.latency.values())
    ratio_ok, p99_ok = ratio >= TARGET_RATIO, p99 <= TARGET_P99_MS
    print(f"ratio receiver/reference = {ratio:.2f}  "
          f"(target >= {TARGET_RATIO}: {'met' if ratio_ok else 'MISSED'})")
    print(f"receiver p99 at {args.rate:g} req/s = {p99:.2f} ms  "
          f"(target <= {TARGET_P99_MS:g} ms: {'met' if p99_ok else 'MISSED'}); "
          f"client send lateness p99 = {late:.2f} ms")
    for name in ("receiver", "reference"):
        per: dict[str, float] = defaultdict(float)
        for stats in m.commands[name]:
            for command, us in stats.items():
                per[command] += us / len(m.commands[name])
        ranked = sorted(per.items(), key=lambda kv: -kv[1])
        parts = ", ".join(f"{c} {us:.1f}" for c, us in ranked if us >= 0.05)
        print(f"Redis µs per request, {name}: {sum(per.values()):.1f} ({parts})")
    if (sp := m.spool) is not None:
        print(f"spool (Redis killed): {sp.spooled} deliveries answered 202 spooled at {sp.spool_rate:.0f}/s, "
              f"each fsynced first ({sp.spool_bytes / sp.spooled:.0f} bytes each on disk); drained in "
              f"{sp.drain_s:.2f} s = {sp.spooled / max(sp.drain_s, 1e-3):.0f}/s once Redis was back")
    if (busy := max(m.foreign_cores)) > FOREIGN_CORES_WARN:
        print(f"WARNING: other processes kept {busy:.2f} cores busy during a throughput round; "
              "the machine was not quiet, so the ratio is unreliable")
    return ratio_ok and p99_ok, ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measured phase")
    parser.add_argument("--rate", type=float, default=500.0, help="open-loop request rate for latency")
    parser.add_argument("--concurrency", type=int, default=32, help="connections for max throughput")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of load before measuring")
    parser.add_argument("--rounds", type=int, default=2, help="throughput rounds per target")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--no-spool", action="store_true", help="skip the spool phase")
    parser.add_argument("--quick", action="store_true",
                        help="CI's mode (~35 s): two 4 s rounds a target in alternating order (one round "
                             "always had the receiver first), 1 s warm-up, no spool phase")
    parser.add_argument("--floor", type=float, default=None,
                        help="exit 1 when the ratio to the reference, measured in this run, is below this")
    parser.add_argument("--profile", metavar="DIR", default=None,
                        help="record each target's first round with py-spy into DIR and print flat profiles")
    parser.add_argument("--serve-reference", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.duration, args.warmup, args.rounds, args.no_spool = 4.0, 1.0, 2, True
    if args.serve_reference is not None:
        stream = Keys(os.environ.get("PD_KEY_PREFIX", PREFIXES["reference"])).events
        return asyncio.run(serve_reference(args.serve_reference, os.environ["REDIS_URL"],
                                           os.environ["WEBHOOK_SECRET"].encode(), stream))

    body, action = load_payload()
    print(f"payload: real GitHub issues/{action} example, {len(body)} bytes; "
          f"{args.rounds} x {args.duration:g} s per target, {args.concurrency} connections", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="pd-bench-receiver-"))
    try:
        measured = asyncio.run(bench(args, body, tmp))
    except Broken as exc:
        print(f"BROKEN: {exc} (logs kept in {tmp})", file=sys.stderr)
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    met, ratio = report(args, measured)
    if args.profile is not None:
        for name in ("receiver", "reference"):
            print(summary(Path(args.profile) / f"{name}.txt"))
    if args.floor is not None and ratio < args.floor:
        print(f"FLOOR: ratio {ratio:.2f} is below the floor {args.floor:g}")
        return 1
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
