"""The GitLab filter on go-playground's real GitLab payloads, mutated per case."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from pidispatch.common.models import encode_job
from pidispatch.forges.gitlab.match import added_labels, decide
from pidispatch.forges.gitlab.payload import project
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
from tests.support.payloads import load_fixture

SELF_ID = 999
DELIVERY = "0b1f9c2e-5d8b-4a57-9d0e-6a1f3f7d2c11"
USERNAME = "username-never-enqueued"
PATH = "group/sub/proj"


def label(index: int, *, any: tuple[str, ...] = (), **run: Any) -> LabelRule:
    return LabelRule(index=index, predicate=Predicate(any=any), run=RunSpec(**run))


def mr_rule(index: int, actions: tuple[str, ...], *, any: tuple[str, ...] = (), none: tuple[str, ...] = (),
            **run: Any) -> PullRequestRule:
    return PullRequestRule(index=index, actions=frozenset(actions), predicate=Predicate(any=any, none=none),
                           review_states=None, run=RunSpec(**run))


def close(index: int, *, number: int | None = None, once: bool = False, **run: Any) -> CloseRule:
    return CloseRule(index=index, actions=frozenset({"close"}), number=number, once=once, run=RunSpec(**run))


def rules_of(gitlab: ForgeGroup, flows: tuple[str, ...] = ()) -> Rules:
    members = [*gitlab.label, *gitlab.pull_request, *gitlab.pr_close, *gitlab.issue]
    runs = [r.run for r in members] + ([gitlab.comment.run] if gitlab.comment else [])
    indices = [r.index for r in members] + ([gitlab.comment.index] if gitlab.comment else [])
    return Rules(
        groups={
            "github": ForgeGroup(),
            "gitlab": gitlab,
            "forgejo": ForgeGroup(),
            "azure": ForgeGroup(),
        },
        cron=(),
        known_flows=frozenset(r.flow for r in runs if r.flow) | frozenset(flows),
        count=max(indices, default=-1) + 1,
    )


RULES = rules_of(ForgeGroup(
    label=(label(0, any=("pi:frontend",), flow="frontend-fix"),),
    comment=CommentRule(index=1, phrase="@pi", run=RunSpec(flow="triage")),
    pull_request=(mr_rule(2, ("open", "approved"), flow="review"),
                  mr_rule(3, ("update",), any=("pi:review",), flow="rereview")),
))


def _identity(p: dict[str, Any], user_id: Any = 7) -> dict[str, Any]:
    p["user"] = {**(p.get("user") or {}), "username": USERNAME}
    if user_id is None:
        p["user"].pop("id", None)
    else:
        p["user"]["id"] = user_id
    p["project"].update(id=42, path_with_namespace=PATH)
    return p


def titles(*names: str) -> list[dict[str, Any]]:
    return [{"id": i, "title": n, "type": "ProjectLabel"} for i, n in enumerate(names)]


def issue(action: str = "update", *, labels: tuple[str, ...] = (), changes: dict[str, Any] | None = None,
          iid: Any = 5, user_id: Any = 7) -> dict[str, Any]:
    p = _identity(load_fixture("gitlab/issue-event.json"), user_id)
    p["object_attributes"].update(action=action, iid=iid, labels=titles(*labels))
    if changes is not None:
        p["changes"] = changes
    return p


def label_change(previous: tuple[str, ...], current: tuple[str, ...]) -> dict[str, Any]:
    return {"labels": {"previous": titles(*previous), "current": titles(*current)}}


def merge_request(action: str = "open", *, changes: dict[str, Any] | None = None, iid: int = 5
                  ) -> dict[str, Any]:
    p = _identity(load_fixture("gitlab/merge-request-event.json"))
    p["object_attributes"].update(action=action, iid=iid)
    p["changes"] = changes or {}
    return p


def note(body: str = "@pi go", *, on: str = "issue", action: str = "create") -> dict[str, Any]:
    p = _identity(load_fixture(f"gitlab/comment-{'merge-request' if on == 'mr' else 'issue'}-event.json"))
    p["object_attributes"].update(note=body, action=action)
    return p


def run(payload: dict[str, Any], rules: Rules = RULES, authorized: Any = True) -> Any:
    return decide(project(json.dumps(payload)), rules, SELF_ID, DELIVERY, authorized)


# --- identity and the access gate ---------------------------------------------------------------------
@pytest.mark.parametrize("user_id", [None, "7", True, {}])
def test_a_user_id_that_is_not_an_integer_is_missing_sender_id(user_id: Any) -> None:
    assert run(issue("open", labels=("pi:frontend",), user_id=user_id)) == Drop("missing-sender-id")


def test_the_harness_own_event_is_self_before_the_gate() -> None:
    assert run(note(), authorized=False) != Drop("self")
    own = note()
    own["user"]["id"] = SELF_ID
    assert run(own, authorized=True) == Drop("self")
    assert run(own, authorized=False) == Drop("self")


@pytest.mark.parametrize("verdict", [None, False, "true", 1, 30, {}])
def test_only_a_literal_true_verdict_passes_for_issue_mr_and_note(verdict: Any) -> None:
    for payload in (issue("open", labels=("pi:frontend",)), merge_request("open"), note()):
        assert run(payload, authorized=verdict) == Drop("author-not-allowed")
        assert isinstance(run(payload, authorized=True), Fire)


# --- labels are the diff: only an added label fires ------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "outcome"),
    [
        (label_change((), ("pi:frontend",)), "fire"),
        ({"title": {"previous": "a", "current": "b"}}, "no-label-change"),
        (label_change(("pi:frontend",), ()), "no-label-change"),
        (label_change(("keep",), ("keep", "pi:frontend")), "fire"),
        (label_change(("pi:frontend",), ("pi:frontend", "other")), "no-allowlisted-label"),
    ],
)
def test_an_issue_update_fires_only_on_an_added_label(changes: dict[str, Any], outcome: str) -> None:
    decision = run(issue("update", labels=("pi:frontend",), changes=changes))
    if outcome == "fire":
        assert isinstance(decision, Fire)
        assert decision.job.trigger.matched.label == "pi:frontend"  # type: ignore[union-attr]
    else:
        assert decision == Drop(outcome)


def test_an_issue_opened_with_the_label_and_empty_changes_fires() -> None:
    assert isinstance(run(issue("open", labels=("pi:frontend",), changes={})), Fire)
    assert run(issue("open", changes={})) == Drop("no-label-change")


def test_reopen_without_a_label_change_fires_nothing() -> None:
    assert run(issue("reopen", labels=("pi:frontend",))) == Drop("no-label-change")


def test_added_labels_reads_the_diff_not_the_set() -> None:
    subset = project(json.dumps(issue("update", labels=("a", "b"), changes=label_change(("a",), ("a", "b")))))
    assert added_labels(subset) == frozenset({"b"})


# --- merge requests and notes ----------------------------------------------------------------------
@pytest.mark.parametrize("action", ["open", "approved"])
def test_an_unpredicated_mr_rule_fires_on_its_actions(action: str) -> None:
    decision = run(merge_request(action))
    assert isinstance(decision, Fire) and decision.index == 2
    assert msgspec.to_builtins(decision.job.trigger.matched) == {  # type: ignore[union-attr]
        "index": 2, "type": "pull_request", "action": action}


def test_a_predicated_mr_update_rule_fires_only_on_an_added_label() -> None:
    decision = run(merge_request("update", changes=label_change((), ("pi:review",))))
    assert isinstance(decision, Fire) and decision.index == 3
    assert decision.job.trigger.matched.type == "label"  # type: ignore[union-attr]
    assert run(merge_request("update", changes={})) == Drop("no-matching-pr-trigger")
    removal = merge_request("update", changes=label_change(("pi:review",), ()))
    assert run(removal) == Drop("no-matching-pr-trigger")


def test_a_none_only_mr_predicate_is_not_evaluated() -> None:
    rules = rules_of(ForgeGroup(pull_request=(mr_rule(0, ("open",), none=("API",), flow="review"),)))
    assert isinstance(run(merge_request("open"), rules), Fire)  # the fixture MR carries API


@pytest.mark.parametrize("action", ["merge", "unapproved", "reopen_later", None])
def test_merge_and_other_mr_actions_are_unhandled(action: Any) -> None:
    assert run(merge_request(action)) == Drop("unhandled-event")


def test_a_note_update_and_a_push_are_unhandled() -> None:
    assert run(note(action="update")) == Drop("unhandled-event")
    push = _identity(load_fixture("gitlab/push-event.json"))
    assert run(push) == Drop("unhandled-event")


def test_a_note_on_a_merge_request_targets_it_by_iid() -> None:
    p = note("@pi go", on="mr")
    decision = run(p)
    assert isinstance(decision, Fire)
    target = decision.job.target
    assert (target.type, target.number) == ("pull_request", p["merge_request"]["iid"])  # type: ignore[union-attr]
    assert decision.job.trigger.comment == {"body": "@pi go"}  # type: ignore[union-attr]


def test_a_note_on_an_issue_targets_the_issue_and_overrides_to_a_known_flow() -> None:
    p = note("@pi frontend-fix")
    decision = run(p)
    assert isinstance(decision, Fire)
    target = decision.job.target
    assert (target.type, target.number) == ("issue", p["issue"]["iid"])  # type: ignore[union-attr]
    assert decision.job.flow == "frontend-fix"
    assert run(note("nothing")) == Drop("no-trigger-phrase")


# --- the job shape ---------------------------------------------------------------------------------
def test_a_gitlab_job_carries_project_id_target_and_trigger_and_no_username() -> None:
    p = issue("update", labels=("pi:frontend",), changes=label_change((), ("pi:frontend",)))
    decision = run(p)
    assert isinstance(decision, Fire)
    job = msgspec.json.decode(encode_job(decision.job))
    assert job["id"] == f"gl-{DELIVERY}" and job["kind"] == "gitlab"
    assert (job["repo"], job["projectId"]) == (PATH, 42)
    assert job["target"] == {"type": "issue", "number": 5, "title": p["object_attributes"]["title"],
                             "body": p["object_attributes"]["description"]}
    assert job["trigger"] == {
        "event": "issue", "action": "update", "deliveryId": DELIVERY, "sender": {"id": 7},
        "matched": {"index": 0, "type": "label", "label": "pi:frontend"},
    }
    assert USERNAME not in json.dumps(job)
    assert semantic_key(decision.job) == f"{PATH}#5:frontend-fix"
    rules = rules_of(ForgeGroup(pull_request=(mr_rule(0, ("open",), flow="frontend-fix"),)))
    mr = run(merge_request("open", iid=5), rules)
    assert isinstance(mr, Fire) and semantic_key(mr.job) == f"{PATH}!5:frontend-fix"
    assert mr.job.target.head is None and mr.job.target.base is None  # type: ignore[union-attr]


def test_a_project_without_a_path_cannot_fire() -> None:
    p = issue("open", labels=("pi:frontend",))
    del p["project"]["path_with_namespace"]
    assert run(p) == Drop("no-repository")


# --- close routes ------------------------------------------------------------------------------------
CLOSES = rules_of(ForgeGroup(
    label=(label(0, any=("pi:frontend",), flow="frontend-fix"),),
    issue=(close(1, number=5, once=True, flow="deploy"),),
    pr_close=(close(2, flow="retro"),),
))


def test_an_issue_close_fires_its_close_rule_and_not_the_label_rule() -> None:
    decision = run(issue("close", iid=5, changes=label_change((), ("pi:frontend",))), CLOSES)
    assert isinstance(decision, Fire) and decision.index == 1
    assert msgspec.to_builtins(decision.job.trigger.matched) == {  # type: ignore[union-attr]
        "index": 1, "type": "issue", "action": "close", "number": 5, "once": True}
    assert semantic_key(decision.job) == f"{PATH}#5:closed:deploy"


def test_a_close_nobody_wants_falls_back_to_the_label_route_only_if_labels_moved() -> None:
    fallback = run(issue("close", iid=6, changes=label_change((), ("pi:frontend",))), CLOSES)
    assert isinstance(fallback, Fire) and fallback.index == 0
    assert run(issue("close", iid=6), CLOSES) == Drop("close-number-not-matched")
    no_close_rules = rules_of(ForgeGroup(label=CLOSES.group("gitlab").label))
    assert run(issue("close", iid=6), no_close_rules) == Drop("no-matching-close-trigger")


def test_an_mr_close_fires_a_pr_close_rule_but_a_merge_never_does() -> None:
    decision = run(merge_request("close"), CLOSES)
    assert isinstance(decision, Fire) and decision.index == 2
    assert msgspec.to_builtins(decision.job.trigger.matched) == {  # type: ignore[union-attr]
        "index": 2, "type": "pull_request", "action": "close"}
    assert semantic_key(decision.job) == f"{PATH}!5:closed:retro"
    assert run(merge_request("merge"), CLOSES) == Drop("unhandled-event")


def test_a_close_of_an_item_without_an_integer_iid_is_refused() -> None:
    assert run(issue("close", iid="5"), CLOSES) == Drop("missing-issue-number")
    mr = merge_request("close")
    mr["object_attributes"]["iid"] = None
    assert run(mr, CLOSES) == Drop("missing-pull-request")
