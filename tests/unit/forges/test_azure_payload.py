"""The Azure DevOps subset on go-playground's PR payloads and Microsoft's documented work-item payloads
(kept verbatim in ``tests.support.payloads``).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from pidispatch.forges.azure.payload import AzureSubset, extract_email, parse_tags, project
from pidispatch.triggers.subsets import MalformedPayload
from tests.support.payloads import (
    FIXTURES,
    WORKITEM_COMMENTED,
    WORKITEM_CREATED,
    WORKITEM_UPDATED,
    load_fixture,
)


def wi(text: str, **fields: Any) -> dict[str, Any]:
    """A documented work-item payload with some of its ``resource.fields`` replaced."""
    p = json.loads(text)
    p["resource"]["fields"].update(fields)
    return p


def sub(payload: dict[str, Any]) -> AzureSubset:
    return project(json.dumps(payload))


def test_a_documented_created_work_item_projects_project_target_and_tags() -> None:
    s = sub(wi(WORKITEM_CREATED, **{"System.Tags": "pi:go; other"}))
    assert (s.event_type, s.project_id, s.project_name) == (
        "workitem.created", "be9b3917-87e6-42a4-a549-2bc06a7a878f", "FabrikamCloud")
    assert (s.number, s.title, s.body) == (5, "Some great new idea!", None)
    assert s.tags == ("pi:go", "other") and s.tag_changes is None
    # "Jamal Hartnett" carries no address and no GUID: no usable actor.
    assert (s.actor_id, s.actor_email) == (None, None)


def test_an_update_reads_the_revision_for_state_and_the_diff_for_tag_changes() -> None:
    p = json.loads(WORKITEM_UPDATED)
    p["resource"]["fields"]["System.Tags"] = {"newValue": "pi:go"}
    p["resource"]["fields"]["System.ChangedBy"] = {"oldValue": "A <a@x.test>",
                                                   "newValue": "Dev Person <Dev@Example.com>"}
    p["resource"]["revision"]["fields"]["System.Tags"] = "pi:go"
    s = sub(p)
    assert s.tag_changes is not None
    assert (s.tag_changes.previous, s.tag_changes.current) == ((), ("pi:go",))
    assert s.tags == ("pi:go",)
    assert s.title == "Some great new idea!" and s.project_name == "FabrikamCloud"
    assert s.actor_email == "dev@example.com"
    # workItemId (0 in the sample) wins over the update's own id, as `??` does.
    assert s.number == 0


def test_an_update_that_moved_no_tag_has_no_tag_changes() -> None:
    assert sub(json.loads(WORKITEM_UPDATED)).tag_changes is None


def test_a_comment_is_system_history_only_on_the_commented_event() -> None:
    assert sub(json.loads(WORKITEM_COMMENTED)).comment == "This is a great new idea"
    assert sub(wi(WORKITEM_CREATED, **{"System.History": "x"})).comment is None


def test_pull_request_fixtures_project_the_scope_refs_and_guid_actor() -> None:
    s = project((FIXTURES / "azuredevops" / "git.pullrequest.created.json").read_text())
    assert s.actor_id == "54d125f7-69f7-4191-904f-c5b96b6261c8" and s.actor_email is None
    assert (s.project_id, s.project_name, s.repository_name) == (
        "be9b3917-87e6-42a4-a549-2bc06a7a878f", "Fabrikam", "Fabrikam")
    assert s.repository_id == "4bc14d40-c903-45e2-872e-0462c7748079"
    assert (s.number, s.title, s.head_ref, s.base_ref) == (1, "my first pull request", "mytopic", "master")


AUTHOR = "3b5f0c2e-0000-4000-8000-000000000001"


def pr_comment(content: str = "@pi review", author_id: str = AUTHOR) -> dict[str, Any]:
    """A PR comment event: the documented PR resource under ``pullRequest`` plus a comment."""
    pr = load_fixture("azuredevops/git.pullrequest.created.json")
    return {
        "id": "0d2f5a61-8c3e-4b7e-9f41-2a6c9e3b7d10",
        "eventType": "ms.vss-code.git-pullrequest-comment-event",
        "publisherId": "tfs", "message": pr["message"],
        "resource": {
            "comment": {"id": 2, "content": content, "author": {"id": author_id, "displayName": "Reviewer"}},
            "pullRequest": copy.deepcopy(pr["resource"]),
        },
        "resourceContainers": pr["resourceContainers"],
    }


def test_a_pr_comment_takes_the_pr_from_the_resource_and_the_author_from_the_comment() -> None:
    p = pr_comment()
    del p["resource"]["pullRequest"]["createdBy"]
    s = sub(p)
    assert s.comment == "@pi review" and s.number == 1 and s.repository_name == "Fabrikam"
    assert s.actor_id == AUTHOR


@pytest.mark.parametrize("name", sorted(p.name for p in (FIXTURES / "azuredevops").glob("*.json")))
def test_every_fixture_projects(name: str) -> None:
    assert isinstance(project((FIXTURES / "azuredevops" / name).read_text()), AzureSubset)


def test_unknown_events_never_read_their_resource() -> None:
    s = sub({"id": "x", "eventType": "tfvc.checkin", "resource": {"comment": "a string here", "fields": 3}})
    assert s.event_type == "tfvc.checkin" and s.number is None


@pytest.mark.parametrize(
    ("raw", "email"),
    [
        ("Dev Person <Dev@Example.COM>", "dev@example.com"),
        ("pi-bot@example.com is not me <mallory@evil.test>", "mallory@evil.test"),
        ("  dev@example.com  ", "dev@example.com"),
        ("\ufeffdev@example.com\u3000", "dev@example.com"),  # JavaScript's trim
        ("\x1cdev@example.com", "\x1cdev@example.com"),  # U+001C is no whitespace to it
        ("Dev <dev@example.com> trailing", None),  # anchored at the very end
        ("dev@example.com is me", None),
        ("Jamal Hartnett", None),
        ("<>", None),
        (None, None),
        (7, None),
    ],
)
def test_the_address_is_anchored_and_lower_cased(raw: Any, email: str | None) -> None:
    assert extract_email(raw) == email


def test_changed_by_wins_over_created_by_and_a_guid_wins_over_both() -> None:
    p = wi(WORKITEM_CREATED, **{"System.ChangedBy": "B <b@x.test>", "System.CreatedBy": "A <a@x.test>"})
    assert sub(p).actor_email == "b@x.test"
    del p["resource"]["fields"]["System.ChangedBy"]
    assert sub(p).actor_email == "a@x.test"
    p["resource"]["createdBy"] = {"id": "guid-1"}
    assert (sub(p).actor_id, sub(p).actor_email) == ("guid-1", None)
    p["resource"]["createdBy"] = {"id": 5}  # not a GUID string: falls through to the address
    assert (sub(p).actor_id, sub(p).actor_email) == (None, "a@x.test")


@pytest.mark.parametrize(("raw", "tags"), [("a; b ; ", ("a", "b")), ("a;b", ("a", "b")), ("", ()), (None, ()),
                                           (";;", ()), ("pi:go", ("pi:go",)),
                                           # JavaScript's trim: the BOM goes, U+001F stays.
                                           ("\ufeffpi:go ;\xa0", ("pi:go",)), ("\x1f;a", ("\x1f", "a"))])
def test_tags_split_on_semicolons_trimmed_and_empties_dropped(raw: Any, tags: tuple[str, ...]) -> None:
    assert parse_tags(raw) == tags


@pytest.mark.parametrize(
    "body",
    [
        "[]",
        '{"eventType": "workitem.updated", "resource": {"fields": "text"}}',
        '{"eventType": "git.pullrequest.created", "resource": {"title": 5}}',
        '{"eventType": "git.pullrequest.created", "resource": "pr"}',
        '{"resourceContainers": 3}',
        "{ not json",
    ],
)
def test_an_impossible_shape_raises_malformed_payload(body: str) -> None:
    with pytest.raises(MalformedPayload):
        project(body)
