"""Router throughput: events per second through one router process, beside the ceiling.

The ceiling is a bare consumer measured in the same run: XREADGROUP → XADD one job → XACK per entry,
no parsing or matching. Both read the same pre-loaded stream of real GitHub payloads (octokit examples
of issues, issue_comment and pull_request, each with a fresh delivery id) against a 20-rule triggers
file. Rounds alternate who goes first; the median round's ratio is the figure. Target: at least 5,000
events/s and at least 0.5 of the ceiling (the CI floor is lower: ``--floor``).

    .venv/bin/python benchmarks/router.py [--events 20000] [--rounds 3] [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _events import preload, wait_drained
from _profile import record_argv, summary
from _redis import private_redis, redis_us_by_command

from pidispatch.common.keys import ROUTER_GROUP, Keys
from pidispatch.common.redis import Redis, create_redis

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "tests" / "fixtures" / "github" / "webhooks-examples.json.gz"
EVENTS = ("issues", "issue_comment", "pull_request")
TARGET_EPS, TARGET_RATIO = 5000.0, 0.5


def twenty_rules() -> dict[str, object]:
    """A realistic file: label rules with predicates, one comment rule, PR rules, a command rule."""
    rules: list[dict[str, object]] = []
    for i in range(14):
        rules.append({"on": {"type": "label", "any": [f"pi:flow{i}", f"ai:{i}"], "none": ["blocked"]},
                      "run": {"kind": "github", "flow": f"flow{i}"}})
    rules.append({"on": {"type": "label", "any": ["bug"], "all": [], "none": ["wontfix"]},
                  "run": {"kind": "github", "flow": "fix"}})
    rules.append({"on": {"type": "label", "all": ["enhancement", "triaged"]},
                  "run": {"kind": "github", "flow": "feature"}})
    rules.append({"on": {"type": "comment", "phrase": "@pi"}, "run": {"kind": "github", "flow": "fix"}})
    rules.append({"on": {"type": "pull_request", "action": ["opened", "synchronize"]},
                  "run": {"kind": "github", "flow": "review"}})
    rules.append({"on": {"type": "pull_request", "action": ["labeled"], "any": ["pi:review"]},
                  "run": {"kind": "github", "flow": "review"}})
    # No close rule: it would need GitHub credentials and a forge to ask, which a benchmark has not.
    rules.append({"on": {"type": "label", "any": ["documentation"], "none": ["blocked"]},
                  "run": {"kind": "github", "command": "docs-check"}})
    return {"triggers": rules}


async def bare_consumer(url: str, prefix: str) -> None:
    """The ceiling: read a page, append one job per entry, ack the page. No parsing."""
    r = create_redis(url)
    keys = Keys(prefix)
    try:
        while True:
            reply = await r.xreadgroup("bare", "c1", {keys.events: ">"}, count=64, block=1000)
            if not reply:
                continue
            ids = [entry_id for _, entries in reply for entry_id, _ in entries]
            async with r.pipeline(transaction=False) as pipe:
                for entry_id in ids:
                    pipe.xadd(keys.jobs, {"id": entry_id, "job": "{}"})
                pipe.xack(keys.events, "bare", *ids)
                await pipe.execute()
    finally:
        await r.aclose()


async def redis_us_per_event(r: Redis, n: int) -> str:
    """Redis's own µs per event by command since the last reset (INFO commandstats), largest first."""
    per = await redis_us_by_command(r, n)
    ranked = sorted(per.items(), key=lambda kv: -kv[1])
    return f"{sum(per.values()):.1f} (" + ", ".join(f"{c} {us:.1f}" for c, us in ranked if us >= 0.05) + ")"


