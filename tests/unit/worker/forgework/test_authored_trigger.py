"""The pre-spend refusals read from the current triggers file, and the disarm write: a foreign mark
refuses, the job's own does not, a narrowed rule refuses its older jobs, and any doubt runs the job."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from pidispatch.common.models import Job, Matched, Target, Trigger
from pidispatch.worker.forgework.authored import refusal
from pidispatch.worker.forgework.disarm import disarm_file, should_disarm

KIND = "github"
AT = "2026-05-01T10:00:00Z"


def once_entry(**on: Any) -> dict[str, Any]:
    return {"on": {"type": "issue", "action": ["closed"], "number": 40, "once": True, **on},
            "run": {"kind": KIND, "flow": "deploy"}}


def job(job_id: str = "gh-1", *, once: bool | None = True, index: int = 1, **fields: Any) -> Job:
    matched = Matched(index=index, type="issue", action="closed", number=40, once=once)
    return Job(id=job_id, kind=KIND, repo="octo/repo", target=Target(type="issue", number=40),
               flow="deploy", trigger=Trigger(event="issues", matched=matched), **fields)


def file_of(*entries: Any) -> dict[str, Any]:
    label = {"on": {"type": "label", "any": ["x"]}, "run": {"kind": KIND, "flow": "fix"}}
    return {"triggers": [label, *entries]}


def test_a_foreign_mark_refuses_once_already_spent_and_the_own_mark_runs() -> None:
    spent = file_of(once_entry(disarmed={"at": AT, "jobId": "gh-other"}))
    assert refusal(spent, job()) == "once-already-spent"
    own = file_of(once_entry(disarmed={"at": AT, "jobId": "gh-1"}))
    assert refusal(own, job()) is None
    no_id = file_of(once_entry(disarmed={"at": AT}))
    assert refusal(no_id, job()) == "once-already-spent"
    assert refusal(file_of(once_entry()), job()) is None


def test_a_mark_on_another_rule_at_that_index_refuses_nothing() -> None:
    moved = file_of(once_entry(number=41, disarmed={"at": AT, "jobId": "gh-other"}))
    assert refusal(moved, job()) is None
    other = once_entry(disarmed={"at": AT, "jobId": "x"})
    other_flow = file_of({**other, "run": {"kind": KIND, "flow": "y"}})
    assert refusal(other_flow, job()) is None


@pytest.mark.parametrize("narrowing", [{"models": ["a/b"]}, {"maxCostUsd": "2.50"}])
def test_a_rule_narrowed_after_the_job_was_queued_refuses_trigger_skew(narrowing: dict[str, Any]) -> None:
    entry = once_entry()
    entry["run"].update(narrowing)
    assert refusal(file_of(entry), job(once=None)) is None  # not the same rule: once differs
    entry["on"].pop("once")
    assert refusal(file_of(entry), job(once=None)) == "trigger-skew"
    carried = {"models": ["a/b"]} if "models" in narrowing else {"max_cost_usd": "2.50"}
    assert refusal(file_of(entry), job(once=None, **carried)) is None


def test_a_rule_that_now_waits_refuses_a_job_queued_without_its_conditions_wait_skew() -> None:
    entry = once_entry()
    entry["on"].pop("once")
    entry["run"]["waitFor"] = [{"profile": "ci-green"}]
    assert refusal(file_of(entry), job(once=None)) == "wait-skew"
    assert refusal(file_of(entry), job(once=None, wait_for=[{"profile": "ci-green"}])) is None


@pytest.mark.parametrize("data", [None, [], {"triggers": "x"}, {"triggers": []}, {"triggers": [1, 2]}])
def test_a_file_that_says_nothing_about_the_rule_refuses_nothing(data: Any) -> None:
    assert refusal(data, job()) is None


def test_a_local_job_or_one_without_a_trigger_is_not_checked() -> None:
    spent = file_of(once_entry(disarmed={"at": AT, "jobId": "gh-other"}))
    assert refusal(spent, Job(id="local-1", kind="local", repo="r", folder="/srv")) is None


def test_only_a_once_job_that_started_or_ended_for_good_disarms() -> None:
    assert should_disarm(job(), None, started=True, final=False)
    assert should_disarm(job(), "container-exit-1", started=True, final=False)
    assert should_disarm(job(), "unprotected-branch", started=False, final=True)
    assert not should_disarm(job(), "workspace-fault", started=False, final=False)
    assert not should_disarm(job(once=None), None, started=True, final=True)


@pytest.mark.parametrize("reason", ["once-already-spent", "trigger-skew"])
def test_a_refusal_the_file_itself_gave_does_not_spend_the_rule(reason: str) -> None:
    assert not should_disarm(job(), reason, started=False, final=True)


TEXT = json.dumps(file_of(once_entry()), indent=2) + "\n"


def write(tmp_path: Path, text: str = TEXT) -> Path:
    path = tmp_path / "triggers.json"
    path.write_text(text)
    path.chmod(0o640)
    return path


def test_disarm_writes_the_mark_keeps_every_other_byte_and_the_mode(tmp_path: Path) -> None:
    path = write(tmp_path)
    assert disarm_file(str(path), job(), AT) == "disarmed"
    after = path.read_text()
    mark = f',\n        "disarmed": {{"at": "{AT}", "jobId": "gh-1"}}'
    assert after == TEXT.replace('"once": true', '"once": true' + mark)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["triggers.json"]
    # Again: its own mark is already there, nothing is written.
    assert disarm_file(str(path), job(), "2027-01-01T00:00:00Z") == "already-disarmed"
    assert path.read_text() == after
    assert disarm_file(str(path), job("gh-2"), AT) == "disarmed-by-another"


@pytest.mark.parametrize(("text", "expected"), [
    (json.dumps(file_of(once_entry(number=41))), "rule-changed"),
    (json.dumps(file_of()), "rule-changed"),
    ("{not json", "unparsable"),
    (TEXT.replace('"number": 40,', '"number": 40, "number": 40,'), "unsafe-splice"),
])
def test_disarm_writes_nothing_when_it_cannot_be_sure(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    assert disarm_file(str(path), job(), AT) == expected
    assert path.read_text() == text


def test_disarm_of_a_missing_file_is_unreadable(tmp_path: Path) -> None:
    assert disarm_file(str(tmp_path / "nope.json"), job(), AT) == "unreadable"
