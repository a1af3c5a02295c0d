"""Cron schedules served by real worker processes on one Redis: a host down across occurrences fires none of
them late; edits reload (a bad one keeps the running set); run --trigger and the event a scheduled job
gets; the stall guard and its re-arm; the fleet gate between hosts that define a schedule differently; and
which re-attach counts a stall. Two hosts serving one schedule through a kill: test_schedule_faults."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiodocker
from structlog.testing import capture_logs

from pidispatch.common.keys import Keys
from pidispatch.common.models import text
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import iso_ms, now_ms
from pidispatch.worker.cron.firings import count_stall, guard_state
from pidispatch.worker.cron.schedules import Scheduler
from pidispatch.worker.cron.serve import start_schedules
from tests.support.polling import wait_for
from tests.support.schedules import cli_json, cron_worker, occurrence, records
from tests.support.worker import make_repo

EVERY_3S = "*/3 * * * * *"


def triggers(tmp_path: Path, folder: Path, pattern: str = EVERY_3S) -> Path:
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "triggers.json"
    entry = {"on": {"type": "cron", "id": "tick", "pattern": pattern},
             "run": {"kind": "local", "folder": str(folder), "flow": "tidy", "task": "pd-test exit=0"}}
    path.write_text(json.dumps({"triggers": [entry]}))
    return path


async def test_a_worker_down_across_occurrences_fires_none_of_them_and_the_next_on_time(
    env: dict[str, str], docker: aiodocker.Docker, tmp_path: Path
) -> None:
    trig = triggers(tmp_path, make_repo(tmp_path / "app"))
    first = cron_worker(env, tmp_path, "a", trig)
    try:
        first.start()
        await wait_for(lambda: first.logged("schedule_fired"), 60, what="a first occurrence")
    finally:
        first.stop()
    down_at = now_ms()
    await wait_for(lambda: now_ms() > down_at + 9500, 20, what="three occurrences to pass while down")
    again = cron_worker(env, tmp_path, "a", trig)
    again.log_path = tmp_path / "a-restarted.log"  # the same host, its own log: "before" is the first life's
    try:
        again.start()
        await wait_for(lambda: again.logged("schedules_started"), 60, what="the restart serving")
        await wait_for(lambda: len(again.logged("schedule_fired")) >= 1, 30, what="the next occurrence")
    finally:
        again.stop()
    before = [occurrence(e["jobId"]) for e in first.logged("schedule_fired")]
    after = [occurrence(e["jobId"]) for e in again.logged("schedule_fired")]
    assert max(before) < down_at + 3000
    started = int(again.logged("schedules_started")[0]["at"])
    assert all(at > started for at in after), (after, started)  # nothing from the down time, late
    assert after[0] - started <= 3000  # the first occurrence after the restart, not a later one
    assert all(e["lateMs"] <= 2000 for e in again.logged("schedule_fired"))
    assert not again.logged("schedule_missed")
    assert (after[0] - max(before)) // 3000 - 1 >= 3  # at least three occurrences passed with nobody serving


@contextlib.asynccontextmanager
async def serving(env: dict[str, str], redis: Redis, keys: Keys) -> AsyncIterator[Scheduler]:
    """The schedules of ``env``'s triggers file served in this process onto ``cron``'s stream, stopped
    (every task awaited) on the way out."""
    stop = asyncio.Event()
    started = await start_schedules(env, redis, keys, keys.host_jobs("cron"), now_ms, stop,
                                    host="cron", recheck_s=0.2)
    assert started is not None
    scheduler, tasks = started
    try:
        yield scheduler
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def test_a_triggers_file_edit_serves_the_new_set_and_a_bad_edit_keeps_the_running_one(
    redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    trig = triggers(tmp_path, app)

    def events(name: str) -> list[Any]:
        return [e for e in logs if e["event"] == name]

    async def queued(prefix: str) -> bool:
        return any(text(f[b"id"]).startswith(prefix) for _, f in await redis.xrange(keys.host_jobs("cron")))

    env = {"PI_TRIGGERS_FILE": str(trig), "TZ": "UTC", "PI_CRON_MIN_INTERVAL_S": "1"}
    with capture_logs() as logs:
        async with serving(env, redis, keys) as scheduler:
            await wait_for(lambda: events("schedule_fired"), 10, what="a first occurrence")
            trig.write_text('{"triggers": [{"on": {"type": "cron"}}]}')
            await wait_for(lambda: events("schedules_reload_invalid"), 10, what="the refusal")
            kept = len(events("schedule_fired"))
            await wait_for(lambda: len(events("schedule_fired")) > kept, 10, what="the kept schedule firing")
            other = tmp_path / "other"
            other.mkdir()
            entry = {"on": {"type": "cron", "id": "tock", "pattern": "*/2 * * * * *"},
                     "run": {"kind": "local", "folder": str(other), "command": "report"}}
            trig.write_text(json.dumps({"triggers": [entry]}))
            await wait_for(lambda: events("scheduler_removed_orphan"), 10, what="tick removed")
            assert list(scheduler.active) == ["tock"] and events("schedules_reloaded")
            await wait_for(lambda: queued("repeat:tock:"), 10, what="tock firing")
    assert [e["id"] for e in events("scheduler_removed_orphan")] == ["tick"]


# Copies the job's event.json into the folder, so the test can read what the job was given.
EVENT_AGENT = """#!/bin/sh
while IFS= read -r line || [ -n "$line" ]; do printf '%s\\n' "$line"; done < /job/event.json \\
  > /workspace/agent-event.json
