"""``find_close_rule``: first armed rule, and the two refusal reasons; ``close_route``: the shared close."""

from __future__ import annotations

from pidispatch.common.models import Matched, Target
from pidispatch.triggers.decision import Decision, Drop
from pidispatch.triggers.explain import Trace
from pidispatch.triggers.match.close import close_route, find_close_rule
from pidispatch.triggers.rules import CloseRule, RunSpec


def close(index: int, actions: tuple[str, ...] = ("closed",), number: int | None = None) -> CloseRule:
    return CloseRule(index=index, actions=frozenset(actions), number=number, once=number is not None,
                     run=RunSpec(flow="deploy"))


def test_the_first_rule_in_file_order_wins() -> None:
    rules = (close(3, number=40), close(5), close(7))
    assert find_close_rule(rules, "closed", 40, "issue")[0] == rules[0]
    assert find_close_rule(rules, "closed", 41, "issue")[0] == rules[1]


def test_a_rule_armed_for_another_item_is_close_number_not_matched() -> None:
    found = find_close_rule((close(0, number=40),), "closed", 41, "issue")
    assert found == (None, "close-number-not-matched")


def test_nothing_armed_is_no_matching_close_trigger() -> None:
    assert find_close_rule((), "closed", 1, "issue") == (None, "no-matching-close-trigger")
    # Another forge's word never matches (GitLab says "close").
    found = find_close_rule((close(0, ("close",)),), "closed", 1, "issue")
    assert found == (None, "no-matching-close-trigger")


def test_the_trace_records_why_each_rule_was_skipped() -> None:
    trace = Trace()
    rules = (close(1, ("close",)), close(2, number=9), close(4))
    rule, _ = find_close_rule(rules, "closed", 10, "issue", trace)
    assert rule == rules[2]
    assert {i: e.why for i, e in trace.entries.items()} == {1: "action-not-in-rule", 2: "number-not-matched"}


def fired(index: int, run: RunSpec, target: Target, matched: Matched) -> Decision:
    # Stands in for a forge's job builder: the route's output is what it would have been handed.
    return Drop(f"fired:{index}:{matched.type}:{matched.number}:{matched.once}")


def test_close_route_refuses_a_closer_and_traces_why_on_every_forge() -> None:
    trace = Trace()
    decision = close_route((close(2),), "closed", "issue", Target(type="issue", number=9), None, trace, fired)
    assert decision == Drop("closer-not-allowed")
    assert trace.entries[2].why == "closer-not-allowed"


def test_close_route_reports_the_missing_number_by_type() -> None:
    rules = (close(0),)
    assert close_route(rules, "closed", "issue", None, True, Trace(), fired) == Drop("missing-issue-number")
    missing = close_route(rules, "closed", "pull_request", None, True, Trace(), fired)
    assert missing == Drop("missing-pull-request")


def test_close_route_fires_with_the_issue_number_only_for_an_issue() -> None:
    issue = close_route((close(1, number=9),), "closed", "issue", Target(type="issue", number=9), True,
                        Trace(), fired)
    assert issue == Drop("fired:1:issue:9:True")
    pr = close_route((close(1),), "closed", "pull_request", Target(type="pull_request", number=9), True,
                     Trace(), fired)
    assert pr == Drop("fired:1:pull_request:None:None")
