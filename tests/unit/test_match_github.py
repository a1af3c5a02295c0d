from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from pidispatch.common.models import encode_job
from pidispatch.router.match.github import Drop, Fire, decide
from pidispatch.router.match.predicate import Predicate, matched_label, matches
from pidispatch.router.subsets.github import project
from pidispatch.router.triggers import Rules, parse_triggers
from tests.helpers import load_fixture

SELF_ID = 999
DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
LOGIN = "sender-login-never-enqueued"

FILLER = {"on": {"type": "cron", "id": "c", "pattern": "* * * * *"}, "run": {"kind": "local"}}
COMMENT = {"on": {"type": "comment", "phrase": "@pi"}, "run": {"kind": "github", "flow": "triage"}}
FIX = {"on": {"type": "label", "any": ["ai-fix", "urgent-fix"], "all": ["triaged"],
              "none": ["blocked", "wontfix"]},
       "run": {"kind": "github", "flow": "fix"}}
REVIEW = {"on": {"type": "label", "any": ["ai-review"]}, "run": {"kind": "github", "flow": "review"}}
# Spec §7 case 20: the fix rule at index 2, the review rule at index 5.
MATRIX_RULES = parse_triggers(json.dumps({"triggers": [FILLER, COMMENT, FIX, FILLER, FILLER, REVIEW]}))


def rules_of(*entries: dict[str, Any]) -> Rules:
    return parse_triggers(json.dumps({"triggers": list(entries)}))


def payload(
    labels: list[str] | None = None, *, action: str = "labeled", sender: Any = 1, number: Any = 42
) -> str:
    p = load_fixture("github/issues.labeled.json")
    p["action"] = action
    p["sender"]["id"] = sender
    p["sender"]["login"] = LOGIN
    p["issue"]["number"] = number
    if labels is not None:
        p["issue"]["labels"] = [{"name": n} for n in labels]
    return json.dumps(p)


def run(body: str, rules: Rules = MATRIX_RULES, event: str = "issues", self_id: int | None = SELF_ID) -> Any:
    return decide(event, project(body), rules, self_id, DELIVERY)


@pytest.mark.parametrize(
    ("labels", "index", "label"),
    [
        (["ai-fix", "triaged"], 2, "ai-fix"),
        (["ai-fix"], None, None),
        (["ai-fix", "triaged", "blocked"], None, None),
        (["ai-fix", "triaged", "ai-review"], 2, "ai-fix"),  # file order: fix before review
        (["urgent-fix", "triaged"], 2, "urgent-fix"),
        (["ai-review"], 5, "ai-review"),
    ],
)
def test_predicate_matrix_of_spec_case_20(labels: list[str], index: int | None, label: str | None) -> None:
    decision = run(payload(labels))
    if index is None:
        assert decision == Drop("no-allowlisted-label")
        return
    assert isinstance(decision, Fire)
    assert decision.index == index
    matched = decision.job.trigger.matched  # type: ignore[union-attr]
    assert (matched.index, matched.type, matched.label) == (index, "label", label)


def test_an_all_only_rule_reports_its_first_all_label() -> None:
    rules = rules_of({"on": {"type": "label", "all": ["triaged", "approved"]},
                      "run": {"kind": "github", "flow": "go"}})
    decision = run(payload(["approved", "triaged"]), rules)
    assert isinstance(decision, Fire)
    assert decision.job.trigger.matched.label == "triaged"  # type: ignore[union-attr]


def test_predicate_building_blocks() -> None:
    p = Predicate(any=("a", "b"), all=("c",), none=("d",))
    assert matches(p, {"b", "c"}) and not matches(p, {"c"}) and not matches(p, {"a", "c", "d"})
    assert matches(Predicate(), set())  # vacuously true; the loader demands a positive selector
    assert matched_label(p, ["c", "b", "a"]) == "a"  # the rule's order, not the issue's
    assert matched_label(Predicate(none=("x",)), []) is None


