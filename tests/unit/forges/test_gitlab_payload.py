"""The GitLab subset on go-playground's real GitLab payloads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pidispatch.forges.gitlab.payload import GitLabSubset, project
from pidispatch.triggers.subsets import MalformedPayload
from tests.support.payloads import FIXTURES, load_fixture


def sub(payload: dict[str, Any]) -> GitLabSubset:
    return project(json.dumps(payload))


@pytest.mark.parametrize("path", sorted((FIXTURES / "gitlab").glob("*.json")), ids=lambda p: p.stem)
def test_every_gitlab_fixture_projects(path: Path) -> None:
    s = project(path.read_text())
    assert s.object_kind == json.loads(path.read_text()).get("object_kind")


def test_a_merge_request_projects_iid_labels_by_title_and_the_label_diff() -> None:
    p = load_fixture("gitlab/merge-request-event.json")
    s = sub(p)
    assert (s.object_kind, s.action, s.user_id, s.project_id) == ("merge_request", "open", 1, 1)
    assert s.project_path == "gitlabhq/gitlab-test"
    oa = p["object_attributes"]
    assert (s.target.iid, s.target.title, s.target.description) == (oa["iid"], oa["title"], oa["description"])
    assert s.target.iid != oa["id"]  # the per-project number, never the global id
    assert s.labels == ("API",) and s.target.labels == ("API",)
    assert s.label_changes is not None
    assert (s.label_changes.previous, s.label_changes.current) == (("API",), ("Platform",))


def test_label_changes_are_absent_unless_changes_labels_exists() -> None:
    p = load_fixture("gitlab/merge-request-event.json")
    del p["changes"]["labels"]
    assert sub(p).label_changes is None
    p["changes"]["labels"] = None
    assert sub(p).label_changes is None
    del p["changes"]
    assert sub(p).label_changes is None


def test_a_note_targets_its_noteable() -> None:
    on_issue = load_fixture("gitlab/comment-issue-event.json")
    s = sub(on_issue)
    assert (s.object_kind, s.noteable_type) == ("note", "Issue")
    assert s.note == on_issue["object_attributes"]["note"]
    assert (s.target.iid, s.target.title) == (on_issue["issue"]["iid"], on_issue["issue"]["title"])
    assert s.target.labels == ("Afterpod", "Element")
    on_mr = load_fixture("gitlab/comment-merge-request-event.json")
    s = sub(on_mr)
    assert s.noteable_type == "MergeRequest" and s.target.iid == on_mr["merge_request"]["iid"]


def test_the_username_is_carried_for_the_lookup_only() -> None:
    s = sub(load_fixture("gitlab/merge-request-event.json"))
    assert s.username == "root"


def test_labels_keep_only_string_titles() -> None:
    p = load_fixture("gitlab/issue-event.json")
    p["object_attributes"]["labels"] = [{"title": "a"}, {"title": 3}, "b", {"name": "c"}]
    assert sub(p).labels == ("a",)
    p["object_attributes"]["labels"] = {"title": "a"}
    assert sub(p).labels == ()


@pytest.mark.parametrize(
    "body",
    [
        "[]",
        '{"object_kind": "issue", "object_attributes": "x"}',
        '{"object_kind": "issue", "object_attributes": {"title": 5}}',
        '{"object_kind": "issue", "user": 7}',
        '{"object_kind": "merge_request", "changes": {"labels": []}}',
        "{ not json",
    ],
)
def test_an_impossible_shape_raises_malformed_payload(body: str) -> None:
    with pytest.raises(MalformedPayload):
        project(body)
