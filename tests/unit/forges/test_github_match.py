"""The GitHub filter on real octokit payloads, mutated where a case needs it."""

from __future__ import annotations

import copy
import gzip
import json
from functools import cache
from typing import Any

import msgspec
import pytest

from pidispatch.common.models import encode_job
from pidispatch.forges.github.match import Drop, Fire, decide, wants_closer_authority
from pidispatch.forges.github.payload import project
from pidispatch.triggers.jobs import semantic_key
from pidispatch.triggers.loader import parse_triggers
from pidispatch.triggers.match.predicate import Predicate
from pidispatch.triggers.rules import (
    CloseRule,
    CommentRule,
    CronRule,
    ForgeGroup,
    LabelRule,
    PullRequestRule,
    Rules,
    RunSpec,
)
from tests.support.payloads import FIXTURES, load_fixture

SELF_ID = 999
DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
LOGIN = "sender-login-never-enqueued"


# --- builders: Rules values straight from rules.py (the loader is another engineer's) ---------------
def label(index: int, *, any: tuple[str, ...] = (), all: tuple[str, ...] = (), none: tuple[str, ...] = (),
          **run: Any) -> LabelRule:
    return LabelRule(index=index, predicate=Predicate(any=any, all=all, none=none), run=RunSpec(**run))


def pr(index: int, actions: tuple[str, ...], *, any: tuple[str, ...] = (),
       states: tuple[str, ...] | None = None, **run: Any) -> PullRequestRule:
    return PullRequestRule(index=index, actions=frozenset(actions), predicate=Predicate(any=any),
                           review_states=frozenset(states) if states else None, run=RunSpec(**run))


def close(index: int, actions: tuple[str, ...], *, number: int | None = None, once: bool = False,
          **run: Any) -> CloseRule:
    return CloseRule(index=index, actions=frozenset(actions), number=number, once=once, run=RunSpec(**run))


def rules_of(github: ForgeGroup, *, gitlab: ForgeGroup | None = None, flows: tuple[str, ...] = (),
             cron: int | None = None) -> Rules:
    groups = [github, gitlab or ForgeGroup()]
    runs = [r.run for g in groups for r in (*g.label, *g.pull_request, *g.pr_close, *g.issue)]
    runs += [g.comment.run for g in groups if g.comment]
    indices = [r.index for g in groups for r in (*g.label, *g.pull_request, *g.pr_close, *g.issue)]
    indices += [g.comment.index for g in groups if g.comment]
    crons = (CronRule(index=cron, id="c", pattern="* * * * *", run={}),) if cron is not None else ()
    return Rules(
        groups={
            "github": github,
            "gitlab": groups[1],
            "forgejo": ForgeGroup(),
            "azure": ForgeGroup(),
        },
        cron=crons,
        known_flows=frozenset(r.flow for r in runs if r.flow) | frozenset(flows),
        count=max([*indices, cron or 0]) + 1,
    )


@cache
def _examples() -> dict[str, list[dict[str, Any]]]:
    with gzip.open(FIXTURES / "github" / "webhooks-examples.json.gz") as f:
        return {e["name"]: e["examples"] for e in json.load(f)}


def octokit(event: str, action: str, nth: int = 0) -> dict[str, Any]:
    """The nth real example of ``event`` with ``action``, as a fresh copy to mutate."""
    return copy.deepcopy([e for e in _examples()[event] if e.get("action") == action][nth])


def decide_on(event: str, payload: dict[str, Any], rules: Rules, *, self_id: int | None = SELF_ID,
              closer: Any = None) -> Any:
    return decide(event, project(json.dumps(payload)), rules, self_id, DELIVERY, closer)


# --- the label predicate (any, all, none; file order) and the issue-label route ---------------------
COMMENT = CommentRule(index=1, phrase="@pi", run=RunSpec(flow="triage"))
MATRIX = rules_of(ForgeGroup(
    label=(label(2, any=("ai-fix", "urgent-fix"), all=("triaged",), none=("blocked", "wontfix"), flow="fix"),
           label(5, any=("ai-review",), flow="review")),
    comment=COMMENT,
), cron=0)


def labeled(labels: list[str] | None = None, *, action: str = "labeled", sender: Any = 1,
            number: Any = 42) -> dict[str, Any]:
    p = load_fixture("github/issues.labeled.json")
    p["action"] = action
    p["sender"]["id"] = sender
    p["sender"]["login"] = LOGIN
    p["issue"]["number"] = number
    if labels is not None:
        p["issue"]["labels"] = [{"name": n} for n in labels]
    return p


