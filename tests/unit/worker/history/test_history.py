"""Run records: explicit fields, sanitised file names, atomic newline-terminated JSON, no payload text."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import re
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from pidispatch.common.models import Job, Matched, Sender, Target, Trigger
from pidispatch.common.settings import Settings
from pidispatch.worker.engine.exitline import ExitInfo
from pidispatch.worker.engine.jobname import MAX_NAME, job_file_name
from pidispatch.worker.history.records import (
    build_record,
    encode_record,
    iso_ms,
    list_runs,
    read_record,
    record_path,
    run_log_sweeper,
    sweep_logs,
    write_record,
)
from tests.support.polling import wait_for

TITLE = "Spelling error in the README file"
BODY = "It looks like you accidently spelled 'commit' with two 't's."
STARTED = 1_700_000_000_123
ENDED = 1_700_000_042_000


def issue_job(job_id: str = "gh-72d3162e") -> Job:
    return Job(
        id=job_id, kind="github", repo="Codertocat/Hello-World",
        target=Target(type="issue", number=1, title=TITLE, body=BODY), flow="triage",
        trigger=Trigger(event="issues", action="labeled", delivery_id="72d3162e", sender=Sender(id=21031067),
                        matched=Matched(index=2, type="label", label="bug")),
        replica=1, replicas=2,
    )


def record_for(job: Job, **kw: object):
    args: dict[str, object] = {
        "attempt": 1, "outcome": "completed", "reason": None, "exit_code": 0,
        "exit_info": ExitInfo(turns=1, tokens={"input": 1, "output": 1, "total": 2, "cost": 0}),
        "started_at_ms": STARTED, "ended_at_ms": ENDED, "host": "hostA",
    }
    args.update(kw)
    return build_record(job, **args)  # type: ignore[arg-type]


def test_record_fields() -> None:
    data = msgspec.to_builtins(record_for(issue_job()))
    assert data == {
        "jobId": "gh-72d3162e", "kind": "github", "target": "Codertocat/Hello-World#1", "flow": "triage",
        "startedAt": "2023-11-14T22:13:20.123Z", "endedAt": "2023-11-14T22:14:02.000Z",
        "outcome": "completed", "reason": None, "exitCode": 0, "turns": 1,
        "tokens": {"input": 1, "output": 1, "total": 2, "cost": 0}, "usage": None, "provider": None,
        "model": None, "budgetReserved": False, "attempt": 1, "replica": 1, "replicas": 2,
        "triggerIndex": 2, "triggerType": "label", "session": None, "host": "hostA",
    }


def test_refusal_record_has_no_exit_data() -> None:
    rec = record_for(
        issue_job(), outcome="policy", reason="job-image-missing", exit_code=None, exit_info=None
    )
    assert (rec.exit_code, rec.turns, rec.tokens) == (None, None, None)


def test_iso_ms_is_utc_with_milliseconds() -> None:
    assert iso_ms(0) == "1970-01-01T00:00:00.000Z"
    assert iso_ms(STARTED) == "2023-11-14T22:13:20.123Z"


def test_file_name_escapes_every_byte_outside_letters_digits_dash_and_dot(tmp_path: Path) -> None:
    assert record_path(str(tmp_path), "gh-72d3162e.1").name == "gh-72d3162e.1.json"
    assert record_path(str(tmp_path), "repeat:nightly:1700").name == "repeat_3anightly_3a1700.json"
    assert record_path(str(tmp_path), "gh-../../etc/passwd").name == "gh-.._2f.._2fetc_2fpasswd.json"
    assert record_path(str(tmp_path), ".hidden").name == "_2ehidden.json"  # never a dot file
    assert record_path(str(tmp_path), "").name == "_.json"


def test_two_ids_that_sanitised_to_one_file_get_two_files(tmp_path: Path) -> None:
    names = {record_path(str(tmp_path), i).name for i in ("a:b:c", "a_b_c", "a/b/c", "a b c")}
    assert len(names) == 4


def _decode(name: str) -> str:
    """The inverse of the encoding, for names without the long-id hash: proves nothing is lost."""
    out, i = bytearray(), 0
    while i < len(name):
        if name[i] == "_":
            out.append(int(name[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(name[i]))
            i += 1
    return out.decode("utf-8", errors="surrogatepass")


@hsettings(max_examples=500, deadline=None)
@given(st.text(max_size=60), st.text(max_size=60))
def test_file_names_are_injective_and_safe(a: str, b: str) -> None:
    name_a, name_b = job_file_name(a), job_file_name(b)
    assert (name_a == name_b) == (a == b)
    for name in (name_a, name_b):
        assert re.fullmatch(r"[A-Za-z0-9_.-]+", name) and not name.startswith(".")
    if a and "_-" not in name_a:  # not cut to the long-id form
        assert _decode(name_a) == a


@hsettings(max_examples=200, deadline=None)
@given(st.text(min_size=70, max_size=300), st.text(min_size=70, max_size=300))
def test_long_ids_keep_distinct_bounded_names(a: str, b: str) -> None:
    name_a, name_b = job_file_name(a), job_file_name(b)
    assert (name_a == name_b) == (a == b)
    assert len(name_a) <= MAX_NAME and len(name_b) <= MAX_NAME


async def test_records_of_ids_that_used_to_collide_are_kept_apart(tmp_path: Path) -> None:
    failed = record_for(issue_job("a:b:c"), outcome="failed", reason="container-exit-1")
    await write_record(str(tmp_path), failed)
    await write_record(str(tmp_path), record_for(issue_job("a_b_c")))
    first, second = await read_record(str(tmp_path), "a:b:c"), await read_record(str(tmp_path), "a_b_c")
    assert first is not None and (first.job_id, first.outcome) == ("a:b:c", "failed")
    assert second is not None and (second.job_id, second.outcome) == ("a_b_c", "completed")
    assert sorted(r.job_id for r in await list_runs(str(tmp_path))) == ["a:b:c", "a_b_c"]


async def test_a_record_under_the_old_name_is_read_only_for_its_own_job(tmp_path: Path) -> None:
    legacy = tmp_path / "a_b_c.json"  # what the replacing sanitiser named "a:b:c"'s record
    legacy.write_bytes(encode_record(record_for(issue_job("a:b:c"))))
    rec = await read_record(str(tmp_path), "a:b:c")
    assert rec is not None and rec.job_id == "a:b:c"
    assert await read_record(str(tmp_path), "a/b/c") is None  # same old name, another job


async def test_written_record_ends_with_newline_and_holds_no_payload_text(tmp_path: Path) -> None:
    logs = tmp_path / "deep" / "logs"
    job = issue_job("repeat:nightly:1700")
    assert await write_record(str(logs), record_for(job))
    path = logs / "repeat_3anightly_3a1700.json"
    raw = path.read_bytes()
    assert raw.endswith(b"}\n") and raw.count(b"\n") == 1
    text = raw.decode()
    for secret in (TITLE, BODY, "Spelling", "21031067", str(tmp_path), "bug"):
        assert secret not in text
    assert json.loads(text)["jobId"] == "repeat:nightly:1700"
    assert [p.name for p in logs.iterdir()] == [path.name]  # no temp file left over


async def test_later_attempt_overwrites_and_reads_back(tmp_path: Path) -> None:
    job = issue_job()
    await write_record(str(tmp_path), record_for(job, attempt=1, outcome="failed", reason="container-exit-1"))
    await write_record(str(tmp_path), record_for(job, attempt=2))
    rec = await read_record(str(tmp_path), job.id)
    assert rec is not None and (rec.attempt, rec.outcome) == (2, "completed")
    assert await read_record(str(tmp_path), "gh-never-ran") is None


async def test_write_failure_names_the_job_and_an_errno_never_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with capture_logs() as logs:
        ok = await write_record(str(blocker / "logs"), record_for(issue_job()))
    assert ok is False
    assert logs == [{"event": "run_record_failed", "job": "gh-72d3162e", "reason": "ENOTDIR",
                     "log_level": "warning"}]


# ---- retention --------------------------------------------------------------------------------------

DAY_MS = 86_400_000
NOW = 1_800_000_000_000


def aged(path: Path, days: float, data: str = "{}") -> Path:
    """A file whose mtime is ``days`` before NOW."""
    path.write_text(data)
    t = (NOW - days * DAY_MS) / 1000
    os.utime(path, (t, t))
    return path


async def test_sweep_removes_old_records_and_logs_and_keeps_the_rest(tmp_path: Path) -> None:
    old_json, old_log = aged(tmp_path / "gh-old.json", 31), aged(tmp_path / "gh-old.log", 45)
    new_json, new_log = aged(tmp_path / "gh-new.json", 29), aged(tmp_path / "gh-new.log", 0)
    other = aged(tmp_path / "notes.txt", 400)  # not ours to delete
    nested = tmp_path / "sub"
    nested.mkdir()
    deep = aged(nested / "gh-deep.json", 400)  # no recursion
    folder = tmp_path / "folder.json"
    folder.mkdir()
    with capture_logs() as logs:
        removed = await sweep_logs(str(tmp_path), 30, NOW)
    assert removed == 2
    assert not old_json.exists() and not old_log.exists()
    assert all(p.exists() for p in (new_json, new_log, other, deep, folder))
    assert logs == [{"event": "logs_swept", "removed": 2, "log_level": "info"}]


async def test_sweep_never_follows_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = aged(outside / "precious.json", 400)
    logs_dir = tmp_path / "logs"
    logs_dir.mkdir()
    link = logs_dir / "gh-link.json"
    link.symlink_to(target)
    t = (NOW - 400 * DAY_MS) / 1000
    os.utime(link, (t, t), follow_symlinks=False)
    dir_link = logs_dir / "gh-dir.log"
    dir_link.symlink_to(outside)
    assert await sweep_logs(str(logs_dir), 30, NOW) == 0
    assert target.exists() and link.is_symlink() and dir_link.is_symlink()


async def test_zero_days_keeps_everything_forever(tmp_path: Path) -> None:
    ancient = aged(tmp_path / "gh-1.json", 10_000)
    with capture_logs() as logs:
        assert await sweep_logs(str(tmp_path), 0, NOW) == 0
    assert ancient.exists() and logs == []


async def test_missing_folder_is_nothing_to_sweep(tmp_path: Path) -> None:
    with capture_logs() as logs:
        assert await sweep_logs(str(tmp_path / "never-made"), 30, NOW) == 0
    assert logs == []


async def test_a_file_that_cannot_be_removed_does_not_stop_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stuck = aged(tmp_path / "gh-stuck.json", 90)
    others = [aged(tmp_path / f"gh-{i}.log", 90) for i in range(3)]
    real_unlink = os.unlink

    def unlink(path: str, *args: object, **kw: object) -> None:
        # Root ignores file modes, so the refusal is simulated at the one call that would see it.
        if os.path.basename(path) == stuck.name:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        real_unlink(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "unlink", unlink)
    with capture_logs() as logs:
        assert await sweep_logs(str(tmp_path), 30, NOW) == 3
    assert stuck.exists() and not any(p.exists() for p in others)
    assert {"event": "log_reaper_skipped", "reason": "EACCES", "log_level": "warning"} in logs
    assert str(tmp_path) not in repr(logs) and "gh-stuck" not in repr(logs)


def settings_for(logs_dir: Path, **kw: object) -> Settings:
    return Settings(logs_dir=str(logs_dir), **kw)  # type: ignore[arg-type]


async def test_sweeper_sweeps_at_boot_and_returns_when_the_interval_is_zero(tmp_path: Path) -> None:
    old = aged(tmp_path / "gh-old.json", 31)
    settings = settings_for(tmp_path, log_retention_days=30, sweep_interval_hours=0)
    await asyncio.wait_for(run_log_sweeper(settings, asyncio.Event(), lambda: NOW), 10)
    assert not old.exists()


async def test_sweeper_sweeps_at_once_then_waits_for_the_stop(tmp_path: Path) -> None:
    old = aged(tmp_path / "gh-old.json", 31)
    settings = settings_for(tmp_path, log_retention_days=30, sweep_interval_hours=24)
    stop = asyncio.Event()
    task = asyncio.create_task(run_log_sweeper(settings, stop, lambda: NOW))
    await wait_for(lambda: not old.exists(), 10, what="the boot sweep")
    assert not task.done()  # the next sweep is a day away
    stop.set()
    await asyncio.wait_for(task, 10)


# ---- listing ----------------------------------------------------------------------------------------


async def write_run(logs_dir: Path, job_id: str, ended_ms: int, mtime_days: float | None = None) -> Path:
    rec = record_for(issue_job(job_id), ended_at_ms=ended_ms, started_at_ms=ended_ms - 1000)
    assert await write_record(str(logs_dir), rec)
    path = record_path(str(logs_dir), job_id)
    if mtime_days is not None:
        t = (NOW - mtime_days * DAY_MS) / 1000
        os.utime(path, (t, t))
    return path


async def test_list_runs_is_newest_ended_first_and_cut_to_the_limit(tmp_path: Path) -> None:
    # mtimes out of order with endedAt: the listing sorts by endedAt, mtime only pre-selects.
    await write_run(tmp_path, "gh-a", ENDED + 1000, mtime_days=1)
    await write_run(tmp_path, "gh-b", ENDED + 3000, mtime_days=3)
    await write_run(tmp_path, "gh-c", ENDED + 2000, mtime_days=2)
    await write_run(tmp_path, "gh-d", ENDED, mtime_days=4)
    assert [r.job_id for r in await list_runs(str(tmp_path))] == ["gh-b", "gh-c", "gh-a", "gh-d"]
    assert [r.job_id for r in await list_runs(str(tmp_path), limit=2)] == ["gh-b", "gh-c"]
    assert await list_runs(str(tmp_path), limit=0) == []


async def test_list_runs_preselects_by_mtime(tmp_path: Path) -> None:
    # Only the newest limit*2 files by mtime are decoded: an old file cannot push in, whatever it claims.
    for i in range(6):
        await write_run(tmp_path, f"gh-{i}", ENDED + i, mtime_days=10 - i)
    await write_run(tmp_path, "gh-old-but-claims-new", ENDED + 10**9, mtime_days=100)
    assert [r.job_id for r in await list_runs(str(tmp_path), limit=2)] == ["gh-5", "gh-4"]


async def test_list_runs_skips_what_does_not_decode(tmp_path: Path) -> None:
    await write_run(tmp_path, "gh-good", ENDED, mtime_days=2)
    aged(tmp_path / "gh-torn.json", 1, '{"jobId": "gh-torn", "ki')
    aged(tmp_path / "gh-wrong.json", 1, '{"jobId": 7}')
    aged(tmp_path / "gh-list.json", 1, "[]")
    aged(tmp_path / "gh-run.log", 0, "not a record")
    (tmp_path / "dir.json").mkdir()
    (tmp_path / "gh-link.json").symlink_to(await write_run(tmp_path / "elsewhere", "gh-x", ENDED))
    assert [r.job_id for r in await list_runs(str(tmp_path), limit=1)] == ["gh-good"]
    assert await list_runs(str(tmp_path / "missing")) == []