async def run_router(r: Redis, url: str, n: int, workdir: Path, profile: Path | None, tag: str) -> float:
    """Events/s of one router process draining ``n`` preloaded events."""
    keys = Keys(f"benchrouter{tag}")
    await r.xgroup_create(keys.events, ROUTER_GROUP, id="0", mkstream=True)
    await preload(r, keys.events, n)
    env = {**os.environ, "REDIS_URL": url, "PD_KEY_PREFIX": keys.prefix,
           "PI_TRIGGERS_FILE": str(workdir / "triggers.json"), "PD_EVENTS_MAXLEN": str(n * 2),
           "GITHUB_SELF_ID": "424242"}  # the router refuses GitHub rules without its own id
    await r.config_resetstat()
    router = subprocess.Popen([sys.executable, "-m", "pidispatch.router"], env=env, stdout=subprocess.DEVNULL)
    spy = (subprocess.Popen(record_argv(router.pid, None, profile / "router.txt"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
           if profile is not None else None)
    try:
        router_s = await wait_drained(r, keys.events, ROUTER_GROUP, n, timeout=300, proc=router)
    finally:
        router.terminate()
        router.wait(10)
        if spy is not None:
            spy.wait(30)
    print(f"  Redis µs per event, router: {await redis_us_per_event(r, n)}")
    await r.delete(keys.events, keys.jobs)
    return n / router_s


async def run_bare(r: Redis, url: str, n: int, tag: str) -> float:
    """Events/s of the bare loop over the same events."""
    keys = Keys(f"benchbare{tag}")
    await r.xgroup_create(keys.events, "bare", id="0", mkstream=True)
    await preload(r, keys.events, n)
    await r.config_resetstat()
    bare = subprocess.Popen([sys.executable, __file__, "--serve-bare", url, keys.prefix])
    try:
        bare_s = await wait_drained(r, keys.events, "bare", n, timeout=300, proc=bare)
    finally:
        bare.terminate()
        bare.wait(10)
    print(f"  Redis µs per event, bare:   {await redis_us_per_event(r, n)}")
    await r.delete(keys.events, keys.jobs)
    return n / bare_s


async def measure(
    url: str, n: int, workdir: Path, profile: Path | None, rounds: int
) -> list[tuple[float, float]]:
    """(router, bare) events/s per round; who goes first alternates, so drift favours neither."""
    r = create_redis(url)
    out = []
    try:
        for i in range(rounds):
            spy = profile if i == 0 else None
            if i % 2 == 0:
                router_eps = await run_router(r, url, n, workdir, spy, str(i))
                bare_eps = await run_bare(r, url, n, str(i))
            else:
                bare_eps = await run_bare(r, url, n, str(i))
                router_eps = await run_router(r, url, n, workdir, spy, str(i))
            print(f"  round {i + 1}: router {router_eps:7.0f} events/s, bare {bare_eps:7.0f}, "
                  f"ratio {router_eps / bare_eps:.2f}", flush=True)
            out.append((router_eps, bare_eps))
        return out
    finally:
        await r.aclose()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3,
                        help="router and bare runs, alternating; the median round's ratio counts")
    parser.add_argument("--floor", type=float, default=None,
                        help="exit 1 when the ratio to the bare loop, measured in this run, is below this")
    parser.add_argument("--profile", metavar="DIR", default=None,
                        help="record the router with py-spy into DIR and print its flat profile")
    parser.add_argument("--serve-bare", nargs=2, metavar=("URL", "PREFIX"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_bare:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(bare_consumer(*args.serve_bare))
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="pd-bench-router-"))
    (workdir / "triggers.json").write_text(json.dumps(twenty_rules()))
    profile = Path(args.profile) if args.profile else None
    with private_redis(workdir) as url:
        rounds = asyncio.run(measure(url, args.events, workdir, profile, args.rounds))
    ratios = sorted(router / bare for router, bare in rounds)
    ratio = ratios[len(ratios) // 2]
    router_eps, bare_eps = next((a, b) for a, b in rounds if a / b == ratio)
    print(f"events            {args.events} x {args.rounds} rounds (the median round below)")
    print(f"router            {router_eps:9.0f} events/s")
    print(f"bare ceiling      {bare_eps:9.0f} events/s")
    print(f"ratio router/bare {ratio:9.2f}")
    met = router_eps >= TARGET_EPS and ratio >= TARGET_RATIO
    verdict = "met" if met else "NOT met"
    print(f"target >= {TARGET_EPS:.0f} events/s and >= {TARGET_RATIO} of the ceiling: {verdict}")
    if args.profile:
        print(summary(Path(args.profile) / "router.txt", 25))
    if args.floor is not None and ratio < args.floor:
        print(f"FLOOR: ratio {ratio:.2f} is below the floor {args.floor:g}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
