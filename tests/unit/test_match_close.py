"""``find_close_rule``: first armed rule, and the two refusal reasons."""

from __future__ import annotations

from pidispatch.router.explain import Trace
from pidispatch.router.match.close import find_close_rule
from pidispatch.router.rules import CloseRule, RunSpec


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