@pytest.mark.parametrize(
    ("labels", "index", "matched"),
    [
        (["ai-fix", "triaged"], 2, "ai-fix"),
        (["ai-fix"], None, None),
        (["ai-fix", "triaged", "blocked"], None, None),
        (["ai-fix", "triaged", "ai-review"], 2, "ai-fix"),  # file order: fix before review
        (["urgent-fix", "triaged"], 2, "urgent-fix"),
        (["ai-review"], 5, "ai-review"),
    ],
)
def test_a_label_rule_fires_on_any_plus_all_unless_none_and_the_first_rule_in_file_order_wins(
    labels: list[str], index: int | None, matched: str | None
) -> None:
    decision = decide_on("issues", labeled(labels), MATRIX)
    if index is None:
        assert decision == Drop("no-allowlisted-label")
        return
    assert isinstance(decision, Fire) and decision.index == index
    m = decision.job.trigger.matched  # type: ignore[union-attr]
    assert (m.index, m.type, m.label) == (index, "label", matched)


def test_an_all_only_label_rule_reports_its_first_all_label() -> None:
    rules = rules_of(ForgeGroup(label=(label(0, all=("triaged", "approved"), flow="go"),)))
    decision = decide_on("issues", labeled(["approved", "triaged"]), rules)
    assert isinstance(decision, Fire)
    assert decision.job.trigger.matched.label == "triaged"  # type: ignore[union-attr]


@pytest.mark.parametrize("action", ["opened", "labeled", "reopened"])
def test_opened_labeled_and_reopened_take_the_issue_label_route(action: str) -> None:
    assert isinstance(decide_on("issues", labeled(["ai-review"], action=action), MATRIX), Fire)


def test_a_labelled_issue_fires_a_job_with_target_flow_trigger_image_and_secrets_and_no_login() -> None:
    """Issue #42 labelled pi:frontend by sender 1 → job gh-<delivery>, target issue #42, no login."""
    rules = rules_of(ForgeGroup(label=(label(1, any=("pi:frontend",), flow="frontend-fix", image="agent:2",
                                             secrets={"API_KEY": "op://v/k"}),)), cron=0)
    decision = decide_on("issues", labeled(["pi:frontend"]), rules)
    assert isinstance(decision, Fire)
    job = msgspec.json.decode(encode_job(decision.job))
    fixture = load_fixture("github/issues.labeled.json")
    assert job == {
        "id": f"gh-{DELIVERY}", "kind": "github", "repo": "Codertocat/Hello-World",
        "target": {"type": "issue", "number": 42, "title": fixture["issue"]["title"],
                   "body": fixture["issue"]["body"]},
        "flow": "frontend-fix",
        "trigger": {"event": "issues", "action": "labeled", "deliveryId": DELIVERY, "sender": {"id": 1},
                    "matched": {"index": 1, "type": "label", "label": "pi:frontend"}},
        "image": "agent:2", "secrets": {"API_KEY": "op://v/k"},
    }
    assert LOGIN not in json.dumps(job)


def test_a_command_rule_carries_the_command_and_no_flow() -> None:
    rules = rules_of(ForgeGroup(label=(label(0, any=("ai-review",), command="check"),)))
    decision = decide_on("issues", labeled(["ai-review"]), rules)
    assert isinstance(decision, Fire)
    assert "flow" not in msgspec.json.decode(encode_job(decision.job))
    assert semantic_key(decision.job) == "Codertocat/Hello-World#42:cmd:check"


def test_an_issue_without_an_integer_number_cannot_fire() -> None:
    assert decide_on("issues", labeled(["ai-review"], number="42"), MATRIX) == Drop("missing-issue-number")


def test_rules_of_another_forge_are_unreachable() -> None:
    rules = rules_of(ForgeGroup(), gitlab=ForgeGroup(label=(label(0, any=("bug",), flow="fix"),)))
    assert decide_on("issues", labeled(["bug"]), rules) == Drop("no-allowlisted-label")


# --- identity first, then the harness itself ---------------------------------------------------------
@pytest.mark.parametrize("sender", [None, {}, "7", "999", True, 7.5])
def test_a_sender_id_that_is_not_an_integer_is_missing_sender_id(sender: Any) -> None:
    p = labeled(["ai-review"])
    if sender is None:
        del p["sender"]["id"]
    else:
        p["sender"]["id"] = sender
    assert decide_on("issues", p, MATRIX) == Drop("missing-sender-id")