echo '{"event":"exit","turns":1,"tokens":{"input":1,"output":1,"total":2,"cost":0}}'
exit 0
"""


async def test_run_trigger_runs_the_cron_job_now_and_its_event_names_the_occurrence_and_previous_run(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    from pidispatch.dev.demoimage import build_image

    tag = "pd-test-event-agent:latest"
    await build_image(tag, EVENT_AGENT, docker)
    repo = make_repo(tmp_path / "app")
    trig = triggers(tmp_path, repo, pattern="0 0 1 1 *")  # never due during the test
    host = cron_worker({**env, "PI_JOB_IMAGE": tag}, tmp_path, "a", trig)
    logs_dir = Path(env["PI_LOGS_DIR"])
    try:
        host.start()
        await wait_for(lambda: host.logged("schedules_started"), 60, what="the worker serving")
        before = now_ms()
        first = cli_json(host.env, "run", "--trigger", "tick")
        await wait_for(lambda: first["jobId"] in records(logs_dir), 60, what="the first run's record")
        # The first run wrote its event into the folder: a second run needs --force.
        second = cli_json(host.env, "run", "--trigger", "tick", "--force")
        await wait_for(lambda: second["jobId"] in records(logs_dir), 60, what="the second run's record")
    finally:
        host.stop()
    assert first["status"] == "queued" and first["trigger"] == "tick"
    assert before <= occurrence(first["jobId"]) < occurrence(second["jobId"]) <= now_ms()
    event = json.loads((repo / "agent-event.json").read_text())
    ended = await redis.hget(keys.job(first["jobId"]), "endedAt")
    assert ended is not None
    assert event == {
        "source": "cron", "trigger": {"id": "tick", "pattern": "0 0 1 1 *"}, "folder": "app",
        "sha": event["sha"], "scheduledFor": iso_ms(occurrence(second["jobId"])),
        "previousRunAt": iso_ms(int(ended)),
    }
    assert records(logs_dir)[second["jobId"]]["outcome"] == "completed"


async def test_a_missing_triggers_file_serves_nothing_until_it_appears(
    redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    path = tmp_path / "later.json"
    env = {"PI_TRIGGERS_FILE": str(path), "TZ": "UTC", "PI_CRON_MIN_INTERVAL_S": "1"}
    with capture_logs() as logs:
        async with serving(env, redis, keys) as scheduler:
            assert scheduler.active == {}
            path.write_text(triggers(tmp_path, app).read_text())
            await wait_for(lambda: list(scheduler.active) == ["tick"], 10, what="the file served")
    assert [e["event"] for e in logs if e["event"].startswith("schedules_")][:2] == [
        "schedules_file_missing", "schedules_started"]


async def test_the_stall_guard_tears_a_schedule_down_past_the_max_until_rearmed(
    redis: Redis, keys: Keys, base_env: dict[str, str], tmp_path: Path
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    trig = triggers(tmp_path, app, pattern="*/2 * * * * *")
    for n in (1, 2, 2):  # the same run found twice (a step repeated after a crash) counts once
        await count_stall(redis, keys, f"repeat:tick:{n}", 2)
    assert await guard_state(redis, keys, "tick") == (2, False)
    assert await redis.ttl(keys.sched_stalls("tick")) > 86_000  # a rolling 24 h window
    await count_stall(redis, keys, "repeat:tick:3", 2)
    assert await guard_state(redis, keys, "tick") == (0, True)
    await count_stall(redis, keys, "local-abc-202601010000", 2)  # not a scheduled job: not a stall
    env = {**base_env, "PI_TRIGGERS_FILE": str(trig), "TZ": "UTC"}

    async def queued() -> int:
        return int(await redis.xlen(keys.host_jobs("cron")))

    with capture_logs() as logs:
        async with serving(env, redis, keys):
            await wait_for(lambda: [e for e in logs if e["event"] == "schedule_torn_down"], 10,
                           what="a skipped occurrence")
            assert await queued() == 0
            (row,) = await asyncio.to_thread(cli_json, env, "schedules")
            assert (row["state"], row["stalls"]) == ("torn-down", 0)
            rearmed = await asyncio.to_thread(cli_json, env, "schedules", "--rearm", "tick")
            assert rearmed == {"rearmed": "tick", "wasTornDown": True}
            await wait_for(queued, 10, what="the schedule firing again")


async def test_two_live_hosts_defining_a_schedule_differently_install_nothing_until_they_agree(
    env: dict[str, str], tmp_path: Path
) -> None:
    app = make_repo(tmp_path / "app")
    trig_a, trig_b = (triggers(tmp_path / side, app, "*/2 * * * * *") for side in ("a", "b"))
    a, b, again = (cron_worker(env, tmp_path, n, t) for n, t in (("a", trig_a), ("b", trig_b),
                                                                  ("b2", trig_a)))
    b.env["TZ"] = "Asia/Tokyo"  # the zone is part of a schedule's definition
    tock = {"on": {"type": "cron", "id": "tock", "pattern": "* * * * * *"},
            "run": {"kind": "local", "folder": str(app), "command": "report"}}
    try:
        a.start()
        await wait_for(lambda: a.logged("schedule_fired"), 60, what="a serving alone")
        b.start()
        await wait_for(lambda: b.logged("cron_divergence_refused"), 60, what="b refusing a's definition")
        (row,) = await asyncio.to_thread(cli_json, a.env, "schedules")
        # a's edit adds tock while b disagrees on tick: a installs nothing new and keeps tick.
        trig_a.write_text(json.dumps({"triggers": [*json.loads(trig_a.read_text())["triggers"], tock]}))
        await wait_for(lambda: a.logged("cron_divergence_refused"), 30, what="a refusing its own edit")
        kept = len(a.logged("schedule_fired"))
        await wait_for(lambda: len(a.logged("schedule_fired")) > kept, 10, what="a still firing tick")
        b.stop()  # its row goes with a clean stop: a's next re-check installs the edit
        await wait_for(lambda: any(e["id"] == "tock" for e in a.logged("schedule_fired")), 30,
                       what="a serving tock")
        again.start()  # a host that agrees installs at once
        await wait_for(lambda: again.logged("schedule_fired"), 60, what="the agreeing host serving")
    finally:
        for w in (a, b, again):
            w.stop()
    refused = b.logged("cron_divergence_refused")[0]
    assert refused["peers"][0]["host"] == a.env["PI_WORKER_NAME"]
    assert refused["mine"] != refused["peers"][0]["fpCron"]
    assert (b.logged("schedules_started")[0]["served"], b.logged("schedule_fired")) == ([], [])
    assert (row["state"], row["hosts"]) == ("divergent", [a.env["PI_WORKER_NAME"]])
    cleared = a.logged("cron_divergence_cleared")[0]
    assert all(e["id"] == "tick" for e in a.log_lines()[:a.log_lines().index(cleared)]
               if e["event"] == "schedule_fired")
    assert a.logged("cron_divergence_refused")[0]["kept"] == ["tick"]
    assert not again.logged("cron_divergence_refused")
    assert again.logged("schedules_started")[0]["served"] == ["tick", "tock"]


async def test_a_reattach_counts_a_stall_after_a_kill_and_none_after_a_clean_shutdown(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    from tests.support.worker import kill_tree

    repo = make_repo(tmp_path / "app")
    trig = triggers(tmp_path, repo, pattern="0 0 1 1 *")  # never due: the run is queued by run --trigger
    trig.write_text(trig.read_text().replace("pd-test exit=0", "pd-test exit=0 sleep=60"))
    host_env = {**env, "PI_SHUTDOWN_GRACE": "0", "PI_SCHEDULER_STALL_MAX": "5"}
    lives = [cron_worker(host_env, tmp_path, "a", trig) for _ in range(3)]
    for n, life in enumerate(lives):  # one host restarted twice, each life with its own log
        life.log_path = tmp_path / f"a-{n}.log"
    job_id = ""
    try:
        lives[0].start()
        await wait_for(lambda: lives[0].logged("schedules_started"), 60, what="the worker serving")
        job_id = (await asyncio.to_thread(cli_json, lives[0].env, "run", "--trigger", "tick"))["jobId"]
        await wait_for(lambda: lives[0].logged("job_started"), 60, what="the scheduled run to start")
        assert lives[0].stop() == 0  # a clean stop past its grace leaves the run to the next start
        lives[1].start()
        await wait_for(lambda: lives[1].logged("job_reattached"), 60, what="the re-attach after a stop")
        after_stop = await guard_state(redis, keys, "tick")
        kill_tree(lives[1])  # this time the worker dies under the run
        lives[2].start()
        await wait_for(lambda: lives[2].logged("job_reattached"), 60, what="the re-attach after a kill")
        await wait_for(lambda: lives[2].logged("scheduler_stall_counted"), 10, what="the stall")
        after_kill = await guard_state(redis, keys, "tick")
    finally:
        for w in lives:
            w.stop()
        for c in await docker.containers.list(all=True, filters=json.dumps({"label": [f"pd.job={job_id}"]})):
            await c.delete(force=True)
    assert lives[0].logged("jobs_left_running")
    assert (after_stop, after_kill) == ((0, False), (1, False))
    assert [e["jobId"] for e in lives[2].logged("scheduler_stall_counted")] == [job_id]
