from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from pidispatch.forges.github.payload import MalformedPayload, label_names, project
from pidispatch.triggers import subsets
from tests.support.payloads import FIXTURES, load_fixture


def raw(name: str) -> str:
    return (FIXTURES / "github" / name).read_text()


def test_issues_labeled_fixture_projects_only_the_subset() -> None:
    s = project(raw("issues.labeled.json"))
    assert s.action == "labeled"
    assert s.sender_id == 21031067
    assert s.repository == "Codertocat/Hello-World"
    assert s.issue is not None
    assert (s.issue.number, s.issue.labels, s.issue.is_pull_request) == (1, ("bug",), False)
    assert s.issue.title == "Spelling error in the README file"
    assert s.comment is None and s.pull_request is None and s.review is None


def test_issue_comment_fixture_carries_the_comment_body_and_association() -> None:
    payload = load_fixture("github/issue_comment.created.json")
    s = project(json.dumps(payload))
    assert s.comment is not None
    assert s.comment.body == payload["comment"]["body"]
    assert s.comment.author_association == payload["comment"]["author_association"]


def test_bytes_and_text_decode_alike() -> None:
    assert project(raw("issues.opened.json").encode()) == project(raw("issues.opened.json"))


@pytest.mark.parametrize(
    ("sender", "expected"),
    [({"id": "7"}, "7"), ({}, None), ({"id": {}}, {}), ({"id": True}, True), (None, None)],
)
def test_sender_id_is_kept_loose_for_the_filter_to_judge(sender: Any, expected: Any) -> None:
    payload = load_fixture("github/issues.labeled.json")
    if sender is None:
        del payload["sender"]
    else:
        payload["sender"] = sender
    assert project(json.dumps(payload)).sender_id == expected


def test_issue_pull_request_marker_is_presence_not_truthiness() -> None:
    payload = load_fixture("github/issue_comment.created.json")
    payload["issue"]["pull_request"] = {}
    assert project(json.dumps(payload)).issue.is_pull_request is True  # type: ignore[union-attr]
    payload["issue"]["pull_request"] = None
    assert project(json.dumps(payload)).issue.is_pull_request is False  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("labels", "names"),
    [
        ([{"name": "a"}, {"name": 3}, "b", {"id": 1}, {"name": "c"}], ("a", "c")),
        ({"name": "a"}, ()),
        (None, ()),
        ("a,b", ()),
    ],
)
def test_labels_keep_only_string_names_and_a_non_array_is_empty(labels: Any, names: tuple[str, ...]) -> None:
    assert label_names(labels) == names
    payload = load_fixture("github/issues.labeled.json")
    payload["issue"]["labels"] = labels
    assert project(json.dumps(payload)).issue.labels == names  # type: ignore[union-attr]


def test_pull_request_and_review_subset() -> None:
    payload = {
        "action": "submitted",
        "sender": {"id": 5, "login": "someone"},
        "repository": {"full_name": "octo/repo"},
        "pull_request": {
            "number": 55, "title": "t", "body": None, "author_association": "NONE",
            "labels": [{"name": "pi:review"}],
            "head": {"ref": "feat", "sha": "abc", "repo": {"full_name": "fork/repo"}},
            "base": {"ref": "main"}, "merged": False,
        },
        "review": {"id": 9, "body": "", "state": "CHANGES_REQUESTED", "author_association": "MEMBER",
                   "user": {"login": "reviewer"}},
    }
    s = project(json.dumps(payload))
    pr = s.pull_request
    assert pr is not None
    assert (pr.number, pr.labels, pr.head_ref, pr.head_sha, pr.head_repo, pr.base_ref) == (
        55, ("pi:review",), "feat", "abc", "fork/repo", "main")
    assert pr.has_head and pr.has_base
    assert s.review is not None and s.review.state == "changes_requested" and s.review.id == 9
    # The reviewer's login is not projected at all.
    assert "reviewer" not in repr(s)


@pytest.mark.parametrize(
    "body",
    [
        '{"action": "labeled", "issue": "not an object"}',
        '{"sender": "octocat"}',
        '{"issue": {"title": 42}}',
        "[]",
        '"text"',
        "{ not json",
    ],
)
def test_an_impossible_shape_raises_a_value_error_subclass(body: str) -> None:
    with pytest.raises(MalformedPayload) as err:
        project(body)
    assert isinstance(err.value, ValueError)


def test_unknown_fields_are_tolerated() -> None:
    s = project('{"action": "labeled", "brand_new": {"x": [1]}, "issue": {"number": 3, "extra": true}}')
    assert s.issue is not None and s.issue.number == 3


def test_a_pull_request_without_head_or_base_says_so() -> None:
    s = project('{"action": "opened", "pull_request": {"number": 1}}')
    assert s.pull_request is not None and not s.pull_request.has_head and not s.pull_request.has_base


def test_malformed_payload_is_the_one_shared_class() -> None:
    assert MalformedPayload is subsets.MalformedPayload


def test_every_octokit_example_projects() -> None:
    with gzip.open(FIXTURES / "github" / "webhooks-examples.json.gz") as f:
        examples = [(e["name"], x) for e in json.load(f) for x in e["examples"]]
    assert len(examples) > 300
    for name, example in examples:
        s = project(json.dumps(example))
        assert s.action == example.get("action"), name
        if name in ("issues", "issue_comment") and "issue" in example:
            assert s.issue is not None and s.issue.number == example["issue"]["number"]
        if name in ("pull_request", "pull_request_review"):
            assert s.pull_request is not None and s.pull_request.number == example["pull_request"]["number"]