def test_whole_float_ids_read_as_the_integers_javascript_saw() -> None:
    """JSON has one number type: 1.0 and 42.0 are sender 1 and issue #42, and the job says 1 and 42."""
    decision = decide_on("issues", labeled(["ai-review"], sender=1.0, number=42.0), MATRIX)
    assert isinstance(decision, Fire)
    job = msgspec.json.decode(encode_job(decision.job))
    assert (job["trigger"]["sender"], job["target"]["number"]) == ({"id": 1}, 42)
    assert type(job["target"]["number"]) is int
    assert semantic_key(decision.job) == "Codertocat/Hello-World#42:review"
    assert decide_on("issues", labeled(["ai-review"], sender=float(SELF_ID)), MATRIX) == Drop("self")
    assert decide_on("issues", labeled(["ai-review"], number=42.5), MATRIX) == Drop("missing-issue-number")


def test_a_missing_sender_object_is_missing_sender_id() -> None:
    p = labeled(["ai-review"])
    del p["sender"]
    assert decide_on("issues", p, MATRIX) == Drop("missing-sender-id")


def comment_payload(body: str, *, association: str = "COLLABORATOR", sender: int = 1,
                    on_pr: bool = False, number: int = 1) -> dict[str, Any]:
    p = octokit("issue_comment", "created")
    p["comment"]["body"] = body
    p["comment"]["author_association"] = association
    p["sender"]["id"] = sender
    p["sender"]["login"] = LOGIN
    p["issue"]["number"] = number
    if on_pr:
        p["issue"]["pull_request"] = {"url": "https://api.github.com/repos/o/r/pulls/55"}
    return p


def test_the_harness_own_comment_or_label_is_self_even_as_owner() -> None:
    own = comment_payload("@pi go", association="OWNER", sender=SELF_ID)
    assert decide_on("issue_comment", own, MATRIX) == Drop("self")
    assert decide_on("issues", labeled(["nothing"], sender=SELF_ID), MATRIX) == Drop("self")


def test_without_a_self_identity_nothing_reads_as_self() -> None:
    assert isinstance(decide_on("issues", labeled(["ai-review"], sender=SELF_ID), MATRIX, self_id=None), Fire)


# --- comments ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("association", ["NONE", "CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", "owner", ""])
def test_a_comment_by_a_non_collaborator_is_author_not_allowed(association: str) -> None:
    assert decide_on("issue_comment", comment_payload("@pi go", association=association), MATRIX) == Drop(
        "author-not-allowed")


FLOWS = rules_of(ForgeGroup(comment=CommentRule(index=4, phrase="@pi", run=RunSpec())),
                 flows=("frontend-fix", "triage"))


@pytest.mark.parametrize(
    ("body", "default", "outcome"),
    [
        ("@pi frontend-fix please", None, "frontend-fix"),
        ("@pi please help", None, "no-flow"),
        ("@pi nonesuch", "triage", "triage"),
        ("please @pi\tfrontend-fix", "triage", "frontend-fix"),
        ("nothing to see", "triage", "no-trigger-phrase"),
        ("@PI frontend-fix", "triage", "no-trigger-phrase"),  # case-sensitive
    ],
)
def test_a_known_flow_after_the_case_sensitive_phrase_overrides_the_comment_rule_flow(
    body: str, default: str | None, outcome: str
) -> None:
    rule = CommentRule(index=4, phrase="@pi", run=RunSpec(flow=default))
    rules = msgspec.structs.replace(FLOWS, groups={**FLOWS.groups, "github": ForgeGroup(comment=rule)})
    decision = decide_on("issue_comment", comment_payload(body), rules)
    if outcome in ("no-flow", "no-trigger-phrase"):
        assert decision == Drop(outcome)
        return
    assert isinstance(decision, Fire)
    assert decision.job.flow == outcome
    assert msgspec.to_builtins(decision.job.trigger.matched) == {  # type: ignore[union-attr]
        "index": 4, "type": "comment", "phrase": "@pi"}


def test_a_command_comment_rule_fires_on_the_phrase_alone_and_trailing_words_are_data() -> None:
    rule = CommentRule(index=0, phrase="@pi", run=RunSpec(command="standup"))
    rules = rules_of(ForgeGroup(comment=rule), flows=("frontend-fix",))
    for body in ("@pi frontend-fix", "@pi nonesuch", "@pi"):
        decision = decide_on("issue_comment", comment_payload(body), rules)
        assert isinstance(decision, Fire)
        assert (decision.job.command, decision.job.flow) == ("standup", None)


