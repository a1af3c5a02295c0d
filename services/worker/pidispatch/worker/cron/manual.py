"""``pi-dispatch run --trigger ID``: one run of a cron trigger now, queued as its schedule would."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys

from pidispatch.common.connect import connected
from pidispatch.common.errors import ConfigError
from pidispatch.common.keys import Keys
from pidispatch.common.outcome import InfraFault
from pidispatch.common.runtime import EpochMsClock
from pidispatch.common.settings import cron_min_interval, load_settings
from pidispatch.triggers.loader import load_triggers
from pidispatch.worker.cron.firings import record_firing
from pidispatch.worker.cron.schedules import cron_job
from pidispatch.worker.local import check_folder, enqueue_once, follow_hint
from pidispatch.worker.replica import own_stream_settings

_RUN_OPTIONS = ("task", "flow", "provider", "model", "max_turns", "image")


def _fail(problem: str) -> int:
    print(f"pi-dispatch run: {problem}", file=sys.stderr)
    return 1


def trigger_problem(args: argparse.Namespace) -> str | None:
    """Pure: why ``run --trigger`` refuses its other arguments, or None."""
    if args.folder is not None:
        return "a folder is refused beside --trigger (the trigger's run.folder is the folder)"
    for name in _RUN_OPTIONS:
        if getattr(args, name) is not None:
            return f"--{name.replace('_', '-')} is refused beside --trigger (the trigger's run says it)"
    return None


async def run_trigger(args: argparse.Namespace, clock: EpochMsClock) -> int:
    """Queue one run of the cron trigger ``args.trigger`` now, on this host's stream, as the schedule
    would (id ``repeat:<id>:<now ms>``); the folder checks of ``pi-dispatch run`` apply (``--force``)."""

    problem = trigger_problem(args)
    if problem is not None:
        return _fail(problem)
    path = (os.environ.get("PI_TRIGGERS_FILE") or "").strip()
    if not path:
        raise ConfigError("PI_TRIGGERS_FILE is unset; accepted: the triggers.json that has the cron trigger")
    floor = cron_min_interval(os.environ)
    rules = (await asyncio.to_thread(functools.partial(load_triggers, path, cron_floor_s=floor))).cron
    rule = next((r for r in rules if r.id == args.trigger), None)
    if rule is None:
        ids = ", ".join(r.id for r in rules) or "none in the file"
        return _fail(f"no cron trigger has on.id {args.trigger!r}; accepted: {ids}")
    folder = str(rule.run["folder"])
    real = await asyncio.to_thread(os.path.realpath, folder)
    try:
        facts = await check_folder(real, folder, force=args.force)
    except InfraFault as fault:
        return _fail(f"folder {folder} cannot be checked ({fault.reason}); try again")
    if isinstance(facts, str):
        return _fail(facts)
    settings = await own_stream_settings(load_settings())
    keys = Keys(settings.key_prefix)
    stream = keys.host_jobs(settings.worker_name) if settings.worker_name_declared else keys.jobs
    now = clock()
    job = cron_job(rule, now, now)
    async with connected(settings, "nothing was queued") as redis:
        status, job_id, state = await enqueue_once(redis, keys, stream, job)
        if status == "queued":
            await record_firing(redis, keys, job_id)
    if args.json:
        print(json.dumps({"status": status, "jobId": job_id, "trigger": rule.id, "state": state}))
    else:
        print(f"queued {job_id} for trigger {rule.id}" if status == "queued"
              else f"{job_id} is already queued ({state}); nothing new was queued")
        print(follow_hint(job_id))
    return 0
