"""The Azure DevOps filter on real payloads, mutated per case."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

import msgspec
import pytest

from pidispatch.common.models import encode_job
from pidispatch.forges.azure.match import decide, stable_actor_id
from pidispatch.forges.azure.payload import project
from pidispatch.triggers.decision import Drop, Fire
from pidispatch.triggers.jobs import semantic_key
from pidispatch.triggers.lookup import SelfIds
from pidispatch.triggers.match.predicate import Predicate
from pidispatch.triggers.rules import CommentRule, ForgeGroup, LabelRule, PullRequestRule, Rules, RunSpec
from tests.support.payloads import WORKITEM_COMMENTED, WORKITEM_CREATED, WORKITEM_UPDATED, load_fixture

SELF = SelfIds(
    ids={
        "azure": ("0f0f0f0f-0000-4000-8000-00000000beef", "pi-bot@example.com"),
    },
)
EMAIL = "dev@example.com"

RULES = Rules(
    groups={
        "github": ForgeGroup(),
        "gitlab": ForgeGroup(),
        "forgejo": ForgeGroup(),
        "azure": ForgeGroup(
        label=(LabelRule(index=0, predicate=Predicate(any=("pi:go",)),
                         run=RunSpec(flow="fix", repository="widgets")),),
        comment=CommentRule(index=1, phrase="@pi", run=RunSpec(flow="triage", repository="widgets")),
        pull_request=(PullRequestRule(index=2, actions=frozenset({"created"}), predicate=Predicate(),
                                      review_states=None, run=RunSpec(flow="review")),),
    ),
    },
    cron=(),
    count=3,
    known_flows=frozenset({"fix", "triage", "review"}),
)


def updated(old: str | None = "", new: str | None = "pi:go", *, by: str = f"Dev Person <{EMAIL}>",
            project_name: str = "Fabrikam") -> dict[str, Any]:
    """The documented workitem.updated, as work item 7 with a tag change by an address-only actor."""
    p = json.loads(WORKITEM_UPDATED)
    res = p["resource"]
    res["workItemId"] = 7
    res["fields"]["System.ChangedBy"] = {"oldValue": "Someone <someone@example.com>", "newValue": by}
    tags: dict[str, Any] = {}
    if old is not None:
        tags["oldValue"] = old
    if new is not None:
        tags["newValue"] = new
        res["revision"]["fields"]["System.Tags"] = new
    if tags:
        res["fields"]["System.Tags"] = tags
    res["revision"]["fields"]["System.TeamProject"] = project_name
    return p


def created(tags: str = "pi:go", by: str = f"Dev Person <{EMAIL}>") -> dict[str, Any]:
    p = json.loads(WORKITEM_CREATED)
    p["resource"]["fields"].update(
        {"System.Tags": tags, "System.ChangedBy": by, "System.TeamProject": "Fabrikam"})
    return p


def run(payload: dict[str, Any], rules: Rules = RULES, *, self_ids: SelfIds = SELF, authorized: Any = True,
        ) -> Any:
    return decide(project(json.dumps(payload)), rules, self_ids, payload.get("id", "d"), authorized)


# --- work-item tags: only an added allowlisted tag fires --------------------------------------------
def test_a_tag_added_on_update_fires_with_the_rule_repository_and_a_hashed_actor() -> None:
    p = updated()
    decision = run(p)
    assert isinstance(decision, Fire)
    job = msgspec.json.decode(encode_job(decision.job))
    assert job["id"] == f"az-{p['id']}" and job["kind"] == "azure"
    assert job["repo"] == "Fabrikam/widgets"
    assert job["azure"] == {"project": "Fabrikam", "projectId": "be9b3917-87e6-42a4-a549-2bc06a7a878f",
                            "repository": "widgets"}
    assert semantic_key(decision.job) == "Fabrikam/widgets#7:fix"
    sender = job["trigger"]["sender"]["id"]
    assert re.fullmatch(r"azid-[0-9a-f]{16}", sender)
    assert sender == "azid-" + hashlib.sha256(EMAIL.encode()).hexdigest()[:16] == stable_actor_id(EMAIL)
    assert job["trigger"]["action"] == "updated" and job["trigger"]["event"] == "workitem.updated"
    assert EMAIL not in json.dumps(job) and "Dev Person" not in json.dumps(job)
    # Stable per address: the same person on another delivery hashes the same.
    again = run(updated(by=f"Dev Person <{EMAIL.upper()}>"))
    assert isinstance(again, Fire) and again.job.trigger.sender.id == sender  # type: ignore[union-attr]


def test_a_title_only_change_is_no_label_change() -> None:
    assert run(updated(old=None, new=None)) == Drop("no-label-change")


def test_a_tag_removal_is_no_label_change() -> None:
    assert run(updated(old="pi:go;other", new="other")) == Drop("no-label-change")


def test_a_first_tag_on_an_untagged_item_has_no_old_value_and_still_fires() -> None:
    assert isinstance(run(updated(old=None, new="pi:go")), Fire)


def test_a_created_work_item_carrying_the_tag_fires() -> None:
    decision = run(created("other; pi:go"))
    assert isinstance(decision, Fire)
    assert decision.job.trigger.action == "created"  # type: ignore[union-attr]
    assert run(created("other")) == Drop("no-allowlisted-label")


def test_tags_match_exactly_and_case_sensitively() -> None:
    assert run(updated(old="", new="PI:GO")) == Drop("no-allowlisted-label")


# --- identity: the harness itself, addresses, GUIDs and unknown events -----------------------------
def test_the_harness_address_is_self_whatever_its_case() -> None:
    assert run(created(by="pi-dispatch <PI-BOT@Example.com>")) == Drop("self")
    assert run(created(by="pi-dispatch <PI-BOT@Example.com>"), authorized=False) == Drop("self")


def test_an_address_in_the_display_name_is_not_the_actor() -> None:
    assert isinstance(run(created(by="pi-bot@example.com is not me <mallory@evil.test>")), Fire)


def test_a_guid_only_identity_never_matches_address_actors() -> None:
    guid_only = SelfIds(
        ids={
            "azure": ("self-guid", None),
        },
    )
    assert isinstance(run(created(by="pi-dispatch <pi-bot@example.com>"), self_ids=guid_only), Fire)
    pr = load_fixture("azuredevops/git.pullrequest.created.json")
    pr["resource"]["createdBy"]["id"] = "self-guid"
    assert run(pr, self_ids=guid_only) == Drop("self")
    assert isinstance(run(pr, self_ids=SelfIds(
        ids={
            "azure": ("", ""),
        },
    )), Fire)


def test_unknown_events_are_unhandled_after_the_identity_step() -> None:
    push = load_fixture("azuredevops/git.push.json")
    push["resource"]["createdBy"] = {"id": "54d125f7-69f7-4191-904f-c5b96b6261c8"}
    assert run(push) == Drop("unhandled-event")
    assert run(load_fixture("azuredevops/git.pullrequest.merged.json")) == Drop("unhandled-event")
    # Without any actor the identity step refuses first.
    assert run(load_fixture("azuredevops/git.push.json")) == Drop("missing-sender-id")


def test_an_actor_known_by_neither_guid_nor_address_is_missing_sender_id() -> None:
    assert run(json.loads(WORKITEM_CREATED)) == Drop("missing-sender-id")


@pytest.mark.parametrize("verdict", [None, False, "true", 1, {}])
def test_every_type_needs_the_literal_true_membership(verdict: Any) -> None:
    assert run(updated(), authorized=verdict) == Drop("author-not-allowed")


# --- pull requests and comments ----------------------------------------------------------------------
def test_a_created_pull_request_fires_with_the_payload_repository_and_refs() -> None:
    p = load_fixture("azuredevops/git.pullrequest.created.json")
    decision = run(p)
    assert isinstance(decision, Fire)
    job = msgspec.json.decode(encode_job(decision.job))
    assert job["repo"] == "Fabrikam/Fabrikam"
    assert job["azure"] == {"project": "Fabrikam", "projectId": "be9b3917-87e6-42a4-a549-2bc06a7a878f",
                            "repository": "Fabrikam", "repositoryId": "4bc14d40-c903-45e2-872e-0462c7748079"}
    assert job["target"] == {"type": "pull_request", "number": 1, "title": "my first pull request",
                             "body": " - test2\r\n", "head": {"ref": "mytopic"}, "base": {"ref": "master"}}
    assert job["trigger"]["sender"] == {"id": "54d125f7-69f7-4191-904f-c5b96b6261c8"}
    assert job["trigger"]["matched"] == {"index": 2, "type": "pull_request", "action": "created"}
    assert semantic_key(decision.job) == "Fabrikam/Fabrikam!1:review"


def test_an_updated_pull_request_with_no_rule_for_it_is_no_matching_pr_trigger() -> None:
    assert run(load_fixture("azuredevops/git.pullrequest.updated.json")) == Drop("no-matching-pr-trigger")


def test_a_work_item_comment_targets_the_item() -> None:
    p = json.loads(WORKITEM_COMMENTED)
    p["resource"]["fields"].update({"System.History": "@pi review this", "System.ChangedBy": f"D <{EMAIL}>"})
    decision = run(p)
    assert isinstance(decision, Fire)
    job = msgspec.json.decode(encode_job(decision.job))
    assert job["flow"] == "review" and job["target"]["type"] == "issue" and job["target"]["number"] == 5
    assert job["trigger"]["comment"] == {"body": "@pi review this"}
    assert job["trigger"]["action"] == "commented"
    assert job["repo"] == "FabrikamCloud/widgets"


def test_a_pull_request_comment_targets_the_pull_request() -> None:
    pr = load_fixture("azuredevops/git.pullrequest.created.json")
    p = {"id": "c1", "eventType": "ms.vss-code.git-pullrequest-comment-event",
         "resource": {"comment": {"content": "@pi go", "author": {"id": "a-guid"}},
                      "pullRequest": copy.deepcopy(pr["resource"])},
         "resourceContainers": pr["resourceContainers"]}
    decision = run(p)
    assert isinstance(decision, Fire)
    assert decision.job.target.type == "pull_request"  # type: ignore[union-attr]
    assert decision.job.repo == "Fabrikam/Fabrikam"
    assert semantic_key(decision.job) == "Fabrikam/Fabrikam!1:triage"


def test_a_work_item_rule_without_a_repository_cannot_scope_the_job() -> None:
    rules = msgspec.structs.replace(RULES, groups={**RULES.groups, "azure": ForgeGroup(label=(
        LabelRule(index=0, predicate=Predicate(any=("pi:go",)), run=RunSpec(flow="fix")),))})
    assert run(updated(), rules) == Drop("no-repository")
    assert run(updated(project_name=""), RULES) == Drop("no-repository")