def test_no_comment_rule_is_no_trigger_phrase() -> None:
    rules = rules_of(ForgeGroup(label=(label(0, any=("x",), flow="fix"),)))
    assert decide_on("issue_comment", comment_payload("@pi fix"), rules) == Drop("no-trigger-phrase")


def test_a_comment_on_a_pull_request_targets_it_without_head_or_base() -> None:
    p = comment_payload("@pi go", on_pr=True, number=55)
    decision = decide_on("issue_comment", p, MATRIX)
    assert isinstance(decision, Fire)
    job = msgspec.json.decode(encode_job(decision.job))
    assert job["target"] == {"type": "pull_request", "number": 55, "title": p["issue"]["title"],
                             "body": p["issue"]["body"]}
    assert job["trigger"]["comment"] == {"body": "@pi go", "author_association": "COLLABORATOR"}
    assert job["flow"] == "triage"


# --- pull requests and reviews -----------------------------------------------------------------------
PRS = rules_of(ForgeGroup(pull_request=(
    pr(0, ("opened", "synchronize", "reopened"), flow="auto"),
    pr(1, ("labeled",), any=("pi:review",), flow="review"),
    pr(2, ("review_submitted",), flow="address"),
)))


def pr_payload(action: str, *, author: str | None = "COLLABORATOR", labels: list[str] | None = None
               ) -> dict[str, Any]:
    p = octokit("pull_request", action)
    if author is None:
        del p["pull_request"]["author_association"]
    else:
        p["pull_request"]["author_association"] = author
    if labels is not None:
        p["pull_request"]["labels"] = [{"name": n} for n in labels]
    return p


@pytest.mark.parametrize("author", ["NONE", "CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", None])
def test_an_opened_pr_by_a_non_collaborator_is_pr_author_not_allowed(author: str | None) -> None:
    decision = decide_on("pull_request", pr_payload("opened", author=author), PRS)
    assert decision == Drop("pr-author-not-allowed")


def test_an_opened_pr_by_a_collaborator_fires_with_head_and_base() -> None:
    p = pr_payload("opened")
    decision = decide_on("pull_request", p, PRS)
    assert isinstance(decision, Fire)
    assert decision.job.trigger.matched.action == "opened"  # type: ignore[union-attr]
    head = p["pull_request"]["head"]
    assert decision.job.target.head == {  # type: ignore[union-attr]
        "ref": head["ref"], "sha": head["sha"], "repo": head["repo"]["full_name"]}
    assert decision.job.target.base == {"ref": p["pull_request"]["base"]["ref"]}  # type: ignore[union-attr]


def test_synchronize_and_reopened_take_the_same_gate() -> None:
    assert isinstance(decide_on("pull_request", pr_payload("synchronize"), PRS), Fire)
    stranger = pr_payload("reopened", author="NONE")
    assert decide_on("pull_request", stranger, PRS) == Drop("pr-author-not-allowed")


def test_a_matching_label_on_a_stranger_pr_is_the_approval_to_run_it() -> None:
    decision = decide_on("pull_request", pr_payload("labeled", author="NONE", labels=["pi:review"]), PRS)
    assert isinstance(decision, Fire) and decision.index == 1
    chore = pr_payload("labeled", author="NONE", labels=["chore"])
    assert decide_on("pull_request", chore, PRS) == Drop("no-matching-pr-trigger")


def review_payload(*, pr_author: str = "NONE", reviewer: str = "COLLABORATOR", state: str = "approved",
                   body: str | None = "please rename", action: str = "submitted") -> dict[str, Any]:
    p = copy.deepcopy(next(e for e in _examples()["pull_request_review"] if e["action"] == "submitted"))
    p["action"] = action
    p["pull_request"]["author_association"] = pr_author
    p["review"].update(author_association=reviewer, state=state, body=body)
    return p


def test_a_review_is_gated_on_the_reviewer_not_the_pr_author() -> None:
    p = review_payload()
    decision = decide_on("pull_request_review", p, PRS)
    assert isinstance(decision, Fire)
    trigger = msgspec.to_builtins(decision.job.trigger)
    assert trigger["action"] == "submitted"
    assert trigger["matched"] == {"index": 2, "type": "pull_request", "action": "review_submitted"}
    assert trigger["review"] == {"id": p["review"]["id"], "body": "please rename", "state": "approved",
                                 "author_association": "COLLABORATOR"}
    stranger = review_payload(pr_author="OWNER", reviewer="NONE")
    assert decide_on("pull_request_review", stranger, PRS) == Drop("review-author-not-allowed")


