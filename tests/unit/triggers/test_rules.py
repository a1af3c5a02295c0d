"""LabelIndex: the hot path tries only the label rules that may hold, and finds the same first rule as
trying every rule in file order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pidispatch.triggers.explain import NO_TRACE, Trace
from pidispatch.triggers.match.common import first_label_rule
from pidispatch.triggers.match.predicate import Predicate
from pidispatch.triggers.rules import ForgeGroup, LabelIndex, LabelRule, PullRequestRule, RunSpec, pr_index

LABELS = st.sampled_from(["bug", "pi:a", "pi:b", "docs", "blocked", "wontfix"])
PREDICATES = st.builds(
    Predicate,
    any=st.lists(LABELS, max_size=3, unique=True).map(tuple),
    all=st.lists(LABELS, max_size=2, unique=True).map(tuple),
    none=st.lists(LABELS, max_size=2, unique=True).map(tuple),
)


def rules_of(predicates: list[Predicate]) -> tuple[LabelRule, ...]:
    return tuple(LabelRule(index=i, predicate=p, run=RunSpec(flow="fix")) for i, p in enumerate(predicates))


@given(st.lists(PREDICATES, max_size=12), st.frozensets(LABELS))
def test_the_index_finds_the_rule_a_scan_in_file_order_finds(
    predicates: list[Predicate], labels: frozenset[str]
) -> None:
    index = LabelIndex(rules_of(predicates))
    assert first_label_rule(index, labels, NO_TRACE) == first_label_rule(index, labels, Trace())


def test_only_rules_keyed_by_a_present_label_are_candidates() -> None:
    index = LabelIndex(rules_of([
        Predicate(any=("pi:a", "pi:b")), Predicate(all=("bug", "docs")), Predicate(any=("docs",)),
        Predicate(),
    ]))
    assert [r.index for r in index.candidates({"pi:b"})] == [0, 3]  # an empty predicate is always tried
    assert [r.index for r in index.candidates({"docs"})] == [2, 3]  # all=(bug, docs) is keyed by "bug"
    assert [r.index for r in index.candidates({"bug", "pi:a"})] == [0, 1, 3]


def test_explain_still_sees_every_rule() -> None:
    index = LabelIndex(rules_of([Predicate(any=("pi:a",)), Predicate(any=("pi:b",))]))
    trace = Trace()
    assert first_label_rule(index, {"pi:b"}, trace) == index.rules[1]
    assert sorted(trace.entries) == [0, 1]


def test_pull_request_rules_are_tried_by_the_action_they_name() -> None:
    rules = tuple(
        PullRequestRule(index=i, actions=frozenset(actions), predicate=Predicate(), review_states=None,
                        run=RunSpec(flow="review"))
        for i, actions in enumerate([{"opened"}, {"closed", "opened"}, {"synchronize"}])
    )
    indexed = ForgeGroup(pull_request=rules, pr_by_action=pr_index(rules))
    for group in (indexed, ForgeGroup(pull_request=rules)):  # built at load, or on demand
        assert [r.index for r in group.pull_requests("opened", every=False)] == [0, 1]
        assert group.pull_requests("labeled", every=False) == ()
        assert group.pull_requests("opened", every=True) == rules  # explain's view: every rule
