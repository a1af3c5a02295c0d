"""``triggers test``'s re-decision: the router's path, each forge question asked once a run, none offline."""

from __future__ import annotations

import asyncio
import json

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.common.models import Event
from pidispatch.console.trial import Facts, candidate_rules, redecide
from pidispatch.forges.github.authority import GithubCloser
from pidispatch.triggers.loader import parse_triggers
from pidispatch.triggers.lookup import Authorized, Indeterminate, Question, SelfIds, Verdict
from tests.support.payloads import load_fixture

CLOSE = {"on": {"type": "issue", "action": ["closed"]}, "run": {"kind": "github", "flow": "closed"}}
RULES = parse_triggers(json.dumps({"triggers": [CLOSE]}))
IDS = SelfIds(ids={"github": 424242})


def closed(delivery: str = "d1") -> Event:
    p = load_fixture("github/issues.labeled.json")
    p["action"] = "closed"
    p.pop("label")
    p["issue"]["labels"] = []
    return Event(forge="github", event="issues", delivery=delivery, received_at=0, body=json.dumps(p))


async def test_each_question_is_asked_once_however_many_deliveries_ask_it() -> None:
    asked: list[Question] = []

    async def ask(question: Question) -> Verdict:
        asked.append(question)
        await asyncio.sleep(0)  # concurrent askers wait on the one lookup
        return Authorized(True)

    facts = Facts(ask)
    results = await asyncio.gather(*(redecide(closed(f"d{i}"), RULES, IDS, facts) for i in range(5)))
    assert asked == [GithubCloser(repo="Codertocat/Hello-World", login="Codertocat")]
    assert facts.asked == 1
    assert {(o.outcome, o.trigger, o.flow) for o, _ in results} == {("fire", 0, "closed")}
    assert results[0][1].target == "Codertocat/Hello-World#1"


async def test_a_refusal_drops_and_an_unanswered_question_stays_pending() -> None:
    async def refuse(question: Question) -> Verdict:
        return Authorized(False)

    async def fail(question: Question) -> Verdict:
        return Indeterminate("status-502")

    refused, _ = await redecide(closed(), RULES, IDS, Facts(refuse))
    assert (refused.outcome, refused.reason) == ("drop", "closer-not-allowed")
    pending, _ = await redecide(closed(), RULES, IDS, Facts(fail))
    assert (pending.outcome, pending.reason) == ("pending", "lookup-failed:status-502")


async def test_offline_asks_nothing_and_says_what_it_would_fire() -> None:
    facts = Facts(None)
    outcome, _ = await redecide(closed(), RULES, IDS, facts)
    assert (outcome.outcome, outcome.trigger, outcome.flow) == ("ask", 0, "closed")
    assert outcome.needs == "authority"
    assert facts.offline and facts.asked == 0


async def test_a_body_of_the_wrong_shape_is_dead_as_the_router_parks_it() -> None:
    event = Event(forge="github", event="issues", delivery="d", received_at=0, body="[1, 2]")
    outcome, about = await redecide(event, RULES, IDS, Facts(None))
    assert (outcome.outcome, outcome.reason, about.event) == ("dead", "malformed-event", "issues")


def test_an_upload_goes_through_the_loaders_checks() -> None:
    assert candidate_rules(json.dumps({"triggers": [CLOSE]}).encode(), "upload", 60).count == 1
    with pytest.raises(ConfigError, match=r"^PI_TRIGGERS_FILE upload: is not UTF-8"):
        candidate_rules(b"\xff\xfe", "upload", 60)
    with pytest.raises(ConfigError, match=r"^PI_TRIGGERS_FILE upload: is not valid JSON"):
        candidate_rules(b"{", "upload", 60)