@pytest.mark.parametrize(
    ("state", "body", "reviewer", "outcome"),
    [
        ("commented", None, "MEMBER", "no-review-body"),
        ("COMMENTED", "", "MEMBER", "no-review-body"),
        ("commented", "   \n\t ", "MEMBER", "no-review-body"),
        # JavaScript's trim: the BOM and U+3000 are blank, the information separators are text.
        ("commented", "\ufeff\u3000\xa0", "MEMBER", "no-review-body"),
        ("commented", "\x1c", "MEMBER", "fire"),
        ("commented", " \x1f ", "MEMBER", "fire"),
        ("commented", "looks off", "MEMBER", "fire"),
        ("approved", "", "MEMBER", "fire"),
        ("changes_requested", "", "MEMBER", "fire"),
        ("commented", "", "NONE", "review-author-not-allowed"),  # security before content
    ],
)
def test_a_commented_review_needs_a_non_blank_body_after_the_reviewer_gate(
    state: str, body: str | None, reviewer: str, outcome: str
) -> None:
    payload = review_payload(state=state, body=body, reviewer=reviewer)
    decision = decide_on("pull_request_review", payload, PRS)
    assert isinstance(decision, Fire) if outcome == "fire" else decision == Drop(outcome)


@pytest.mark.parametrize(
    ("state", "outcome"),
    [("changes_requested", "fire"), ("CHANGES_REQUESTED", "fire"), ("approved", "review-state-not-matched"),
     ("commented", "review-state-not-matched")],
)
def test_a_review_rule_with_states_fires_only_on_those_states_in_any_case(state: str, outcome: str) -> None:
    rules = rules_of(ForgeGroup(pull_request=(pr(0, ("review_submitted",), states=("changes_requested",),
                                                 flow="address"),)))
    decision = decide_on("pull_request_review", review_payload(state=state), rules)
    assert isinstance(decision, Fire) if outcome == "fire" else decision == Drop(outcome)


@pytest.mark.parametrize("action", ["edited", "dismissed", "review_submitted"])
def test_review_actions_other_than_submitted_are_unhandled(action: str) -> None:
    assert decide_on("pull_request_review", review_payload(action=action), PRS) == Drop("unhandled-event")


def test_a_pull_request_event_without_its_object_is_missing_pull_request() -> None:
    p = pr_payload("opened")
    del p["pull_request"]
    assert decide_on("pull_request", p, PRS) == Drop("missing-pull-request")


# --- close rules -------------------------------------------------------------------------------------
def test_a_pr_close_with_no_close_rules_is_no_matching_close_trigger() -> None:
    decision = decide_on("pull_request", pr_payload("closed"), PRS, closer=True)
    assert decision == Drop("no-matching-close-trigger")


ONE_SHOT = rules_of(ForgeGroup(
    label=(label(0, any=("bug",), flow="fix"),),
    comment=CommentRule(index=1, phrase="@pi", run=RunSpec(flow="fix")),
    issue=(close(2, ("closed",), number=40, once=True, flow="deploy"),),
))


def issue_closed(number: int = 40, *, sender: int = 7) -> dict[str, Any]:
    p = labeled(["bug"], action="closed", sender=sender, number=number)
    p["repository"]["full_name"] = "octo/repo"
    return p


def test_an_authorised_close_of_the_armed_item_fires_the_one_shot() -> None:
    decision = decide_on("issues", issue_closed(), ONE_SHOT, closer=True)
    assert isinstance(decision, Fire)
    job = msgspec.json.decode(encode_job(decision.job))
    assert job["trigger"]["sender"] == {"id": 7}
    assert job["trigger"]["matched"] == {"index": 2, "type": "issue", "action": "closed", "number": 40,
                                         "once": True}
    assert semantic_key(decision.job) == "octo/repo#40:closed:deploy"
    assert LOGIN not in json.dumps(job)


@pytest.mark.parametrize("verdict", [False, None, "true", 1, 30, {}])
def test_only_a_literal_true_verdict_opens_a_close(verdict: Any) -> None:
    assert decide_on("issues", issue_closed(), ONE_SHOT, closer=verdict) == Drop("closer-not-allowed")


def test_a_close_of_another_item_is_close_number_not_matched() -> None:
    assert decide_on("issues", issue_closed(41), ONE_SHOT, closer=True) == Drop("close-number-not-matched")


