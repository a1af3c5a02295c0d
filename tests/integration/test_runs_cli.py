"""``pi-dispatch runs`` lists this host's record files merged with the fleet's Redis mirror, newest first;
without Redis it still lists this host's files, says why in one line, and exits 0.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from pidispatch.common import cli
from pidispatch.common.keys import Keys
from pidispatch.common.models import Job, Matched, RunRecord, Sender, Target, Trigger
from pidispatch.common.redis import create_redis
from pidispatch.common.runtime import now_ms
from pidispatch.worker.engine.exitline import ExitInfo
from pidispatch.worker.history.mirror import mirror_record
from pidispatch.worker.history.records import build_record, write_record

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


def make(job_id: str, ended_ms: int, **kw: object) -> RunRecord:
    fields: dict[str, object] = {
        "attempt": 1, "outcome": "completed", "reason": None, "exit_code": 0,
        "exit_info": ExitInfo(turns=1, tokens={"input": 1, "output": 1, "total": 2, "cost": 0}),
        "started_at_ms": ended_ms - 5000, "ended_at_ms": ended_ms, "host": "hostA",
    }
    fields.update(kw)
    return build_record(job(job_id), **fields)  # type: ignore[arg-type]


def write(logs: Path, job_id: str, ended_ms: int, **kw: object) -> None:
    assert asyncio.run(write_record(str(logs), make(job_id, ended_ms, **kw)))


def mirror(url: str, prefix: str, *records: RunRecord) -> None:
    """What another host's worker does after writing its own file."""
    async def go() -> None:
        redis = create_redis(url)
        try:
            for record in records:
                assert await mirror_record(redis, Keys(prefix), record, retention_days=30, now_ms=now_ms())
        finally:
            await redis.aclose()

    asyncio.run(go())


UNREACHABLE_NOTE = (
    "fleet view unavailable: Redis unreachable (ConnectionError) — showing this host's files only\n"
)


@pytest.fixture
def logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Host A with its PI_LOGS_DIR; Redis points at a closed port on purpose (the fleet view is down)."""
    path = tmp_path / "logs"
    monkeypatch.setenv("PI_LOGS_DIR", str(path))
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("PI_WORKER_NAME", "hostA")
    return path


@pytest.fixture
def fleet(logs: Path, redis_server: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The same host with its Redis up (an isolated prefix); returns the Redis URL."""
    monkeypatch.setenv("REDIS_URL", redis_server)
    monkeypatch.setenv("PD_KEY_PREFIX", key_prefix)
    return redis_server


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code, out, _ = run_cli_err(capsys, *args)
    return code, out


