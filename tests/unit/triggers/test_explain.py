"""``explain``: the decision re-run rule by rule, rendered for people and as JSON, with no payload text."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from pidispatch.common.models import Event
from pidispatch.forges.pipeline import explain
from pidispatch.triggers.decisions import Decided
from pidispatch.triggers.explain import Explanation, RuleEntry
from pidispatch.triggers.lookup import SelfIds
from pidispatch.triggers.match.predicate import Predicate
from pidispatch.triggers.rules import (
    CommentRule,
    CronRule,
    ForgeGroup,
    LabelRule,
    PullRequestRule,
    Rules,
    RunSpec,
)
from tests.support.payloads import load_fixture

SELF = SelfIds(
    ids={
        "github": 999,
        "gitlab": 999,
    },
)
LOGIN = "secret-login-octocat"
DELIVERY = "9e8d7c6b-5a49-4382-a716-151413121110"

RULES = Rules(
    groups={
        "github": ForgeGroup(
        label=(LabelRule(index=1, predicate=Predicate(any=("ai-fix",)), run=RunSpec(flow="fix")),
               LabelRule(index=2, predicate=Predicate(any=("bug",), none=("wontfix",)),
                         run=RunSpec(flow="triage", replicas=2))),
        comment=CommentRule(index=3, phrase="@pi", run=RunSpec(flow="fix")),
        pull_request=(PullRequestRule(index=4, actions=frozenset({"opened"}), predicate=Predicate(),
                                      review_states=None, run=RunSpec(flow="review")),),
    ),
        "gitlab": ForgeGroup(comment=CommentRule(index=5, phrase="@pi", run=RunSpec(flow="fix"))),
        "forgejo": ForgeGroup(),
        "azure": ForgeGroup(),
    },
    cron=(CronRule(index=0, id="nightly", pattern="0 3 * * *", run={}),),
    known_flows=frozenset({"fix", "triage", "review"}),
    count=7,
)


def github(name: str, payload: dict[str, Any]) -> Event:
    return Event(forge="github", event=name, delivery=DELIVERY, received_at=1, body=json.dumps(payload))


def labeled(labels: tuple[str, ...] = ("bug",), sender: int = 7, action: str = "labeled") -> dict[str, Any]:
    p = load_fixture("github/issues.labeled.json")
    p["action"] = action
    p["sender"].update(id=sender, login=LOGIN)
    p["issue"]["labels"] = [{"name": n} for n in labels]
    return p


def payload_text(p: dict[str, Any]) -> list[str]:
    """The strings a person could recognise from the body: titles, bodies, logins, comments."""
    texts = [LOGIN, p["issue"]["title"], p["issue"]["body"], p["repository"]["full_name"]]
    if "comment" in p:
        texts.append(p["comment"]["body"])
    return [t for t in texts if t]


def rendered(e: Explanation) -> str:
    return "\n".join(e.lines()) + msgspec.json.encode(e).decode()


def by_index(e: Explanation) -> dict[int, RuleEntry]:
    return {r.index: r for r in e.rules}


def test_a_fired_delivery_names_its_rule_jobs_and_every_other_rule() -> None:
    p = labeled()
    e = explain(github("issues", p), RULES, SELF)
    assert (e.outcome, e.reason, e.trigger, e.needs_authority, e.verdict) == ("fire", "", 2, False, None)
    assert e.jobs == (f"gh-{DELIVERY}-r1", f"gh-{DELIVERY}-r2")
    assert (e.forge, e.event, e.action, e.routes) == ("github", "issues", "labeled", ("issue-label",))
    rules = by_index(e)
    assert list(range(7)) == sorted(rules)
    assert (rules[1].matched, rules[1].why) == (False, "no-any-label")
    assert (rules[2].matched, rules[2].why, rules[2].forge) == (True, "matched", "github")
    assert rules[3].why == "not-read-by-route" and rules[4].why == "not-read-by-route"
    assert (rules[0].type, rules[0].why) == ("cron", "cron-rule")
    assert (rules[5].why, rules[5].forge) == ("other-forge", "gitlab")
    assert (rules[6].type, rules[6].why) == ("disarmed", "disarmed")
    text = rendered(e)
    assert e.lines()[1] == f"today's rules would: fire rule #2, job(s) gh-{DELIVERY}-r1, gh-{DELIVERY}-r2"
    assert "#2 label (github): MATCH" in text
    for secret in payload_text(p):
        assert secret not in text


def test_a_dropped_delivery_says_which_clause_failed_and_why_it_dropped() -> None:
    p = labeled(("bug", "wontfix"))
    e = explain(github("issues", p), RULES, SELF)
    assert (e.outcome, e.reason, e.trigger, e.jobs) == ("drop", "no-allowlisted-label", None, ())
    assert by_index(e)[2].why == "has-none-label"
    assert e.lines()[1] == "today's rules would: drop it, reason no-allowlisted-label"
    for secret in payload_text(p):
        assert secret not in rendered(e)


def test_a_comment_by_a_stranger_names_the_gate_on_its_rule() -> None:
    p = load_fixture("github/issue_comment.created.json")
    p["comment"].update(body="@pi please fix the title leak", author_association="NONE")
    p["sender"]["login"] = LOGIN
    e = explain(github("issue_comment", p), RULES, SELF)
    assert (e.outcome, e.reason) == ("drop", "author-not-allowed")
    assert by_index(e)[3].why == "author-not-allowed"
    for secret in payload_text(p):
        assert secret not in rendered(e)


def test_a_drop_before_routing_reaches_no_rule() -> None:
    e = explain(github("issues", labeled(sender=999)), RULES, SELF)
    assert (e.outcome, e.reason, e.routes) == ("drop", "self", ())
    assert {r.why for r in e.rules if r.forge == "github"} == {"not-reached"}


def gitlab_note(body: str = "@pi go") -> Event:
    p = load_fixture("gitlab/comment-issue-event.json")
    p["object_attributes"].update(note=body, action="create")
    p["user"]["username"] = LOGIN
    p["project"]["path_with_namespace"] = "group/proj"
    return Event(forge="gitlab", event="note", delivery=DELIVERY, received_at=1, body=json.dumps(p))


def test_an_ask_case_says_it_would_fire_if_allowed_and_asks_nobody() -> None:
    e = explain(gitlab_note(), RULES, SELF)
    assert (e.outcome, e.needs_authority, e.verdict, e.trigger, e.jobs) == ("ask", True, None, 5, ())
    assert by_index(e)[5].matched
    text = rendered(e)
    assert "today's rules would: fire rule #5 if the forge says the actor is allowed" in text
    assert "authority: needed, not asked" in text
    assert LOGIN not in text and "@pi go" not in text


@pytest.mark.parametrize(("verdict", "outcome", "reason"),
                         [(True, "fire", ""), (False, "drop", "author-not-allowed")])
def test_a_given_verdict_is_used_and_shown(verdict: bool, outcome: str, reason: str) -> None:
    e = explain(gitlab_note(), RULES, SELF, authorized=verdict)
    assert (e.outcome, e.reason, e.verdict, e.needs_authority) == (outcome, reason, verdict, True)
    assert ("allowed" if verdict else "refused") in "\n".join(e.lines())
    if not verdict:
        assert by_index(e)[5].why == "not-reached"


def test_a_verdict_is_not_needed_where_it_changes_nothing() -> None:
    e = explain(gitlab_note("no phrase here"), RULES, SELF, authorized=False)
    assert (e.outcome, e.reason, e.needs_authority, e.verdict) == ("drop", "no-trigger-phrase", False, None)


def test_words_that_are_not_forge_vocabulary_are_not_shown() -> None:
    p = labeled(action="labeled; rm -rf / <script>")
    e = explain(github("issues", p), RULES, SELF)
    assert e.action is None and e.reason == "unhandled-event"
    assert "rm -rf" not in rendered(e)


def test_the_json_form_round_trips() -> None:
    e = explain(github("issues", labeled()), RULES, SELF)
    assert msgspec.json.decode(msgspec.json.encode(e), type=Explanation) == e


def test_an_empty_file_renders() -> None:
    empty = Rules(
        groups={
            "github": ForgeGroup(),
            "gitlab": ForgeGroup(),
            "forgejo": ForgeGroup(),
            "azure": ForgeGroup(),
        },
        cron=(),
        known_flows=frozenset(),
        count=0,
    )
    e = explain(github("issues", labeled()), empty, SELF)
    assert e.rules == () and "(the file has no rules)" in e.lines()[-1]


# ---- the stored decision, said before today's re-run --------------------------------------------------

AT = 1_767_323_045_000  # 2026-01-02 03:04:05 UTC
SURVIVOR = "gh-0f0f0f0f-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    ("stored", "line"),
    [
        (Decided("queued", "", [f"gh-{DELIVERY}"], 2, AT, "1-0"),
         f"stored decision (2026-01-02 03:04:05 UTC): queued by rule #2, job(s) gh-{DELIVERY}"),
        (Decided("deduplicated", "", [SURVIVOR], 2, AT, "1-0"),
         f"stored decision (2026-01-02 03:04:05 UTC): deduplicated by rule #2: no job of its own, the "
         f"surviving job(s) {SURVIVOR} carry it"),
        (Decided("deduplicated", "semantic-window", [SURVIVOR], 2, AT, "1-0"),
         f"stored decision (2026-01-02 03:04:05 UTC): deduplicated by rule #2: no job of its own, the "
         f"surviving job(s) {SURVIVOR} carry it (the 10-minute window)"),
        (Decided("deduplicated", "job-id", [f"gh-{DELIVERY}"], 2, AT, "1-0"),
         f"stored decision (2026-01-02 03:04:05 UTC): deduplicated by rule #2 by job id: its job "
         f"gh-{DELIVERY} exists already (this entry is a replay)"),
        (Decided("dropped", "no-allowlisted-label", [], None, AT, "1-0"),
         "stored decision (2026-01-02 03:04:05 UTC): dropped, reason no-allowlisted-label"),
        (Decided("pending", "lookup-failed:timeout", [], None, AT, "1-0"),
         "stored decision (2026-01-02 03:04:05 UTC): pending, reason lookup-failed:timeout (the router "
         "tries it again)"),
        (Decided("dead", "max-deliveries", [], None, AT, "1-0"),
         "stored decision: dead, reason max-deliveries (parked after repeated failures)"),
    ],
)
def test_a_decided_delivery_shows_its_stored_decision_before_todays_rules(stored: Decided, line: str) -> None:
    today = explain(github("issues", labeled()), RULES, SELF)
    e = msgspec.structs.replace(today, stored=stored)
    fires = f"today's rules would: fire rule #2, job(s) gh-{DELIVERY}-r1, gh-{DELIVERY}-r2"
    assert e.lines()[1:3] == [line, fires]
    assert msgspec.json.decode(msgspec.json.encode(e), type=Explanation).stored == stored


def test_an_undecided_delivery_shows_only_todays_rules_labelled() -> None:
    e = explain(github("issues", labeled(("wontfix",))), RULES, SELF)
    assert e.stored is None and not any(line.startswith("stored") for line in e.lines())
    assert e.lines()[1] == "today's rules would: drop it, reason no-allowlisted-label"