def test_a_loaded_one_shot_fires_once_armed_and_nothing_once_the_worker_marked_it_disarmed() -> None:
    entry = {"on": {"type": "issue", "action": ["closed"], "number": 40, "once": True},
             "run": {"kind": "github", "flow": "deploy"}}
    armed = parse_triggers(json.dumps({"triggers": [entry]}))
    fired = decide_on("issues", issue_closed(), armed, closer=True)
    assert isinstance(fired, Fire) and fired.job.trigger is not None
    assert fired.job.trigger.matched is not None and fired.job.trigger.matched.once is True
    entry["on"]["disarmed"] = {"at": "2026-05-01T10:00:00Z", "jobId": fired.job.id}
    spent = parse_triggers(json.dumps({"triggers": [entry]}))
    assert decide_on("issues", issue_closed(), spent, closer=True) == Drop("no-matching-close-trigger")


def test_the_closer_lookup_is_wanted_only_for_a_close_a_rule_wants() -> None:
    def wants(event: str, payload: dict[str, Any]) -> bool:
        return wants_closer_authority(event, project(json.dumps(payload)), ONE_SHOT.group("github"), SELF_ID)

    assert wants("issues", issue_closed(40))
    assert not wants("issues", issue_closed(41))
    assert not wants("issues", issue_closed(40, sender=SELF_ID))
    assert not wants("issues", labeled(["bug"], number=40))
    assert not wants("issue_comment", comment_payload("@pi go", number=40))
    assert not wants("pull_request", pr_payload("closed"))  # no PR close rule armed
    string_number = issue_closed(40)
    string_number["issue"]["number"] = "40"
    assert not wants("issues", string_number)
    float_number = issue_closed(40)
    float_number["issue"]["number"] = 40.0
    assert wants("issues", float_number)


def test_a_merged_pr_close_fires_a_pr_close_rule_without_a_number_in_matched() -> None:
    p = pr_payload("closed")
    p["pull_request"]["merged"] = True
    rules = rules_of(ForgeGroup(pr_close=(close(0, ("closed",), flow="retro"),)))
    decision = decide_on("pull_request", p, rules, closer=True)
    assert isinstance(decision, Fire)
    assert msgspec.to_builtins(decision.job.trigger.matched) == {  # type: ignore[union-attr]
        "index": 0, "type": "pull_request", "action": "closed"}
    assert semantic_key(decision.job) == f"Codertocat/Hello-World#{p['pull_request']['number']}:closed:retro"
    assert decide_on("pull_request", p, rules, closer=False) == Drop("closer-not-allowed")


def test_a_pr_close_without_an_integer_number_is_missing_pull_request() -> None:
    p = pr_payload("closed")
    p["pull_request"]["number"] = "2"
    rules = rules_of(ForgeGroup(pr_close=(close(0, ("closed",), flow="retro"),)))
    assert decide_on("pull_request", p, rules, closer=True) == Drop("missing-pull-request")


# --- every real payload -------------------------------------------------------------------------------
ROUTED = {("issues", "opened"), ("issues", "labeled"), ("issues", "reopened"), ("issues", "closed"),
          ("issue_comment", "created"), ("pull_request", "labeled"), ("pull_request", "opened"),
          ("pull_request", "synchronize"), ("pull_request", "reopened"), ("pull_request", "closed"),
          ("pull_request_review", "submitted")}


def test_every_octokit_example_decides_and_unrouted_actions_are_unhandled() -> None:
    rules = rules_of(ForgeGroup(label=(label(0, any=("bug",), flow="fix"),),
                                pull_request=PRS.group("github").pull_request))
    seen = 0
    for name, examples in _examples().items():
        for example in examples:
            decision = decide_on(name, example, rules, self_id=None, closer=True)
            seen += 1
            if (name, example.get("action")) not in ROUTED:
                has_sender = isinstance((example.get("sender") or {}).get("id"), int)
                expected = "unhandled-event" if has_sender else "missing-sender-id"
                assert decision == Drop(expected), (name, example.get("action"))
    assert seen > 300


@pytest.mark.parametrize(("event", "fixture"), [("ping", "ping.json"), ("issues", "issues.unlabeled.json")])
def test_ping_and_removals_are_unhandled(event: str, fixture: str) -> None:
    decision = decide_on(event, load_fixture(f"github/{fixture}"), MATRIX, self_id=None)
    assert decision == Drop("unhandled-event")
