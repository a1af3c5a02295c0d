"""The label predicate every forge shares: any, all, none."""

from __future__ import annotations

import pytest

from pidispatch.triggers.match.predicate import Predicate, matched_label, matches, why_not

P = Predicate(any=("a", "b"), all=("c",), none=("d",))


@pytest.mark.parametrize(
    ("labels", "why"),
    [
        ({"b", "c"}, None),
        ({"c"}, "no-any-label"),
        ({"a"}, "missing-all-label"),
        ({"a", "c", "d"}, "has-none-label"),
    ],
)
def test_each_clause_and_the_one_that_failed(labels: set[str], why: str | None) -> None:
    assert why_not(P, labels) == why
    assert matches(P, labels) is (why is None)


def test_an_empty_predicate_is_vacuously_true() -> None:
    assert matches(Predicate(), set()) and matches(Predicate(), ["x"])
    assert not Predicate(none=("x",)).has_positive and Predicate(all=("x",)).has_positive


def test_sequences_and_sets_read_alike() -> None:
    assert matches(P, ["c", "b"]) and matches(P, ("c", "a")) and not matches(P, ["c", "a", "d"])


def test_matched_label_follows_the_rule_order_then_all() -> None:
    assert matched_label(P, ["c", "b", "a"]) == "a"  # the rule's order, not the item's
    assert matched_label(Predicate(all=("triaged", "approved")), {"approved", "triaged"}) == "triaged"
    assert matched_label(Predicate(none=("x",)), []) is None


def test_matching_is_exact_and_case_sensitive() -> None:
    assert not matches(Predicate(any=("Bug",)), {"bug"})
    assert not matches(Predicate(any=("bug",)), {"bug "})