@pytest.mark.parametrize("sender", [None, {}, "7", "999", True, 7.5])
def test_a_sender_id_that_is_not_an_integer_is_missing_sender_id(sender: Any) -> None:
    p = json.loads(payload(["ai-review"]))
    if sender is None:
        del p["sender"]["id"]
    else:
        p["sender"]["id"] = sender
    assert run(json.dumps(p)) == Drop("missing-sender-id")


def test_a_missing_sender_object_is_missing_sender_id() -> None:
    p = json.loads(payload(["ai-review"]))
    del p["sender"]
    assert run(json.dumps(p)) == Drop("missing-sender-id")


def test_the_harness_own_event_is_self_before_any_label_logic() -> None:
    assert run(payload(["ai-review"], sender=SELF_ID)) == Drop("self")
    assert run(payload(["nothing"], sender=SELF_ID)) == Drop("self")
    # Without an identity there is no self to match.
    assert isinstance(run(payload(["ai-review"], sender=SELF_ID), self_id=None), Fire)


@pytest.mark.parametrize(
    ("event", "fixture"),
    [
        ("ping", "ping.json"),
        ("issues", "issues.unlabeled.json"),
        ("issue_comment", "issue_comment.created.json"),
        ("push", "issues.labeled.json"),
    ],
)
def test_events_without_a_route_yet_are_unhandled(event: str, fixture: str) -> None:
    body = json.dumps(load_fixture(f"github/{fixture}"))
    assert run(body, event=event, self_id=None) == Drop("unhandled-event")


@pytest.mark.parametrize("action", ["opened", "labeled", "reopened"])
def test_opened_labeled_and_reopened_take_the_issue_label_route(action: str) -> None:
    assert isinstance(run(payload(["ai-review"], action=action)), Fire)


def test_no_label_rule_matching_is_no_allowlisted_label() -> None:
    assert run(payload(["bug"])) == Drop("no-allowlisted-label")
    assert run(payload(["ai-review"]), rules_of(COMMENT)) == Drop("no-allowlisted-label")


def test_an_issue_without_an_integer_number_cannot_fire() -> None:
    assert run(payload(["ai-review"], number="42")) == Drop("missing-issue-number")


def test_the_fired_job_has_the_spec_shape() -> None:
    """Spec §7 case 1: issue #42 labelled pi:frontend by sender 1."""
    rules = rules_of(FILLER, {"on": {"type": "label", "any": ["pi:frontend"]},
                              "run": {"kind": "github", "flow": "frontend-fix", "image": "agent:2",
                                      "secrets": {"API_KEY": "op://v/k"}}})
    decision = run(payload(["pi:frontend"]), rules)
    assert isinstance(decision, Fire)
    job = msgspec.json.decode(encode_job(decision.job))
    fixture = load_fixture("github/issues.labeled.json")
    assert job == {
        "id": f"gh-{DELIVERY}",
        "kind": "github",
        "repo": "Codertocat/Hello-World",
        "target": {"type": "issue", "number": 42, "title": fixture["issue"]["title"],
                   "body": fixture["issue"]["body"]},
        "flow": "frontend-fix",
        "trigger": {
            "event": "issues", "action": "labeled", "deliveryId": DELIVERY, "sender": {"id": 1},
            "matched": {"index": 1, "type": "label", "label": "pi:frontend"},
        },
        "image": "agent:2",
        "secrets": {"API_KEY": "op://v/k"},
    }
    # No login anywhere in the job.
    assert LOGIN not in json.dumps(job)


def test_a_command_rule_carries_the_command_not_a_flow() -> None:
    rules = rules_of({"on": {"type": "label", "any": ["ai-review"]},
                      "run": {"kind": "github", "command": "check"}})
    decision = run(payload(["ai-review"]), rules)
    assert isinstance(decision, Fire)
    assert (decision.job.command, decision.job.flow) == ("check", None)
