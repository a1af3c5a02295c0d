from __future__ import annotations

import json

import pytest

from pidispatch.common.models import (
    Event,
    Job,
    Matched,
    Sender,
    Target,
    Trigger,
    job_from_fields,
    job_to_fields,
    sanitize_job_id,
)
from pidispatch.worker.history.records import record_target


def _job(**kw: object) -> Job:
    base: dict[str, object] = {
        "id": "gh-abc",
        "kind": "github",
        "repo": "octo/repo",
        "target": Target(type="issue", number=7, title="t", body="b"),
        "flow": "fix",
        "trigger": Trigger(
            event="issues",
            action="labeled",
            delivery_id="abc",
            sender=Sender(id=7),
            matched=Matched(index=0, type="label", label="pi:fix"),
        ),
    }
    base.update(kw)
    return Job(**base)  # type: ignore[arg-type]


def test_event_fields_round_trip_and_body_is_verbatim() -> None:
    body = '{"a": 1,  "b":"é"}'
    e = Event(forge="github", event="issues", delivery="d1", received_at=5, body=body)
    fields = e.to_fields()
    assert fields["body"] == body
    raw = {k.encode(): v.encode() for k, v in fields.items()}
    assert Event.from_fields(raw) == e


def test_event_from_incomplete_fields_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="malformed event"):
        Event.from_fields({b"forge": b"github"})


def test_job_entry_is_flat_and_job_json_uses_camel_case_names_and_omits_unset_keys() -> None:
    fields = job_to_fields(_job(secrets_profile="prod", replica=2, replicas=2), attempt=1)
    assert set(fields) == {"id", "kind", "repo", "attempt", "job"}
    data = json.loads(fields["job"])
    assert data["trigger"]["deliveryId"] == "abc"
    assert data["secretsProfile"] == "prod"
    assert data["replica"] == 2
    # Keys a rule did not set are absent, never null.
    assert "command" not in data and "image" not in data
    assert "head" not in data["target"]


def test_job_round_trip() -> None:
    job = _job()
    decoded, attempt = job_from_fields(job_to_fields(job, attempt=2))
    assert decoded == job and attempt == 2


@pytest.mark.parametrize(
    "fields",
    [{}, {"job": "not json"}, {"job": '{"id": 1}'}, {"job": '{"id":"a","kind":"github","repo":"r"}',
                                                      "attempt": "x"}],
)
def test_bad_job_entries_raise_value_error(fields: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        job_from_fields(fields)


def test_sanitize_job_id() -> None:
    assert sanitize_job_id("repeat:nightly:1700") == "repeat_nightly_1700"
    assert sanitize_job_id(None) == "unknown-job"
    assert sanitize_job_id("") == "unknown-job"
    assert sanitize_job_id("../../etc/passwd") == ".._.._etc_passwd"


def test_record_target() -> None:
    assert record_target(_job()) == "octo/repo#7"
    mr = _job(kind="gitlab", target=Target(type="pull_request", number=5))
    assert record_target(mr) == "octo/repo!5"
    gh_pr = _job(target=Target(type="pull_request", number=5))
    assert record_target(gh_pr) == "octo/repo#5"
    local = Job(id="l1", kind="local", repo="local:proj", folder="/home/me/proj", task="x")
    assert record_target(local) == "local:proj"