def run_cli_err(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    # Synchronous on purpose: the CLI runs its command with asyncio.run, as from a shell.
    code = cli.main(["runs", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_lists_records_newest_first_as_on_disk(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(logs, "gh-first", T0)
    write(logs, "gh-third", T0 + 2 * MINUTE, outcome="policy", reason="runner-policy", exit_code=2)
    write(logs, "gh-second", T0 + MINUTE, outcome="failed", reason="container-exit-1", exit_code=1,
                attempt=2)
    code, out = run_cli(capsys, "--json")
    assert code == 0
    view = json.loads(out)
    assert (view["degraded"], view["hosts"]) == ("unreachable (ConnectionError)", ["hostA"])
    rows = view["runs"]
    assert [r["jobId"] for r in rows] == ["gh-third", "gh-second", "gh-first"]
    on_disk = json.loads((logs / "gh-second.json").read_text())
    assert rows[1] == on_disk  # camelCase, every field, exactly as written
    assert TITLE not in out

    code, out = run_cli(capsys, "--json", "--limit", "1")
    assert [r["jobId"] for r in json.loads(out)["runs"]] == ["gh-third"]


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
    assert code == 0 and [r["jobId"] for r in json.loads(out)["runs"]] == ["gh-good"]


@pytest.mark.parametrize("make_dir", [False, True], ids=["missing-folder", "empty-folder"])
def test_nothing_recorded_yet(logs: Path, capsys: pytest.CaptureFixture[str], make_dir: bool) -> None:
    if make_dir:
        logs.mkdir()
    code, out = run_cli(capsys)
    assert (code, out) == (0, "no runs recorded yet\n")
    code, out = run_cli(capsys, "--json", "--local")
    assert (code, json.loads(out)) == (0, {"runs": [], "degraded": "local", "hosts": []})
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


# ---- the fleet view: this host's records and the rows other hosts mirrored -------------------------


def test_files_of_this_host_and_mirror_rows_of_another_are_listed_together(
    fleet: str, key_prefix: str, logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = now_ms()
    write(logs, "gh-a1", now - 3 * MINUTE)
    # A retry that landed on host B: A holds the failed attempt 1, B mirrored the completed attempt 2.
    write(logs, "gh-retry", now - 4 * MINUTE, outcome="failed", reason="container-exit-1", exit_code=1)
    mirror(fleet, key_prefix,
           make("gh-a1", now - 3 * MINUTE),  # host A's worker mirrors its own runs too: listed once
           make("gh-b1", now - 2 * MINUTE, host="hostB"),
           make("gh-retry", now - MINUTE, host="hostB", attempt=2))

    code, out, err = run_cli_err(capsys, "--json")
    assert (code, err) == (0, "")
    view = json.loads(out)
    assert (view["degraded"], view["hosts"]) == ("ok", ["hostA", "hostB"])
    assert [(r["jobId"], r["host"], r["attempt"], r["outcome"]) for r in view["runs"]] == [
        ("gh-retry", "hostB", 2, "completed"),
        ("gh-b1", "hostB", 1, "completed"),
        ("gh-a1", "hostA", 1, "completed"),
    ]
    assert TITLE not in out

    code, out, err = run_cli_err(capsys)
    assert (code, err) == (0, "")
    assert [line.split()[4:6] for line in out.splitlines()[1:]] == [
        ["gh-retry", "hostB"], ["gh-b1", "hostB"], ["gh-a1", "hostA"],
    ]


def test_redis_down_lists_this_hosts_files_with_a_note_and_exits_0(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(logs, "gh-mine", T0)
    code, out, err = run_cli_err(capsys)
    assert (code, err) == (0, UNREACHABLE_NOTE)  # the note goes to stderr; stdout stays the table
    assert [line.split()[4:6] for line in out.splitlines()[1:]] == [["gh-mine", "hostA"]]
    code, out, err = run_cli_err(capsys, "--json")
    view = json.loads(out)
    assert (code, err, view["degraded"]) == (0, "", "unreachable (ConnectionError)")
    assert [r["jobId"] for r in view["runs"]] == ["gh-mine"]


def test_local_flag_shows_only_this_hosts_files(
    fleet: str, key_prefix: str, logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = now_ms()
    write(logs, "gh-mine", now - MINUTE)
    mirror(fleet, key_prefix, make("gh-theirs", now, host="hostB"))
    code, out, err = run_cli_err(capsys, "--local", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "runs": [json.loads((logs / "gh-mine.json").read_text())], "degraded": "local", "hosts": ["hostA"],
    }
    code, out, err = run_cli_err(capsys, "--local")
    assert (code, err) == (0, "") and "gh-theirs" not in out


def test_no_mirror_says_no_worker_declares_a_name(
    fleet: str, logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(logs, "gh-mine", T0)
    code, out, err = run_cli_err(capsys)
    assert code == 0 and "gh-mine" in out
    assert err == (
        "no fleet mirror (PI_WORKER_NAME not declared on any worker?) — showing this host's files only\n"
    )
    code, out = run_cli(capsys, "--json")
    assert json.loads(out)["degraded"] == "off"


def test_a_fuller_mirror_than_the_limit_says_how_many_are_shown(
    fleet: str, key_prefix: str, logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = now_ms()
    mirror(fleet, key_prefix, *(make(f"gh-b{i}", now - i * MINUTE, host="hostB") for i in range(3)))
    code, out, err = run_cli_err(capsys, "--limit", "2")
    assert (code, err) == (0, "showing the newest 2 runs; --limit shows more\n")
    assert [line.split()[4] for line in out.splitlines()[1:]] == ["gh-b0", "gh-b1"]
    code, out = run_cli(capsys, "--json", "--limit", "2")
    view = json.loads(out)
    assert (view["degraded"], len(view["runs"])) == ("truncated", 2)
