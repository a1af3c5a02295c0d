"""Cron schedules under worker faults, with real worker processes killed -9, one Redis and real containers:
when one of two hosts serving a schedule dies, the survivor keeps the beat, so every occurrence is queued
once and runs once with none skipped; and a scheduled run lost with its worker counts a stall that, past
``PI_SCHEDULER_STALL_MAX``, tears the schedule down fleet-wide (its occurrences skipped, not queued) until
``pi-dispatch schedules --rearm`` restores it."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import aiodocker

from pidispatch.common.runtime import now_ms
from tests.support.polling import wait_for
from tests.support.processes import ServiceProcess
from tests.support.schedules import cli_json, cron_worker, occurrence, queued, records
from tests.support.worker import kill_tree, make_repo


def schedule_id(env: dict[str, str]) -> str:
    # Per test: container names derive from job ids, and a concurrent run's "repeat:tick:<ms>" would clash.
    return f"tick-{env['PD_KEY_PREFIX']}"


def triggers(path: Path, sid: str, folder: Path, pattern: str, task: str) -> Path:
    entry = {"on": {"type": "cron", "id": sid, "pattern": pattern},
             "run": {"kind": "local", "folder": str(folder), "flow": "tidy", "task": task}}
    path.write_text(json.dumps({"triggers": [entry]}))
    return path


async def containers(docker: aiodocker.Docker, *labels: str) -> list[Any]:
    return await docker.containers.list(all=True, filters=json.dumps({"label": list(labels)}))


async def remove_containers(docker: aiodocker.Docker, *hosts: ServiceProcess) -> None:
    """The hosts' names are not the fixture's, so its sweep misses their containers: remove them here."""
    for host in hosts:
        for c in await containers(docker, f"pd.host={host.env['PI_WORKER_NAME']}"):
            with contextlib.suppress(aiodocker.DockerError):
                await c.delete(force=True)


async def test_two_workers_on_one_schedule_one_killed_halfway_run_every_occurrence_once(
    env: dict[str, str], docker: aiodocker.Docker, tmp_path: Path
) -> None:
    sid = schedule_id(env)
    trig = triggers(tmp_path / "triggers.json", sid, make_repo(tmp_path / "app"), "*/3 * * * * *",
                    "pd-test exit=0")
    a, b = cron_worker(env, tmp_path, "a", trig), cron_worker(env, tmp_path, "b", trig)
    logs_dir = Path(env["PI_LOGS_DIR"])
    try:
        a.start()
        b.start()
        await wait_for(lambda: a.logged("schedules_started") and b.logged("schedules_started"), 60,
                       what="both workers serving")
        window_start = now_ms()
        window_end = window_start + 25_000
        await wait_for(lambda: now_ms() >= window_start + 12_000, 20, what="12 s of both serving")
        (shown,) = await asyncio.to_thread(cli_json, a.env, "schedules")
        # Killed just after B started a container, the survivor re-attaches to it. (Killed between
        # "launching" and the container's start, the run would be recorded worker-lost, never rerun.)
        started_before = len(b.logged("job_started"))
        await wait_for(lambda: len(b.logged("job_started")) > started_before, 20, what="B starting a run")
        killed_at = now_ms()
        kill_tree(b)
        # The survivor fired past the window's end: every occurrence inside it was fired by then.
        await wait_for(lambda: any(occurrence(j) > window_end for j in queued(a)), 40,
                       what="the survivor firing past the window")
        fired = [occurrence(e["jobId"]) for w in (a, b) for e in w.logged("schedule_fired")]
        expected = sorted({at for at in fired if window_start < at <= window_end})
        await wait_for(lambda: set(expected) <= {occurrence(j) for j in records(logs_dir)}, 90,
                       what="a record of every occurrence")
    finally:
        a.stop()
        b.stop()
        await remove_containers(docker, a, b)
    assert 7 <= len(expected) <= 9, expected
    assert all(later - earlier == 3000 for earlier, later in pairwise(expected))  # no gap after the kill
    everywhere = Counter(queued(a) + queued(b))
    assert all(n == 1 for n in everywhere.values()), everywhere  # one host queued each, the other heard dup
    jobs = [f"repeat:{sid}:{at}" for at in expected]
    assert all(everywhere[j] == 1 for j in jobs)
    assert all(j in queued(a) for j in jobs if occurrence(j) > killed_at)  # the survivor fired each after
    both = Counter(fired)
    assert all(both[at] == 2 for at in expected if at < killed_at - 2500)  # both served before the kill
    outcomes = {j: r["outcome"] for j, r in records(logs_dir).items()}
    assert {outcomes[j] for j in jobs} == {"completed"}, outcomes
    # pi-dispatch schedules --json, asked while both hosts served the schedule.
    assert list(shown) == ["id", "pattern", "tz", "hosts", "next", "last", "stalls", "state"]
    assert (shown["id"], shown["pattern"], shown["tz"], shown["stalls"], shown["state"]) == (
        sid, "*/3 * * * * *", "UTC", 0, "active")
    assert shown["hosts"] == sorted([a.env["PI_WORKER_NAME"], b.env["PI_WORKER_NAME"]])
    assert shown["last"]["jobId"].startswith(f"repeat:{sid}:") and set(shown["last"]) == {"at", "jobId",
                                                                                        "outcome"}
    assert shown["next"].endswith("+00:00")


async def test_a_scheduled_run_whose_worker_is_killed_tears_its_schedule_down_until_rearmed(
    env: dict[str, str], docker: aiodocker.Docker, tmp_path: Path
) -> None:
    sid = schedule_id(env)
    app = make_repo(tmp_path / "app")
    # A's runs outlive A; B's (the same schedule, its own file) end at once, so the rearmed run finishes.
    trig_a = triggers(tmp_path / "a.json", sid, app, "*/5 * * * * *", "pd-test exit=0 sleep=60")
    trig_b = triggers(tmp_path / "b.json", sid, app, "*/5 * * * * *", "pd-test exit=0")
    a = cron_worker(env, tmp_path, "a", trig_a, PI_SCHEDULER_STALL_MAX="0")
    b = cron_worker(env, tmp_path, "b", trig_b, PI_SCHEDULER_STALL_MAX="0")
    logs_dir = Path(env["PI_LOGS_DIR"])

    def started() -> list[str]:
        return [e["job"] for e in a.logged("job_started") if e["job"].startswith("repeat:")]

    def record(job_id: str) -> dict[str, Any] | None:
        return records(logs_dir).get(job_id)

    async def state() -> str:
        (row,) = await asyncio.to_thread(cli_json, b.env, "schedules")
        return str(row["state"])

    async def torn_down() -> bool:
        return await state() == "torn-down"

    try:
        a.start()
        lost = (await wait_for(started, 60, what="A starting a scheduled run"))[0]
        kill_tree(a)
        # Peers share this Docker daemon: gone with its host, the container is out of B's sight.
        (gone,) = await containers(docker, f"pd.job={lost}", f"pd.host={a.env['PI_WORKER_NAME']}")
        await gone.delete(force=True)
        b.start()
        await wait_for(lambda: record(lost), 60, what="B recording the lost run")
        await wait_for(lambda: b.logged("jobs_taken_over"), 10, what="the takeover logged")
        await wait_for(torn_down, 20, interval=0.5, what="the schedule torn down")
        await wait_for(lambda: len(b.logged("schedule_torn_down")) >= 2, 20, what="two skipped occurrences")
        skipped = [e["jobId"] for e in b.logged("schedule_torn_down")]
        assert not [j for j in queued(b) if occurrence(j) >= occurrence(skipped[0])]  # none queued meanwhile
        rearmed = await asyncio.to_thread(cli_json, b.env, "schedules", "--rearm", sid)
        assert rearmed == {"rearmed": sid, "wasTornDown": True}
        assert await state() == "active"
        after = await wait_for(lambda: [j for j in queued(b) if occurrence(j) > occurrence(skipped[-1])], 15,
                               what="B queuing the next occurrence")
        await wait_for(lambda: record(after[0]), 60, what="the rearmed run's record")
    finally:
        a.stop()
        b.stop()
        await remove_containers(docker, a, b)
    rec = record(lost)
    assert rec is not None and (rec["outcome"], rec["reason"], rec["host"]) == (
        "failed", "worker-lost", b.env["PI_WORKER_NAME"])
    assert lost not in [e["job"] for e in b.logged("job_started")]  # no second container for the lost run
    assert all(later - earlier == 5000 for earlier, later in pairwise([occurrence(j) for j in skipped]))
    assert (record(after[0]) or {}).get("outcome") == "completed"
