"""The Forgejo filter on go-playground's real Gitea payloads, mutated per case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from pidispatch.common.models import encode_job
from pidispatch.forges.forgejo.match import decide
from pidispatch.forges.forgejo.payload import project
from pidispatch.triggers.decision import Drop, Fire
from pidispatch.triggers.jobs import semantic_key
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
from tests.support.payloads import FIXTURES, load_fixture

SELF_ID = 999
DELIVERY = "6f0d2b3a-1e7c-4c55-8a0e-8d0b5f0e9a21"
LOGIN = "login-never-enqueued"


def label(index: int, *, any: tuple[str, ...] = (), **run: Any) -> LabelRule:
    return LabelRule(index=index, predicate=Predicate(any=any), run=RunSpec(**run))


def pr_rule(index: int, actions: tuple[str, ...], *, any: tuple[str, ...] = (),
            **run: Any) -> PullRequestRule:
    return PullRequestRule(index=index, actions=frozenset(actions), predicate=Predicate(any=any),
                           review_states=None, run=RunSpec(**run))


def close(index: int, **run: Any) -> CloseRule:
    return CloseRule(index=index, actions=frozenset({"closed"}), number=None, once=False, run=RunSpec(**run))


RULES = Rules(
    groups={
        "github": ForgeGroup(),
        "gitlab": ForgeGroup(),
        "azure": ForgeGroup(),
        "forgejo": ForgeGroup(
        label=(label(0, any=("pi:go",), flow="go"),),
        comment=CommentRule(index=1, phrase="@pi", run=RunSpec(flow="triage")),
        pull_request=(pr_rule(2, ("synchronized",), flow="sync"),
                      pr_rule(3, ("label_updated",), any=("pi:go",), flow="label-pr")),
        issue=(close(4, flow="ship"),),
        pr_close=(close(5, flow="retro"),),
    ),
    },
    cron=(),
    count=6,
    known_flows=frozenset({"go", "triage", "sync", "label-pr", "ship", "retro"}),
)


def gitea(name: str, *, action: str | None = None, labels: tuple[str, ...] | None = None,
          sender: Any = 7) -> dict[str, Any]:
    p = load_fixture(f"gitea/{name}.json")
    p["sender"].update(id=sender, login=LOGIN)
    if action is not None:
        p["action"] = action
    if labels is not None:
        item = p.get("pull_request") or p["issue"]
        item["labels"] = [{"id": i, "name": n} for i, n in enumerate(labels)]
    return p


def run(event: str, payload: dict[str, Any], rules: Rules = RULES, authorized: Any = True) -> Any:
    return decide(event, project(json.dumps(payload)), rules, SELF_ID, DELIVERY, authorized)


def test_label_updated_with_the_label_fires_with_the_raw_action_word() -> None:
    decision = run("issues", gitea("issue-label-event", labels=("pi:go",)))
    assert isinstance(decision, Fire)
    job = msgspec.json.decode(encode_job(decision.job))
    assert job["id"] == f"fj-{DELIVERY}" and job["kind"] == "forgejo" and job["repo"] == "example/example"
    assert job["trigger"]["action"] == "label_updated"
    assert job["trigger"]["matched"] == {"index": 0, "type": "label", "label": "pi:go"}
    assert LOGIN not in json.dumps(job)
    assert semantic_key(decision.job) == "example/example#1:go"


def test_whole_float_sender_and_pull_request_numbers_read_as_integers() -> None:
    p = gitea("pull-request-event", action="synchronized", sender=7.0)
    p["pull_request"]["number"] = float(p["pull_request"]["number"])
    decision = run("pull_request", p)
    assert isinstance(decision, Fire)
    job = msgspec.json.decode(encode_job(decision.job))
    assert job["trigger"]["sender"] == {"id": 7}
    assert job["target"]["number"] == p["pull_request"]["number"] and type(job["target"]["number"]) is int
    p["pull_request"]["number"] += 0.5
    assert run("pull_request", p) == Drop("missing-pull-request")


@pytest.mark.parametrize("action", ["label_cleared", "edited", "assigned", "milestoned", "reviewed"])
def test_recognised_but_ignored_action_words_are_action_not_actionable(action: str) -> None:
    assert run("issues", gitea("issue-label-event", action=action, labels=("pi:go",))) == Drop(
        "action-not-actionable")


@pytest.mark.parametrize("action", ["labeled", "synchronize", "banana", ""])
def test_unknown_action_words_are_unhandled_event(action: str) -> None:
    p = gitea("issue-label-event", action=action, labels=("pi:go",))
    assert run("issues", p) == Drop("unhandled-event")


def test_a_rule_keyed_on_synchronized_fires_on_a_pr_sync() -> None:
    decision = run("pull_request", gitea("pull-request-event", action="synchronized"))
    assert isinstance(decision, Fire) and decision.index == 2
    assert decision.job.trigger.matched.action == "synchronized"  # type: ignore[union-attr]
    head = load_fixture("gitea/pull-request-event.json")["pull_request"]["head"]
    assert decision.job.target.head == {  # type: ignore[union-attr]
        "ref": head["ref"], "sha": head["sha"], "repo": {"full_name": head["repo"]["full_name"]}}


def test_a_comment_with_is_pull_targets_the_pull_request() -> None:
    p = gitea("pull-request-comment-event")
    p["comment"]["body"] = "@pi please"
    decision = run("issue_comment", p)
    assert isinstance(decision, Fire)
    target = decision.job.target
    assert (target.type, target.number) == ("pull_request", 2)  # type: ignore[union-attr]
    assert decision.job.trigger.comment == {"body": "@pi please"}  # type: ignore[union-attr]
    issue_comment = gitea("issue-comment-event")
    issue_comment["comment"]["body"] = "@pi please"
    decision = run("issue_comment", issue_comment)
    assert isinstance(decision, Fire) and decision.job.target.type == "issue"  # type: ignore[union-attr]


def test_is_pull_must_be_the_literal_true() -> None:
    p = gitea("pull-request-comment-event")
    p["comment"]["body"] = "@pi please"
    p["is_pull"] = "true"
    decision = run("issue_comment", p)
    assert isinstance(decision, Fire) and decision.job.target.type == "issue"  # type: ignore[union-attr]


def test_a_comment_that_is_not_created_is_not_actionable() -> None:
    p = gitea("issue-comment-event", action="edited")
    p["comment"]["body"] = "@pi please"
    assert run("issue_comment", p) == Drop("action-not-actionable")


def test_the_pr_label_word_fires_only_with_the_rule_label() -> None:
    decision = run("pull_request", gitea("pull-request-label-event", labels=("pi:go",)))
    assert isinstance(decision, Fire) and decision.index == 3
    assert run("pull_request", gitea("pull-request-label-event")) == Drop("no-matching-pr-trigger")


def test_issues_use_the_current_label_set_and_refire_on_reopen() -> None:
    assert isinstance(run("issues", gitea("issues-event", action="reopened", labels=("pi:go",))), Fire)
    assert run("issues", gitea("issues-event")) == Drop("no-allowlisted-label")


@pytest.mark.parametrize("verdict", [None, False, "true", 1, {}])
def test_every_type_needs_the_literal_true_permission(verdict: Any) -> None:
    assert run("issues", gitea("issue-label-event", labels=("pi:go",)), authorized=verdict) == Drop(
        "author-not-allowed")


def test_identity_comes_before_the_gate() -> None:
    assert run("issues", gitea("issues-event", sender=SELF_ID), authorized=False) == Drop("self")
    assert run("issues", gitea("issues-event", sender="7"), authorized=True) == Drop("missing-sender-id")


def test_closes_fire_close_rules_and_merged_prs_count() -> None:
    closed_issue = run("issues", gitea("issues-event", action="closed"))
    assert isinstance(closed_issue, Fire) and closed_issue.index == 4
    assert msgspec.to_builtins(closed_issue.job.trigger.matched) == {  # type: ignore[union-attr]
        "index": 4, "type": "issue", "action": "closed", "number": 1}
    merged = gitea("pull-request-event", action="closed")
    merged["pull_request"]["merged"] = True
    closed_pr = run("pull_request", merged)
    assert isinstance(closed_pr, Fire) and closed_pr.index == 5
    assert semantic_key(closed_pr.job) == "example/example#2:closed:retro"


@pytest.mark.parametrize(
    ("event", "fixture", "expected"),
    [
        ("issue_label", "issue-label-event", "fire"),  # the hook type some versions send
        ("pull_request_label", "pull-request-label-event", "fire"),
        ("pull_request_sync", "pull-request-event", "fire"),
        ("pull_request_comment", "pull-request-comment-event", "fire"),  # a comment on a PR
        ("pull_request_comment", "pull-request-review-event", "action-not-actionable"),  # a review comment
        ("pull_request_approved", "pull-request-review-event", "action-not-actionable"),
        ("pull_request_review_rejected", "pull-request-review-event", "action-not-actionable"),
        ("issue_assign", "issue-assign-event", "action-not-actionable"),
        ("pull_request_milestone", "pull-request-milestone-event", "action-not-actionable"),
        ("push", "push-event", "unhandled-event"),
        ("release", "release-event", "unhandled-event"),
        ("repository", "repository-event", "unhandled-event"),
        ("create", "create-event", "unhandled-event"),
    ],
)
def test_event_name_variants_map_onto_their_routes(event: str, fixture: str, expected: str) -> None:
    p = gitea(fixture, labels=("pi:go",) if "label" in fixture else None)
    if fixture == "pull-request-event":
        p["action"] = "synchronized"
    if "comment" in p:
        p["comment"]["body"] = "@pi please"
    decision = run(event, p)
    assert isinstance(decision, Fire) if expected == "fire" else decision == Drop(expected)


@pytest.mark.parametrize("path", sorted((FIXTURES / "gitea").glob("*.json")), ids=lambda p: p.stem)
def test_every_gitea_fixture_projects_and_decides(path: Path) -> None:
    assert isinstance(run("issues", json.loads(path.read_text())), Drop | Fire)
