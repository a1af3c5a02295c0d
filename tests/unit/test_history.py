"""Run records: explicit fields, sanitised file names, atomic newline-terminated JSON, no payload text."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
from structlog.testing import capture_logs

from pidispatch.common.models import Job, Matched, Sender, Target, Trigger
from pidispatch.worker.exitline import ExitInfo
from pidispatch.worker.history import build_record, iso_ms, read_record, record_path, write_record

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


def test_file_name_is_the_sanitised_job_id(tmp_path: Path) -> None:
    assert record_path(str(tmp_path), "repeat:nightly:1700").name == "repeat_nightly_1700.json"
    assert record_path(str(tmp_path), "gh-../../etc/passwd").name == "gh-.._.._etc_passwd.json"
    assert record_path(str(tmp_path), "").name == "unknown-job.json"


async def test_written_record_ends_with_newline_and_holds_no_payload_text(tmp_path: Path) -> None:
    logs = tmp_path / "deep" / "logs"
    job = issue_job("repeat:nightly:1700")
    assert await write_record(str(logs), record_for(job))
    path = logs / "repeat_nightly_1700.json"
    raw = path.read_bytes()
    assert raw.endswith(b"}\n") and raw.count(b"\n") == 1
    text = raw.decode()
    for secret in (TITLE, BODY, "Spelling", "21031067", str(tmp_path), "bug"):
        assert secret not in text
    assert json.loads(text)["jobId"] == "repeat:nightly:1700"
    assert [p.name for p in logs.iterdir()] == ["repeat_nightly_1700.json"]  # no temp file left over


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
