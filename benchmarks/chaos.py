"""Chaos: the whole stack under kill -9, counted. Nothing lost, nothing doubled, nothing paid twice.

Each trial starts a receiver, a router and a worker as separate processes (``python -m pidispatch.<name>``)
on a real redis-server with an append-only file and a real Docker daemon, posts a batch of signed GitHub
``issues.labeled`` deliveries (distinct delivery ids and issues) through a stand-in GitHub, and at a random
moment kills one target with SIGKILL (receiver, router, worker, or redis-server, restarted on the same
port from its append-only file), starts it again and waits, with a deadline, for quiescence. Deliveries
answered 5xx or not at all are redelivered like a forge would. Per trial and in total it prints:
deliveries answered 2xx, stored (exactly once in ``<prefix>:events``), jobs enqueued, containers started
(the Docker daemon's own events), ``completed`` records, lost (answered 2xx, no completed record), doubled
(a job with more than one container start or record) and paid twice (more than one container start).

    .venv/bin/python benchmarks/chaos.py [--trials 100] [--seed N] [--batch 6] [--max-down 1]
        [--targets receiver,redis] [--keep]

Exit 1 when any trial lost, doubled or paid twice (or stored a delivery twice); 0 otherwise. Ctrl-C stops
the run and leaves no process or container behind. The implementation is ``tests/support/chaos.py``,
shared with ``tests/integration/test_chaos.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script: the shared implementation lives in tests/

import aiodocker  # noqa: E402

from pidispatch.dev.demoimage import TEST_AGENT_SCRIPT, build_image  # noqa: E402
from tests.support.chaos import (  # noqa: E402
    HEADER,
    TARGETS,
    ChaosConfig,
    TrialResult,
    format_details,
    format_row,
    format_totals,
    plan_targets,
    run_trials,
    summarize,
)


def _targets(raw: str) -> list[str]:
    names = [t.strip() for t in raw.split(",") if t.strip()]
    bad = [t for t in names if t not in TARGETS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"accepted: a comma list of {', '.join(TARGETS)}")
    return names


async def _remove_image(tag: str) -> None:
    docker = aiodocker.Docker()
    try:
        with contextlib.suppress(aiodocker.DockerError):
            await docker.images.delete(tag, force=True)
    finally:
        await docker.close()


async def chaos(args: argparse.Namespace, root: Path) -> list[TrialResult]:
    main = asyncio.current_task()
    assert main is not None
    # SIGTERM ends the run like Ctrl-C does: the cleanup in Chaos.__aexit__ runs either way.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    tag = f"pd-chaos-agent-{uuid.uuid4().hex[:8]}:latest"
    config = ChaosConfig(batch=args.batch, max_down_s=args.max_down, keep_logs=args.keep)
    print(HEADER, flush=True)

    def show(r: TrialResult) -> None:
        print(format_row(r), flush=True)
        for line in format_details(r):
            print(line, flush=True)

    try:
        await build_image(tag, TEST_AGENT_SCRIPT)
        plan = plan_targets(args.trials, args.seed, args.targets)
        return await run_trials(root, tag, plan, seed=args.seed, config=config, on_result=show)
    finally:
        await asyncio.shield(_remove_image(tag))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=100, help="number of trials (default 100)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock)")
    parser.add_argument("--batch", type=int, default=ChaosConfig.batch, help="deliveries per trial")
    parser.add_argument("--max-down", type=float, default=ChaosConfig.max_down_s,
                        help="longest time a killed target stays down, seconds (default %(default)s)")
    parser.add_argument("--targets", type=_targets, default=list(TARGETS),
                        help=f"kill targets to choose from (default {','.join(TARGETS)})")
    parser.add_argument("--keep", action="store_true", help="keep the run's folder even when all is well")
    args = parser.parse_args()
    if args.trials < 1 or args.batch < 1 or not 0 <= args.max_down <= 60:
        parser.error("--trials and --batch must be >= 1, --max-down from 0 to 60")
    if args.seed is None:
        args.seed = time.time_ns() % 1_000_000
    root = Path(tempfile.mkdtemp(prefix="pd-chaos-"))
    print(f"chaos: {args.trials} trials, seed {args.seed}, {args.batch} deliveries per trial, kill targets "
          f"{','.join(args.targets)}; folder {root}", flush=True)
    started = time.monotonic()
    try:
        results = asyncio.run(chaos(args, root))
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C, or SIGTERM (cancels the run)
        print("interrupted: every process and container of the run was stopped", file=sys.stderr)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        return 130
    totals = summarize(results)
    print(f"\ntotal (wall {time.monotonic() - started:.0f} s)")
    for line in format_totals(totals):
        print("  " + line)
    if args.keep or any(r.notes or not r.ok for r in results):
        print(f"logs kept in {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if totals.ok else 1


if __name__ == "__main__":
    sys.exit(main())
