"""``plan`` / ``resume``: a forge lookup is asked for only when its verdict could change the outcome."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from pidispatch.common.models import Event, encode_job
from pidispatch.forges.azure.authority import AzureMembership
from pidispatch.forges.forgejo.authority import ForgejoPermission
from pidispatch.forges.github.authority import GithubCloser
from pidispatch.forges.gitlab.authority import GitlabMember
from pidispatch.forges.pipeline import Ask, Drop, Fire, MalformedPayload, Subject, plan, planned, resume
from pidispatch.triggers.jobs import semantic_key
from pidispatch.triggers.lookup import SelfIds
from pidispatch.triggers.match.predicate import Predicate
from pidispatch.triggers.rules import (
    CloseRule,
    CommentRule,
    ForgeGroup,
    LabelRule,
    PullRequestRule,
    Rules,
    RunSpec,
)
from tests.support.payloads import WORKITEM_CREATED, WORKITEM_UPDATED, fixture_bytes, load_fixture

SELF = SelfIds(
    ids={
        "github": 999,
        "gitlab": 999,
        "forgejo": 999,
        "azure": ("self-guid", "pi-bot@example.com"),
    },
)
LOGIN = "closer-login-never-enqueued"
DELIVERY = "5a1c7e2b-3f4d-4e8a-9b6c-0d1e2f3a4b5c"


def label(index: int, name: str, **run: Any) -> LabelRule:
    return LabelRule(index=index, predicate=Predicate(any=(name,)), run=RunSpec(**run))


RULES = Rules(
    groups={
        "github": ForgeGroup(
        label=(label(0, "bug", flow="fix"),),
        comment=CommentRule(index=1, phrase="@pi", run=RunSpec(flow="fix")),
        issue=(CloseRule(index=2, actions=frozenset({"closed"}), number=40, once=True,
                         run=RunSpec(flow="deploy")),),
    ),
        "gitlab": ForgeGroup(label=(label(3, "pi:frontend", flow="frontend-fix"),),
                      comment=CommentRule(index=4, phrase="@pi", run=RunSpec(flow="fix"))),
        "forgejo": ForgeGroup(label=(label(5, "bug", flow="fix"),)),
        "azure": ForgeGroup(
        label=(label(6, "pi:go", flow="fix", repository="widgets"),),
        pull_request=(PullRequestRule(index=7, actions=frozenset({"created"}), predicate=Predicate(),
                                      review_states=None, run=RunSpec(flow="review")),),
    ),
    },
    cron=(),
    known_flows=frozenset({"fix", "deploy", "frontend-fix", "review"}),
    count=8,
)


def event(forge: str, name: str, payload: dict[str, Any] | str) -> Event:
    body = payload if isinstance(payload, str) else json.dumps(payload)
    return Event(forge=forge, event=name, delivery=DELIVERY, received_at=1, body=body)


# --- GitHub: only a close a close rule wants ----------------------------------------------------------
def gh_issue(action: str, number: int = 40, sender: int = 7, labels: tuple[str, ...] = ("bug",)) -> Event:
    p = load_fixture("github/issues.labeled.json")
    p.update(action=action)
    p["sender"].update(id=sender, login=LOGIN)
    p["issue"].update(number=number, labels=[{"name": n} for n in labels])
    p["repository"]["full_name"] = "octo/repo"
    return event("github", "issues", p)


def test_a_wanted_close_asks_once_with_repo_and_login_then_fires() -> None:
    ev = gh_issue("closed")
    assert plan(ev, RULES, SELF) == Ask(GithubCloser(repo="octo/repo", login=LOGIN))
    fired = resume(ev, RULES, SELF, True)
    assert isinstance(fired, Fire)
    job = msgspec.json.decode(encode_job(fired.job))
    assert job["trigger"]["sender"] == {"id": 7}
    assert job["trigger"]["matched"]["once"] is True
    assert semantic_key(fired.job) == "octo/repo#40:closed:deploy"
    assert LOGIN not in json.dumps(job)
    assert resume(ev, RULES, SELF, False) == Drop("closer-not-allowed")


@pytest.mark.parametrize(
    ("ev", "outcome"),
    [
        (gh_issue("closed", number=41), Drop("close-number-not-matched")),
        (gh_issue("closed", sender=999), Drop("self")),
        (gh_issue("labeled"), "fire"),
        (gh_issue("labeled", labels=("other",)), Drop("no-allowlisted-label")),
    ],
)
def test_nothing_but_a_wanted_close_on_github_asks(ev: Event, outcome: Any) -> None:
    decision = plan(ev, RULES, SELF)
    assert isinstance(decision, Fire) if outcome == "fire" else decision == outcome


def test_a_github_comment_never_asks() -> None:
    p = load_fixture("github/issue_comment.created.json")
    p["comment"].update(body="@pi go", author_association="MEMBER")
    assert isinstance(plan(event("github", "issue_comment", p), RULES, SELF), Fire)


def test_a_wanted_close_without_a_login_cannot_be_asked_and_fails_closed() -> None:
    p = json.loads(gh_issue("closed").body)
    del p["sender"]["login"]
    assert plan(event("github", "issues", p), RULES, SELF) == Drop("closer-not-allowed")


def test_a_verdict_does_not_change_a_delivery_that_is_not_gated() -> None:
    ev = gh_issue("labeled")
    assert isinstance(resume(ev, RULES, SELF, False), Fire)


# --- GitLab / Forgejo / Azure: any delivery that would fire ------------------------------------------
def gl(kind: str = "note", *, user_id: Any = 7, project_id: Any = 42, **attrs: Any) -> Event:
    name = {"note": "comment-issue-event", "issue": "issue-event", "push": "push-event"}[kind]
    p = load_fixture(f"gitlab/{name}.json")
    p["user"] = {"id": user_id, "username": "guest-user"}
    p["project"].update(id=project_id, path_with_namespace="group/proj")
    p.setdefault("object_attributes", {}).update(attrs)
    return event("gitlab", kind, p)


def test_a_gitlab_delivery_that_would_fire_asks_for_the_member_verdict() -> None:
    ev = gl(note="@pi go", action="create")
    assert plan(ev, RULES, SELF) == Ask(GitlabMember(project_id=42, user_id=7))
    assert isinstance(resume(ev, RULES, SELF, True), Fire)
    assert resume(ev, RULES, SELF, False) == Drop("author-not-allowed")


@pytest.mark.parametrize(
    ("ev", "reason"),
    [
        (gl("push"), "unhandled-event"),  # a guest's push: the filter's reason, no lookup
        (gl(note="@pi go", action="update"), "unhandled-event"),
        (gl(note="no phrase", action="create"), "no-trigger-phrase"),
        (gl("issue", action="update"), "no-label-change"),
        (gl(note="@pi go", action="create", user_id=999), "self"),
        (gl(note="@pi go", action="create", user_id="7"), "missing-sender-id"),
    ],
)
def test_a_gitlab_delivery_that_cannot_fire_is_decided_without_a_question(ev: Event, reason: str) -> None:
    assert plan(ev, RULES, SELF) == Drop(reason)


def test_gitlab_whole_float_ids_are_asked_and_enqueued_as_integers() -> None:
    p = json.loads(gl(note="@pi go", action="create", user_id=7.0, project_id=42.0).body)
    p["issue"]["iid"] = 3.0  # a note's number is its noteable's
    ev = event("gitlab", "note", p)
    asked = plan(ev, RULES, SELF)
    assert asked == Ask(GitlabMember(project_id=42, user_id=7))
    assert isinstance(asked, Ask) and isinstance(asked.question, GitlabMember)
    assert (type(asked.question.project_id), type(asked.question.user_id)) == (int, int)  # the URL says 42
    fired = resume(ev, RULES, SELF, True)
    assert isinstance(fired, Fire)
    job = msgspec.json.decode(encode_job(fired.job))
    assert (job["projectId"], job["target"]["number"], job["trigger"]["sender"]) == (42, 3, {"id": 7})
    assert semantic_key(fired.job) == "group/proj#3:fix"


def test_a_gitlab_project_without_an_integer_id_cannot_be_asked_and_is_refused() -> None:
    ev = gl(note="@pi go", action="create", project_id=None)
    assert plan(ev, RULES, SELF) == Drop("author-not-allowed")


def fj(action: str = "label_updated") -> Event:
    p = load_fixture("gitea/issue-label-event.json")
    p["action"] = action
    p["sender"].update(id=7, login="forgejo-login")
    return event("forgejo", "issues", p)


def test_a_forgejo_delivery_that_would_fire_asks_for_the_permission() -> None:
    assert plan(fj(), RULES, SELF) == Ask(ForgejoPermission(repo="example/example", login="forgejo-login"))
    assert isinstance(resume(fj(), RULES, SELF, True), Fire)
    assert resume(fj(), RULES, SELF, False) == Drop("author-not-allowed")
    assert plan(fj("label_cleared"), RULES, SELF) == Drop("action-not-actionable")


def az_updated(by: str = "Dev Person <Dev@Example.com>") -> Event:
    p = json.loads(WORKITEM_UPDATED)
    p["resource"]["workItemId"] = 7
    p["resource"]["fields"].update({"System.Tags": {"oldValue": "", "newValue": "pi:go"},
                                    "System.ChangedBy": {"newValue": by}})
    return event("azure", "workitem.updated", p)


def test_an_azure_delivery_asks_by_address_or_by_guid() -> None:
    assert plan(az_updated(), RULES, SELF) == Ask(AzureMembership(
        project_id="be9b3917-87e6-42a4-a549-2bc06a7a878f", actor_id=None, actor_email="dev@example.com"))
    fired = resume(az_updated(), RULES, SELF, True)
    assert isinstance(fired, Fire) and fired.job.repo == "FabrikamCloud/widgets"
    pr = event("azure", "git.pullrequest.created", load_fixture("azuredevops/git.pullrequest.created.json"))
    assert plan(pr, RULES, SELF) == Ask(AzureMembership(
        project_id="be9b3917-87e6-42a4-a549-2bc06a7a878f", actor_id="54d125f7-69f7-4191-904f-c5b96b6261c8"))
    assert plan(az_updated(by="pi <PI-BOT@example.com>"), RULES, SELF) == Drop("self")


def test_an_unknown_forge_is_unhandled() -> None:
    ev = Event(forge="bitbucket", event="push", delivery=DELIVERY, received_at=1, body="{}")
    assert plan(ev, RULES, SELF) == Drop("unhandled-event")
    assert resume(ev, RULES, SELF, True) == Drop("unhandled-event")


@pytest.mark.parametrize(("forge", "body"), [
    ("github", '{"issue": "x"}'), ("gitlab", "[]"), ("forgejo", '{"sender": 1}'),
    ("azure", '{"resourceContainers": 1}'),
])
def test_an_impossible_shape_raises_a_value_error(forge: str, body: str) -> None:
    with pytest.raises(MalformedPayload) as err:
        plan(event(forge, "issues", body), RULES, SELF)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(("forge", "event", "fixture", "subject"), [
    ("github", "issues", "github/issues.labeled.json", ("issues", "labeled", "Codertocat/Hello-World#1")),
    ("gitlab", "merge_request", "gitlab/merge-request-event.json",
     ("merge_request", "open", "gitlabhq/gitlab-test!1")),
    ("gitlab", "note", "gitlab/comment-merge-request-event.json", ("note", None, "gitlab-org/gitlab-test!1")),
    ("gitlab", "issue", "gitlab/issue-event.json", ("issue", "open", "gitlabhq/gitlab-test#23")),
    ("forgejo", "pull_request", "gitea/pull-request-event.json",
     ("pull_request", "opened", "example/example#2")),
    ("azure", "git.pullrequest.created", "azuredevops/git.pullrequest.created.json",
     ("git.pullrequest.created", "created", "Fabrikam/Fabrikam!1")),
])
def test_a_decision_says_what_the_delivery_is_about_in_the_forges_own_form(
    forge: str, event: str, fixture: str, subject: tuple[str, str | None, str]
) -> None:
    body = fixture_bytes(fixture).decode()
    delivery = Event(forge=forge, event=event, delivery="d-1", received_at=1, body=body)
    _, about = planned(delivery, RULES, SelfIds())
    assert (about.event, about.action, about.target) == subject


def test_a_work_item_is_its_projects_number_and_an_unknown_forge_only_its_event_word() -> None:
    item = Event(forge="azure", event="workitem.created", delivery="d-1", received_at=1,
                 body=WORKITEM_CREATED)
    assert planned(item, RULES, SelfIds())[1].target == "FabrikamCloud#5"
    odd = Event(forge="nowhere", event="<b>", delivery="d-1", received_at=1, body="{}")
    assert planned(odd, RULES, SelfIds()) == (Drop("unhandled-event"), Subject("?"))
