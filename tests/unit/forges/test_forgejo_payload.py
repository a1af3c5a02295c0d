"""The Forgejo subset on go-playground's real Gitea payloads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pidispatch.forges.forgejo.payload import project
from pidispatch.triggers.subsets import MalformedPayload
from tests.support.payloads import FIXTURES, load_fixture


@pytest.mark.parametrize("path", sorted((FIXTURES / "gitea").glob("*.json")), ids=lambda p: p.stem)
def test_every_gitea_fixture_projects(path: Path) -> None:
    payload = json.loads(path.read_text())
    s = project(path.read_text())
    assert s.action == payload.get("action")
    assert s.sender_id == payload["sender"]["id"]


def test_an_issue_label_event_keeps_the_raw_word_and_current_labels() -> None:
    s = project((FIXTURES / "gitea" / "issue-label-event.json").read_text())
    assert (s.action, s.repository, s.sender_login) == ("label_updated", "example/example", "example")
    assert s.issue is not None and (s.issue.number, s.issue.labels) == (1, ("bug",))
    assert s.pull_request is None and not s.has_comment


def test_a_pull_request_projects_head_and_base_as_data() -> None:
    p = load_fixture("gitea/pull-request-event.json")
    s = project(json.dumps(p))
    pr = s.pull_request
    assert pr is not None
    head = p["pull_request"]["head"]
    assert (pr.number, pr.head_ref, pr.head_sha, pr.head_repo, pr.base_ref) == (
        2, head["ref"], head["sha"], head["repo"]["full_name"], p["pull_request"]["base"]["ref"])


def test_is_pull_is_top_level_and_only_the_literal_true_counts() -> None:
    assert project((FIXTURES / "gitea" / "pull-request-comment-event.json").read_text()).is_pull is True
    assert project((FIXTURES / "gitea" / "issue-comment-event.json").read_text()).is_pull is False
    p = load_fixture("gitea/pull-request-comment-event.json")
    for value in ("true", 1, None):
        p["is_pull"] = value
        assert project(json.dumps(p)).is_pull is False


def test_a_comment_body_and_its_presence() -> None:
    p = load_fixture("gitea/issue-comment-event.json")
    s = project(json.dumps(p))
    assert s.has_comment and s.comment_body == p["comment"]["body"]


@pytest.mark.parametrize(
    "body",
    ['"x"', '{"issue": []}', '{"sender": "bot"}', '{"pull_request": {"head": "main"}}', "{ not json"],
)
def test_an_impossible_shape_raises_malformed_payload(body: str) -> None:
    with pytest.raises(MalformedPayload):
        project(body)
