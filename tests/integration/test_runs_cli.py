"""``pi-dispatch runs`` reads this host's record files, newest first, and needs no Redis."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from pidispatch.common import cli
from pidispatch.common.models import Job, Matched, Sender, Target, Trigger
from pidispatch.worker.exitline import ExitInfo
from pidispatch.worker.history import build_record, write_record

TITLE = "Spelling error in the README file"
T0 = 1_700_000_000_000
MINUTE = 60_000


def job(job_id: str, *, kind: str = "github", number: int = 1) -> Job:
    return Job(
        id=job_id, kind=kind, repo="Codertocat/Hello-World", flow="triage",
        target=Target(type="issue", number=number, title=TITLE, body="body text"),
        trigger=Trigger(event="issues", action="labeled", delivery_id=job_id, sender=Sender(id=21031067),
                        matched=Matched(index=0, type="label", label="bug")),
    )


def write(logs: Path, job_id: str, ended_ms: int, **kw: object) -> None:
    fields: dict[str, object] = {
        "attempt": 1, "outcome": "completed", "reason": None, "exit_code": 0,
        "exit_info": ExitInfo(turns=1, tokens={"input": 1, "output": 1, "total": 2, "cost": 0}),
        "started_at_ms": ended_ms - 5000, "ended_at_ms": ended_ms, "host": "hostA",
    }
    fields.update(kw)
    record = build_record(job(job_id), **fields)  # type: ignore[arg-type]
    assert asyncio.run(write_record(str(logs), record))


@pytest.fixture
def logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A deployment whose only configuration is PI_LOGS_DIR; Redis points at a closed port on purpose."""
    path = tmp_path / "logs"
    monkeypatch.setenv("PI_LOGS_DIR", str(path))
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("PI_WORKER_NAME", "hostA")
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    # Synchronous on purpose: the CLI runs its command with asyncio.run, as from a shell.
    code = cli.main(["runs", *args])
    return code, capsys.readouterr().out


def test_json_lists_records_newest_first_as_on_disk(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(logs, "gh-first", T0)
    write(logs, "gh-third", T0 + 2 * MINUTE, outcome="policy", reason="runner-policy", exit_code=2)
    write(logs, "gh-second", T0 + MINUTE, outcome="failed", reason="container-exit-1", exit_code=1,
                attempt=2)
    code, out = run_cli(capsys, "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["jobId"] for r in rows] == ["gh-third", "gh-second", "gh-first"]
    on_disk = json.loads((logs / "gh-second.json").read_text())
    assert rows[1] == on_disk  # camelCase, every field, exactly as written
    assert TITLE not in out

    code, out = run_cli(capsys, "--json", "--limit", "1")
    assert [r["jobId"] for r in json.loads(out)] == ["gh-third"]


def test_table_for_people(logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(logs, "gh-done", T0)
    write(logs, "gh-broke", T0 + MINUTE, outcome="failed", reason="container-exit-1", exit_code=1,
                attempt=2)
    code, out = run_cli(capsys)
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split() == ["ENDED", "OUTCOME", "REASON", "TARGET", "JOB", "HOST", "ATTEMPT"]
    target = "Codertocat/Hello-World#1"
    assert [line.split() for line in lines] == [
        ["2023-11-14T22:14Z", "failed", "container-exit-1", target, "gh-broke", "hostA", "2"],
        ["2023-11-14T22:13Z", "completed", "-", target, "gh-done", "hostA", "1"],
    ]
    # Columns line up: every row starts its JOB cell where the header's does.
    col = header.index("JOB")
    assert all(line[col:].startswith("gh-") for line in lines)


def test_a_bad_record_file_is_skipped_not_fatal(logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(logs, "gh-good", T0)
    (logs / "gh-torn.json").write_text('{"jobId": "gh-torn", "kind"')
    code, out = run_cli(capsys, "--json")
    assert code == 0 and [r["jobId"] for r in json.loads(out)] == ["gh-good"]


@pytest.mark.parametrize("make_dir", [False, True], ids=["missing-folder", "empty-folder"])
def test_nothing_recorded_yet(logs: Path, capsys: pytest.CaptureFixture[str], make_dir: bool) -> None:
    if make_dir:
        logs.mkdir()
    code, out = run_cli(capsys)
    assert (code, out) == (0, "no runs recorded in PI_LOGS_DIR yet\n")
    code, out = run_cli(capsys, "--json")
    assert (code, json.loads(out)) == (0, [])
    assert not logs.exists() or not any(logs.iterdir())  # reading creates nothing


def test_limit_must_be_a_positive_number(logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("0", "-3", "ten"):
        with pytest.raises(SystemExit) as exited:
            cli.main(["runs", "--limit", bad])
        assert exited.value.code == 2
        assert "accepted: a whole number from 1 to" in capsys.readouterr().err



def test_control_characters_in_a_record_cannot_drive_the_terminal(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(logs, "gh-x", T0)
    data = json.loads((logs / "gh-x.json").read_text())
    data["reason"] = "\x1b]0;owned\x07\x1b[2J"
    (logs / "gh-x.json").write_text(json.dumps(data))
    code, out = run_cli(capsys)
    assert code == 0 and "\x1b" not in out and "\x07" not in out
    assert "?]0;owned??[2J" in out
