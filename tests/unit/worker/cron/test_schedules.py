"""Cron schedules: the next occurrence (DST included, with an injected start), which schedules a host
serves, which occurrences are due, and the job one occurrence becomes."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from pidispatch.common.cronpattern import next_occurrence, schedule_of, scheduled_for, valid_pattern
from pidispatch.common.errors import ConfigError
from pidispatch.common.registry import HostRow, parse_row
from pidispatch.common.settings import load_settings
from pidispatch.console.scheduleview import ROW_KEYS, render_table, schedule_rows
from pidispatch.triggers.rules import CronRule
from pidispatch.worker.cron.manual import trigger_problem
from pidispatch.worker.cron.schedules import (
    GRACE_MS,
    Loaded,
    Scheduler,
    cron_job,
    definitions,
    due,
    fleet_fingerprint,
    host_zone,
    served,
)

AMS = ZoneInfo("Europe/Amsterdam")


def ms(year: int, month: int, day: int, hour: int, minute: int = 0, second: int = 0, *, fold: int = 0,
       zone: ZoneInfo = AMS) -> int:
    return int(datetime(year, month, day, hour, minute, second, tzinfo=zone, fold=fold).timestamp() * 1000)


def iso(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, AMS).isoformat()


def rule(sid: str = "nightly", pattern: str = "0 3 * * *", **run: Any) -> CronRule:
    return CronRule(index=0, id=sid, pattern=pattern,
                    run={"kind": "local", "folder": "/srv/app", "flow": "tidy", "task": "tidy up", **run})


# --- next occurrence -------------------------------------------------------------------------------


def test_a_daily_time_inside_the_spring_forward_gap_fires_once_right_after_the_gap() -> None:
    # 2026-03-29: Amsterdam clocks jump from 02:00 to 03:00, so 02:30 does not exist that day.
    first = next_occurrence("30 2 * * *", ms(2026, 3, 29, 1, 0), AMS)
    assert iso(first) == "2026-03-29T03:00:00+02:00"
    assert iso(next_occurrence("30 2 * * *", first, AMS)) == "2026-03-30T02:30:00+02:00"


def test_a_daily_time_inside_the_fall_back_repeat_fires_once() -> None:
    # 2026-10-25: 02:00-03:00 passes twice; a fixed-hour schedule runs at the first pass only.
    first = next_occurrence("30 2 * * *", ms(2026, 10, 25, 1, 0), AMS)
    assert iso(first) == "2026-10-25T02:30:00+02:00"
    assert iso(next_occurrence("30 2 * * *", first, AMS)) == "2026-10-26T02:30:00+01:00"


def test_an_hourly_schedule_fires_in_both_passes_of_the_repeated_hour() -> None:
    start = ms(2026, 10, 25, 1, 30)
    seen = []
    for _ in range(3):
        start = next_occurrence("0 * * * *", start, AMS)
        seen.append(iso(start))
    assert seen == ["2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T03:00:00+01:00"]


def test_six_fields_put_seconds_first_and_the_next_is_strictly_after() -> None:
    start = ms(2026, 1, 1, 0, 0, 3)
    assert iso(next_occurrence("*/3 * * * * *", start, AMS)) == "2026-01-01T00:00:06+01:00"
    assert iso(next_occurrence("0 30 9 * * *", start, AMS)) == "2026-01-01T09:30:00+01:00"


def test_the_same_pattern_in_another_zone_is_another_instant() -> None:
    start = ms(2026, 6, 1, 0, zone=ZoneInfo("UTC"))
    utc = next_occurrence("0 3 * * *", start, ZoneInfo("UTC"))
    assert utc - next_occurrence("0 3 * * *", start, AMS) == 2 * 3600 * 1000


@pytest.mark.parametrize(("pattern", "ok"), [
    ("0 3 * * *", True), ("*/3 * * * * *", True), ("0 0 1 1 MON", True),
    ("61 * * * *", False), ("* * *", False), ("* * * * * * *", False), ("a b c d e", False),
])
def test_valid_pattern(pattern: str, ok: bool) -> None:
    assert valid_pattern(pattern) is ok


# --- zone, serving, due ----------------------------------------------------------------------------


def test_the_zone_is_tz_when_set_and_a_bad_tz_is_a_config_error() -> None:
    assert host_zone({"TZ": "Europe/Amsterdam"}) == (AMS, "Europe/Amsterdam")
    assert host_zone({"TZ": ":UTC"})[1] == "UTC"
    with pytest.raises(ConfigError, match=r"^TZ 'Mars/Olympus' is not an IANA time zone"):
        host_zone({"TZ": "Mars/Olympus"})
    assert host_zone({})[1]  # the system zone, named


def test_a_host_serves_only_schedules_whose_absolute_folder_it_has() -> None:
    rules = [rule("a"), rule("b", folder="/elsewhere"), rule("c", folder="relative/app")]
    assert [r.id for r in served(rules, lambda p: p in {"/srv/app", "relative/app"})] == ["a"]


def test_due_fires_within_the_grace_and_names_older_ones_missed() -> None:
    now = 1_000_000
    nexts = {"on-time": now, "late": now - GRACE_MS, "too-late": now - GRACE_MS - 1, "future": now + 1}
    assert due(nexts, now) == (["late", "on-time"], ["too-late"])


# --- jobs ------------------------------------------------------------------------------------------


def test_an_occurrence_is_one_local_job_named_by_its_schedule_and_instant() -> None:
    job = cron_job(rule(model="m1", maxTurns=5, secrets={"K": "ref"}), 1_700_000_003_000, 1_700_000_003_010)
    assert job.id == "repeat:nightly:1700000003000"
    assert (job.kind, job.folder, job.repo, job.flow, job.task) == ("local", "/srv/app", "local:app", "tidy",
                                                                    "tidy up")
    assert (job.model, job.max_turns, job.secrets) == ("m1", 5, {"K": "ref"})
    assert job.trigger is not None and (job.trigger.id, job.trigger.pattern) == ("nightly", "0 3 * * *")
    assert scheduled_for(job.id) == 1_700_000_003_000 and schedule_of(job.id) == "nightly"
    assert scheduled_for("local-abc-202601010000") is None and schedule_of("repeat::12") is None


# --- the set a scheduler serves --------------------------------------------------------------------


def scheduler(now: list[int]) -> Scheduler:
    return Scheduler(redis=None, keys=None, stream="s", clock=lambda: now[0], zone=AMS,  # type: ignore[arg-type]
                     tz="Europe/Amsterdam")


def test_a_reload_keeps_a_kept_schedules_next_and_drops_a_removed_one(caplog: Any) -> None:
    now = [ms(2026, 1, 1, 0, 0, 1)]
    s = scheduler(now)
    a, b = rule("a", "*/3 * * * * *"), rule("b", "0 3 * * *")
    s.install(Loaded(rules=(a, b), mine=(a, b)))
    first = dict(s.nexts)
    assert datetime.fromtimestamp(first["a"] / 1000, UTC).second == 3
    now[0] += 1000
    s.install(Loaded(rules=(a,), mine=(a,)))
    assert s.nexts == {"a": first["a"]} and list(s.active) == ["a"]
    changed = rule("a", "0 * * * * *")
    s.install(Loaded(rules=(changed,), mine=()))
    assert s.nexts == {} and s.active == {}


def test_the_row_names_what_is_served_and_fingerprints_what_is_wanted() -> None:
    s = scheduler([ms(2026, 1, 1, 0, 0, 1)])
    a, b = rule("a", "*/3 * * * * *"), rule("b", "0 3 * * *")
    s.install(Loaded(rules=(a,), mine=(a,)))
    s.swap(Loaded(rules=(a, b), mine=(a, b)))  # wanted, not yet installed (the gate decides)
    defs = definitions((a, b), "Europe/Amsterdam")
    assert s.row_fields() == {"cron": "a", "cronCount": "1", "fpCron": fleet_fingerprint(defs),
                              "cronSigs": f"a={defs['a']},b={defs['b']}", "tz": "Europe/Amsterdam"}
    s.swap(Loaded(rules=(a, b), mine=()))
    assert s.unserved == {"a", "b"}
    assert s.row_fields() == {"cron": "a", "cronCount": "1", "fpCron": "", "cronSigs": "",
                              "tz": "Europe/Amsterdam"}


# --- pi-dispatch schedules ---------------------------------------------------------------------------


def test_each_schedule_is_one_row_with_exactly_the_documented_keys() -> None:
    hosts = [HostRow(name="h1", cron=frozenset({"a"})), HostRow(name="h0", cron=frozenset({"a", "x"}))]
    last = {"at": "2026-01-01T00:00:00.000Z", "jobId": "repeat:a:1767225600000", "outcome": "completed"}
    rows = schedule_rows([rule("a", "*/3 * * * * *"), rule("b")], hosts, {"a": last},
                         ms(2026, 1, 1, 0, 0, 1), AMS, "Europe/Amsterdam")
    assert [tuple(r) for r in rows] == [ROW_KEYS, ROW_KEYS]
    assert rows[0] == {"id": "a", "pattern": "*/3 * * * * *", "tz": "Europe/Amsterdam", "hosts": ["h0", "h1"],
                       "next": "2026-01-01T00:00:03+01:00", "last": last, "stalls": 0, "state": "active"}
    assert (rows[1]["hosts"], rows[1]["last"], rows[1]["state"]) == ([], None, "unserved")
    table = render_table(rows).splitlines()
    assert table[0].split() == ["ID", "PATTERN", "STATE", "NEXT", "LAST", "HOSTS"]
    assert table[2].split()[0] == "b" and table[2].endswith("-")


def test_a_peers_cron_fields_are_revalidated_on_read() -> None:
    row = parse_row({"name": "h", "cron": "a,b,../x,", "fpCron": "0123abcd", "cronCount": "2",
                     "cronSigs": "a=0123456789ab,b=NOTHEX,../x=0123456789ab,c"}, 0)
    assert row is not None
    assert (row.cron, row.fp_cron, row.cron_count) == (frozenset({"a", "b"}), "0123abcd", 2)
    assert row.cron_sigs == {"a": "0123456789ab"}


@pytest.mark.parametrize(("given", "problem"), [
    ({}, None),
    ({"folder": "/srv/app"}, "a folder is refused beside --trigger"),
    ({"task": "x"}, "--task is refused beside --trigger"),
    ({"max_turns": "3"}, "--max-turns is refused beside --trigger"),
])
def test_run_trigger_refuses_what_the_trigger_decides(given: dict[str, str], problem: str | None) -> None:
    fields = dict.fromkeys(("folder", "task", "flow", "provider", "model", "max_turns", "image"))
    found = trigger_problem(argparse.Namespace(**{**fields, **given}))
    assert found == problem if problem is None else (found or "").startswith(problem)


async def test_a_reload_during_a_fire_wins_over_the_ticks_own_next() -> None:
    now = [ms(2026, 1, 1, 0, 0, 1)]
    s = scheduler(now)
    a, b = rule("a", "*/3 * * * * *"), rule("b", "*/3 * * * * *")
    s.install(Loaded(rules=(a, b), mine=(a, b)))
    now[0] = s.nexts["a"]
    fired: list[str] = []

    async def fire(rule: CronRule, at_ms: int, now_ms: int) -> None:
        fired.append(rule.id)
        s.install(Loaded(rules=(a,), mine=(a,)))  # the file lost b while a was being queued

    s._fire = fire  # type: ignore[method-assign]
    await s._tick(now[0])
    assert fired == ["a"] and list(s.nexts) == ["a"] and s.nexts["a"] == now[0] + 3000


def test_a_torn_down_schedule_shows_so_whoever_serves_it_and_the_stalls_are_counted() -> None:
    hosts = [HostRow(name="h0", cron=frozenset({"a"}))]
    rows = schedule_rows([rule("a"), rule("b")], hosts, {}, ms(2026, 1, 1, 0), AMS, "Europe/Amsterdam",
                         {"a": (0, True), "b": (2, False)})
    assert [(r["state"], r["stalls"]) for r in rows] == [("torn-down", 0), ("unserved", 2)]


def test_the_stall_max_is_read_from_its_variable_with_a_default_of_2() -> None:
    assert load_settings({}).scheduler_stall_max == 2
    assert load_settings({"PI_SCHEDULER_STALL_MAX": "0"}).scheduler_stall_max == 0
    with pytest.raises(ConfigError, match="PI_SCHEDULER_STALL_MAX"):
        load_settings({"PI_SCHEDULER_STALL_MAX": "-1"})


async def test_the_loop_with_an_injected_clock_fires_at_the_right_instants_across_a_dst_change() -> None:
    now = [ms(2026, 10, 24, 23, 0)]
    s = scheduler(now)
    daily, hourly = rule("daily", "30 2 * * *"), rule("hourly", "0 * * * *")
    s.install(Loaded(rules=(daily, hourly), mine=(daily, hourly)))
    fired: list[tuple[str, str]] = []

    async def fire(rule: CronRule, at_ms: int, now_ms: int) -> None:
        fired.append((rule.id, iso(at_ms)))

    s._fire = fire  # type: ignore[method-assign]
    end = ms(2026, 10, 25, 4, 0, 1, fold=0)
    while now[0] < end:  # a tick every 500 ms of injected time, as the loop's own cadence
        await s._tick(now[0])
        now[0] += 500
    assert fired == [
        ("hourly", "2026-10-25T00:00:00+02:00"), ("hourly", "2026-10-25T01:00:00+02:00"),
        ("hourly", "2026-10-25T02:00:00+02:00"), ("daily", "2026-10-25T02:30:00+02:00"),
        ("hourly", "2026-10-25T02:00:00+01:00"), ("hourly", "2026-10-25T03:00:00+01:00"),
        ("hourly", "2026-10-25T04:00:00+01:00"),
    ]
